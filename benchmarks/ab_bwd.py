"""A/B test of the tensor-core backward's pipeline depth (issue 23, v2; not the recorded benchmark).

``flash_backward_mma(stages=2)`` double-buffers the streamed tiles (Q_i, dO_i in the main kernel;
K_j, V_j in the deterministic dQ pass) where ``stages=1`` loads, waits, then computes. The two
do the same arithmetic in the same order, so each shape first checks the bits: deterministic dQ,
dK, dV and atomic dK, dV equal between the builds (atomic dQ: max relative difference recorded).
Then, as ``ab_fa3.py`` does, each build is captured once as a CUDA graph of ``CALLS`` backward
calls and ``ROUNDS`` rounds replay the graphs in an order rotated each round; kernel-only for all
(graph replay), median ms per call and the median of the paired ratio stages=1 ÷ stages=2 (above 1:
two stages faster). (SDPA's backward is not captured here: on 2026-12-05 its capture invalidated
the stream's and stopped the script; bench_bwd.py times it against ours.)

    python benchmarks/ab_bwd.py [--rounds 9] [--d 64,128] [--n 1024,4096,16384]

fp16, B·N = 16k tokens, H = 2048/d, causal and not. Writes $OUT/ab-bwd.json (or ./ab-bwd.json):
env, method, rows (shape, bit checks, times, ratios). Exit status 1 if a bit check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

CALLS = 5           #: backward calls per graph


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--n", default="1024,4096,16384")
    args = ap.parse_args(argv)
    import torch

    from flashviz.gpu.common import environment
    from flashviz.gpu.tensorcore.backward import flash_backward_mma
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    from flashviz.gpu.timing import capture_calls, replay_ms

    out = Path(os.environ.get("OUT", "."))
    res = {"env": environment(), "kind": "ab bwd stages", "argv": sys.argv[1:], "calls_per_graph": CALLS,
           "rounds": args.rounds, "source_commit": os.environ.get("FLASHVIZ_COMMIT"),
           "method": f"kernel-only: CUDA-graph replay of {CALLS} backward calls per implementation, "
                     f"{args.rounds} rounds in rotated order, median per call; ratios paired by round", "rows": []}
    t_start, bad = time.time(), 0
    for d in (int(x) for x in args.d.split(",")):
        for causal in (False, True):
            for N in (int(x) for x in args.n.split(",")):
                B, H = max(1, 16384 // N), 2048 // d
                q, k, v, dO = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(4))
                O, lse = flash_forward_mma(q, k, v, causal=causal)
                fns, bits = {}, {}
                for det in (False, True):
                    got = {}
                    for st in (1, 2):
                        name = f"{'det' if det else 'atomic'}_s{st}"
                        fns[name] = (lambda det, st: lambda: flash_backward_mma(
                            q, k, v, O, dO, lse, causal=causal, dq="separate" if det else "atomic",
                            stages=st))(det, st)
                        got[st] = fns[name]()
                    same = [bool(torch.equal(a, b)) for a, b in zip(got[1], got[2])]
                    dq_rel = float((got[1][0].float() - got[2][0].float()).abs().max()
                                   / got[1][0].float().abs().max().clamp_min(1e-30))
                    ok = all(same) if det else (same[1] and same[2] and dq_rel <= 1e-2)
                    bad += not ok
                    bits["det" if det else "atomic"] = {"same_dQ_dK_dV": same, "dQ_max_rel_diff": dq_rel, "ok": ok}
                graphs, errors = {}, {}
                for name, fn in fns.items():
                    try:
                        graphs[name] = capture_calls(fn, CALLS)
                    except Exception as exc:  # one that cannot be captured is reported, the others go on
                        errors[name] = f"{type(exc).__name__}: {exc}"[:300]
                names = list(graphs)
                times = {n: [] for n in names}
                for r in range(args.rounds):
                    for n in names[r % len(names):] + names[:r % len(names)]:
                        times[n].append(replay_ms(graphs[n], CALLS))
                row = {"d": d, "causal": causal, "N": N, "B": B, "H": H, "bits": bits, "errors": errors,
                       "ms": {n: float(np.median(t)) for n, t in times.items()}, "times_ms": times}
                for det in ("atomic", "det"):
                    a, b = f"{det}_s1", f"{det}_s2"
                    if a in times and b in times:
                        ratio = np.array(times[a]) / np.array(times[b])
                        row[f"{det}_s1_over_s2"] = {"median": float(np.median(ratio)),
                                                    "q1_q3": [float(np.percentile(ratio, 25)),
                                                              float(np.percentile(ratio, 75))]}
                res["rows"].append(row)
                print(f"d={d} causal={causal} N={N}: " + "  ".join(f"{n}={m:.3f}ms" for n, m in row["ms"].items())
                      + "  s1/s2: " + "  ".join(f"{x}={row[f'{x}_s1_over_s2']['median']:.3f}"
                                               for x in ("atomic", "det") if f"{x}_s1_over_s2" in row)
                      + f"  bits ok: {all(b['ok'] for b in bits.values())}" + (f"  errors={errors}" if errors else ""),
                      flush=True)
                graphs = fns = None
                torch.cuda.empty_cache()
                res["wall_s"] = time.time() - t_start
                (out / "ab-bwd.json").write_text(json.dumps(res, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
