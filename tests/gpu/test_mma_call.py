"""The public call of the tensor-core kernels: stream ordering, CUDA-graph capture, one read
of the sources per process, mixed inputs, the launch plans of repeated calls, and the shared
argument checks of both kernels.

GPU tests (marked ``gpu``) check values against float64 references (torch SDPA in float64);
the CPU tests check the argument rules and the plan key, which need no device (a stand-in
for torch's tensors where the key reads them).
"""

from __future__ import annotations

import dataclasses
import math
import struct
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

from flashviz.gpu.common import LOG2E, check_scale

# ---------------------------------------------------------------- CPU: the shared checks

def test_one_scale_rule_for_both_kernels():
    """The teaching kernel receives scale, the tensor-core kernels scale·log2(e); both must be
    normal float32 values, so the limits differ by exactly log2(e)."""
    f32 = np.finfo(np.float32)
    assert check_scale(None, 64) == pytest.approx(1 / 8)
    assert check_scale(0.3, 64) == 0.3
    top = float(f32.max)
    assert check_scale(top * 0.99, 64) == pytest.approx(top * 0.99)                 # teaching: fits
    with pytest.raises(ValueError, match="normal float32"):
        check_scale(top * 0.99, 64, factor=LOG2E)                                 # ·log2(e) overflows
    for bad in (0.0, -1.0, math.nan, math.inf, 1e39, 1e-40):
        with pytest.raises(ValueError, match="scale must be > 0"):
            check_scale(bad, 64)
    for bad in ("0.1", True, [0.1]):
        with pytest.raises(TypeError, match="scale must be a real number"):
            check_scale(bad, 64)


@pytest.mark.parametrize("bad", [[[0.0] * 64] * 4, (1.0, 2.0), "Q", None, 3.0])
def test_lists_and_other_objects_are_one_line_type_errors(bad):
    from flashviz.gpu.tensorcore.operands import as_operand
    with pytest.raises(TypeError, match="must be a torch tensor, CuPy or NumPy float array") as info:
        as_operand(bad, "Q", None)
    assert "\n" not in str(info.value)


def test_the_source_is_read_once(monkeypatch):
    from flashviz.gpu import common
    from flashviz.records import files
    monkeypatch.setattr(common, "_SOURCES", {})
    calls = []
    real = files.kernel_source
    monkeypatch.setattr(files, "kernel_source", lambda name: calls.append(name) or real(name))
    a = common.source("flash_fwd_mma.cu")
    b = common.source("flash_fwd_mma.cu")
    assert a is b and calls == ["flash_fwd_mma.cu", "fv_ptx.cuh", "fv_wgmma.cuh", "fv_attn.cuh", "fv_trace.cuh"]
    assert "flash_fwd_mma" in a


# ---------------------------------------------------------------- CPU: the launch plan's key

def _contiguous(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


class _FakeTensor:
    """What ``kernel._plan_key`` reads of a torch tensor: shape, stride(), dtype, get_device(),
    is_cuda, data_ptr()."""

    def __init__(self, shape=(2, 4, 256, 64), strides=None, dtype="float16", device=0, ptr=1 << 20):
        self.shape = tuple(shape)
        self._strides = _contiguous(shape) if strides is None else tuple(strides)
        self.dtype, self._device, self._ptr = dtype, device, ptr
        self.is_cuda = device >= 0

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self._device


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in ``torch`` module (its Tensor: _FakeTensor), a driver already looked up whose
    current device is ``current[0]``, no source overrides and an empty plan cache."""
    from flashviz.gpu.tensorcore import kernel as km
    fake = types.ModuleType("torch")
    fake.Tensor = _FakeTensor
    monkeypatch.setitem(sys.modules, "torch", fake)
    current = [0]
    monkeypatch.setattr(km, "_DRIVER", [None, None, lambda: current[0]])
    monkeypatch.setattr(km, "SOURCE_OVERRIDE", {})
    monkeypatch.setattr(km, "_PLANS", {})
    return km, fake, current


def test_the_plan_key_tells_apart_everything_the_checks_read(fake_torch, monkeypatch):
    km, _, current = fake_torch

    def key(Q=None, K=None, V=None, causal=False, scale=None, dtype=None, Br=None, Bc=None, variant=None):
        t = _FakeTensor()
        hit = km._plan_key(Q or t, K or t, V or t, causal, scale, dtype, Br, Bc, variant)
        return None if hit is None else hit[0]

    base = key()
    assert base is not None and key() == base and hash(key()) == hash(base)     # new objects, the same key
    assert key(Q=_FakeTensor(ptr=(1 << 20) + 4096)) == base                     # another aligned address
    hit = km._plan_key(_FakeTensor(ptr=16), _FakeTensor(ptr=32), _FakeTensor(ptr=48), False, None, None, None,
                       None, None)
    assert hit[1:] == (16, 32, 48)                                                # the pointers the launch needs
    others = [
        key(Q=_FakeTensor((2, 4, 320, 64))),                                      # shape
        key(Q=_FakeTensor(strides=(256 * 4 * 64, 64, 4 * 64, 1))),                # strides (BSHD viewed as BHSD)
        key(K=_FakeTensor(strides=(0, 256 * 64, 64, 1))),                         # a broadcast axis
        key(V=_FakeTensor(dtype="bfloat16")),                                     # dtype
        key(K=_FakeTensor(device=1)),                                             # device
        key(V=_FakeTensor(device=-1)),                                            # a CPU tensor
        key(Q=_FakeTensor(ptr=(1 << 20) + 8)),                                    # not 16-byte aligned
        key(Q=_FakeTensor((4, 256, 64)), K=_FakeTensor((4, 256, 64)), V=_FakeTensor((4, 256, 64))),  # leading axes
        key(causal=True), key(scale=0.3), key(scale=0.125), key(dtype="float16"),
        key(Br=128), key(Bc=64), key(variant="wgmma"), key(variant="fa3"),
    ]
    current[0] = 1
    others.append(key())                                                          # another current device
    current[0] = 0
    monkeypatch.setitem(km.SOURCE_OVERRIDE, "fa3", "// another build\n")
    others.append(key())                                                          # a source override
    keys = [base, *others]
    assert None not in keys and len(set(keys)) == len(keys)


@pytest.mark.parametrize("kw", [
    {"causal": 1}, {"causal": np.True_}, {"causal": None}, {"scale": True}, {"scale": 1}, {"scale": np.float64(0.3)},
    {"Br": 128.0}, {"Br": True}, {"Bc": np.int64(64)}, {"variant": ["fa3"]}, {"dtype": np.float16},
])
def test_arguments_the_key_cannot_hold_plainly_have_no_plan(fake_torch, kw):
    """Values that compare equal to valid ones (1 == True, 128.0 == 128) but that the checks treat
    otherwise give no key: such calls always take the general path (its result or error)."""
    km, _, _ = fake_torch
    args = {"causal": False, "scale": None, "dtype": None, "Br": None, "Bc": None, "variant": None, **kw}
    t = _FakeTensor()
    assert km._plan_key(t, t, t, *args.values()) is None


def test_no_key_without_three_plain_tensors_or_before_the_first_launch(fake_torch, monkeypatch):
    km, fake, _ = fake_torch
    t = _FakeTensor()

    class Sub(_FakeTensor):
        pass

    assert km._plan_key(Sub(), t, t, False, None, None, None, None, None) is None     # subclasses: general path
    assert km._plan_key(t, np.zeros((2, 4, 256, 64)), t, False, None, None, None, None, None) is None
    monkeypatch.setattr(km, "_DRIVER", [])
    assert km._plan_key(t, t, t, False, None, None, None, None, None) is None          # no launch yet
    monkeypatch.delitem(sys.modules, "torch")
    assert km._plan_key(t, t, t, False, None, None, None, None, None) is None          # torch not loaded


def test_the_repeated_call_and_the_general_path_share_one_key(fake_torch, monkeypatch):
    """No plan: the general path runs, given the call's key (under which it stores the plan it
    makes); a plan under that key: the call launches it and never reaches the general path."""
    km, _, _ = fake_torch
    q, k, v = _FakeTensor(), _FakeTensor(ptr=1 << 21), _FakeTensor(ptr=1 << 22)
    runs, launched = [], []
    monkeypatch.setattr(km, "torch_operand", lambda x, name, dtype: SimpleNamespace(device=0))
    monkeypatch.setattr(km, "_check_shapes", lambda *ops: None)
    monkeypatch.setattr(km, "_run", lambda *a: runs.append(a[-1]) or "general")
    monkeypatch.setattr(km, "_call_plan", lambda plan, *ptrs: launched.append((plan, ptrs)) or "planned")
    assert km.forward_mma_nograd(q, k, v, causal=True) == "general"
    key = km._plan_key(q, k, v, True, None, None, None, None, None)[0]
    assert runs == [key]
    plan = km._PLANS[key] = object()
    assert km.forward_mma_nograd(q, k, v, causal=True) == "planned"
    assert launched == [(plan, (1 << 20, 1 << 21, 1 << 22))] and len(runs) == 1
    assert km.forward_mma_nograd(q, k, v, causal=False) == "general" and runs[-1] not in (None, key)
    # the process's first launch: the general path looks the driver up, then makes the key
    monkeypatch.setattr(km, "_DRIVER", [])
    monkeypatch.setattr(km, "_driver", lambda: km._DRIVER.extend((None, None, lambda: 0)))
    del km._PLANS[key]
    assert km.forward_mma_nograd(q, k, v, causal=True) == "general" and runs[-1] == key
    # arguments the key cannot hold: the general path, no key (no plan stored)
    assert km.forward_mma_nograd(q, k, v, causal=True, scale=1) == "general" and runs[-1] is None


def test_a_plan_holds_the_checked_launch_and_launches_it(fake_torch, monkeypatch):
    """The plan of a checked call: sizes, element strides (size-1 axes 0), O's strides and the
    scale as the launch takes them, the outputs' shapes with the caller's leading axes; launched
    from it, the parameter block holds them and the grid is (Tr, H, B)."""
    from flashviz.gpu.tensorcore.operands import Operand
    km, fake, _ = fake_torch
    mk = SimpleNamespace(variant="wgmma", Br=64, threads=128, smem_bytes=1000, function_ptr=7)
    q = Operand(16, (1, 3, 100, 64), (0, 100 * 64, 64, 1), "float16", None, "cupy", 0)
    k = Operand(32, (1, 3, 40, 64), (0, 64, 3 * 64, 1), "float16", None, "cupy", 0)
    plan = km._make_plan(mk, 0, q, k, k, 0.125, (3,), False)
    assert plan.args == (1, 3, 100, 40, (0, 6400, 64), (0, 64, 192), (0, 64, 192), (19200, 6400, 64), 0.125)
    assert plan.o_shape == (3, 100, 64) and plan.lse_shape == (3, 100) and plan.templates is None
    assert plan.variant == "wgmma" and plan.device == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.device = 1
    launches = []
    monkeypatch.setattr(km, "_DRIVER", [lambda *a: launches.append((a, km._ARGBUF.buf.tobytes())), None, lambda: 0])
    monkeypatch.setattr(km, "raw_torch_stream", lambda dev: 0x5EED)
    bound = []
    monkeypatch.setattr(km, "ensure_context", bound.append)             # no CUDA here: the device it binds
    addresses = {"O-template": 0x1000, "lse-template": 0x2000}
    fake.empty_like = lambda t: SimpleNamespace(data_ptr=lambda: addresses[t], like=t)
    O, lse = km._call_plan(dataclasses.replace(plan, templates=("O-template", "lse-template")), 16, 32, 48)
    assert (O.like, lse.like) == ("O-template", "lse-template")
    (a, block), = launches
    assert bound == [0]                                               # the plan's device, before the launch
    assert a[:9] == (7, 2, 3, 1, 128, 1, 1, 1000, 0x5EED)            # function, grid (Tr, H, B), block, smem, stream
    vals = struct.unpack("<5Q3i4x12qf", block)
    assert vals[:8] == (16, 32, 48, 0x1000, 0x2000, 100, 40, 3)
    assert vals[8:20] == (0, 6400, 64, 0, 64, 192, 0, 64, 192, 19200, 6400, 64)
    assert vals[20] == pytest.approx(0.125 * LOG2E)


# ---------------------------------------------------------------- GPU

def _torch():
    return pytest.importorskip("torch")


def _ref(q, k, v, causal=False, scale=None):
    torch = _torch()
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            is_causal=causal, scale=scale)


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.gpu
def test_launch_is_ordered_after_a_slow_producer_on_torchs_stream():
    """A producer on a side stream sleeps, then writes Q. Our call on that stream must see the
    written Q. The same launch on another stream (the control) reads the unwritten buffer —
    so this test can fail, and would if the runner launched on the wrong stream."""
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    from flashviz.gpu.tensorcore.operands import as_operand
    g = torch.Generator(device="cuda").manual_seed(5)
    src, k, v = (torch.randn(2, 4, 512, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    want = _ref(src, k, v)
    mma.flash_forward_mma(src, k, v)               # compile and warm outside the race
    import cupy as cp
    side = torch.cuda.Stream()
    cycles = int(2e8)                              # ~0.1 s at 1.98 GHz
    # control: launch on a stream that waits for no other while the producer is still asleep;
    # everything the launch needs (the kernel compiled, operands, outputs) is made before the race,
    # and the legacy default stream is no control: it waits for the other blocking streams
    q = torch.zeros_like(src)
    qo, ko, vo = (as_operand(x, n, None) for x, n in ((q, "Q"), (k, "K"), (v, "V")))
    mk = mma.compile_mma("float16", None, None, 64, False)
    o, O_wrong, lse, lp = mma.out_like(qo)
    control = cp.cuda.Stream(non_blocking=True)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        q.copy_(src)
    mma.launch_mma(mk, qo, ko, vo, o, lp, 0.125, control)
    torch.cuda.synchronize()
    assert _rel(O_wrong, want) > 0.1, "the control should read the unwritten (zero) Q"
    # the runner: the same race, but launched through the public call on torch's current stream
    q = torch.zeros_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        q.copy_(src)
        O, _ = mma.flash_forward_mma(q, k, v)
    torch.cuda.synchronize()
    assert _rel(O, want) <= 2e-3


@pytest.mark.gpu
def test_arrays_mixed_with_tensors_follow_torchs_stream():
    """NumPy Q with torch K and V produced late on a side stream: Q is copied and the kernel
    launched on torch's current stream there, after K and V are written; Q follows K's dtype."""
    torch = _torch()
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    g = torch.Generator(device="cuda").manual_seed(6)
    q, k_src, v_src = (torch.randn(1, 2, 300, 64, device="cuda", dtype=torch.bfloat16, generator=g)
                       for _ in range(3))
    flash_forward_mma(q, k_src, v_src)
    side = torch.cuda.Stream()
    k, v = torch.zeros_like(k_src), torch.zeros_like(v_src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(2e8))
        k.copy_(k_src)
        v.copy_(v_src)
        O, L = flash_forward_mma(q.float().cpu().numpy(), k, v)
    torch.cuda.synchronize()
    O = torch.as_tensor(O, device="cuda")           # a CuPy array (Q's kind), bf16 widened to float32
    assert _rel(O, _ref(q, k_src, v_src)) <= 1e-2


@pytest.mark.gpu
def test_the_public_call_works_inside_cuda_graph_capture():
    torch = _torch()
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(2, 3, 700, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    flash_forward_mma(q, k, v, causal=True)        # warm: compile and load outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        O, L = flash_forward_mma(q, k, v, causal=True)
    q.copy_(torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=g))   # new values, same buffer
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(O, _ref(q, k, v, causal=True)) <= 2e-3
    s = (q[1, 2].double() @ k[1, 2].double().T) / math.sqrt(128)
    s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    assert (L[1, 2].double() - torch.logsumexp(s, -1)).abs().max().item() <= 1e-2


@pytest.mark.gpu
def test_a_repeated_call_reads_no_file_and_compiles_nothing(monkeypatch):
    torch = _torch()
    from flashviz.gpu import common, nvrtc
    from flashviz.gpu.tensorcore import kernel as mma
    from flashviz.records import files
    q = torch.randn(1, 1, 64, 64, device="cuda", dtype=torch.float16)
    mma.flash_forward_mma(q, q, q)

    def boom(*a, **k):
        raise AssertionError("the per-call path touched the disk or the compiler")
    monkeypatch.setattr(common, "kernel_source", boom)
    monkeypatch.setattr(files, "kernel_source", boom)
    monkeypatch.setattr(nvrtc, "compile_cubin", boom)
    O, _ = mma.flash_forward_mma(q, q, q)
    assert _rel(O, _ref(q, q, q)) <= 2e-3


def _count_general_calls(monkeypatch, mma) -> list:
    """A list that gets one entry per call of the general path (``kernel._run``)."""
    runs, real = [], mma._run
    monkeypatch.setattr(mma, "_run", lambda *a, **k: runs.append(1) or real(*a, **k))
    return runs


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_a_repeated_call_launches_the_plan_the_general_path_made(monkeypatch, dt):
    """The first call goes the general way and leaves one plan (the kernel auto_variant picks);
    the repeated calls find it, never reach the general path, and give fresh contiguous outputs
    bit-identical to the first call's."""
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    monkeypatch.setattr(mma, "_PLANS", {})
    runs = _count_general_calls(monkeypatch, mma)
    g = torch.Generator(device="cuda").manual_seed(3)
    tdt = getattr(torch, dt)
    # K and V as views of one BSHD buffer: strided operands
    q = torch.randn(2, 4, 300, 64, device="cuda", dtype=tdt, generator=g)
    kv = torch.randn(2, 300, 2, 4, 64, device="cuda", dtype=tdt, generator=g)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    O1, L1 = mma.flash_forward_mma(q, k, v, causal=True)                # the general path: makes the plan
    assert len(runs) == 1 and len(mma._PLANS) == 1
    key, qp, kp, vp = mma._plan_key(q, k, v, True, None, None, None, None, None)
    plan = mma._PLANS[key]
    assert (qp, kp, vp) == (q.data_ptr(), k.data_ptr(), v.data_ptr())
    ops = [mma.torch_operand(x, n, None) for x, n in ((q, "Q"), (k, "K"), (v, "V"))]
    assert plan.variant == mma.auto_variant(q.get_device(), None, None, ops, True)
    assert plan.device == q.get_device() and plan.o_shape == (2, 4, 300, 64) and plan.lse_shape == (2, 4, 300)
    O2, L2 = mma.flash_forward_mma(q, k, v, causal=True)
    O3, L3 = mma.flash_forward_mma(q, k, v, causal=True)
    torch.cuda.synchronize()
    assert len(runs) == 1 and list(mma._PLANS.values()) == [plan]
    for O, L in ((O1, L1), (O2, L2), (O3, L3)):
        assert O.shape == (2, 4, 300, 64) and O.dtype == tdt and O.is_contiguous()
        assert L.shape == (2, 4, 300) and L.dtype == torch.float32 and L.is_contiguous()
    for O, L in ((O2, L2), (O3, L3)):
        assert torch.equal(O, O1) and torch.equal(L, L1)                  # bit-identical to the general path
    assert len({O1.data_ptr(), O2.data_ptr(), O3.data_ptr()}) == 3        # fresh outputs each call
    assert len({L1.data_ptr(), L2.data_ptr(), L3.data_ptr()}) == 3
    assert _rel(O1, _ref(q, k, v, causal=True)) <= (2e-3 if dt == "float16" else 1e-2)


@pytest.mark.gpu
def test_each_change_the_checks_read_makes_its_own_plan(monkeypatch):
    """Strides, shape, dtype, causal, scale, blocks and leading axes are each in the key: each
    variation takes the general path once and leaves its own plan; its repeated call launches
    that plan, bit for bit the first call's result, close to float64 attention."""
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    monkeypatch.setattr(mma, "_PLANS", {})
    runs = _count_general_calls(monkeypatch, mma)
    g = torch.Generator(device="cuda").manual_seed(11)

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.float16, generator=g)

    q, k, v = rnd(1, 2, 256, 64), rnd(1, 2, 256, 64), rnd(1, 2, 256, 64)
    cases = [
        ("first", (q, k, v), {}),
        ("strides", (rnd(1, 256, 2, 64).transpose(1, 2), k, v), {}),       # q's shape, other strides
        ("shape", (rnd(1, 2, 320, 64), k, v), {}),
        ("dtype", tuple(x.to(torch.bfloat16) for x in (q, k, v)), {}),
        ("causal", (q, k, v), {"causal": True}),
        ("scale", (q, k, v), {"scale": 0.3}),
        ("blocks", (q, k, v), {"Br": 128, "Bc": 128}),
        ("leading axes", (q[0], k[0], v[0]), {}),
    ]
    for n, (name, (a, b, c), kw) in enumerate(cases, start=1):
        O1, L1 = mma.flash_forward_mma(a, b, c, **kw)
        assert len(runs) == n and len(mma._PLANS) == n, (name, len(runs), len(mma._PLANS))
        O2, L2 = mma.flash_forward_mma(a, b, c, **kw)
        assert len(runs) == n and len(mma._PLANS) == n, name
        torch.cuda.synchronize()
        assert torch.equal(O1, O2) and torch.equal(L1, L2), name
        assert O1.shape == a.shape and L1.shape == a.shape[:-1] and O1.dtype == a.dtype, name
        want = _ref(a, b, c, causal=kw.get("causal", False), scale=kw.get("scale"))
        assert _rel(O1, want) <= (2e-3 if a.dtype == torch.float16 else 1e-2), name


@pytest.mark.gpu
def test_a_broadcast_operand_gets_the_kernel_auto_variant_picks(monkeypatch):
    """K with a broadcast batch axis (stride 0, ``expand``): its plan holds the kernel that
    ``auto_variant`` picks for those operands (on Hopper wgmma, not fa3: the TMA rule); the same
    values contiguous get another plan (on Hopper fa3); each repeated call launches its plan."""
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    monkeypatch.setattr(mma, "_PLANS", {})
    runs = _count_general_calls(monkeypatch, mma)
    g = torch.Generator(device="cuda").manual_seed(12)
    q, v = (torch.randn(2, 3, 200, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(2))
    kb = torch.randn(1, 3, 200, 64, device="cuda", dtype=torch.float16, generator=g).expand(2, 3, 200, 64)
    kc = kb.contiguous()
    dev = q.get_device()
    plans = []
    for n, k in enumerate((kb, kc), start=1):
        O1, L1 = mma.flash_forward_mma(q, k, v)
        O2, L2 = mma.flash_forward_mma(q, k, v)
        torch.cuda.synchronize()
        assert len(runs) == n
        ops = [mma.torch_operand(x, nm, None) for x, nm in ((q, "Q"), (k, "K"), (v, "V"))]
        plan = mma._PLANS[mma._plan_key(q, k, v, False, None, None, None, None, None)[0]]
        assert plan.variant == mma.auto_variant(dev, None, None, ops, False)
        assert torch.equal(O1, O2) and torch.equal(L1, L2)
        assert _rel(O1, _ref(q, kc, v)) <= 2e-3
        plans.append(plan)
    assert len(mma._PLANS) == 2 and plans[0] is not plans[1]
    if mma.device_variant(dev) == "wgmma":           # Hopper: the TMA rule keeps the broadcast K off fa3
        assert (plans[0].variant, plans[1].variant) == ("wgmma", "fa3")


@pytest.mark.gpu
def test_no_plan_serves_a_misaligned_or_cpu_tensor_of_a_planned_shape(monkeypatch):
    """A tensor with a planned call's shape, strides and dtype whose base address is not 16-byte
    aligned, or that is on the CPU, does not find that plan: the general path's error."""
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    monkeypatch.setattr(mma, "_PLANS", {})
    n = 2 * 4 * 128 * 64
    buf = torch.randn(n + 8, device="cuda", dtype=torch.float16)
    q = buf[:n].view(2, 4, 128, 64)
    q_off = buf[4:4 + n].view(2, 4, 128, 64)          # 8 bytes past an aligned address
    assert q_off.stride() == q.stride() and q_off.data_ptr() % 16 == 8
    mma.flash_forward_mma(q, q, q)
    mma.flash_forward_mma(q, q, q)
    assert len(mma._PLANS) == 1
    with pytest.raises(ValueError, match="16-byte aligned"):
        mma.flash_forward_mma(q_off, q, q)
    with pytest.raises(TypeError, match="CPU torch tensor"):
        mma.flash_forward_mma(q.cpu(), q, q)
    assert len(mma._PLANS) == 1


@pytest.mark.gpu
def test_the_plan_cache_is_bounded(monkeypatch):
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    monkeypatch.setattr(mma, "_PLANS", {})
    monkeypatch.setattr(mma, "_PLANS_MAX", 3)
    q = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.float16)
    for i in range(7):
        mma.flash_forward_mma(q, q, q, scale=0.1 + 0.01 * i)
        assert 1 <= len(mma._PLANS) <= 3
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_teaching_kernel_uses_the_disk_cache_and_the_scale_rule(monkeypatch, tmp_path):
    import cupy as cp

    from flashviz.gpu.teaching import kernel as runner
    monkeypatch.setenv("FLASHVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(runner, "_CACHE", {})
    ck = runner.compile_kernel(32, 32, 32)
    assert list((tmp_path / "cubin").glob("*.cubin")), "the teaching kernel's cubin was not cached on disk"
    monkeypatch.setattr(runner, "_CACHE", {})
    again = runner.compile_kernel(32, 32, 32)
    assert again.compile_ms < ck.compile_ms
    Q = cp.random.standard_normal((40, 32), dtype=cp.float32)
    with pytest.raises(ValueError, match="normal float32"):
        runner.flash_forward_gpu(Q, Q, Q, Br=32, Bc=32, scale=1e39)
