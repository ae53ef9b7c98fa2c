"""A/B test of fa3 builds against SDPA-cuDNN in alternating rounds (issue 13; not the recorded benchmark).

Run-to-run noise on the H200 is ±5 % and the same build timed twice in one probe differed by up to
8 % (benchmarks/NOTES.md), so one-after-the-other timings cannot separate builds a few percent
apart. Here every implementation of a shape is captured once as a CUDA graph of ``CALLS`` public
calls; then ``ROUNDS`` rounds replay the graphs one after the other, in an order rotated each
round, so a slow stretch of the machine hits every build alike. Kernel-only for all (graph replay:
the same method for cuDNN and ours); per build the median time per call and the median and
quartiles of its *paired* ratio to cuDNN (cuDNN's time in the same round ÷ the build's).

Builds (name -> Br, Bc, #defines, grid): ``BUILDS`` below, each compiled from the kernel file with
the defines prepended (``tensorcore.kernel.SOURCE_OVERRIDE``) and launched with one block per tile
(grid None), the static persistent grid ("persistent": ``fa3.PERSISTENT``) or the persistent grid
with the dynamic tile scheduler ("dynamic": ``fa3.DYNAMIC``, the build with ``FA3_DYNAMIC``). Every build's output is compared with
cuDNN's before timing (max |difference| recorded; above 2e-2 the build is reported and not timed).

    python benchmarks/ab_fa3.py [--rounds 15] [--d 128] [--n 2048,4096,8192,16384]

Writes $OUT/ab-fa3.json (or ./ab-fa3.json): env, method, rows (shape, build, times, ratios).
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

CALLS = 10          #: public calls per graph
#: d -> {name: (Br, Bc, #defines, grid)}; "default" is the file as it is with the runner's default
#: blocks and grid. The fa3 v6 question (benchmarks/NOTES.md): does the dynamic scheduler beat one
#: block per tile, where the static persistent grid lost?
BUILDS = {
    128: {"default": (None, None, {}, None), "persistent": (None, None, {}, "persistent"),
          "dynamic": (None, None, {"FA3_DYNAMIC": 1}, "dynamic"), "128x176_f1": (128, 176, {"FA3_FEAT": 1}, None)},
    64: {"default": (None, None, {}, None), "persistent": (None, None, {}, "persistent"),
         "dynamic": (None, None, {"FA3_DYNAMIC": 1}, "dynamic"), "192x128_f3": (192, 128, {"FA3_FEAT": 3}, None)},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--d", default="128,64")
    ap.add_argument("--n", default="2048,4096,8192,16384")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashviz.gpu.common import environment, source
    from flashviz.gpu.tensorcore import fa3 as fa3mod
    from flashviz.gpu.tensorcore import kernel as kmod
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    from flashviz.gpu.timing import capture_calls, replay_ms

    out = Path(os.environ.get("OUT", "."))
    res = {"env": environment(), "kind": "ab fa3", "argv": sys.argv[1:], "calls_per_graph": CALLS,
           "rounds": args.rounds,
           "method": f"kernel-only: CUDA-graph replay of {CALLS} public calls per implementation, "
                     f"{args.rounds} rounds in rotated order, median per call; ratios paired by round", "rows": []}
    t_start = time.time()

    def graph(fn):
        return capture_calls(fn, CALLS)

    for d in (int(x) for x in args.d.split(",")):
        for causal in (False, True):
            for N in (int(x) for x in args.n.split(",")):
                B, H = max(1, 16384 // N), 2048 // d
                q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
                flops = 4 * B * H * N * N * d * (0.5 if causal else 1.0)

                def cudnn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                ref = cudnn().float()
                graphs, errors, diffs = {"sdpa_cudnn": graph(cudnn)}, {}, {}
                for name, (Br, Bc, defs, grid) in BUILDS[d].items():
                    kmod.SOURCE_OVERRIDE.clear()
                    if defs:
                        kmod.SOURCE_OVERRIDE["fa3"] = "".join(f"#define {a} {b}\n" for a, b in defs.items()) \
                            + source("flash_fwd_fa3.cu")
                    fa3mod.PERSISTENT, fa3mod.DYNAMIC = grid == "persistent", grid == "dynamic"
                    try:
                        fn = (lambda Br, Bc: lambda: flash_forward_mma(q, k, v, causal=causal, variant="fa3",
                                                                       Br=Br, Bc=Bc))(Br, Bc)
                        diffs[name] = float((fn()[0].float() - ref).abs().max())
                        if not diffs[name] <= 2e-2:
                            raise RuntimeError(f"max |O - cuDNN's O| = {diffs[name]:.3g}")
                        graphs[name] = graph(fn)
                    except Exception as exc:  # a build that fails is reported, the others go on
                        errors[name] = f"{type(exc).__name__}: {exc}"[:400]
                    finally:
                        kmod.SOURCE_OVERRIDE.clear()
                        fa3mod.PERSISTENT = fa3mod.DYNAMIC = False
                names = list(graphs)
                times = {n: [] for n in names}
                for r in range(args.rounds):
                    for n in names[r % len(names):] + names[:r % len(names)]:
                        times[n].append(replay_ms(graphs[n], CALLS))
                cu = np.array(times["sdpa_cudnn"])
                row = {"d": d, "causal": causal, "N": N, "B": B, "H": H, "flops": flops, "errors": errors,
                       "max_abs_vs_cudnn": diffs, "builds": {}}
                for n in names:
                    t = np.array(times[n])
                    ratio = cu / t
                    row["builds"][n] = {"ms": float(np.median(t)), "tflops": flops / float(np.median(t)) / 1e9,
                                        "vs_cudnn_median": float(np.median(ratio)),
                                        "vs_cudnn_q1_q3": [float(np.percentile(ratio, 25)), float(np.percentile(ratio, 75))],
                                        "times_ms": [float(x) for x in t]}
                res["rows"].append(row)
                print(f"d={d} causal={causal} N={N}: " + "  ".join(
                    f"{n}={b['vs_cudnn_median']:.3f}[{b['vs_cudnn_q1_q3'][0]:.3f},{b['vs_cudnn_q1_q3'][1]:.3f}]"
                    for n, b in row["builds"].items() if n != "sdpa_cudnn") + (f"  errors={errors}" if errors else ""),
                      flush=True)
                graphs = ref = None              # free the graphs' memory before the next shape
                torch.cuda.empty_cache()
                res["wall_s"] = time.time() - t_start
                (out / "ab-fa3.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
