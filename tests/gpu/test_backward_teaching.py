"""The backward teaching kernel (kernels/flash_bwd.cu, ``flashviz.gpu.flash_backward_gpu``).

CPU tests (no CuPy needed): the shared-memory arithmetic, the one-line argument errors (checked
before any CUDA work), and the kernel's step tags (FA2 Algorithm 2, the vocabulary of
flashviz.steps). GPU tests (marked ``gpu``; skipped without a device): dQ, dK, dV against float64
dense gradients written here from the closed form (Dao et al. 2022, Appendix B.2) over a grid of
N = 1, 3, 64, 129, 257, Nq ≠ Nk both ways, causal and not, d = 16, 64, 128, Br, Bc = 16, 32, 64,
keyless rows (gradient exactly 0), large logits, leading (B, H) axes, torch inputs, the gradient of
lse, both dQ modes (atomics; deterministic: bitwise equal over 20 runs) and fully written outputs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from flashviz import gpu
from flashviz.gpu.teaching import limits as tl
from flashviz.steps import STEPS, find_tags

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the float64 reference

def dense_forward_backward(Q, K, V, dO, *, causal=False, scale=None, dlse=None):
    """O, lse, dQ, dK, dV of O = softmax(scale·Q Kᵀ) V in float64, from the closed form:
    P = softmax(S) (rows with no visible key: P = 0, lse = −inf); dV = Pᵀ dO; dP = dO Vᵀ;
    D = rowsum(dO ∘ O) − dlse; dS = P ∘ (dP − D); dQ = scale·dS K; dK = scale·dSᵀ Q."""
    Q, K, V, dO = (np.asarray(x, dtype=np.float64) for x in (Q, K, V, dO))
    Nq, Nk, d = Q.shape[-2], K.shape[-2], Q.shape[-1]
    scale = 1 / np.sqrt(d) if scale is None else scale
    S = scale * (Q @ np.swapaxes(K, -1, -2))
    if causal:
        r, c = np.arange(Nq)[:, None], np.arange(Nk)[None, :]
        S = np.where(c <= r + Nk - Nq, S, -np.inf)
    m = S.max(axis=-1, keepdims=True)
    m0 = np.where(np.isfinite(m), m, 0.0)
    E = np.exp(S - m0)
    l = E.sum(axis=-1, keepdims=True)
    P = E / np.where(l > 0, l, 1.0)
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, m0[..., 0] + np.log(l[..., 0]), -np.inf)
    O = P @ V
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    dV = T(P) @ dO
    dP = dO @ T(V)
    D = (dO * O).sum(axis=-1, keepdims=True)
    if dlse is not None:
        D = D - np.asarray(dlse, dtype=np.float64)[..., None]
    dS = P * (dP - D)
    return O, lse, scale * (dS @ K), scale * (T(dS) @ Q), dV


def _inputs(rng, lead, Nq, Nk, d, *, logit_gain=1.0):
    Q = (rng.standard_normal((*lead, Nq, d)) * logit_gain).astype(np.float32)
    K = rng.standard_normal((*lead, Nk, d)).astype(np.float32)
    V = rng.standard_normal((*lead, Nk, d)).astype(np.float32)
    dO = rng.standard_normal((*lead, Nq, d)).astype(np.float32)
    return Q, K, V, dO


def _err(got, ref, floor: float = 0.0) -> float:
    """max |got − ref| / max(max |ref|, floor); the absolute error when both are 0. floor: a natural
    scale of the gradient for references that cancel to (nearly) 0 — with one key, P = 1 and
    dS = dP − D = 0 exactly, so dQ and dK are 0 up to rounding."""
    top = max(float(np.abs(ref).max()), floor)
    diff = float(np.abs(np.asarray(got, dtype=np.float64) - ref).max())
    return diff if top == 0 else diff / top


# ---------------------------------------------------------------- CPU: limits, errors, tags

@pytest.mark.parametrize("Br, Bc, d", [(64, 64, 64), (64, 64, 128), (16, 16, 16), (32, 64, 128), (128, 128, 128)])
def test_bwd_smem_bytes_counted_by_hand(Br, Bc, d):
    # K_j, V_j [Bc][d+4] + Q_i, dO_i [Br][d+4] + P_ij, dS_ij [Br][Bc+4] + L_i, D_i [Br], float32
    want = 4 * (2 * Bc * (d + 4) + 2 * Br * (d + 4) + 2 * Br * (Bc + 4) + 2 * Br)
    assert tl.bwd_smem_bytes(Br, Bc, d) == want
    assert tl.bwd_dq_smem_bytes(Br, Bc, d) == want - 4 * Br * (Bc + 4)
    assert gpu.bwd_smem_bytes(64, 64, 128) == 170_496


def test_bwd_launch_limit_names_bytes_asked_and_available():
    with pytest.raises(ValueError, match=r"Br=64, Bc=128, d=128 needs 270,848 bytes of shared memory; the device "
                                         r"limit is 232,448 per block"):
        gpu.check_bwd_launch(64, 128, 128)
    assert gpu.check_bwd_launch(64, 64, 128) == 170_496
    assert (64, 64) in gpu.bwd_supported_blocks(128) and (64, 128) not in gpu.bwd_supported_blocks(128)
    assert len(gpu.bwd_supported_blocks(16)) == 16
    with pytest.raises(ValueError, match="supported: 16, 32, 64, 128"):
        gpu.check_bwd_launch(64, 48, 64)
    with pytest.raises(ValueError, match="d=96"):
        gpu.bwd_supported_blocks(96)


def _args(Nq=8, Nk=8, d=64, lead=(2,)):
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    return [z(*lead, Nq, d), z(*lead, Nk, d), z(*lead, Nk, d), z(*lead, Nq, d), z(*lead, Nq, d), z(*lead, Nq)]


@pytest.mark.parametrize("change, kw, err, text", [
    (lambda a: a.__setitem__(0, a[0].tolist()), {}, TypeError, "Q must be a NumPy or CuPy float array"),
    (lambda a: a.__setitem__(1, a[1].astype(np.int32)), {}, TypeError, "K must have a float dtype"),
    (lambda a: a.__setitem__(2, a[2][:, :4]), {}, ValueError, "V must have K's shape"),
    (lambda a: a.__setitem__(1, a[1][..., :32]), {}, ValueError, "K must have shape"),
    (lambda a: a.__setitem__(3, a[3][:, :4]), {}, ValueError, "O must have Q's shape"),
    (lambda a: a.__setitem__(4, a[4][None]), {}, ValueError, "dO must have Q's shape"),
    (lambda a: a.__setitem__(5, a[5][:, :3]), {}, ValueError, r"lse must have shape \(\.\.\., Nq\)"),
    (lambda a: a.__setitem__(0, a[0][0, 0]), {}, ValueError, "ndim >= 2"),
    (lambda a: None, {"causal": 1}, TypeError, "causal must be True or False"),
    (lambda a: None, {"deterministic": "yes"}, TypeError, "deterministic must be True or False"),
    (lambda a: None, {"scale": -1.0}, ValueError, "scale must be > 0"),
    (lambda a: None, {"scale": "0.1"}, TypeError, "scale must be a real number"),
    (lambda a: None, {"Br": 48}, ValueError, "Br=48 is not supported by the backward teaching kernel"),
    (lambda a: None, {"Bc": 64.0}, TypeError, "Bc must be an integer"),
    (lambda a: None, {"dlse": np.zeros((2, 3), np.float32)}, ValueError, "dlse must have shape"),
])
def test_bad_inputs_are_one_line_errors_before_any_cuda_work(monkeypatch, change, kw, err, text):
    monkeypatch.setitem(sys.modules, "cupy", None)          # any CUDA work would raise RuntimeError instead
    a = _args()
    change(a)
    with pytest.raises(err, match=text) as info:
        gpu.flash_backward_gpu(*a, **kw)
    assert "\n" not in str(info.value)


def test_valid_input_without_cupy_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(RuntimeError, match="CuPy"):
        gpu.flash_backward_gpu(*_args(d=16))


def test_the_kernel_tags_every_backward_step_with_algorithm_2_lines():
    text = (ROOT / "kernels" / "flash_bwd.cu").read_text(encoding="utf-8")
    tags = find_tags(text)
    backward = {s.name for s in STEPS if s.backward}
    assert {t.name for t in tags} == backward
    by = {s.name: s for s in STEPS}
    for t in tags:
        assert t.paper == "Alg. 2" and set(t.lines) <= set(by[t.name].lines["Alg. 2"]), (t.index + 1, t.name)
    # the main kernel, flash_bwd<Br, Bc, D>, in Algorithm 2's order
    start = text.index("flash_bwd(const float*")
    end = text.index("flash_bwd_dq(const float*")
    main = [t.name for t in find_tags(text[start:end])]
    assert main == ["load_KV", "init_dKdV", "load_Qi", "recompute_P", "accumulate_dV", "compute_dS",
                    "accumulate_dK", "update_dQ", "write_dKdV"]
    assert [t.name for t in find_tags(text[:start])] == ["compute_D"]
    assert not re.search(r"#\s*include\s*<", text) and '#include "fv_ptx.cuh"' in text


# ---------------------------------------------------------------- GPU

@pytest.fixture
def cp():
    cupy = pytest.importorskip("cupy")
    ok, reason = gpu.gpu_status()
    if not ok:
        pytest.skip(reason)
    return cupy


def _check(cp, Q, K, V, dO, *, Br, Bc, causal, scale=None, deterministic=False, tol=1e-4, O=None, lse=None):
    O_ref, lse_ref, dQ_ref, dK_ref, dV_ref = dense_forward_backward(Q, K, V, dO, causal=causal, scale=scale)
    O = O_ref if O is None else O
    lse = lse_ref if lse is None else lse
    dQ, dK, dV = gpu.flash_backward_gpu(Q, K, V, O, dO, lse, Br=Br, Bc=Bc, causal=causal, scale=scale,
                                        deterministic=deterministic)
    assert isinstance(dQ, cp.ndarray) and dQ.dtype == cp.float32
    assert dQ.shape == Q.shape and dK.shape == K.shape and dV.shape == V.shape
    dQ, dK, dV = dQ.get(), dK.get(), dV.get()
    floor = 0.1 * float(np.abs(dV_ref).max())                          # dV = Pᵀ dO never cancels
    for name, got, ref in (("dQ", dQ, dQ_ref), ("dK", dK, dK_ref), ("dV", dV, dV_ref)):
        assert np.isfinite(got).all(), name
        assert _err(got, ref, floor) <= tol, (name, _err(got, ref, floor))
    keyless = np.isneginf(lse_ref)
    assert np.all(dQ[keyless] == 0)                                   # rows that see no key: exactly 0
    return dQ, dK, dV


SHAPES = [(1, 1), (3, 3), (64, 64), (129, 129), (257, 257), (1, 257), (257, 1), (3, 257), (257, 3),
          (129, 64), (64, 129)]
BLOCKS = [(16, 16), (32, 64), (64, 32), (64, 64), (16, 64), (32, 32)]


@pytest.mark.gpu
@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("k, Nq_Nk", list(enumerate(SHAPES)), ids=[f"{a}x{b}" for a, b in SHAPES])
def test_gradients_match_float64_over_shapes(cp, k, Nq_Nk, causal, d):
    Nq, Nk = Nq_Nk
    Br, Bc = BLOCKS[(k + d // 16) % len(BLOCKS)]
    rng = np.random.default_rng([k, d, int(causal)])
    _check(cp, *_inputs(rng, (2,), Nq, Nk, d), Br=Br, Bc=Bc, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("Br", [16, 32, 64])
@pytest.mark.parametrize("Bc", [16, 32, 64])
@pytest.mark.parametrize("Nq, Nk", [(129, 257), (257, 129)])
def test_gradients_match_float64_over_blocks(cp, Br, Bc, d, Nq, Nk):
    """Every block size with both Nq < Nk and Nq > Nk under the causal mask: with Nq = 257 and
    Nk = 129 the first 128 query rows see no key (their dQ is 0), and tiles are partial."""
    rng = np.random.default_rng([Br, Bc, d, Nq])
    _check(cp, *_inputs(rng, (1,), Nq, Nk, d), Br=Br, Bc=Bc, causal=True, deterministic=(Br + Bc) % 3 == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [32, 64, 128])
def test_leading_axes_and_the_gpu_forward_chain(cp, d):
    """(B, H) = (2, 3) heads; O and lse from the teaching forward on the GPU (as a user would run it)."""
    rng = np.random.default_rng(d)
    Q, K, V, dO = _inputs(rng, (2, 3), 200, 150, d)
    O, lse = gpu.flash_forward_gpu(Q, K, V, Br=64, Bc=64, causal=True)
    _check(cp, Q, K, V, dO, Br=64, Bc=32, causal=True, O=O, lse=lse, tol=2e-4)
    _check(cp, Q, K, V, dO, Br=32, Bc=64, causal=False, scale=0.3)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_large_logits(cp, causal):
    """Scores up to about ±100 (Q scaled by 12): P is nearly one-hot; no overflow, no NaN."""
    rng = np.random.default_rng(7)
    _check(cp, *_inputs(rng, (2,), 129, 200, 64, logit_gain=12.0), Br=64, Bc=64, causal=causal, tol=1e-3)


@pytest.mark.gpu
def test_agrees_with_the_numpy_tiled_backward(cp):
    """The same algorithm in NumPy (flashviz/backward.py, checked there by finite differences)."""
    import flashviz as fv
    from flashviz.backward import flash_backward
    rng = np.random.default_rng(11)
    Q, K, V, dO = (x.astype(np.float64) for x in _inputs(rng, (), 100, 70, 64))
    r = fv.flash_forward(Q, K, V, Br=32, Bc=32, causal=True)
    ref = flash_backward(Q, K, V, r.O, dO, r.lse, Br=32, Bc=32, causal=True)
    got = gpu.flash_backward_gpu(Q, K, V, r.O, dO, r.lse, Br=32, Bc=32, causal=True)
    for g, want in zip(got, (ref.dQ, ref.dK, ref.dV)):
        assert _err(g.get(), want) <= 1e-4


@pytest.mark.gpu
def test_deterministic_dq_is_bitwise_reproducible_and_matches_atomics(cp):
    rng = np.random.default_rng(5)
    Q, K, V, dO = (cp.asarray(x) for x in _inputs(rng, (2, 2), 257, 513, 64))
    O, lse = gpu.flash_forward_gpu(Q, K, V, causal=True)
    runs = [gpu.flash_backward_gpu(Q, K, V, O, dO, lse, Br=32, Bc=32, causal=True, deterministic=True)
            for _ in range(20)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert cp.array_equal(a, b)                                   # the same bits, every run
    atomic = gpu.flash_backward_gpu(Q, K, V, O, dO, lse, Br=32, Bc=32, causal=True)
    for a, b in zip(runs[0], atomic):
        assert _err(a.get(), b.get().astype(np.float64)) <= 1e-5
    cp.testing.assert_array_equal(runs[0][1], atomic[1])                   # dK, dV never use atomics
    cp.testing.assert_array_equal(runs[0][2], atomic[2])


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [False, True])
def test_every_output_element_is_written(cp, deterministic):
    """Outputs poisoned with NaN before the launch: none is left (keys no query sees: dK = dV = 0)."""
    from flashviz.gpu.teaching.backward import compile_backward, launch_backward
    rng = np.random.default_rng(9)
    Nq, Nk, d = 70, 333, 64                                               # causal: keys 0..332, rows reach 262 + 70
    Q, K, V, dO = (cp.asarray(x) for x in _inputs(rng, (3,), Nq, Nk, d))
    O, lse = gpu.flash_forward_gpu(Q, K, V, causal=True)
    cb = compile_backward(32, 64, d)
    dQ, dK, dV = (cp.full(x.shape, cp.nan, cp.float32) for x in (Q, K, V))
    Dbuf = cp.full((3, Nq), cp.nan, cp.float32)
    launch_backward(cb, Q, K, V, O, dO, lse, dQ, dK, dV, Dbuf, causal=True, scale=1 / 8, deterministic=deterministic)
    assert not cp.isnan(dQ).any() and not cp.isnan(dK).any() and not cp.isnan(dV).any()
    _, _, dQ_ref, dK_ref, dV_ref = dense_forward_backward(Q.get(), K.get(), V.get(), dO.get(), causal=True)
    assert _err(dQ.get(), dQ_ref) <= 1e-4 and _err(dK.get(), dK_ref) <= 1e-4 and _err(dV.get(), dV_ref) <= 1e-4
    # Nq > Nk, causal: rows 0..259 see no key; their dQ is exactly 0
    Q2, K2, V2, dO2 = (cp.asarray(x) for x in _inputs(rng, (1,), 300, 40, d))
    O2, lse2 = gpu.flash_forward_gpu(Q2, K2, V2, causal=True)
    dQ2, dK2, dV2 = (cp.full(x.shape, cp.nan, cp.float32) for x in (Q2, K2, V2))
    launch_backward(cb, Q2, K2, V2, O2, dO2, lse2, dQ2, dK2, dV2, cp.empty((1, 300), cp.float32), causal=True,
                    scale=1 / 8, deterministic=deterministic)
    assert not cp.isnan(dQ2).any() and bool((dQ2[0, :260] == 0).all())


@pytest.mark.gpu
def test_keys_no_query_sees_get_zero_gradients(cp):
    """Bottom-right causal masking lets the last row see every key, so keys no query sees come from
    rows that all have lse = −inf: then every gradient is exactly 0 (dK = dV = 0 written), no NaN."""
    rng = np.random.default_rng(4)
    Q, K, V, dO = _inputs(rng, (1,), 50, 90, 32)
    O = np.zeros_like(Q)
    lse = np.full((1, 50), -np.inf, np.float32)
    for det in (False, True):
        for g in gpu.flash_backward_gpu(Q, K, V, O, dO, lse, Br=16, Bc=32, deterministic=det):
            assert bool((g == 0).all())


@pytest.mark.gpu
def test_gradient_of_lse_folds_into_D(cp):
    rng = np.random.default_rng(12)
    Q, K, V, dO = _inputs(rng, (2,), 140, 100, 64)
    dlse = rng.standard_normal((2, 140)).astype(np.float32)
    O, lse, dQ_ref, dK_ref, dV_ref = dense_forward_backward(Q, K, V, dO, causal=True, dlse=dlse)
    for det in (False, True):
        dQ, dK, dV = gpu.flash_backward_gpu(Q, K, V, O, dO, lse, Br=64, Bc=32, causal=True, dlse=dlse,
                                            deterministic=det)
        assert _err(dQ.get(), dQ_ref) <= 1e-4 and _err(dK.get(), dK_ref) <= 1e-4 and _err(dV.get(), dV_ref) <= 1e-4


@pytest.mark.gpu
def test_torch_inputs_give_torch_outputs_on_torchs_stream(cp):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 150, 3, 4, 64, device="cuda", dtype=torch.float16, generator=g)   # B, N, H, (q,k,v,dO), d
    q, k, v, do = (x[:, :, :, n].transpose(1, 2) for n in range(4))                        # strided BHSD views
    qd, kd, vd, dod = (t.double() for t in (q, k, v, do))
    O, lse, dQ_ref, dK_ref, dV_ref = dense_forward_backward(qd.cpu().numpy(), kd.cpu().numpy(), vd.cpu().numpy(),
                                                            dod.cpu().numpy(), causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        O_t = torch.as_tensor(O, device="cuda").half()
        lse_t = torch.as_tensor(lse, device="cuda")
        dQ, dK, dV = gpu.flash_backward_gpu(q, k, v, O_t, do, lse_t, Br=64, Bc=64, causal=True)
    torch.cuda.synchronize()
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.is_cuda for t in (dQ, dK, dV))
    assert dQ.shape == q.shape and dK.shape == k.shape
    for got, ref in ((dQ, dQ_ref), (dK, dK_ref), (dV, dV_ref)):
        assert _err(got.cpu().numpy(), ref) <= 2e-3                       # O rounded to fp16 feeds D
    with pytest.raises(TypeError, match="CPU torch tensor"):
        gpu.flash_backward_gpu(q.cpu(), k, v, O_t, do, lse_t, causal=True)


@pytest.mark.gpu
def test_torch_cuda_graph_capture_replays_the_backward(cp):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(1, 2, 96, 64, device="cuda", generator=g) for _ in range(4))
    O, lse = (torch.as_tensor(t.get(), device="cuda") for t in gpu.flash_forward_gpu(
        cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True))
    gpu.flash_backward_gpu(q, k, v, O, do, lse, Br=32, Bc=32, causal=True)        # warm: compile outside
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gpu.flash_backward_gpu(q, k, v, O, do, lse, Br=32, Bc=32, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gpu.flash_backward_gpu(q, k, v, O, do, lse, Br=32, Bc=32, causal=True)
    do.copy_(torch.randn(do.shape, device="cuda", generator=g))
    graph.replay()
    torch.cuda.synchronize()
    ref = gpu.flash_backward_gpu(q, k, v, O, do, lse, Br=32, Bc=32, causal=True, deterministic=True)
    for a, b in zip(out, ref):
        assert (a - b).abs().max().item() <= 1e-5 * max(1.0, b.abs().max().item())


@pytest.mark.gpu
def test_compile_cached_and_shared_memory_error(cp):
    a = gpu.compile_backward(32, 32, 64)
    assert gpu.compile_backward(32, 32, 64) is a and a.smem_bytes == gpu.bwd_smem_bytes(32, 32, 64)
    limit = gpu.device_smem_optin()
    if limit < 270_848:
        with pytest.raises(ValueError, match=rf"needs 270,848 bytes of shared memory; the device limit is {limit:,}"):
            gpu.flash_backward_gpu(*_args(d=128), Br=64, Bc=128)


@pytest.mark.gpu
@pytest.mark.parametrize("causal, Nq, Nk, Br, Bc", [(False, 257, 129, 64, 64), (True, 300, 300, 32, 64),
                                                    (True, 100, 300, 64, 32)])
def test_backward_timeline_is_complete_ordered_and_exact(cp, causal, Nq, Nk, Br, Bc):
    """kernels/flash_bwd.cu traced (gpu.trace_backward: its dK, dV bit-identical to the normal
    kernel's, dQ to float32 rounding): one record per key block j and head; each block visits the
    query blocks that see K_j (causal, bottom-right: from the block of row c0 − (Nk − Nq) on) and no
    other; in each warp the steps of a query block run in Algorithm 2's order, one query block after
    the other; load_KV and write_dKdV once a block; both times measured."""
    rng = np.random.default_rng(3)
    Q, K, V = (rng.standard_normal((1, 2, n, 64)).astype(np.float32) for n in (Nq, Nk, Nk))
    tl = gpu.trace_backward(Q, K, V, causal=causal, Br=Br, Bc=Bc, repeat=3, rounds=2)
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    assert tl.kernel == "bwd_teaching" and tl.grid == (Tc, 2, 1) and len(tl.blocks) == 2 * Tc
    order = ("load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ")
    for blk in tl.blocks:
        j = int(blk["i"])
        c0, off = j * Bc, Nk - Nq
        first = max(0, (c0 - off) // Br) if causal else 0
        seen = [] if causal and c0 - off >= Nq else list(range(first, Tr))
        assert sorted(tl.tiles["j"][tl.tiles["cta"] == blk["cta"]].tolist()) == seen
        assert blk["n_j"] == len(seen)
        mine = tl.events[tl.events["cta"] == blk["cta"]]
        for w in range(8):
            e = mine[(mine["group"] == w) & (mine["j"] >= 0)]
            e = e[np.lexsort((e["t0_ns"], e["j"]))]
            assert [tl.stages[s] for s in e["stage"]] == list(order) * len(seen)
            assert np.all(np.diff(e["t0_ns"]) >= -1.0)
        block_steps = sorted(tl.stages[s] for s in mine["stage"][mine["j"] == -1])
        assert block_steps == sorted(["load_KV"] * 8 + ["write_dKdV"] * 8)
    assert tl.kernel_ms > 0 and tl.traced_ms > 0


# ---------------------------------------------------------------- recompute versus store

def test_the_stored_p_paths_refuse_bad_input_in_one_line():
    from flashviz.gpu.teaching.stored_p import flash_backward_stored_p, naive_backward_gpu
    Q, K, V, dO = _inputs(np.random.default_rng(0), (2,), 5, 7, 16)
    with pytest.raises(ValueError, match="K must have shape"):
        naive_backward_gpu(Q, K[:, :, :8], V, Q, dO, Q[..., 0])
    with pytest.raises(TypeError, match="causal must be"):
        flash_backward_stored_p(Q, K, V, Q, dO, Q[..., 0], None, causal="yes")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq, Nk", [(129, 257), (257, 129), (64, 64), (3, 300)])
def test_the_stored_p_and_the_naive_backward_match_float64(cp, causal, Nq, Nk):
    """P made from lse equals the float64 softmax (0 where masked, and on rows that see no key); the
    teaching kernel reading it and the whole-matrix cuBLAS backward give the float64 gradients, and
    the stored-P kernel the recomputing kernel's to float32 rounding (they differ in P's step only)."""
    from flashviz.gpu.teaching.stored_p import flash_backward_stored_p, naive_backward_gpu, probabilities_gpu
    Q, K, V, dO = _inputs(np.random.default_rng(Nq + Nk), (2,), Nq, Nk, 64)
    O, lse, dQ_ref, dK_ref, dV_ref = dense_forward_backward(Q, K, V, dO, causal=causal)
    S = (Q.astype(np.float64) @ K.astype(np.float64).swapaxes(-1, -2)) / 8.0
    with np.errstate(invalid="ignore", over="ignore"):
        P_ref = np.where(np.isneginf(lse)[..., None], 0.0, np.exp(S - lse[..., None]))
    if causal:
        P_ref = np.where(np.arange(Nk)[None, :] <= np.arange(Nq)[:, None] + Nk - Nq, P_ref, 0.0)
    O32, lse32 = O.astype(np.float32), lse.astype(np.float32)
    P = probabilities_gpu(Q, K, lse32, causal=causal)
    assert P.shape == (2, Nq, Nk) and float(np.abs(P.get() - P_ref).max()) <= 1e-5
    floor = 0.1 * float(np.abs(dV_ref).max())
    stored = flash_backward_stored_p(Q, K, V, O32, dO, lse32, P, Br=32, Bc=64, causal=causal)
    naive = naive_backward_gpu(Q, K, V, O32, dO, lse32, causal=causal)
    recompute = gpu.flash_backward_gpu(Q, K, V, O32, dO, lse32, Br=32, Bc=64, causal=causal)
    for grads in (stored, naive):
        for got, ref in zip(grads, (dQ_ref, dK_ref, dV_ref)):
            assert got.shape == ref.shape and _err(got.get(), ref, floor) <= 1e-4
    for a, b in zip(stored, recompute):
        assert _err(a.get(), b.get().astype(np.float64), floor) <= 1e-5
    given = naive_backward_gpu(Q, K, V, O32, dO, lse32, causal=causal, P=P)     # the stored P, unchanged
    assert all(bool(cp.array_equal(a, b)) for a, b in zip(given, naive))
    assert float(np.abs(P.get() - P_ref).max()) <= 1e-5
    keyless = np.isneginf(lse)
    assert np.all(stored[0].get()[keyless] == 0) and np.all(naive[0].get()[keyless] == 0)
