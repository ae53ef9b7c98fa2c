"""Where the half-precision backward's rounding error comes from (a GPU probe, not a test).

The case of NOTES.md's "An open accuracy question": tests/gpu/test_backward_autograd.py's
test_half_precision_gradients_match_float64 inputs (seeded the same way), fp16 by default. For each
backward it prints max |g − g64| / max |g64| of dQ, dK, dV against float64 dense gradients:

- ours: every kernel / dQ path / Bc (``flash_backward_mma``), fed our forward's O and lse, and the
  default wgmma kernel fed SDPA-flash's O and lse and the float64 O (rounded) and lse;
- SDPA: each backend named (flash, efficient, cudnn, math) and the default dispatch, which of them
  gave the default's bits;
- float64 emulations of Algorithm 2 with one rounding at a time (P to fp16 for dV, dS to fp16 for
  dK and dQ, O to fp16 for D), to see which rounding the measured errors match.

    python benchmarks/probe_bwd_accuracy.py [--Nq 200 --Nk 200 --d 128 --causal 0 --dtype float16]
        [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import math

import torch

from flashviz import gpu
from flashviz.gpu.common import device_facts


def rel(a, b) -> float:
    """max |a − b| / max |b|."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def inputs(Nq, Nk, d, dtype):
    """The test's leaves and weights, seeded as test_half_precision_gradients_match_float64 seeds them."""
    g = torch.Generator(device="cuda").manual_seed(Nq + d)
    q, k, v = (torch.randn(s, dtype=dtype, device="cuda", generator=g)
               for s in ((2, 3, Nq, d), (2, 3, Nk, d), (2, 3, Nk, d)))
    w = torch.randn(2, 3, Nq, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(7 * Nq + d))
    return q, k, v, w


def mask_of(Nq, Nk, causal, device):
    r = torch.arange(Nq, device=device)[:, None]
    c = torch.arange(Nk, device=device)[None, :]
    return (c <= r + Nk - Nq) if causal else torch.ones(Nq, Nk, dtype=torch.bool, device=device)


def emulate(q, k, v, O, dO, lse, scale, causal, round_P, round_dS, dtype):
    """Algorithm 2 in float64 from the given (rounded) tensors; round_P / round_dS round P for dV /
    dS for dK, dQ to ``dtype``. Returns (dQ, dK, dV) in float64, unrounded."""
    Q, K, V, Od, dOd = (t.double() for t in (q, k, v, O, dO))
    S = scale * Q @ K.transpose(-1, -2)
    S = S.masked_fill(~mask_of(q.shape[-2], k.shape[-2], causal, q.device), -math.inf)
    P = torch.exp(S - lse.double()[..., None])
    Pv = P.to(dtype).double() if round_P else P
    dV = Pv.transpose(-1, -2) @ dOd
    dP = dOd @ V.transpose(-1, -2)
    D = (dOd * Od).sum(-1, keepdim=True)
    dS = P * (dP - D)
    dSr = dS.to(dtype).double() if round_dS else dS
    return scale * dSr @ K, scale * dSr.transpose(-1, -2) @ Q, dV


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--Nq", type=int, default=200)
    ap.add_argument("--Nk", type=int, default=200)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    causal = bool(a.causal)
    q, k, v, w = inputs(a.Nq, a.Nk, a.d, dtype)
    scale = 1 / math.sqrt(a.d)
    dO = w.to(dtype)                                    # d(O.float() · w).sum() / dO, as autograd forms it
    out = {"case": vars(a), "device": device_facts().name, "torch": torch.__version__}

    # float64 dense reference, and its O, lse
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    S = scale * qd @ kd.transpose(-1, -2)
    S = S.masked_fill(~mask_of(a.Nq, a.Nk, causal, q.device), -math.inf)
    lse64 = torch.logsumexp(S, -1)
    O64 = torch.softmax(S, -1) @ vd
    ref = torch.autograd.grad((O64 * w.double()).sum(), (qd, kd, vd))
    O64, lse64 = O64.detach(), lse64.detach()

    def errs(g):
        return [rel(x, r) for x, r in zip(g, ref)]

    rows = {}
    O, lse = gpu.attention_with_lse(q, k, v, causal=causal)
    O, lse = O.detach(), lse.detach()
    rows["our forward: O rel err"] = [rel(O, O64)]
    rows["our forward: lse max abs err"] = [(lse.double() - lse64).abs().max().item()]
    plans = [("wgmma", "separate", 128), ("wgmma", "separate", 64), ("wgmma", "atomic", 128),
             ("wgmma", "bulk", 128), ("wgmma", "bulk", 64), ("mma", "separate", 128), ("mma", "atomic", 128),
             ("mma", "separate", 64)]
    for kernel, dq, Bc in plans:
        try:
            g = gpu.flash_backward_mma(q, k, v, O, dO, lse, causal=causal, kernel=kernel, dq=dq, Bc=Bc,
                                       deterministic=dq == "separate")
            rows[f"ours {kernel} {dq} Bc {Bc}"] = errs(g)
        except Exception as e:                          # noqa: BLE001 — a plan this device lacks
            rows[f"ours {kernel} {dq} Bc {Bc}"] = str(e)[:120]
    # the default kernel fed other forwards' O, lse
    O16 = O64.to(dtype)
    rows["ours default, O64 rounded + lse64"] = errs(gpu.flash_backward_mma(q, k, v, O16, dO, lse64.float(),
                                                                         causal=causal))
    try:
        Of, lsef = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal and a.Nq == a.Nk,
                                                                      False, scale=scale)[:2]
        if not causal or a.Nq == a.Nk:
            rows["ours default, SDPA-flash O + lse"] = errs(gpu.flash_backward_mma(q, k, v, Of, dO, lsef,
                                                                                causal=causal))
            rows["SDPA-flash O rel err"] = [rel(Of, O64)]
    except Exception as e:                              # noqa: BLE001
        rows["ours default, SDPA-flash O + lse"] = str(e)[:120]

    # SDPA's backends
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    grads = {}
    for name in ("default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        mask = causal_lower_right(a.Nq, a.Nk) if causal else None
        try:
            if name == "default":
                Os = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
            else:
                with sdpa_kernel(getattr(SDPBackend, name)):
                    Os = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
            grads[name] = torch.autograd.grad((Os.float() * w).sum(), (qs, ks, vs))
            rows[f"SDPA {name}"] = errs(grads[name])
        except Exception as e:                          # noqa: BLE001
            rows[f"SDPA {name}"] = str(e).splitlines()[0][:120]
    if "default" in grads:
        rows["SDPA default = backend (bitwise)"] = [n for n, g in grads.items() if n != "default"
                                                    and all(torch.equal(x, y) for x, y in zip(g, grads["default"]))]

    # float64 emulations from our forward's O (rounded) and lse
    for rp, rds, src in ((False, False, "ours"), (True, False, "ours"), (False, True, "ours"), (True, True, "ours"),
                         (True, True, "O64")):
        Oe = O if src == "ours" else O64
        g = emulate(q, k, v, Oe, dO, lse if src == "ours" else lse64, scale, causal, rp, rds, dtype)
        rows[f"emulated f64: P rounded {rp}, dS rounded {rds}, O {src}; outputs rounded"] = errs(
            [x.to(dtype) for x in g])
        rows[f"emulated f64: P rounded {rp}, dS rounded {rds}, O {src}; unrounded"] = errs(g)

    # dS: how much of it is subnormal in dtype, and where dK's worst error sits
    e64 = emulate(q, k, v, O64, dO, lse64, scale, causal, False, False, dtype)
    Q64, K64 = q.double(), k.double()
    S = (scale * Q64 @ K64.transpose(-1, -2)).masked_fill(~mask_of(a.Nq, a.Nk, causal, q.device), -math.inf)
    P = torch.exp(S - lse64[..., None])
    dS = P * (dO.double() @ v.double().transpose(-1, -2) - (dO.double() * O64).sum(-1, keepdim=True))
    tiny = torch.finfo(dtype).tiny
    nz = dS[dS != 0].abs()
    out["dS"] = {"max": nz.max().item(), "median": nz.median().item(),
                 "fraction below the dtype's smallest normal": (nz < tiny).double().mean().item()}
    wg = gpu.flash_backward_mma(q, k, v, O, dO, lse, causal=causal)
    err = (wg[1].double() - ref[1]).abs()
    idx = [int(x) for x in torch.unravel_index(err.argmax(), err.shape)]
    out["dK worst (default kernel)"] = {"index b,h,j,col": idx, "abs err": err.max().item(),
                                        "ref": ref[1][tuple(idx)].item(), "got": wg[1][tuple(idx)].item(),
                                        "emulated unrounded": e64[1][tuple(idx)].item(),
                                        "max |dK|": ref[1].abs().max().item()}
    out["rows"] = rows
    w0 = max(len(k) for k in rows)
    for k_, r in rows.items():
        print(f"{k_:<{w0}}  " + (", ".join(f"{x:.2e}" for x in r) if isinstance(r, list) and r
                                 and isinstance(r[0], float) else str(r)))
    print(json.dumps({k_: v_ for k_, v_ in out.items() if k_ != "rows"}, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
