"""Recompute versus store, measured (issue 23, chapter 6): ``run_store_benchmark`` is what
``benchmarks/bench_store_p.py`` calls on a GPU.

One process, one run, float32 throughout, d = 64, B·H = 8 heads, Br = Bc = 64 (the teaching
kernels), no mask, N = Nq = Nk over ``NS``. Three backwards of the same inputs (Q, K, V, dO
standard normal, NumPy ``default_rng(N)``; O and lse from the teaching forward):

* ``recompute`` — ``flash_backward_gpu`` (kernels/flash_bwd.cu): P_ij made again from lse, tile
  by tile, on chip;
* ``stored`` — ``stored_p.flash_backward_stored_p``: the same kernel built to read P_ij from a
  stored P (B·H·N² float32), everything else the same;
* ``naive`` — ``stored_p.naive_backward_gpu`` given the stored P: whole-matrix cuBLAS products,
  dP / dS materialised (one more N × N matrix a head).

and ``make_P`` — ``stored_p.probabilities_gpu``: producing that P from Q, K and lse, what a
forward that stores P spends on writing it (not part of the stored backwards' time).

Per row (one N): ``<impl>_call_ms`` (public call, CUDA events; every row's call pass runs before
any kernel-only pass), ``<impl>_kernel_ms`` (kernel-only, torch.profiler), ``<impl>_peak_bytes``
(the call's peak device memory, ``timing.cupy_peak_bytes``: a fresh pool's high-water mark; the
inputs and P made before it are not counted), ``<impl>_kept_bytes`` (what the forward must keep
for this backward, counted: O and lse for all, + P for stored and naive), ``<impl>_max_rel_err``
(against the float64 dense gradients of head 0, ``flashviz.backward.attention_backward``, for
N <= ``REF_MAX_N``), ``<impl>_error`` for a failed
cell. The record ``storep-<device>-<date>.json`` (``partial-storep-…`` when any N is left out or
the run is cut short) also holds ``env`` (device, versions, commit, code hashes), ``method``.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import numpy as np

from ...backward import attention_backward

NS = (512, 1024, 2048, 4096, 8192, 16384)
D, BH, BR, BC = 64, 8, 64, 64
IMPLS = ("recompute", "stored", "naive")
REF_MAX_N = 4096
DEADLINE_S = 400.0
BUDGET_S = 1.0
FILES = ["flashviz/gpu/teaching/store_bench.py", "flashviz/gpu/teaching/stored_p.py",
         "flashviz/gpu/teaching/backward.py", "benchmarks/bench_store_p.py"]
METHOD = {"call_ms": "public call; CUDA events around each call, calls back to back, median (timing.measure); all "
                     "rows' call times before any profiler session",
          "kernel_ms": "kernel-only; torch.profiler (CUPTI) kernel durations summed per call, median",
          "peak_bytes": "timing.cupy_peak_bytes: a fresh CuPy pool's high-water mark over one call",
          "kept_bytes": "counted, not measured: O (N·d·4) and lse (N·4) a head, + P (N²·4) for stored and naive",
          "max_rel_err": "max |grad − float64 dense| / max |float64| over dQ, dK, dV of head 0"}


def kept_bytes(N: int, impl: str, d: int = D, heads: int = BH) -> int:
    """Bytes the forward keeps for ``impl``'s backward: O and lse in float32, and P for the two that
    store it. ValueError for an unknown impl."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    return heads * (N * d * 4 + N * 4 + (N * N * 4 if impl != "recompute" else 0))


def max_rel_err(got, ref) -> float:
    """max over the pairs (g, r) of max |g − r| / max |r| (float64)."""
    return max(float(np.abs(np.asarray(g, np.float64) - r).max() / np.abs(r).max()) for g, r in zip(got, ref))


def _calls(Q, K, V, O, dO, lse, P) -> dict:
    """The public calls timed on one row's inputs (bound here, so pass 2 times the same arrays)."""
    from .backward import flash_backward_gpu
    from .stored_p import flash_backward_stored_p, naive_backward_gpu, probabilities_gpu

    return {"recompute": lambda: flash_backward_gpu(Q, K, V, O, dO, lse, Br=BR, Bc=BC),
            "stored": lambda: flash_backward_stored_p(Q, K, V, O, dO, lse, P, Br=BR, Bc=BC),
            "naive": lambda: naive_backward_gpu(Q, K, V, O, dO, lse, P=P),
            "make_P": lambda: probabilities_gpu(Q, K, lse)}


def record_name(env: dict, full: bool) -> str:
    """storep-<device>-<date>.json (partial-storep-… for a run that is not the full one)."""
    dev = str(env.get("device", "gpu")).lower().replace("nvidia", "").strip().replace(" ", "-") or "gpu"
    return f"{'' if full else 'partial-'}storep-{dev}-{env.get('date', datetime.date.today().isoformat())}.json"


def run_store_benchmark(out_dir, *, Ns=NS, budget_s: float = BUDGET_S, deadline_s: float = DEADLINE_S,
                        log=print) -> Path:
    """Run the benchmark (see the module text) and write its record into ``out_dir``; returns the
    record's path. RuntimeError without a GPU (from the first CuPy call)."""
    from ..bench_util import RunRecord, error_text
    from ..common import cupy, environment
    from ..provenance_env import code_hashes, stamp_commit
    from ..timing import cupy_peak_bytes, measure
    from .kernel import flash_forward_gpu
    from .stored_p import probabilities_gpu

    cp = cupy()
    t0 = time.time()
    env = stamp_commit(environment())
    full = tuple(Ns) == NS
    path = Path(out_dir) / record_name(env, full)
    data = {"kind": "flashviz recompute-versus-store benchmark", "full": full, "Ns": list(Ns), "d": D, "BH": BH,
            "Br": BR, "Bc": BC, "dtype": "float32", "causal": False, "impls": list(IMPLS), "method": METHOD,
            "env": env, "bench": [], "cut_short": None}
    rec = RunRecord(path, data, t0=t0, deadline_s=deadline_s, log=log, hashes=lambda: code_hashes(FILES, ("flash_bwd.cu",)))
    rec.say(f"{env.get('device')}: recompute vs store, d = {D}, {BH} heads, Br = Bc = {BR}, N = {list(Ns)}")
    cases = {}
    for N in Ns:                                   # pass 1: correctness, peaks, public calls
        if rec.late(f"N = {N}"):
            break
        rng = np.random.default_rng(N)
        Q, K, V, dO = (cp.asarray(rng.standard_normal((BH, N, D)).astype(np.float32)) for _ in range(4))
        row = {"N": N, "d": D, "BH": BH, "P_bytes": BH * N * N * 4}
        try:
            O, lse = flash_forward_gpu(Q, K, V, Br=BR, Bc=BC)
            P = probabilities_gpu(Q, K, lse)
        except Exception as exc:              # out of memory at the largest N: recorded, the run goes on
            row["setup_error"] = error_text(exc)
            data["bench"].append(row)
            rec.say(f"N = {N}: {row['setup_error']}")
            continue
        calls = _calls(Q, K, V, O, dO, lse, P)
        ref = attention_backward(Q[0].get(), K[0].get(), V[0].get(), dO[0].get()) if N <= REF_MAX_N else None
        for name, fn in calls.items():
            try:
                if ref is not None and name in IMPLS:
                    row[f"{name}_max_rel_err"] = max_rel_err([g[0].get() for g in fn()], ref)
                row[f"{name}_peak_bytes"] = cupy_peak_bytes(fn)
                row[f"{name}_call_ms"] = measure(fn, parts=("call",), budget_s=budget_s)["call_ms"]
                if name in IMPLS:
                    row[f"{name}_kept_bytes"] = kept_bytes(N, name)
            except Exception as exc:
                row[f"{name}_error"] = error_text(exc)
        data["bench"].append(row)
        cases[N] = calls
        rec.say(f"N = {N}: " + "; ".join(f"{k} {row.get(f'{k}_call_ms', float('nan')):.3f} ms, peak "
                                         f"{row.get(f'{k}_peak_bytes', 0) / 2**20:.0f} MiB" for k in calls))
        rec.save()
    for row in data["bench"]:                  # pass 2: kernel-only (torch.profiler)
        calls = cases.get(row["N"])
        if calls is None or rec.late(f"kernel-only at N = {row['N']}"):
            continue
        for name, fn in calls.items():
            if f"{name}_error" in row:
                continue
            try:
                row[f"{name}_kernel_ms"] = measure(fn, parts=("kernel",), budget_s=budget_s)["kernel_ms"]
            except Exception as exc:
                row[f"{name}_kernel_error"] = error_text(exc)
        rec.say(f"N = {row['N']} kernel-only: " + "; ".join(f"{k} {row.get(f'{k}_kernel_ms', float('nan')):.3f} ms"
                                                          for k in calls))
        rec.save()
    cases.clear()
    ran_all = not data["cut_short"] and len(data["bench"]) == len(Ns) and \
        not any("setup_error" in r for r in data["bench"])
    if full and not ran_all:                     # a run cut short never takes the full record's name
        for f in (path, path.with_suffix(".log")):
            f.unlink(missing_ok=True)
        data["full"] = False
        rec.path = path = Path(out_dir) / record_name(env, False)
        rec.say(f"not every row ran: written as {path.name}")
    rec.save()
    return path
