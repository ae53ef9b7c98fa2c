"""float64 gradients of dense attention, the yardstick of the tensor-core backward checks.

``dense_gradients`` is what tests/gpu/test_backward_mma.py, tests/gpu/test_backward_wgmma.py and
benchmarks/check_bwd_wgmma.py compare flashviz's backward kernels against: torch autograd of
dense attention in float64 on the same rounded inputs, with the conventions of the public API
(bottom-right causal; a row that sees no key has O = 0, lse = −inf and zero gradients);
``strided_views`` makes the strided q, k, v (and dlse) that both test files check them on. Imports
nothing at module level; the caller passes torch.
"""

from __future__ import annotations

import math


def dense_gradients(torch, q, k, v, dO, *, causal: bool, scale=None, dlse=None):
    """(O, lse, (dQ, dK, dV)) for loss = sum(O ∘ dO) (+ sum(lse ∘ dlse)): O and the gradients in
    float64, lse (natural log) in float32 with −inf for keyless rows, by torch autograd of dense
    attention. q (..., Nq, d), k, v (..., Nk, d), dO like q, dlse (..., Nq) or None: torch tensors
    of any floating dtype on one device (upcast exactly); scale None means 1/sqrt(d). Causal is
    bottom-right aligned: query r sees key c iff c <= r + Nk − Nq."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    Nq, Nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = (1 / math.sqrt(d) if scale is None else scale) * q @ k.transpose(-1, -2)
    if causal:
        r = torch.arange(Nq, device=q.device)[:, None]
        c = torch.arange(Nk, device=q.device)[None, :]
        s = s.masked_fill(c > r + Nk - Nq, -math.inf)
    keyless = torch.isneginf(s).all(-1)
    lse0 = torch.logsumexp(s.masked_fill(keyless[..., None], 0.0), -1).masked_fill(keyless, 0.0)
    O = torch.exp(s - lse0[..., None]) @ v
    loss = (O * dO.double()).sum()
    if dlse is not None:
        loss = loss + (lse0 * dlse.double()).sum()
    grads = torch.autograd.grad(loss, (q, k, v))
    return O.detach(), lse0.detach().masked_fill(keyless, -math.inf).float(), grads


def relative_errors(got, ref) -> list[float]:
    """max |a − b| / max(max |b|, floor) for dQ, dK, dV (``got`` and ``ref`` triples of tensors), with
    floor = 0.1 · max |dV_ref| (dV = Pᵀ dO never cancels, so it sets the scale where dQ or dK nearly
    vanish)."""
    floor = 0.1 * ref[2].abs().max().item()
    return [((a.double() - b.double()).abs().max() / max(b.abs().max().item(), floor)).item()
            for a, b in zip(got, ref)]


def strided_views(torch, dtype, seed: int):
    """(q, k, v, dlse) on the current CUDA device from one ``torch.Generator`` seeded with ``seed``:
    q, k, v (2, 4, 300, 128) in ``dtype`` (a torch dtype), strided views (B, H, N, d) of one
    (B, N, H, 3, d) tensor, as a fused qkv projection leaves them (unit stride along d, rows
    H·3·d elements apart); then dlse (2, 4, 300) float32, the gradient of lse, drawn after them."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(2, 300, 4, 3, 128, device="cuda", dtype=dtype, generator=g)     # B, N, H, (q,k,v), d
    q, k, v = (x[:, :, :, n].transpose(1, 2) for n in range(3))                     # BHSD views, strided
    return q, k, v, torch.randn(2, 4, 300, device="cuda", generator=g)
