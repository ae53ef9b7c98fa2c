"""Which split kernel a decode call without ``variant`` runs (flashviz.gpu.decode), on the CPU: v2
("mma", ``flash_decode_mma``) where a block of the device may opt in to v2's shared memory at the
call's d, else v1 ("simt", ``flash_decode``) — decided by ``check_variant`` from the device's facts.
The devices are pretend ones (``common.DeviceFacts`` as ``device_facts`` would report them); the
tensors stand-ins with only what ``plan_decode`` reads; the compiler a stand-in that returns the
name expression it was asked for. The bytes are the kernels' own sums (tests/gpu/test_decode_gpu.py
checks them against kernels/flash_decode.cu): v1 90,496 / 49,536, v2 102,400 / 51,200 at d = 128 / 64.
"""

from __future__ import annotations

import sys
import types

import pytest

from flashviz.gpu import decode as gd
from flashviz.gpu.common import DeviceFacts

#: an H100 / H200 and an sm_86 / sm_89 GPU (99 KB a block: less than v2 needs at d = 128)
HOPPER = DeviceFacts(0, 90, 132, 232_448, 50 << 20, "NVIDIA H200", 233_472, 1_024)
AMPERE = DeviceFacts(0, 86, 84, 101_376, 6 << 20, "NVIDIA GeForce RTX 3090", 102_400, 1_024)


def test_the_default_is_v2_where_its_shared_memory_fits_else_v1():
    assert gd.DEFAULT_VARIANT == "mma" and gd.FALLBACK_VARIANT == "simt"
    assert gd.check_variant(None) == "mma"                                   # no device named: the default
    assert gd.check_variant(None, 128, HOPPER.smem_optin) == "mma"
    assert gd.check_variant(None, 128, AMPERE.smem_optin) == "simt"         # 102,400 > 101,376
    assert gd.check_variant(None, 64, AMPERE.smem_optin) == "mma"           # 51,200 fits
    assert gd.check_variant(None, 128, 102_400) == "mma" and gd.check_variant(None, 128, 102_399) == "simt"
    # a variant named is never replaced, and a wrong one is an error with or without a device
    assert gd.check_variant("mma", 128, AMPERE.smem_optin) == "mma"
    assert gd.check_variant("simt", 128, HOPPER.smem_optin) == "simt"
    with pytest.raises(ValueError, match="variant must be one of 'simt', 'mma' or None"):
        gd.check_variant("wgmma", 128, HOPPER.smem_optin)
    with pytest.raises(ValueError, match=r"d in \(64, 128\), got d = 96"):
        gd.check_variant(None, 96, AMPERE.smem_optin)


def test_the_launch_without_a_gpu_follows_the_same_rule():
    h200 = gd.decode_launch(1, 32, 4, 8, 1000, 128)                          # G·Nq = 64 rows
    assert (h200["variant"], h200["chunks"], h200["rows"], h200["smem_bytes"]) == ("mma", 4, 16, 102_400)
    small = gd.decode_launch(1, 32, 4, 8, 1000, 128, smem_optin=AMPERE.smem_optin)
    assert (small["variant"], small["chunks"], small["rows"], small["smem_bytes"]) == ("simt", 2, 32, 90_496)
    assert gd.decode_launch(1, 32, 4, 8, 1000, 64, smem_optin=AMPERE.smem_optin)["variant"] == "mma"
    named = gd.decode_launch(1, 32, 4, 8, 1000, 128, variant="mma", smem_optin=AMPERE.smem_optin)
    assert named["variant"] == "mma" and named["smem_bytes"] == 102_400


def test_the_launch_without_a_gpu_counts_the_splits_with_the_devices_shared_memory():
    """The split count counts the blocks an SM holds from the device's shared memory an SM, as
    ``plan_decode`` does: on AMPERE one v1 block (90,496 + 1,024 of 102,400), on an H200 two."""
    assert gd.facts_kwargs(AMPERE) == {"num_sms": 84, "smem_optin": 101_376, "smem_per_sm": 102_400,
                                       "smem_reserved": 1_024}
    small = gd.decode_launch(1, 32, 8, 1, 32_768, 128, **gd.facts_kwargs(AMPERE))
    assert (small["variant"], small["splits"]) == ("simt", 10)             # 84 slots: ⌈512 / ⌈512/10⌉⌉
    assert small["splits"] == gd.default_splits(8, 512, 128, "simt", num_sms=84, smem_per_sm=102_400)
    # the shared memory an SM, when not given, is smem_optin + smem_reserved (device_facts' fallback)
    assert gd.decode_launch(1, 32, 8, 1, 32_768, 128, num_sms=84, smem_optin=101_376)["splits"] == 10
    assert gd.decode_launch(1, 32, 8, 1, 32_768, 128, num_sms=84, smem_optin=101_376,
                            smem_per_sm=233_472)["splits"] == 21               # 168 slots
    assert gd.decode_launch(1, 32, 8, 1, 32_768, 128, **gd.facts_kwargs(HOPPER)) == gd.decode_launch(
        1, 32, 8, 1, 32_768, 128)                                           # the defaults are the H200's


class _Tensor:
    """A stand-in CUDA tensor: what ``plan_decode`` reads (type, dtype, shape, device, pointer)."""

    is_cuda = True
    device = "cuda:0"

    def __init__(self, *shape, dtype="torch.float16"):
        self.shape, self.dtype = tuple(shape), dtype

    def dim(self):
        return len(self.shape)

    def contiguous(self):
        return self

    def unsqueeze(self, i):
        return _Tensor(*self.shape[:i], 1, *self.shape[i:], dtype=self.dtype)

    def get_device(self):
        return 0

    def data_ptr(self):
        return 1 << 20


@pytest.fixture
def pretend(monkeypatch):
    """plan_decode and compile_decode on a pretend device: ``use(facts)`` chooses it; ``built``
    collects the name expressions handed to the compiler."""
    torch = types.SimpleNamespace(Tensor=_Tensor, float16="torch.float16", bfloat16="torch.bfloat16",
                                  int32="torch.int32", int64="torch.int64")
    monkeypatch.setitem(sys.modules, "torch", torch)
    facts = {"now": HOPPER}
    monkeypatch.setattr(gd, "device_facts", lambda dev=None: facts["now"])
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    monkeypatch.setattr(gd, "cupy", lambda: cp)
    monkeypatch.setattr(gd, "_CACHE", {})
    built: list[str] = []

    def compile_cubin(text, expr, arch, options=()):
        built.append(expr)
        return types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=len(built)), expr=expr), None, None

    from flashviz.gpu import nvrtc
    monkeypatch.setattr(nvrtc, "compile_cubin", compile_cubin)

    def use(f):
        facts["now"] = f
        gd._CACHE.clear()
    return use, built


def _qkv(d=128, Nq=8):
    return _Tensor(1, 32, Nq, d), _Tensor(1, 4, 1000, d), _Tensor(1, 4, 1000, d)


def test_a_call_without_a_variant_plans_and_builds_v2_on_hopper_and_v1_where_v2_does_not_fit(pretend):
    use, built = pretend
    plan = gd.plan_decode(*_qkv())
    assert (plan.variant, plan.chunks) == ("mma", 4)                         # 64 rows, 16 a block
    assert plan.S == gd.default_splits(4 * 4, 16, 128, "mma", num_sms=132)
    assert gd.kernels_for(plan).smem_bytes == 102_400 and built[-2:] == [
        "fvdec::flash_decode_mma<0,128,false>", "fvdec::flash_decode_merge<0,128>"]
    use(AMPERE)
    plan = gd.plan_decode(*_qkv())
    assert (plan.variant, plan.chunks) == ("simt", 2)                        # 64 rows, 32 a block
    assert plan.S == gd.default_splits(4 * 2, 16, 128, "simt", num_sms=84, smem_per_sm=102_400)
    launch = gd.decode_launch(1, 32, 4, 8, 1000, 128, **gd.facts_kwargs(AMPERE))    # what the records say
    assert (launch["variant"], launch["chunks"], launch["splits"]) == (plan.variant, plan.chunks, plan.S)
    assert gd.kernels_for(plan).smem_bytes == 90_496 and built[-2] == "fvdec::flash_decode<0,128,false,32>"
    assert gd.plan_decode(*_qkv(d=64)).variant == "mma"                     # v2 fits there at d = 64
    assert gd.plan_decode(*_qkv(), num_splits=3).variant == "simt"           # the split count given: the same rule


def test_a_named_v2_is_kept_and_refused_where_its_shared_memory_does_not_fit(pretend):
    use, built = pretend
    use(AMPERE)
    plan = gd.plan_decode(*_qkv(), variant="mma", num_splits=2)
    assert plan.variant == "mma"
    with pytest.raises(ValueError, match="needs 102,400 bytes of shared memory a block at d = 128; this GPU "
                                         "allows 101,376"):
        gd.kernels_for(plan)
    with pytest.raises(ValueError, match="needs 102,400 bytes"):
        gd.compile_decode("float16", 128, False, variant="mma")
    assert built == []
    assert gd.compile_decode("float16", 128, False, 4).smem_bytes == 90_496          # None: v1 here
    assert built[0] == "fvdec::flash_decode<0,128,false,4>"
    with pytest.raises(ValueError, match="variant must be one of"):
        gd.plan_decode(*_qkv(), variant="tensor")
