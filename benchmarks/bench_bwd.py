"""The backward benchmark on a GPU (issue 23): flashviz's backward kernels beside torch SDPA's.

One process, one run: correctness of every implementation against float64 gradients, the
deterministic dQ checked bit for bit, every backward timed by public call and kernel-only
(torch.profiler), forward + backward by public call, and the backward's peak memory against
SDPA-math's; fp16, B·N = 16k tokens, H = 2048/d, N in 1k..16k, d in {64, 128}, causal and not.
Writes bwd-<device>-<date>.json and its .log into DIR (partial-bwd-… for any subset or a run
cut short), and prints one line per shape with the ratios. The logic is in
flashviz/gpu/tensorcore/bench_bwd.py (its module text says what the record holds).

Run from the repository root on the GPU machine (CuPy, torch with CUDA):

    FLASHVIZ_COMMIT=<commit> python3 benchmarks/bench_bwd.py [--quick] [--out DIR]

DIR defaults to $OUT when set, else benchmarks/results. --plan prints the shapes, the parts and
the planned time without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashviz.gpu.bench_util import positive_ints  # noqa: E402
from flashviz.gpu.tensorcore import bench_bwd as bb  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Without options: the full run (the record bwd-<device>-<date>.json).")
    ap.add_argument("--quick", action="store_true",
                    help=f"a small subset: N in {','.join(map(str, bb.QUICK_N))}, the teaching kernels at "
                         f"N <= {bb.QUICK_TEACHING_MAX_N}, memory at those N (written as partial-bwd-…)")
    ap.add_argument("--N", help=f"sequence lengths (default {','.join(map(str, bb.BWD_N))})")
    ap.add_argument("--d", help=f"head dimensions (default {','.join(map(str, bb.BWD_D))})")
    ap.add_argument("--causal", choices=("both", "true", "false"), default="both")
    ap.add_argument("--impls", help=f"implementations (default all: {','.join(bb.ALL_IMPLS)})")
    ap.add_argument("--only", help=f"parts to run (default all: {','.join(bb.PARTS)})")
    ap.add_argument("--teaching-max-n", type=int, help=f"largest N for the fp32 teaching kernels "
                                                          f"(default {bb.TEACHING_MAX_N})")
    ap.add_argument("--peak-n", help=f"N of the memory part (default {','.join(map(str, bb.PEAK_N))})")
    ap.add_argument("--budget-s", type=float, default=bb.BUDGET_S,
                    help="seconds one measurement aims at (default %(default)s)")
    ap.add_argument("--deadline-s", type=float, default=bb.DEADLINE_S,
                    help="start no new shape or part after this many seconds (default %(default)s)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"),
                    help="folder for the record (default: $OUT, else benchmarks/results)")
    ap.add_argument("--plan", action="store_true", help="print the plan and its planned time; needs no GPU")
    a = ap.parse_args(argv)
    a.Ns = positive_ints(a.N, "--N", ap) if a.N else (bb.QUICK_N if a.quick else bb.BWD_N)
    a.ds = positive_ints(a.d, "--d", ap) if a.d else bb.BWD_D
    if any(d not in bb.BWD_D for d in a.ds):
        ap.error(f"--d: each of {bb.BWD_D}, got {a.d!r}")
    a.causals = {"both": (False, True), "true": (True,), "false": (False,)}[a.causal]
    a.impls = tuple(x for x in a.impls.split(",") if x) if a.impls else bb.ALL_IMPLS
    if not a.impls or any(i not in bb.ALL_IMPLS for i in a.impls):
        ap.error(f"--impls: a selection of {','.join(bb.ALL_IMPLS)}, got {','.join(a.impls)!r}")
    a.parts = tuple(x for x in a.only.split(",") if x) if a.only else bb.PARTS
    if not a.parts or any(p not in bb.PARTS for p in a.parts):
        ap.error(f"--only: a selection of {','.join(bb.PARTS)}, got {a.only!r}")
    if a.teaching_max_n is None:
        a.teaching_max_n = bb.QUICK_TEACHING_MAX_N if a.quick else bb.TEACHING_MAX_N
    a.peak_Ns = positive_ints(a.peak_n, "--peak-n", ap) if a.peak_n else (bb.QUICK_N if a.quick else bb.PEAK_N)
    return a


def main(argv=None) -> int:
    a = parse(argv)
    shapes = bb.bench_shapes(a.Ns, a.ds, a.causals)
    if a.plan:
        full = bb.is_full(Ns=a.Ns, ds=a.ds, causals=a.causals, impls=a.impls, teaching_max_n=a.teaching_max_n,
                          parts=a.parts, peak_Ns=a.peak_Ns)
        est = bb.estimate_seconds(shapes, a.impls, teaching_max_n=a.teaching_max_n, parts=a.parts,
                                  budget_s=a.budget_s, peak_Ns=a.peak_Ns)
        print(f"writes {a.out}/{'' if full else 'partial-'}bwd-<device>-<date>.json (and .log)")
        print(f"parts: {','.join(a.parts)}; implementations: {','.join(a.impls)}; teaching kernels at "
              f"N <= {a.teaching_max_n}; memory at N = {','.join(map(str, a.peak_Ns))}")
        for N, d, causal in shapes:
            r = bb.base_row(N, d, causal)
            print(f"  N={N:5d} d={d:3d} causal={causal!s:5} B={r['B']:2d} H={r['H']:2d} "
                  f"flops_bwd={r['flops_bwd']:.3e}")
        print("planned seconds on an H200 (rough): " + ", ".join(f"{k} {v:.0f}" for k, v in est.items()))
        return 0
    try:
        path = bb.run_bwd_benchmark(a.out, Ns=a.Ns, ds=a.ds, causals=a.causals, impls=a.impls,
                                    teaching_max_n=a.teaching_max_n, parts=a.parts, peak_Ns=a.peak_Ns,
                                    budget_s=a.budget_s, deadline_s=a.deadline_s,
                                    argv=sys.argv[1:] if argv is None else list(argv),
                                    log=lambda line: print(line, flush=True))
    except (RuntimeError, ValueError) as exc:
        print(f"bench_bwd: {exc}", file=sys.stderr, flush=True)
        return 1
    rec = json.loads(path.read_text())
    holes = [f"N={r['N']} d={r['d']} causal={r['causal']} {k}" for r in rec["bench"] for k in r
             if k.endswith("error")]
    wrong = [f"{c.get('impl')} N={c['N']} d={c['d']} causal={c['causal']}" for c in rec["correctness"]
             if not c.get("pass")]
    nondet = [e["impl"] for e in rec["deterministic"] if e.get("deterministic") and not e.get("bitwise_equal")]
    for what, items in (("failed cells", holes), ("correctness failures or errors", wrong),
                        ("deterministic paths that changed bits", nondet)):
        if items:
            print(f"{len(items)} {what}: " + "; ".join(items[:20]), flush=True)
    if rec.get("cut_short"):
        print(f"cut short: {rec['cut_short']}", flush=True)
    return 1 if holes or wrong or nondet or rec.get("cut_short") else 0


if __name__ == "__main__":
    sys.exit(main())
