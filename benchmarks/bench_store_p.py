"""Recompute versus store on a GPU (issue 23, chapter 6): the teaching backward that recomputes P, the
same kernel reading a stored P, and a whole-matrix cuBLAS backward, over N.

One process, one run; float32, d = 64, 8 heads, Br = Bc = 64, no mask, N = 512 … 16384. Writes
storep-<device>-<date>.json and its .log into DIR (partial-storep-… for another N set or a run cut
short). The logic is in flashviz/gpu/teaching/store_bench.py (its module text says what the record
holds).

Run from the repository root on the GPU machine (CuPy, torch with CUDA):

    FLASHVIZ_COMMIT=<commit> python3 benchmarks/bench_store_p.py [--n 512,1024] [--out DIR]

DIR defaults to $OUT when set, else benchmarks/results. Exit status 0 only when every cell ran.
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
from flashviz.gpu.teaching import store_bench as sb  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", help=f"sequence lengths (default {','.join(map(str, sb.NS))})")
    ap.add_argument("--budget-s", type=float, default=sb.BUDGET_S, help="seconds a measurement aims at")
    ap.add_argument("--deadline-s", type=float, default=sb.DEADLINE_S, help="start nothing new after this")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)
    Ns = positive_ints(a.n, "--n", ap) if a.n else sb.NS
    Path(a.out).mkdir(parents=True, exist_ok=True)
    path = sb.run_store_benchmark(a.out, Ns=Ns, budget_s=a.budget_s, deadline_s=a.deadline_s)
    rec = json.loads(path.read_text())
    failed = [k for r in rec["bench"] for k in r if k.endswith("_error")]
    print(f"wrote {path}; failed cells: {failed or 'none'}")
    return 0 if not failed and not rec.get("cut_short") and len(rec["bench"]) == len(Ns) else 1


if __name__ == "__main__":
    sys.exit(main())
