"""The decode benchmark on a GPU (issue 24): flashviz's split-KV decode beside SDPA-cuDNN and SDPA-flash.

One process, one run: the device's copy bandwidth, then every case by public call (with its
error against float64), then kernel-only (torch.profiler), then ours at a range of split counts;
fp16, d = 128 (and 64), Nq = 1 (and 4, causal), (B, H, H_kv) in (8, 32, 32), (8, 32, 8),
(1, 32, 8), Nk in 4k, 32k, 128k, and a paged cache. Writes decode-<device>-<date>.json and its
.log into DIR (partial-decode-… for any subset or a run cut short), and prints one line per row
with the ratios (cudnn/ours, flash/ours, ours GB/s ÷ the copy's). The logic is in
flashviz/gpu/decode_bench.py (its module text says what the record holds).

Run from the repository root on the GPU machine (CuPy, torch with CUDA):

    FLASHVIZ_COMMIT=<commit> python3 benchmarks/bench_decode.py [--quick] [--out DIR]

DIR defaults to $OUT when set, else benchmarks/results. --plan prints the rows, the sweep and the
planned time without a GPU. Exit status 0 only when every cell ran and every correctness check
passed and the run was not cut short.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashviz.gpu import decode_bench as db  # noqa: E402
from flashviz.gpu.bench_util import positive_ints  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Without options: the full run (the record decode-<device>-<date>.json).")
    ap.add_argument("--quick", action="store_true",
                    help=f"a small subset at Nk = 4096 ({len(db.QUICK_CASES)} cases, one sweep; written as "
                         f"partial-decode-…)")
    ap.add_argument("--nk", help="keep only the cases (and sweeps) with these Nk (comma-separated)")
    ap.add_argument("--impls", help=f"implementations (default all: {','.join(db.ALL_IMPLS)})")
    ap.add_argument("--only", help=f"parts to run (default all: {','.join(db.PARTS)})")
    ap.add_argument("--budget-s", type=float, default=db.BUDGET_S,
                    help="seconds one measurement aims at (default %(default)s)")
    ap.add_argument("--deadline-s", type=float, default=db.DEADLINE_S,
                    help="start no new row or part after this many seconds (default %(default)s)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"),
                    help="folder for the record (default: $OUT, else benchmarks/results)")
    ap.add_argument("--plan", action="store_true", help="print the plan and its planned time; needs no GPU")
    a = ap.parse_args(argv)
    a.cases = db.QUICK_CASES if a.quick else db.FULL_CASES
    a.sweep = db.QUICK_SWEEP if a.quick else db.SWEEP_SHAPES
    if a.nk:
        nks = positive_ints(a.nk, "--nk", ap)
        a.cases = tuple(c for c in a.cases if c.Nk in nks)
        a.sweep = tuple(s for s in a.sweep if s[3] in nks)
        if not a.cases:
            ap.error(f"--nk: no case has Nk in {nks}")
    a.impls = tuple(x for x in a.impls.split(",") if x) if a.impls else db.ALL_IMPLS
    if not a.impls or any(i not in db.ALL_IMPLS for i in a.impls):
        ap.error(f"--impls: a selection of {','.join(db.ALL_IMPLS)}, got {','.join(a.impls)!r}")
    a.parts = tuple(x for x in a.only.split(",") if x) if a.only else db.PARTS
    if not a.parts or any(p not in db.PARTS for p in a.parts):
        ap.error(f"--only: a selection of {','.join(db.PARTS)}, got {a.only!r}")
    return a


def main(argv=None) -> int:
    a = parse(argv)
    if a.plan:
        for line in db.plan_lines(a.cases, a.impls, parts=a.parts, sweep=a.sweep, budget_s=a.budget_s,
                                  out_dir=a.out, deadline_s=a.deadline_s):
            print(line)
        return 0
    try:
        path = db.run_decode_benchmark(a.out, cases=a.cases, impls=a.impls, parts=a.parts, sweep=a.sweep,
                                       budget_s=a.budget_s, deadline_s=a.deadline_s,
                                       argv=sys.argv[1:] if argv is None else list(argv),
                                       log=lambda line: print(line, flush=True))
    except (RuntimeError, ValueError) as exc:
        print(f"bench_decode: {exc}", file=sys.stderr, flush=True)
        return 1
    rec = json.loads(path.read_text())
    holes = [f"{r['label']} {k}" for r in rec["bench"] for k in r if k.endswith("_error")]
    holes += [f"sweep Nk={s['Nk']} B={s['B']} splits {n}" for s in rec["splits"] for n in s.get("errors", {})]
    wrong = [f"{r['label']} {i}" for r in rec["bench"] for i in r.get("impls", []) if r.get(f"{i}_pass") is False]
    for what, items in (("failed cells", holes), ("correctness failures", wrong)):
        if items:
            print(f"{len(items)} {what}: " + "; ".join(items[:20]), flush=True)
    if rec.get("cut_short"):
        print(f"cut short: {rec['cut_short']}", flush=True)
    return 1 if holes or wrong or rec.get("cut_short") else 0


if __name__ == "__main__":
    sys.exit(main())
