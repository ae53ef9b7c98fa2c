"""``flashviz.gpu.flash_attention``: the torch.library operator with its backward, and
``flash_forward_mma`` with inputs that require grad (never a silent gradient drop).

CPU tests (torch needed, no GPU): the operator's wiring — autograd formula, fake (meta) kernels,
torch.compile, the gradient of lse, one-line errors — with the two kernels replaced by dense torch
float64 math (``_forward`` / ``_backward`` monkeypatched), checked against torch's own autograd
and ``torch.library.opcheck``. GPU tests (marked ``gpu``): the real kernels against float64 dense
autograd (bottom-right causal, Nq ≠ Nk both ways, keyless rows), gradcheck on small float64
inputs, a small attention layer trained for a few steps beside the same layer on SDPA,
torch.compile, and a forward-and-backward step captured in a torch.cuda.graph.
"""

from __future__ import annotations

import contextlib
import math

import pytest

torch = pytest.importorskip("torch")

from flashviz import gpu  # noqa: E402
from flashviz.gpu import autograd as fa  # noqa: E402


def dense(q, k, v, *, causal=False, scale=None):
    """(O, lse) of softmax(scale·q kᵀ) v in torch, bottom-right causal; keyless rows: O = 0, lse = −inf.
    Differentiable by torch's own autograd (the reference)."""
    Nq, Nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    s = scale * q @ k.transpose(-1, -2)
    if causal:
        r = torch.arange(Nq, device=q.device)[:, None]
        c = torch.arange(Nk, device=q.device)[None, :]
        s = s.masked_fill(c > r + Nk - Nq, -math.inf)
    keyless = torch.isneginf(s).all(dim=-1)
    lse0 = torch.logsumexp(s.masked_fill(keyless[..., None], 0.0), dim=-1).masked_fill(keyless, 0.0)
    p = torch.exp(s - lse0[..., None])                  # keyless rows: exp(−inf − 0) = 0, no NaN in the gradient
    return p @ v, lse0.masked_fill(keyless, -math.inf)


def _fake_forward(q, k, v, causal, scale, Br, Bc, variant):
    with torch.no_grad():
        O, lse = dense(q.double(), k.double(), v.double(), causal=causal, scale=scale)
    return O.to(q.dtype), lse.float()


def _fake_backward(dO, dlse, q, k, v, O, lse, causal, scale, deterministic, bwd_kernel=None):
    """The closed form (Dao et al. 2022, B.2) with D − dlse, in float64 (whichever bwd_kernel)."""
    q64, k64, v64, dO64 = q.double(), k.double(), v.double(), dO.double()
    Nq, Nk = q.shape[-2], k.shape[-2]
    s = scale * q64 @ k64.transpose(-1, -2)
    if causal:
        r = torch.arange(Nq)[:, None]
        c = torch.arange(Nk)[None, :]
        s = s.masked_fill(c > r + Nk - Nq, -math.inf)
    L = lse.double()
    P = torch.where(torch.isfinite(L)[..., None], torch.exp(s - torch.where(torch.isfinite(L), L, 0)[..., None]), 0)
    D = (dO64 * O.double()).sum(-1)
    if dlse is not None:
        D = D - dlse.double()
    dS = P * (dO64 @ v64.transpose(-1, -2) - D[..., None])
    return ((scale * dS @ k64).to(q.dtype), (scale * dS.transpose(-1, -2) @ q64).to(k.dtype),
            (P.transpose(-1, -2) @ dO64).to(v.dtype))


@pytest.fixture
def fake_kernels(monkeypatch):
    monkeypatch.setattr(fa, "_forward", _fake_forward)
    monkeypatch.setattr(fa, "_backward", _fake_backward)


def _leaves(*shapes, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(s, dtype=dtype, device=device, generator=g).requires_grad_() for s in shapes]


# ---------------------------------------------------------------- CPU: the operator's wiring

@pytest.mark.parametrize("causal, Nq, Nk", [(False, 7, 7), (True, 9, 5), (True, 4, 11)])
def test_gradients_flow_through_the_operator(fake_kernels, causal, Nq, Nk):
    q, k, v = _leaves((2, Nq, 8), (2, Nk, 8), (2, Nk, 8))
    O = gpu.flash_attention(q, k, v, causal=causal, scale=0.4)
    assert O.grad_fn is not None and O.shape == q.shape and O.dtype == q.dtype
    w = torch.randn(O.shape, dtype=O.dtype)
    got = torch.autograd.grad((O * w).sum(), (q, k, v))
    ref = torch.autograd.grad((dense(q, k, v, causal=causal, scale=0.4)[0] * w).sum(), (q, k, v))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)          # lse travels as float32
    if causal and Nq > Nk:                              # keyless rows: zero gradient, no NaN
        assert torch.isfinite(got[0]).all() and (got[0][:, : Nq - Nk] == 0).all()


def test_the_gradient_of_lse_flows_too(fake_kernels):
    q, k, v = _leaves((3, 6, 8), (3, 10, 8), (3, 10, 8), seed=1)
    O, lse = gpu.attention_with_lse(q, k, v, causal=True)
    wo, wl = torch.randn(O.shape, dtype=O.dtype), torch.randn(lse.shape, dtype=torch.float64)
    got = torch.autograd.grad((O * wo).sum() + (lse * wl).sum(), (q, k, v))
    Or, lr = dense(q, k, v, causal=True)
    ref = torch.autograd.grad((Or * wo).sum() + (lr * wl).sum(), (q, k, v))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)     # lse travels as float32


def test_flash_forward_mma_routes_inputs_that_require_grad(fake_kernels, monkeypatch):
    """Priority of issue 23: with grad enabled and an input that requires grad, the outputs carry a
    grad_fn (the autograd operator), never a silently gradient-free O."""
    from flashviz.gpu.tensorcore import kernel as mk
    q, k, v = _leaves((1, 2, 12, 64), (1, 2, 20, 64), (1, 2, 20, 64), dtype=torch.float16, seed=2)
    O, lse = gpu.flash_forward_mma(q, k, v, causal=True)
    assert O.grad_fn is not None and lse.grad_fn is not None and O.dtype == torch.float16
    O.float().sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None and torch.isfinite(q.grad).all()
    calls = []
    monkeypatch.setattr(mk, "forward_mma_nograd", lambda *a, **kw: calls.append(kw) or ("O", "lse"))
    with torch.no_grad():                                              # grad mode off: the plain forward
        assert gpu.flash_forward_mma(q, k, v) == ("O", "lse")
    assert gpu.flash_forward_mma(q.detach(), k.detach(), v.detach(), causal=True) == ("O", "lse")
    assert len(calls) == 2 and calls[1]["causal"] is True


@pytest.mark.parametrize("make, text", [
    (lambda q, k, v: (q, k.detach().numpy(), v), "records gradients only when Q, K and V are all torch tensors"),
    (lambda q, k, v: (q.float(), k.float(), v.float()), "must be a float16 or bfloat16 torch tensor"),
])
def test_flash_forward_mma_with_grad_says_what_it_cannot_do_in_one_line(make, text):
    q, k, v = _leaves((1, 1, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64), dtype=torch.float16)
    with pytest.raises(TypeError, match=text) as info:
        gpu.flash_forward_mma(*make(q, k, v))
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="dtype='bfloat16' was asked"):
        gpu.flash_forward_mma(q, k, v, dtype="bfloat16")


def test_cpu_tensors_and_bad_arguments_are_one_line_errors():
    q, k, v = _leaves((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), dtype=torch.float16)
    for call, err, text in [
        (lambda: gpu.flash_forward_mma(q, k, v), TypeError, "CPU torch tensor"),
        (lambda: gpu.flash_attention(q.float(), k.float(), v.float()), TypeError, "CPU torch tensor"),
        (lambda: gpu.flash_attention(q, k, v, causal="no"), TypeError, "causal must be True or False"),
        (lambda: gpu.flash_attention(q, k, v, scale=0.0), ValueError, "scale must be > 0"),
        (lambda: gpu.flash_attention(q, k.float(), v), TypeError, "share one dtype"),
        (lambda: gpu.flash_attention(q.int(), k, v), TypeError, "float16, bfloat16, float32 or float64"),
        (lambda: gpu.flash_attention(q.detach().numpy(), k, v), TypeError, "takes torch tensors"),
    ]:
        with pytest.raises(err, match=text) as info:
            call()
        assert "\n" not in str(info.value)


def test_opcheck_the_registrations(fake_kernels):
    """torch.library.opcheck: schema, fake kernels against real outputs, the autograd registration
    and AOT dispatch, for both operators (with the dense stand-in kernels)."""
    ops = fa._ops()
    q, k, v = _leaves((2, 5, 8), (2, 7, 8), (2, 7, 8), seed=3)
    torch.library.opcheck(ops["fwd"], (q, k, v, True, 0.3, None, None, None, False, None))
    torch.library.opcheck(ops["fwd"], (q, k, v, True, 0.3, None, None, None, False, "wgmma"))
    O, lse = _fake_forward(q, k, v, True, 0.3, None, None, None)
    dO = torch.randn(O.shape, dtype=O.dtype)
    torch.library.opcheck(ops["bwd"], (dO, None, q.detach(), k.detach(), v.detach(), O, lse, True, 0.3, False, None))
    torch.library.opcheck(ops["bwd"], (dO, torch.randn(lse.shape), q.detach(), k.detach(), v.detach(), O, lse,
                                       True, 0.3, True, "mma"))


def test_torch_compile_fullgraph_matches_eager(fake_kernels):
    q, k, v = _leaves((2, 9, 8), (2, 6, 8), (2, 6, 8), seed=4)

    def f(q, k, v):
        return (gpu.flash_attention(q, k, v, causal=True) ** 2).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    ref = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("bwd_kernel", [None, "mma", "wgmma"])
def test_bwd_kernel_reaches_the_backward_eager_and_compiled(fake_kernels, monkeypatch, bwd_kernel):
    """flash_attention(bwd_kernel=...) hands the name, unchanged (None stays None: the default
    route), through the operator to the backward, in eager mode and under torch.compile."""
    seen = []
    monkeypatch.setattr(fa, "_backward", lambda *a: seen.append(a[-1]) or _fake_backward(*a))
    q, k, v = _leaves((1, 2, 9, 64), (1, 2, 6, 64), (1, 2, 6, 64), dtype=torch.float16, seed=14)

    def f(q, k, v):
        return gpu.flash_attention(q, k, v, causal=True, bwd_kernel=bwd_kernel).float().sum()

    got = torch.autograd.grad(f(q, k, v), (q, k, v))
    again = torch.autograd.grad(torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v), (q, k, v))
    assert seen == [bwd_kernel, bwd_kernel]
    for a, b in zip(got, again):
        assert a.dtype == torch.float16 and torch.equal(a, b)


def test_bwd_kernel_needs_half_precision_and_d_64_or_128():
    """A named backward kernel is a tensor-core one: float32 / float64 or d = 32 is a one-line
    ValueError at the call, before any GPU work (the tensors here are on the CPU)."""
    for dtype, d, name in ((torch.float64, 64, "mma"), (torch.float32, 128, "wgmma"), (torch.float16, 32, "wgmma")):
        q, k, v = _leaves((1, 8, d), (1, 8, d), (1, 8, d), dtype=dtype)
        with pytest.raises(ValueError, match=rf"^bwd_kernel='{name}' runs the tensor-core backward: float16 / "
                                             rf"bfloat16 with d in \{{64, 128\}}; got {dtype}, d={d} ") as e:
            gpu.flash_attention(q, k, v, bwd_kernel=name)
        assert "\n" not in str(e.value)


def test_backward_blocks_fit_the_device_limit():
    assert fa.backward_blocks(128, 232_448) == (64, 64)
    assert fa.backward_blocks(128, 101_376) == (32, 32)                     # sm_86/89: 99 KB per block
    assert fa.backward_blocks(64, 49_152) == (32, 32)
    with pytest.raises(ValueError, match="d=96"):
        fa.backward_blocks(96, 232_448)


# ---------------------------------------------------------------- GPU: the real kernels

@pytest.fixture
def cuda():
    ok, reason = gpu.gpu_status()
    if not ok or not torch.cuda.is_available():
        pytest.skip(reason if not ok else "torch sees no CUDA device")
    return torch.device("cuda")


def _rel(a, b, floor: float = 1e-30) -> float:
    """max |a − b| / max(max |b|, floor) (floor: a natural scale when b cancels to about 0)."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(floor)).item()


def _sdpa_errors(q, k, v, w, causal, ref, backend=None):
    """SDPA's own gradient errors on the same half-precision inputs (bottom-right causal): its default
    dispatch, or the backend named ("FLASH_ATTENTION": FlashAttention-2, the same roundings as ours);
    None when it refuses these inputs."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        mask = causal_lower_right(q.shape[-2], k.shape[-2]) if causal else None
        with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
            O = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
        g = torch.autograd.grad((O.float() * w).sum(), (qs, ks, vs))
        return [_rel(a, b, 0.1 * ref[2].abs().max().item()) for a, b in zip(g, ref)]
    except Exception:                   # a backend that refuses the mask: nothing to compare
        return None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)], ids=["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq, Nk", [(200, 200), (100, 333), (333, 100), (1, 1), (257, 64)])
def test_half_precision_gradients_match_float64(cuda, record_property, dtype, tol, d, causal, Nq, Nk):
    q, k, v = _leaves((2, 3, Nq, d), (2, 3, Nk, d), (2, 3, Nk, d), dtype=dtype, device="cuda", seed=Nq + d)
    w = torch.randn(2, 3, Nq, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(7 * Nq + d))
    every = {}
    for deterministic in (False, True):
        O = gpu.flash_attention(q, k, v, causal=causal, deterministic=deterministic)
        assert O.dtype == dtype and O.shape == q.shape
        got = torch.autograd.grad((O.float() * w).sum(), (q, k, v))
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = torch.autograd.grad((dense(qd, kd, vd, causal=causal)[0] * w.double()).sum(), (qd, kd, vd))
        floor = 0.1 * ref[2].abs().max().item()         # one key: dQ = dK = 0 up to rounding (dS = dP − D = 0)
        errs = [_rel(a, b, floor) for a, b in zip(got, ref)]
        assert all(g.dtype == dtype and torch.isfinite(g).all() for g in got)
        assert max(errs) <= tol, errs
        if causal and Nq > Nk:
            assert (got[0][:, :, : Nq - Nk] == 0).all()                # keyless rows
        every[deterministic] = errs
    for det, errs in every.items():
        record_property(f"ours_rel_err_dq_dk_dv{'_deterministic' if det else ''}", [f"{e:.2e}" for e in errs])
    # Against SDPA on the same inputs: its default (cuDNN's backward on an H100 for most of these) at most
    # twice its error, FlashAttention-2 (the same roundings of P and dS) at most its error, each plus the
    # unit roundoff u: the gradients' own rounding to the dtype moves the max error by up to u·max|g|
    # (benchmarks/results/h100/probe-bwd-accuracy-…: every kernel of ours has FlashAttention-2's errors)
    u = torch.finfo(dtype).eps / 2
    for backend, factor in ((None, 2), ("FLASH_ATTENTION", 1)):
        sdpa = _sdpa_errors(q, k, v, w, causal, ref, backend)
        record_property(f"sdpa_{(backend or 'default').lower()}_rel_err_dq_dk_dv",
                        None if sdpa is None else [f"{e:.2e}" for e in sdpa])
        if sdpa is not None:            # both dQ paths
            for det, errs in every.items():
                assert all(e <= factor * s + u for e, s in zip(errs, sdpa)), (backend, det, errs, sdpa)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_deterministic_half_precision_gradients_take_the_tensor_cores_and_repeat_bit_for_bit(cuda, dtype):
    """deterministic=True with fp16 / bf16 runs the tensor-core dQ pass (not the fp32 teaching
    kernel): 20 backwards on the same inputs give the same bits, equal to the tensor-core
    backward called directly, and the gradients match float64 (bottom-right causal, Nq < Nk)."""
    q, k, v = _leaves((2, 4, 300, 128), (2, 4, 700, 128), (2, 4, 700, 128), dtype=dtype, device="cuda", seed=11)
    assert fa.uses_tensor_core_backward(q)
    w = torch.randn(2, 4, 300, 128, device="cuda")
    O, lse = gpu.attention_with_lse(q, k, v, causal=True, deterministic=True)
    first = torch.autograd.grad((O.float() * w).sum(), (q, k, v), retain_graph=True)
    for _ in range(19):
        again = torch.autograd.grad((O.float() * w).sum(), (q, k, v), retain_graph=True)
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    direct = gpu.flash_backward_mma(q.detach(), k.detach(), v.detach(), O.detach(), w.to(dtype), lse.detach(),
                                    causal=True, deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(first, direct))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad((dense(qd, kd, vd, causal=True)[0] * w.double()).sum(), (qd, kd, vd))
    assert max(_rel(a, b) for a, b in zip(first, ref)) <= (5e-3 if dtype == torch.float16 else 3e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_default_half_precision_gradients_take_the_backward_plan(cuda, dtype):
    """deterministic=False (the default) with fp16 / bf16 runs flash_backward_mma's default call,
    whose kernel, dQ path and Bc ``backward_plan`` names for this GPU (on sm_90: wgmma, "bulk"):
    dK, dV equal the direct call with those named bit for bit and dQ by rounding only;
    deterministic=True runs the separate pass: the same bits on every run and as the direct call
    with dq="separate"."""
    from flashviz.gpu.common import device_facts
    from flashviz.gpu.tensorcore.backward import backward_plan
    cc = device_facts().cc
    kernel, dq, Bc = backward_plan(cc, 64)
    assert (kernel, dq, Bc) == (("wgmma", "bulk", 64) if cc == 90 else ("mma", "separate", 128))
    q, k, v = _leaves((2, 4, 500, 64), (2, 4, 300, 64), (2, 4, 300, 64), dtype=dtype, device="cuda", seed=13)
    w = torch.randn(2, 4, 500, 64, device="cuda")
    tol = 5e-3 if dtype == torch.float16 else 3e-2
    O, lse = gpu.attention_with_lse(q, k, v, causal=True)
    first = torch.autograd.grad((O.float() * w).sum(), (q, k, v))
    args = (q.detach(), k.detach(), v.detach(), O.detach(), w.to(dtype), lse.detach())
    direct = gpu.flash_backward_mma(*args, causal=True, kernel=kernel, dq=dq, Bc=Bc)
    assert torch.equal(first[1], direct[1]) and torch.equal(first[2], direct[2])
    assert _rel(first[0], direct[0]) <= tol
    O, lse = gpu.attention_with_lse(q, k, v, causal=True, deterministic=True)
    det = torch.autograd.grad((O.float() * w).sum(), (q, k, v), retain_graph=True)
    for _ in range(4):
        again = torch.autograd.grad((O.float() * w).sum(), (q, k, v), retain_graph=True)
        assert all(torch.equal(a, b) for a, b in zip(det, again))
    separate = gpu.flash_backward_mma(*args, causal=True, kernel=kernel, dq="separate")
    assert all(torch.equal(a, b) for a, b in zip(det, separate))
    assert _rel(det[0], first[0]) <= tol


@pytest.mark.gpu
@pytest.mark.parametrize("causal, Nq, Nk", [(False, 129, 129), (True, 129, 257), (True, 300, 70)])
def test_float32_gradients_match_float64(cuda, causal, Nq, Nk):
    q, k, v = _leaves((2, 2, Nq, 64), (2, 2, Nk, 64), (2, 2, Nk, 64), dtype=torch.float32, device="cuda", seed=5)
    O, lse = gpu.attention_with_lse(q, k, v, causal=causal)
    w, wl = torch.randn_like(O), torch.randn_like(lse)
    got = torch.autograd.grad((O * w).sum() + (torch.nan_to_num(lse, neginf=0.0) * wl).sum(), (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    Or, lr = dense(qd, kd, vd, causal=causal)
    ref = torch.autograd.grad((Or * w.double()).sum() + (torch.nan_to_num(lr, neginf=0.0) * wl.double()).sum(),
                              (qd, kd, vd))
    for a, b in zip(got, ref):
        assert _rel(a, b) <= 1e-4


@pytest.mark.gpu
def test_gradcheck_float64(cuda):
    """torch.autograd.gradcheck on small float64 inputs; the operator computes in float32, so the
    finite differences use eps = 1e-3 with tolerances to match (O and lse both checked)."""
    q, k, v = _leaves((1, 2, 20, 32), (1, 2, 27, 32), (1, 2, 27, 32), device="cuda", seed=6)
    for det in (False, True):
        assert torch.autograd.gradcheck(lambda q, k, v: gpu.attention_with_lse(q, k, v, causal=True, deterministic=det),
                                        (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-2, fast_mode=True,
                                        nondet_tol=0.0 if det else 1e-5)      # atomics: dQ's last bits may move


@pytest.mark.gpu
def test_flash_forward_mma_with_grad_goes_through_autograd(cuda):
    q, k, v = _leaves((2, 4, 300, 64), (2, 4, 300, 64), (2, 4, 300, 64), dtype=torch.bfloat16, device="cuda", seed=8)
    O, lse = gpu.flash_forward_mma(q, k, v, causal=True)
    assert O.grad_fn is not None and lse.grad_fn is not None
    gq, gk, gv = torch.autograd.grad(O.float().sum(), (q, k, v))
    O2 = gpu.flash_attention(q, k, v, causal=True, deterministic=True)
    assert torch.equal(O, O2)
    r = torch.autograd.grad(O2.float().sum(), (q, k, v))
    for a, b in zip((gq, gk, gv), r):
        assert _rel(a, b) <= 1e-2
    with torch.no_grad():
        O3, _ = gpu.flash_forward_mma(q, k, v, causal=True)
    assert O3.grad_fn is None and torch.equal(O3, O)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_small_attention_layer_trains_like_sdpa(cuda, dtype):
    """Two copies of one layer (qkv projection → attention → output projection), one on
    flash_attention, one on SDPA: the same gradients at the start, and after 5 Adam steps on the
    same batch the same losses, going down (the layer fits the batch)."""
    torch.manual_seed(0)
    B, N, H, d = 2, 256, 4, 64

    class Layer(torch.nn.Module):
        def __init__(self, attn):
            super().__init__()
            self.qkv, self.out, self.attn = torch.nn.Linear(H * d, 3 * H * d), torch.nn.Linear(H * d, H * d), attn

        def forward(self, x):
            q, k, v = self.qkv(x).view(B, N, 3, H, d).permute(2, 0, 3, 1, 4).contiguous().unbind(0)
            return self.out(self.attn(q, k, v).transpose(1, 2).reshape(B, N, H * d))

    ours = Layer(lambda q, k, v: gpu.flash_attention(q, k, v, causal=True)).to("cuda", dtype)
    sdpa = Layer(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    sdpa = sdpa.to("cuda", dtype)
    sdpa.load_state_dict(ours.state_dict())
    x = torch.randn(B, N, H * d, device="cuda", dtype=dtype)
    y = torch.randn(B, N, H * d, device="cuda", dtype=dtype)
    opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in (ours, sdpa)]
    losses = {0: [], 1: []}
    for step in range(5):                                 # fit one batch
        for n, (m, opt) in enumerate(zip((ours, sdpa), opts)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x).float(), y.float())
            loss.backward()
            losses[n].append(loss.item())
            if step == 0 and n == 1:
                tol = 1e-4 if dtype == torch.float32 else 5e-2
                for (name, p1), p2 in zip(ours.named_parameters(), sdpa.parameters()):
                    assert _rel(p1.grad, p2.grad) <= tol, name
            opt.step()
    assert losses[0][-1] < losses[0][0]
    for a, b in zip(*losses.values()):
        assert abs(a - b) <= (1e-4 if dtype == torch.float32 else 2e-2) * abs(b)


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [False, True])
def test_torch_cuda_graph_captures_forward_and_backward(cuda, deterministic):
    """A whole step, flash_attention's forward and its backward through torch.autograd.grad,
    captured in one torch.cuda.graph (after warm-up calls on a side stream, as torch's docs ask)
    and replayed on new inputs, gives the eager step's gradients: the same bits with
    deterministic=True, to rounding with False (which promises nothing, though fp16 takes the same
    separate dQ pass by default)."""
    g = torch.Generator(device="cuda").manual_seed(12)
    q, k, v = (torch.randn(s, device="cuda", dtype=torch.float16, generator=g).requires_grad_()
               for s in ((1, 2, 200, 64), (1, 2, 300, 64), (1, 2, 300, 64)))
    w = torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.float16, generator=g)

    def step():
        O = gpu.flash_attention(q, k, v, causal=True, deterministic=deterministic)
        return torch.autograd.grad((O.float() * w.float()).sum(), (q, k, v))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = step()
    with torch.no_grad():
        for t in (q, k, v, w):
            t.copy_(torch.randn(t.shape, device="cuda", dtype=t.dtype, generator=g))
    graph.replay()
    torch.cuda.synchronize()
    ref = step()
    for a, b in zip(got, ref):
        assert torch.isfinite(a).all()
        assert torch.equal(a, b) if deterministic else _rel(a, b) <= 1e-3


@pytest.mark.gpu
def test_torch_compile_aot_eager_fullgraph_on_the_gpu(cuda):
    q, k, v = _leaves((2, 4, 200, 64), (2, 4, 300, 64), (2, 4, 300, 64), dtype=torch.float16, device="cuda", seed=9)

    def f(q, k, v):
        return (gpu.flash_attention(q, k, v, causal=True, deterministic=True).float() ** 2).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    ref = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(got, ref):
        assert _rel(a, b) <= 1e-3


@pytest.mark.gpu
def test_torch_compile_inductor(cuda):
    """The default backend (inductor) around the operator: the op stays one opaque node."""
    q, k, v = _leaves((1, 2, 128, 64), (1, 2, 128, 64), (1, 2, 128, 64), dtype=torch.bfloat16, device="cuda", seed=10)

    def f(q, k, v):
        return (gpu.flash_attention(q * 2, k, v, deterministic=True).float().sin()).sum()

    got = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), (q, k, v))
    ref = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(got, ref):
        assert _rel(a, b) <= 1e-2
