"""The Hopper backward (kernels/flash_bwd_wgmma.cu, ``flash_backward_mma(kernel="wgmma")``).

CPU tests: shared memory by hand, the kernel names the runner builds, the step tags (Algorithm 2),
one-line errors for the kernel and dQ choices, and for ``flash_attention(bwd_kernel=...)`` before
torch is imported. GPU tests (marked ``gpu``, on an sm_90 device only: skipped elsewhere): dQ, dK,
dV against float64 dense gradients (torch autograd of dense attention on the same rounded inputs,
bottom-right causal) over fp16 / bf16, d = 64 / 128, Bc = 64 / 128, causal and not, N = 1, 63,
128, 1000, Nq ≠ Nk both ways, keyless rows (dQ exactly 0), strided views and the gradient of lse —
for each dQ path ("bulk", "atomic", "separate"); and the same kernel reached through
``flash_attention(bwd_kernel="wgmma")``'s autograd.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from flashviz import gpu
from flashviz.gpu.tensorcore import backward as bk
from flashviz.gpu.tensorcore.gradcheck import dense_gradients, relative_errors, strided_views
from flashviz.steps import STEPS, find_tags

ROOT = Path(__file__).resolve().parents[2]


def test_wgmma_smem_bytes_counted_by_hand():
    for Bc, d in ((64, 64), (64, 128), (128, 64), (128, 128)):
        base = 1024 + 2 * (2 * Bc * d + 2 * 2 * 64 * d) + 8 * 2 * 64    # align; K, V; Q, dO x2; L, D x2
        assert bk.bwd_wgmma_smem_bytes(Bc, d, "separate") == base
        assert bk.bwd_wgmma_smem_bytes(Bc, d, "atomic") == base + 2 * Bc * 64          # dS_ijᵀ
        ks = 2 if (Bc, d) == (128, 64) else 1                                         # dQ tiles summed apart
        assert bk.bwd_wgmma_smem_bytes(Bc, d, "bulk") == base + 2 * Bc * 64 + ks * 64 * (4 * d + 32)   # padded rows
    assert bk.bwd_wgmma_smem_bytes(128, 128) == 184_320                               # the default dq: bulk
    with pytest.raises(ValueError, match="Bc=32 is not supported by the wgmma backward"):
        bk.bwd_wgmma_smem_bytes(32, 64)
    with pytest.raises(ValueError, match="dq must be one of"):
        bk.bwd_wgmma_smem_bytes(64, 64, "fast")


def test_the_runners_kernel_names():
    assert bk.wgmma_backward_expressions("float16", 128, 128, True, "bulk") == {
        "preprocess": "flash_bwd_mma_preprocess<0,128>", "main": "flash_bwd_wgmma<0,128,128,true,2>",
        "convert": "flash_bwd_mma_convert<0>"}
    assert bk.wgmma_backward_expressions("bfloat16", 64, 64, False, "separate") == {
        "preprocess": "flash_bwd_mma_preprocess<1,64>", "main": "flash_bwd_wgmma<1,64,64,false,0>",
        "dq": "flash_bwd_mma_dq<1,64,false,2>"}
    assert bk.wgmma_backward_expressions("float16", 64, 128, False, "atomic")["main"] == "flash_bwd_wgmma<0,64,128,false,1>"
    with pytest.raises(ValueError, match="dtype must be 'float16' or 'bfloat16'; got 'float32'"):
        bk.wgmma_backward_expressions("float32", 64, 64, False, "bulk")


def test_the_kernel_tags_every_backward_step_with_algorithm_2_lines():
    text = (ROOT / "kernels" / "flash_bwd_wgmma.cu").read_text(encoding="utf-8")
    by = {s.name: s for s in STEPS}
    start = text.index("flash_bwd_wgmma(const u16*")
    tags = find_tags(text[start:])
    for t in tags:
        assert t.paper == "Alg. 2" and set(t.lines) <= set(by[t.name].lines["Alg. 2"]), (t.index + 1, t.name)
    assert [t.name for t in tags] == ["load_KV", "init_dKdV", "load_Qi", "load_Qi", "recompute_P", "accumulate_dV",
                                      "compute_dS", "accumulate_dK", "update_dQ", "write_dKdV"]


def test_kernel_and_dq_choices_are_one_line_errors_without_a_gpu(monkeypatch):
    assert bk.BWD_KERNELS == ("mma", "wgmma") and (bk.BWD_KERNEL_HOPPER, bk.BWD_KERNEL_OTHER) == ("wgmma", "mma")
    assert bk.check_kernel(None) is None and bk.check_kernel("wgmma") == "wgmma"
    # the default call by device: wgmma on sm_90 (Bc 64 with the bulk dQ at d = 64), mma elsewhere or with stages
    assert bk.default_kernel(90) == "wgmma" and bk.default_kernel(80) == bk.default_kernel(90, stages=2) == "mma"
    assert bk.backward_plan(90, 64) == ("wgmma", "bulk", 64) and bk.backward_plan(90, 128) == ("wgmma", "bulk", 128)
    assert bk.backward_plan(90, 64, deterministic=True) == ("wgmma", "separate", 128)
    assert bk.backward_plan(90, 64, dq="atomic", Bc=128) == ("wgmma", "atomic", 128)
    assert bk.backward_plan(89, 64) == ("mma", "separate", 128) and bk.backward_plan(90, 64, stages=2)[0] == "mma"
    for cc, kw in ((80, {}), (90, {"stages": 2}), (90, {"kernel": "mma"})):     # the mma kernel has no bulk path
        with pytest.raises(ValueError, match=r"^dq='bulk' needs the wgmma kernel"):
            bk.backward_plan(cc, 64, dq="bulk", **kw)
    with pytest.raises(ValueError, match="stages=2 is for kernel='mma'"):
        bk.backward_plan(90, 64, kernel="wgmma", stages=2)
    with pytest.raises(ValueError, match="stages"):
        bk.backward_plan(80, 64, stages=3)
    assert bk.check_dq(None, False, "wgmma") == "bulk" and bk.check_dq(None, True, "wgmma") == "separate"
    assert bk.check_dq("atomic", False, "wgmma") == "atomic"
    with pytest.raises(ValueError, match=r"^dq='bulk' needs the wgmma kernel \(sm_90, stages None\); this call "
                                         r"runs kernel='mma'$"):
        bk.check_dq("bulk")                                   # the mma kernel has no bulk path
    # before the device is known (kernel None) every kernel's choices pass, and a bad one names both defaults
    assert bk.check_dq("bulk", False, None) == "bulk" and bk.check_dq(None, True, None) is None
    with pytest.raises(ValueError, match=r"^dq must be one of 'atomic', 'bulk', 'separate' or None \(the default: "
                                         r"'bulk' with the wgmma kernel, else 'separate'\); got 'fast'$"):
        bk.check_dq("fast", False, None)
    with pytest.raises(ValueError, match="deterministic=True needs dq='separate'"):
        bk.check_dq("bulk", True, "wgmma")
    monkeypatch.setitem(sys.modules, "cupy", None)
    z = [np.zeros((2, 8, 64), np.float32)] * 5 + [np.zeros((2, 8), np.float32)]
    for bad in ("WGMMA", "fa3", 1):
        with pytest.raises(ValueError, match=r"^kernel must be one of 'mma', 'wgmma' or None") as e:
            gpu.flash_backward_mma(*z, kernel=bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="stages=2 is for kernel='mma'"):
        gpu.flash_backward_mma(*z, kernel="wgmma", stages=2)
    for dq in ("bulk", "atomic", "separate", None):          # good choices reach the tensor check
        with pytest.raises(TypeError, match="takes torch CUDA tensors"):
            gpu.flash_backward_mma(*z, kernel="wgmma", dq=dq)


def test_flash_attention_bwd_kernel_is_checked_before_torch_is_imported(monkeypatch):
    """flash_attention / attention_with_lse check bwd_kernel with flash_backward_mma's own rule
    (check_kernel) first: a bad name is a one-line ValueError even where torch cannot be imported;
    a good one passes on to the tensor checks (which need torch: ImportError here)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    for call in (gpu.flash_attention, gpu.attention_with_lse):
        for bad in ("WGMMA", "fa3", "", 1, True):
            with pytest.raises(ValueError, match=r"^bwd_kernel must be one of 'mma', 'wgmma' or None "
                                                 r"\(the default: 'wgmma' on sm_90, else 'mma'\); got ") as e:
                call(None, None, None, bwd_kernel=bad)
            assert "\n" not in str(e.value)
        for good in ("mma", "wgmma", None):
            with pytest.raises(ImportError):
                call(None, None, None, bwd_kernel=good)


# ---------------------------------------------------------------- GPU

@pytest.fixture
def torch():
    """torch, on a machine whose GPU is sm_90 (else the test is skipped, with the reason)."""
    t = pytest.importorskip("torch")
    ok, reason = gpu.gpu_status()
    cap = t.cuda.get_device_capability() if ok and t.cuda.is_available() else None
    if cap != (9, 0):
        pytest.skip(reason if not ok else f"the wgmma backward needs an sm_90 GPU; this one: {cap or 'none'}")
    return t


def _check(torch, q, k, v, *, causal, tol, dq, Bc=None, scale=None, dlse=None):
    dO = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    O, lse, ref = dense_gradients(torch, q, k, v, dO, causal=causal, scale=scale, dlse=dlse)
    got = gpu.flash_backward_mma(q, k, v, O.to(q.dtype), dO, lse, causal=causal, scale=scale, dlse=dlse, Bc=Bc,
                                 dq=dq, kernel="wgmma")
    for name, a, b in zip(("dQ", "dK", "dV"), got, ref):
        assert a.dtype == q.dtype and a.shape == b.shape and torch.isfinite(a).all(), name
    errs = relative_errors(got, ref)
    assert max(errs) <= tol, errs
    keyless = torch.isneginf(lse)
    assert (got[0][keyless] == 0).all()
    return got


SHAPES = [(1, 1), (63, 63), (128, 128), (1000, 1000), (1, 257), (257, 1), (100, 333), (333, 100), (1000, 63)]
TOL = {"float16": 5e-3, "bfloat16": 3e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("dq", ["bulk", "atomic", "separate"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("k, Nq_Nk", list(enumerate(SHAPES)), ids=[f"{a}x{b}" for a, b in SHAPES])
def test_gradients_match_float64(torch, dq, dtype, d, causal, k, Nq_Nk):
    Nq, Nk = Nq_Nk
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(3000 * k + d + causal)
    q, kk, v = (torch.randn(2, 3, N, d, device="cuda", dtype=dt, generator=g) for N in (Nq, Nk, Nk))
    _check(torch, q, kk, v, causal=causal, tol=TOL[dtype], dq=dq, Bc=(64, 128)[k % 2])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_strided_views_scale_and_lse_gradient(torch, dtype):
    q, k, v, dlse = strided_views(torch, getattr(torch, dtype), 8)
    _check(torch, q, k, v, causal=True, tol=TOL[dtype], dq=None, scale=0.05)
    for dq in ("bulk", "atomic", "separate"):
        _check(torch, q, k, v, causal=True, tol=TOL[dtype], dq=dq, dlse=dlse, Bc=64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal, Nq, Nk", [(False, 200, 200), (True, 100, 333), (True, 333, 100)])
def test_flash_attention_gradients_through_wgmma_match_float64(torch, dtype, d, causal, Nq, Nk):
    """flash_attention(bwd_kernel="wgmma"): autograd's dQ, dK, dV against float64 dense gradients,
    with deterministic False ("bulk" dQ) and True ("separate"), keyless rows (Nq > Nk) giving dQ = 0;
    with deterministic=True the same bits as flash_backward_mma(kernel="wgmma") called directly."""
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(500 + d + Nq + causal)
    q, k, v = (torch.randn(2, 3, N, d, device="cuda", dtype=dt, generator=g).requires_grad_() for N in (Nq, Nk, Nk))
    dO = torch.randn(2, 3, Nq, d, device="cuda", dtype=dt, generator=g)
    ref = dense_gradients(torch, q, k, v, dO, causal=causal)[2]
    for det in (False, True):
        O, lse = gpu.attention_with_lse(q, k, v, causal=causal, deterministic=det, bwd_kernel="wgmma")
        got = torch.autograd.grad(O, (q, k, v), dO)
        assert all(a.dtype == dt and torch.isfinite(a).all() for a in got)
        errs = relative_errors(got, ref)
        assert max(errs) <= TOL[dtype], (det, errs)
        assert (got[0][torch.isneginf(lse)] == 0).all()
    direct = gpu.flash_backward_mma(q.detach(), k.detach(), v.detach(), O.detach(), dO, lse.detach(), causal=causal,
                                    deterministic=True, kernel="wgmma")
    assert all(torch.equal(a, b) for a, b in zip(got, direct))


@pytest.mark.gpu
def test_a_gpu_that_is_not_hopper_is_a_one_line_error(monkeypatch):
    t = pytest.importorskip("torch")
    ok, _ = gpu.gpu_status()
    if not ok or not t.cuda.is_available() or t.cuda.get_device_capability() == (9, 0):
        pytest.skip("needs a CUDA GPU other than sm_90")
    q = t.zeros(1, 64, 64, device="cuda", dtype=t.float16)
    with pytest.raises(ValueError, match="kernel='wgmma' needs a Hopper GPU"):
        gpu.flash_backward_mma(q, q, q, q, q, t.zeros(1, 64, device="cuda"), kernel="wgmma")
    if t.cuda.get_device_capability() >= (8, 0):                                # the forward's tensor cores
        O = gpu.flash_attention(q.requires_grad_(), q, q, bwd_kernel="wgmma")
        with pytest.raises(ValueError, match="kernel='wgmma' needs a Hopper GPU"):
            O.float().sum().backward()
