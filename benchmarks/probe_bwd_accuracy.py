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

    python benchmarks/probe_bwd_accuracy.py [--out DIR]   → DIR/probe-bwd-accuracy-<device>-<date>.json

Cases (Nq, Nk, d, causal, dtype): CASES; keyless rows (causal, Nq > Nk) have P = 0 in the float64
reference and the emulations (their gradients are 0).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from flashviz import gpu
from flashviz.gpu.common import environment
from flashviz.gpu.tensorcore.run import device_slug

CASES = [(200, 200, 128, False, "float16"), (200, 200, 64, False, "float16"), (333, 100, 128, True, "float16"),
         (100, 333, 64, True, "float16"), (257, 64, 128, True, "float16"), (200, 200, 128, False, "bfloat16"),
         (333, 100, 64, True, "bfloat16")]


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


def probs(S, lse):
    """exp(S − lse) in float64, 0 on keyless rows (lse = −inf)."""
    L = lse.double()[..., None]
    return torch.where(torch.isfinite(L), torch.exp(S - torch.where(torch.isfinite(L), L, 0)), 0)


def emulate(q, k, v, O, dO, lse, scale, causal, round_P, round_dS, dtype):
    """Algorithm 2 in float64 from the given (rounded) tensors; round_P / round_dS round P for dV /
    dS for dK, dQ to ``dtype``. Returns (dQ, dK, dV) in float64, unrounded."""
    Q, K, V, Od, dOd = (t.double() for t in (q, k, v, O, dO))
    S = scale * Q @ K.transpose(-1, -2)
    S = S.masked_fill(~mask_of(q.shape[-2], k.shape[-2], causal, q.device), -math.inf)
    P = probs(S, lse)
    Pv = P.to(dtype).double() if round_P else P
    dV = Pv.transpose(-1, -2) @ dOd
    dP = dOd @ V.transpose(-1, -2)
    D = (dOd * Od).sum(-1, keepdim=True)
    dS = P * (dP - D)
    dSr = dS.to(dtype).double() if round_dS else dS
    return scale * dSr @ K, scale * dSr.transpose(-1, -2) @ Q, dV


def probe(Nq, Nk, d, causal, dtype_name) -> dict:
    """Every row of the module docstring for one case: {"case", "rows": {label: [dQ, dK, dV] or text}, ...}."""
    dtype = getattr(torch, dtype_name)
    q, k, v, w = inputs(Nq, Nk, d, dtype)
    scale = 1 / math.sqrt(d)
    dO = w.to(dtype)                                    # d(O.float() · w).sum() / dO, as autograd forms it
    out = {"case": {"Nq": Nq, "Nk": Nk, "d": d, "causal": causal, "dtype": dtype_name}}

    # float64 dense reference (keyless rows: P = 0), and its O, lse
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    S = (scale * qd @ kd.transpose(-1, -2)).masked_fill(~mask_of(Nq, Nk, causal, q.device), -math.inf)
    keyless = torch.isneginf(S).all(-1)
    lse64 = torch.logsumexp(S.masked_fill(keyless[..., None], 0.0), -1).masked_fill(keyless, -math.inf)
    O64 = probs(S, lse64) @ vd
    ref = torch.autograd.grad((O64 * w.double()).sum(), (qd, kd, vd))
    O64, lse64 = O64.detach(), lse64.detach()

    def errs(g):
        return [rel(x, r) for x, r in zip(g, ref)]

    rows = {}
    O, lse = gpu.attention_with_lse(q, k, v, causal=causal)
    O, lse = O.detach(), lse.detach()
    rows["our forward: O rel err"] = [rel(O, O64)]
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
    rows["ours default, O64 rounded + lse64"] = errs(gpu.flash_backward_mma(q, k, v, O64.to(dtype), dO,
                                                                         lse64.float(), causal=causal))
    if not causal or Nq == Nk:                          # SDPA-flash's own causal mask is top-left
        Of, lsef = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False,
                                                                      scale=scale)[:2]
        rows["ours default, SDPA-flash O + lse"] = errs(gpu.flash_backward_mma(q, k, v, Of, dO, lsef, causal=causal))
        rows["SDPA-flash forward: O rel err"] = [rel(Of, O64)]

    # SDPA's backends
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    grads = {}
    for name in ("default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        mask = causal_lower_right(Nq, Nk) if causal else None
        try:
            if name == "default":
                Os = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
            else:
                with sdpa_kernel(getattr(SDPBackend, name)):
                    Os = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
            grads[name] = torch.autograd.grad((Os.float() * w).sum(), (qs, ks, vs))
            rows[f"SDPA {name}"] = errs(grads[name])
        except Exception as e:                          # noqa: BLE001 — a backend that refuses these inputs
            rows[f"SDPA {name}"] = str(e).splitlines()[0][:120]
    if "default" in grads:
        out["SDPA default bits are"] = [n for n, g in grads.items() if n != "default"
                                          and all(torch.equal(x, y) for x, y in zip(g, grads["default"]))]

    # float64 emulations from our forward's O (rounded) and lse, one rounding at a time
    for rp, rds, src in ((False, False, "ours"), (True, False, "ours"), (False, True, "ours"), (True, True, "ours"),
                         (True, True, "O64")):
        g = emulate(q, k, v, O if src == "ours" else O64, dO, lse if src == "ours" else lse64, scale, causal,
                    rp, rds, dtype)
        label = f"emulated f64: P rounded {rp}, dS rounded {rds}, O {src}"
        rows[label + "; outputs rounded"] = errs([x.to(dtype) for x in g])
        rows[label + "; unrounded"] = errs(g)

    # dS: how much of it is subnormal in dtype; the unit roundoff, against which the errors read
    e = emulate(q, k, v, O64, dO, lse64, scale, causal, False, False, dtype)
    S64 = (scale * q.double() @ k.double().transpose(-1, -2)).masked_fill(~mask_of(Nq, Nk, causal, q.device),
                                                                         -math.inf)
    dS = probs(S64, lse64) * (dO.double() @ v.double().transpose(-1, -2)
                              - (dO.double() * O64).sum(-1, keepdim=True))
    nz = dS[dS != 0].abs()
    out["dS"] = {"max": nz.max().item(), "median": nz.median().item(),
                 "fraction below the dtype's smallest normal": (nz < torch.finfo(dtype).tiny).double().mean().item()}
    out["unit roundoff"] = torch.finfo(dtype).eps / 2
    out["emulated f64 (no rounding) rel err"] = errs(e)
    out["rows"] = rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    env = environment()
    cases = []
    for case in CASES:
        r = probe(*case)
        cases.append(r)
        print(f"== {r['case']}  SDPA default = {r.get('SDPA default bits are')}  u = {r['unit roundoff']:.2e}")
        w0 = max(len(k) for k in r["rows"])
        for k_, row in r["rows"].items():
            print(f"{k_:<{w0}}  " + (", ".join(f"{x:.2e}" for x in row) if isinstance(row, list) else str(row)))
    path = Path(a.out) / f"probe-bwd-accuracy-{device_slug(env)}-{env['date']}.json"
    path.write_text(json.dumps({"environment": env, "script": "benchmarks/probe_bwd_accuracy.py",
                                "metric": "max |g - g64| / max |g64| for [dQ, dK, dV]", "cases": cases}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
