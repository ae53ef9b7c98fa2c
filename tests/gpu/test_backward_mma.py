"""The tensor-core backward (kernels/flash_bwd_mma.cu, ``flashviz.gpu.flash_backward_mma``).

CPU tests: shared memory by hand, the step tags (Algorithm 2), one-line errors, the dQ default
(``dq``: "separate" unless "atomic" is named) and the autograd route's use of it. GPU tests (marked
``gpu``): dQ, dK, dV against float64 dense gradients (torch autograd of dense attention on the
same rounded inputs, bottom-right causal) over fp16 / bf16, d = 64 / 128, Bc = 64 / 128, causal and
not, N = 1, 3, 64, 129, 257, Nq ≠ Nk both ways, keyless rows (gradient exactly 0), strided views,
leading axes, large logits and the gradient of lse — for the atomic dQ (``dq="atomic"``), the
deterministic one (``deterministic=True``) and the default call, which runs the deterministic pass.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from flashviz import gpu
from flashviz.gpu.tensorcore.gradcheck import dense_gradients, strided_views
from flashviz.steps import STEPS, find_tags

ROOT = Path(__file__).resolve().parents[2]


def test_bwd_mma_smem_bytes_counted_by_hand():
    for Bc, d in ((64, 64), (64, 128), (128, 64), (128, 128)):
        # K_j, V_j [Bc][d] + Q_i, dO_i [64][d] + dS_ij [64][Bc], 2 bytes each; L_i, D_i [64] fp32
        assert gpu.bwd_mma_smem_bytes(Bc, d) == 2 * (2 * Bc * d + 2 * 64 * d + 64 * Bc) + 8 * 64
    assert gpu.bwd_mma_smem_bytes(64, 128) == 74_240
    with pytest.raises(ValueError, match="Bc=32 is not supported by the tensor-core backward"):
        gpu.bwd_mma_smem_bytes(32, 64)


def test_the_kernel_tags_every_backward_step_with_algorithm_2_lines():
    text = (ROOT / "kernels" / "flash_bwd_mma.cu").read_text(encoding="utf-8")
    tags = find_tags(text)
    by = {s.name: s for s in STEPS}
    assert {t.name for t in tags} == {s.name for s in STEPS if s.backward}
    for t in tags:
        assert t.paper == "Alg. 2" and set(t.lines) <= set(by[t.name].lines["Alg. 2"]), (t.index + 1, t.name)
    start = text.index("flash_bwd_mma(const u16*")
    end = text.index("flash_bwd_mma_dq(const u16*")
    assert [t.name for t in find_tags(text[start:end])] == [
        "load_KV", "init_dKdV", "load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK",
        "update_dQ", "write_dKdV"]
    start, end = end, text.index("flash_bwd_mma_convert(const float*")      # the deterministic dQ pass
    assert [t.name for t in find_tags(text[start:end])] == ["load_Qi", "load_KV", "load_KV", "recompute_P",
                                                            "compute_dS", "update_dQ"]   # load_KV: prologue, loop


def test_dq_pass_smem_bytes_counted_by_hand():
    for d in (64, 128):
        assert gpu.bwd_mma_dq_smem_bytes(d) == 2 * (4 * 64 * d) + 8 * 64
    assert gpu.bwd_mma_dq_smem_bytes(128) == 66_048
    with pytest.raises(ValueError):
        gpu.bwd_mma_dq_smem_bytes(96)


def test_two_stages_add_one_tile_of_each_streamed_operand():
    for Bc, d in ((64, 64), (128, 128)):     # one more Q_i and dO_i [64][d] b16, one more L_i, D_i [64] fp32
        assert gpu.bwd_mma_smem_bytes(Bc, d, 2) - gpu.bwd_mma_smem_bytes(Bc, d, 1) == 2 * 2 * 64 * d + 8 * 64
    assert gpu.bwd_mma_smem_bytes(128, 128, 2) == 148_480
    for d in (64, 128):                      # one more K_j and V_j [64][d] b16
        assert gpu.bwd_mma_dq_smem_bytes(d, 2) - gpu.bwd_mma_dq_smem_bytes(d, 1) == 2 * 2 * 64 * d
    assert gpu.bwd_mma_dq_smem_bytes(128, 2) == 98_816
    with pytest.raises(ValueError, match="stages=3 is not supported by the tensor-core backward"):
        gpu.bwd_mma_smem_bytes(64, 64, 3)


def test_the_runners_kernel_names_and_their_errors():
    from flashviz.gpu.tensorcore.backward import backward_expressions
    assert backward_expressions("float16", 64, 128, False, True, 2) == {
        "preprocess": "flash_bwd_mma_preprocess<0,128>", "main": "flash_bwd_mma<0,64,128,false,false,2>",
        "convert": "flash_bwd_mma_convert<0>", "dq": "flash_bwd_mma_dq<0,128,false,2>"}
    assert "dq" not in backward_expressions("bfloat16", 128, 64, True, False, 1)
    with pytest.raises(ValueError, match="dtype must be 'float16' or 'bfloat16'; got 'float32'"):
        backward_expressions("float32", 64, 64, False, False, 1)
    with pytest.raises(ValueError, match="stages=3"):
        backward_expressions("float16", 64, 64, False, False, 3)


def test_arrays_and_flags_are_one_line_errors_without_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    z = [np.zeros((2, 8, 64), np.float32)] * 5 + [np.zeros((2, 8), np.float32)]
    for det in (False, True):
        with pytest.raises(TypeError, match="takes torch CUDA tensors"):
            gpu.flash_backward_mma(*z, deterministic=det)
    with pytest.raises(TypeError, match="deterministic"):
        gpu.flash_backward_mma(*z, deterministic="yes")


def test_the_dq_default_is_the_separate_pass_and_bad_choices_are_one_line_errors(monkeypatch):
    from flashviz.gpu.tensorcore import backward as bk
    assert bk.BWD_DQ == ("atomic", "separate") and bk.BWD_DQ_DEFAULT == "separate"
    assert bk.check_dq(None) == bk.check_dq(None, True) == bk.check_dq("separate") == "separate"
    assert bk.check_dq("separate", True) == "separate" and bk.check_dq("atomic") == bk.check_dq("atomic", False) \
        == "atomic"
    with pytest.raises(ValueError, match=r"^deterministic=True needs dq='separate' \(or None\); dq='atomic'") as e:
        bk.check_dq("atomic", True)
    assert "\n" not in str(e.value)
    for bad in ("Atomic", "fast", "", 1, True, ("atomic",)):
        with pytest.raises(ValueError, match=r"^dq must be one of 'atomic', 'separate' or None \(the default: "
                                             r"'separate'\); got ") as e:
            bk.check_dq(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="deterministic"):
        bk.check_dq(None, "yes")
    # flash_backward_mma checks dq before anything that needs a GPU, and names the same errors
    monkeypatch.setitem(sys.modules, "cupy", None)
    z = [np.zeros((2, 8, 64), np.float32)] * 5 + [np.zeros((2, 8), np.float32)]
    with pytest.raises(ValueError, match="deterministic=True needs dq='separate'"):
        gpu.flash_backward_mma(*z, deterministic=True, dq="atomic")
    with pytest.raises(ValueError, match="dq must be one of"):
        gpu.flash_backward_mma(*z, dq="fp32-atomics")
    for dq in ("atomic", "separate", None):                 # good choices reach the tensor check
        with pytest.raises(TypeError, match="takes torch CUDA tensors"):
            gpu.flash_backward_mma(*z, dq=dq)
    # the default is decided in one place: the call follows BWD_DQ_DEFAULT
    monkeypatch.setattr(bk, "BWD_DQ_DEFAULT", "atomic")
    assert bk.check_dq(None) == "atomic"


def test_only_the_atomic_path_needs_the_fp32_dq_buffer():
    """launch_backward_mma: an atomic build without dQacc is a one-line ValueError raised before any
    launch; a deterministic (separate-pass) build launches with a null dQacc — the preprocess kernel
    then zeroes nothing, and the convert kernel is not launched."""
    import types

    from flashviz.gpu.tensorcore import backward as bk
    calls = []

    def kernel(name):
        return lambda grid, block, args, shared_mem=0: calls.append((name, args))

    class T:                                       # what the launcher reads of a torch tensor
        def __init__(self, shape, ptr):
            self.shape, self._ptr = shape, ptr

        def numel(self):
            return math.prod(self.shape)

        def data_ptr(self):
            return self._ptr

    q, k = T((2, 100, 64), 16), T((2, 80, 64), 32)
    mb = types.SimpleNamespace(Bc=64, deterministic=False, smem_bytes=0, dq_smem_bytes=0,
                               **{n: kernel(n) for n in ("preprocess", "main", "convert", "dq")})
    args = (q, k, k, q, q, T((2, 100), 48), None, T((2, 100), 64))
    with pytest.raises(ValueError, match=r"^launch_backward_mma: the atomic and bulk dQ paths need dQacc") as e:
        bk.launch_backward_mma(mb, *args, None, q, k, k, scale=0.125)
    assert "\n" not in str(e.value) and calls == []
    mb.deterministic = True
    bk.launch_backward_mma(mb, *args, None, q, k, k, scale=0.125)
    assert [n for n, _ in calls] == ["preprocess", "main", "dq"]
    assert int(calls[0][1][4]) == 0 and int(calls[1][1][6]) == 0          # dQacc: a null pointer to both


def test_the_autograd_backward_passes_deterministic_and_leaves_dq_to_the_default(monkeypatch):
    """flash_attention's backward operator (autograd._backward) calls flash_backward_mma with the
    caller's deterministic and no dq: deterministic=False gets the device's default dQ (the wgmma
    kernel's bulk reduction on sm_90, the mma kernel's separate pass elsewhere).
    Its schema is unchanged (no dq argument). Pretend tensors: no torch, no GPU needed."""
    import types

    from flashviz.gpu import autograd as fa
    from flashviz.gpu.tensorcore import backward as bk
    assert "bool deterministic" in fa._BWD_SCHEMA and "dq" not in fa._BWD_SCHEMA
    calls = []
    monkeypatch.setattr(bk, "flash_backward_mma", lambda *a, **kw: calls.append(kw) or ("dq", "dk", "dv"))
    monkeypatch.setattr(fa, "uses_tensor_core_backward", lambda q: True)
    q = types.SimpleNamespace(is_cuda=True, get_device=lambda: 0, shape=(1, 2, 8, 64), dtype="float16")
    dO = types.SimpleNamespace(to=lambda dtype: "dO")
    for det in (False, True):
        assert fa._backward(dO, None, q, "k", "v", "O", "lse", True, 0.125, det) == ("dq", "dk", "dv")
    assert [c["deterministic"] for c in calls] == [False, True] and not any("dq" in c for c in calls)
    # what those calls run: the device's default dQ, or the separate pass where deterministic
    plans = {cc: [bk.backward_plan(cc, 64, deterministic=c["deterministic"], kernel=c.get("kernel"))[1] for c in calls]
             for cc in (80, 90)}
    assert plans == {80: ["separate", "separate"], 90: ["bulk", "separate"]}


# ---------------------------------------------------------------- GPU

torch_cuda = pytest.mark.gpu


def mma_backward(*args, **kw):
    """flash_backward_mma with the main kernel this file tests named: kernels/flash_bwd_mma.cu (on
    sm_90 the default call runs the wgmma kernel: tests/gpu/test_backward_wgmma.py)."""
    return gpu.flash_backward_mma(*args, kernel="mma", **kw)


@pytest.fixture
def torch():
    t = pytest.importorskip("torch")
    ok, reason = gpu.gpu_status()
    if not ok or not t.cuda.is_available():
        pytest.skip(reason if not ok else "torch sees no CUDA device")
    return t


def _reference(torch, q, k, v, dO, *, causal, scale=None, dlse=None):
    """float64 O, lse, dQ, dK, dV by torch autograd of dense attention (bottom-right causal)."""
    return dense_gradients(torch, q, k, v, dO, causal=causal, scale=scale, dlse=dlse)


def _rel(a, b, floor):
    return ((a.double() - b.double()).abs().max() / max(b.abs().max().item(), floor)).item()


def _check(torch, q, k, v, *, causal, tol, Bc=None, scale=None, dlse=None, record=None, deterministic=False,
           dq=None):
    dO = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    O, lse, ref = _reference(torch, q, k, v, dO, causal=causal, scale=scale, dlse=dlse)
    got = mma_backward(q, k, v, O.to(q.dtype), dO, lse, causal=causal, scale=scale, dlse=dlse, Bc=Bc,
                                 deterministic=deterministic, dq=dq)
    floor = 0.1 * ref[2].abs().max().item()                   # dV = Pᵀ dO never cancels
    errs = []
    for name, a, b in zip(("dQ", "dK", "dV"), got, ref):
        assert a.dtype == q.dtype and a.shape == b.shape, name
        assert torch.isfinite(a).all(), name
        errs.append(_rel(a, b, floor))
    assert max(errs) <= tol, errs
    keyless = torch.isneginf(lse)
    assert (got[0][keyless] == 0).all()
    if record is not None:
        record("rel_err_dq_dk_dv", [f"{e:.2e}" for e in errs])
    return got


SHAPES = [(1, 1), (3, 3), (64, 64), (129, 129), (257, 257), (1, 257), (257, 1), (100, 333), (333, 100)]
TOL = {"float16": 5e-3, "bfloat16": 3e-2}


@torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("k, Nq_Nk", list(enumerate(SHAPES)), ids=[f"{a}x{b}" for a, b in SHAPES])
def test_gradients_match_float64(torch, record_property, dtype, d, causal, k, Nq_Nk):
    """dq="atomic": dQ added by fp32 atomics in the main kernel (the deterministic pass, the default,
    has the grid below)."""
    Nq, Nk = Nq_Nk
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(1000 * k + d + causal)
    q = torch.randn(2, 3, Nq, d, device="cuda", dtype=dt, generator=g)
    kk = torch.randn(2, 3, Nk, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(2, 3, Nk, d, device="cuda", dtype=dt, generator=g)
    _check(torch, q, kk, v, causal=causal, tol=TOL[dtype], Bc=(64, 128)[k % 2], record=record_property, dq="atomic")


@torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("k, Nq_Nk", list(enumerate(SHAPES)), ids=[f"{a}x{b}" for a, b in SHAPES])
def test_deterministic_gradients_match_float64(torch, dtype, d, causal, k, Nq_Nk):
    """deterministic=True: dK, dV from the main kernel without the dQ atomics, dQ from the dQ pass."""
    Nq, Nk = Nq_Nk
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(2000 * k + d + causal)
    q, kk, v = (torch.randn(2, 3, N, d, device="cuda", dtype=dt, generator=g) for N in (Nq, Nk, Nk))
    _check(torch, q, kk, v, causal=causal, tol=TOL[dtype], Bc=(64, 128)[k % 2], deterministic=True)


@torch_cuda
@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_dq_has_the_same_bits_on_20_runs_and_the_atomic_dq_is_close(torch, causal):
    g = torch.Generator(device="cuda").manual_seed(11)
    q, k, v, dO = (torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    O, lse = gpu.flash_forward_mma(q, k, v, causal=causal)
    first = mma_backward(q, k, v, O, dO, lse, causal=causal, deterministic=True)
    for _ in range(19):
        again = mma_backward(q, k, v, O, dO, lse, causal=causal, deterministic=True)
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    atomic = mma_backward(q, k, v, O, dO, lse, causal=causal, dq="atomic")
    for a, b in zip(first, atomic):
        assert _rel(a, b, 0.1 * b.abs().max().item()) <= 5e-3
    assert torch.equal(first[1], atomic[1]) and torch.equal(first[2], atomic[2])   # dK, dV: the same kernel code


@torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_default_call_runs_the_separate_pass(torch, dtype, causal):
    """Without dq (deterministic=False: no promise asked for) the call runs the default dQ, the
    separate pass: the same bits as dq="separate" and deterministic=True, on 20 runs; against float64
    like them; dq="atomic" differs from it in dQ by rounding only, and not at all in dK, dV."""
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(21 + causal)
    q, k, v, dO = (torch.randn(2, 4, N, 128, device="cuda", dtype=dt, generator=g) for N in (700, 900, 900, 700))
    O, lse = gpu.flash_forward_mma(q, k, v, causal=causal)
    default = mma_backward(q, k, v, O, dO, lse, causal=causal)
    for again in [mma_backward(q, k, v, O, dO, lse, causal=causal) for _ in range(19)] + [
            mma_backward(q, k, v, O, dO, lse, causal=causal, dq="separate"),
            mma_backward(q, k, v, O, dO, lse, causal=causal, deterministic=True),
            mma_backward(q, k, v, O, dO, lse, causal=causal, deterministic=True, dq="separate")]:
        assert all(torch.equal(a, b) for a, b in zip(default, again))
    atomic = mma_backward(q, k, v, O, dO, lse, causal=causal, dq="atomic")
    assert torch.equal(default[1], atomic[1]) and torch.equal(default[2], atomic[2])
    assert _rel(atomic[0], default[0], 0.1 * default[0].abs().max().item()) <= TOL[dtype]
    for k_, (Nq, Nk) in enumerate([(129, 257), (257, 100), (1, 64)]):
        g = torch.Generator(device="cuda").manual_seed(4000 * k_ + causal)
        q, kk, v = (torch.randn(2, 3, N, 64, device="cuda", dtype=dt, generator=g) for N in (Nq, Nk, Nk))
        _check(torch, q, kk, v, causal=causal, tol=TOL[dtype], Bc=(64, 128)[k_ % 2])


@torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_two_pipeline_stages_give_one_stages_bits(torch, dtype, d, causal):
    """stages=2 (v2: the next tile's copies in flight) does the same arithmetic in the same order as
    stages=1, which the grid above checks against float64: deterministic dQ, dK, dV bit for bit;
    with atomics dK, dV bit for bit and dQ to the atomics' rounding. Over the grid's shapes (one
    query block, Nq < Br, Nq ≠ Nk both ways, keyless rows) and both Bc."""
    dt = getattr(torch, dtype)
    for k, (Nq, Nk) in enumerate(SHAPES + [(1000, 700)]):
        g = torch.Generator(device="cuda").manual_seed(3000 * k + d + causal)
        q, kk, v, dO = (torch.randn(2, 3, N, d, device="cuda", dtype=dt, generator=g) for N in (Nq, Nk, Nk, Nq))
        O, lse = gpu.flash_forward_mma(q, kk, v, causal=causal)
        for Bc in (64, 128):
            for det in (False, True):
                one, two = (mma_backward(q, kk, v, O, dO, lse, causal=causal, Bc=Bc,
                                                   dq="separate" if det else "atomic", stages=st) for st in (1, 2))
                assert torch.equal(one[1], two[1]) and torch.equal(one[2], two[2]), (Nq, Nk, Bc, det)
                if det:
                    assert torch.equal(one[0], two[0]), (Nq, Nk, Bc)
                else:
                    assert _rel(two[0], one[0], 0.1 * one[2].abs().max().item()) <= 1e-2, (Nq, Nk, Bc)


@torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_strided_views_large_logits_scale_and_lse_gradient(torch, dtype):
    dt = getattr(torch, dtype)
    q, k, v, dlse = strided_views(torch, dt, 7)
    _check(torch, q, k, v, causal=True, tol=TOL[dtype], scale=0.05)
    _check(torch, q, k, v, causal=True, tol=TOL[dtype], dlse=dlse, Bc=128, dq="atomic")
    _check(torch, q, k, v, causal=True, tol=TOL[dtype], dlse=dlse, deterministic=True)
    big = (q.float() * 6).to(dt)                                                  # scores up to about ±60
    _check(torch, big, k, v, causal=False, tol=2 * TOL[dtype])


@torch_cuda
def test_one_head_as_n_by_d_and_errors(torch):
    g = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(77, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    _check(torch, q, k, v, causal=True, tol=5e-3)
    O, lse = gpu.flash_forward_mma(q, k, v)
    with pytest.raises(ValueError, match="d=96"):
        mma_backward(*(torch.zeros(4, 96, device="cuda", dtype=torch.float16),) * 5,
                               torch.zeros(4, device="cuda"))
    with pytest.raises(TypeError, match="must be torch.float16 like Q"):
        mma_backward(q, k.bfloat16(), v, O, O, lse)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        mma_backward(q.float(), k.float(), v.float(), O.float(), O.float(), lse)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["mma", "wgmma"])
@pytest.mark.parametrize("causal, Nq, Nk, Bc, d", [(False, 257, 129, 128, 64), (True, 300, 300, 64, 64),
                                                  (True, 100, 300, 128, 64), (False, 200, 333, 128, 128)])
def test_tensorcore_backward_timeline_is_complete_ordered_and_exact(torch, kernel, causal, Nq, Nk, Bc, d):
    """kernels/flash_bwd_mma.cu (atomic dQ) and flash_bwd_wgmma.cu (sm_90; the plan's dQ path)
    traced (gpu.trace_backward: dK, dV bit-identical to the normal kernel's, dQ to fp16 rounding):
    one record per key block and head; each block visits exactly the query blocks of 64 rows that
    see K_j; in each writer (a warp of 16 keys, a warpgroup of 64) the steps of a query block run
    in Algorithm 2's order; load_KV and write_dKdV once a writer."""
    from flashviz.gpu.common import device_facts
    if kernel == "wgmma" and device_facts().cc != 90:
        pytest.skip("the wgmma backward runs on sm_90 only")
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((1, 2, n, d)).astype(np.float32) for n in (Nq, Nk, Nk))
    tl = gpu.trace_backward(Q, K, V, kernel=kernel, causal=causal, Bc=Bc, repeat=3, rounds=2)
    Tr, Tc, W = -(-Nq // 64), -(-Nk // Bc), Bc // (16 if kernel == "mma" else 64)
    assert tl.kernel == f"bwd_{kernel}" and tl.grid == (Tc, 2, 1) and (tl.Br, tl.Bc, tl.d) == (64, Bc, d)
    order = ("load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ")
    for blk in tl.blocks:
        c0, off = int(blk["i"]) * Bc, Nk - Nq
        first = max(0, (c0 - off) // 64) if causal else 0
        seen = [] if causal and c0 - off >= Nq else list(range(first, Tr))
        assert sorted(tl.tiles["j"][tl.tiles["cta"] == blk["cta"]].tolist()) == seen and blk["n_j"] == len(seen)
        mine = tl.events[tl.events["cta"] == blk["cta"]]
        for w in range(W):
            e = mine[(mine["group"] == w) & (mine["j"] >= 0)]
            e = e[np.lexsort((e["t0_ns"], e["j"]))]
            assert [tl.stages[s] for s in e["stage"]] == list(order) * len(seen)
            assert np.all(np.diff(e["t0_ns"]) >= -1.0)
        assert sorted(tl.stages[s] for s in mine["stage"][mine["j"] == -1]) == sorted(["load_KV", "write_dKdV"] * W)
    assert tl.kernel_ms > 0 and tl.traced_ms > 0
