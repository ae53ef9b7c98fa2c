"""The tensor-core kernels on a GPU: correctness grid, benchmark, block-size sweep, ceilings.

One script, one run (the same as ``flashviz bench``, but writing into benchmarks/results by
default): writes mma-<device>-<date>.json (partial-mma-… for a partial run) and its PNG figures
into DIR and prints one line per item. Needs CuPy,
a CUDA GPU and, for the SDPA comparison, torch:

    python benchmarks/bench_mma.py [--quick] [--out DIR] [--only ceil,check,bench,sweep]
                                   [--variants wgmma,mma.sync,fa3] [--N 512,1024,...] [--ab KERNEL.cu]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashviz.cli import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    if not any(a == "--out" or a.startswith("--out=") for a in args):   # this script records: the committed folder
        args += ["--out", str(Path(__file__).resolve().parent / "results")]
    raise SystemExit(main(["bench", *args]))
