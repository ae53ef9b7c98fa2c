"""Command line: ``flashviz tables`` (the IO model's tables: standard vs tiled traffic over N, a
block-size sweep against an SRAM budget, backward storage), ``flashviz gpu`` (is a GPU usable
here, and the recorded GPU results), ``flashviz bench`` (the tensor-core kernels against
FlashAttention-2 and the rest on this GPU, or the recorded run without one), ``flashviz render``,
``flashviz present`` and ``flashviz report`` (the measured docs pages, from the records)."""

from __future__ import annotations

import argparse
import sys

from . import checks
from .iomodel import (
    SWEEP_BLOCKS,
    best_of_sweep,
    block_size_sweep,
    flash_backward_io,
    flash_forward_io,
    standard_attention_io,
    standard_backward_io,
    stored_between_passes,
)
from .mma_limits import ALL_VARIANTS, BENCH_N

TABLE_N = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
LONG_SWEEP = 20_000     # query/key blocks visited in all; above this a progress bar is shown (on a terminal)
#: Tokens of every benchmark run (B·N): ``flashviz bench --N`` takes sequence lengths that divide it,
#: so B = 16,384 / N sequences is a whole number and runs of different N move the same data.
BENCH_TOKENS = 16_384
#: Largest --d, --Br and --Bc of ``flashviz tables``: 65,536, the longest N of its tables (a block
#: longer than N is N; no attention head is that wide); far larger values overflow its floats.
MAX_TABLE_SIZE = 65_536


def tables(d: int = 64, Br: int = 128, Bc: int = 128, itemsize: int = 2, causal: bool = False) -> str:
    """HBM bytes (MiB) and GFLOP of standard vs tiled attention for N = 1k…64k, as text."""
    rows = [f"d = {d}, Br = {Br}, Bc = {Bc}, {itemsize}-byte elements{', causal' if causal else ''}",
            f"{'N':>7} {'standard MiB':>13} {'tiled MiB':>10} {'ratio':>6} {'GFLOP':>9}"]
    for N in TABLE_N:
        std = standard_attention_io(N, N, d, itemsize=itemsize)
        til = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, causal=causal)
        rows.append(f"{N:>7} {std.hbm_bytes / 2**20:>13.1f} {til.hbm_bytes / 2**20:>10.1f} "
                    f"{std.hbm_bytes / til.hbm_bytes:>6.1f} {til.flops / 1e9:>9.1f}")
    return "\n".join(rows)


def sweep_table(N: int = 4096, d: int = 64, sram: str = "H100/H200", itemsize: int = 2, causal: bool = False,
                order: str = "fa2", blocks=SWEEP_BLOCKS) -> str:
    """The block-size sweep (iomodel.block_size_sweep) at N, d against an SRAM preset (or bytes), as text:
    Br, Bc, Tr, Tc, HBM MiB, SRAM KiB, whether it fits, the optimum marked with *."""
    from .replay.blocksize import sram_budget_bytes

    N = checks.check_int(N, "N", 1)
    blocks = checks.check_blocks(blocks)
    problem = checks.sweep_problem(N, blocks, blocks_given=blocks != SWEEP_BLOCKS)
    if problem:
        raise ValueError(problem)
    label, M = sram_budget_bytes(sram)
    n_cfg = len(blocks) ** 2
    long = N // min(blocks) * n_cfg > LONG_SWEEP
    bar = _progress(n_cfg, long, "block-size sweep")
    try:
        rows = block_size_sweep(N, d, blocks=blocks, itemsize=itemsize, sram_budget=M, order=order, causal=causal,
                                progress=lambda i, n: bar.update(1))
    finally:
        bar.close()
    best = best_of_sweep(rows)
    std = standard_attention_io(N, N, d, itemsize=itemsize).hbm_bytes
    out = [f"Block-size sweep: N = {N}, d = {d}, {itemsize}-byte elements, {order.upper()} order"
           f"{', causal' if causal else ''}; SRAM budget M = {label} ({M:,} bytes); standard attention "
           f"{std / 2**20:.1f} MiB",
           f"{'Br':>5} {'Bc':>5} {'Tr':>6} {'Tc':>6} {'HBM MiB':>10} {'SRAM KiB':>9} {'fits':>5}"]
    for r in rows:
        star = " *" if best is not None and r is best else ""
        out.append(f"{r['Br']:>5} {r['Bc']:>5} {r['Tr']:>6} {r['Tc']:>6} {r['hbm_bytes'] / 2**20:>10.2f} "
                   f"{r['sram_bytes'] / 1024:>9.1f} {'yes' if r['fits'] else 'NO':>5}{star}")
    out.append(f"* optimum (least traffic that fits, ties → largest tile): {best['Br']}×{best['Bc']}" if best else
               "no configuration fits: every one would spill out of SRAM")
    return "\n".join(out)


def backward_table(d: int = 64, Br: int = 128, Bc: int = 128, itemsize: int = 2, causal: bool = False) -> str:
    """What the forward leaves for the backward (P vs lse, iomodel.stored_between_passes) and the
    backward's HBM traffic (standard_backward_io vs flash_backward_io) over N, as text."""
    out = [f"Backward: stored between passes and backward HBM traffic; d = {d}, Br = {Br}, Bc = {Bc}, "
           f"{itemsize}-byte elements{', causal' if causal else ''}",
           f"{'N':>7} {'P MiB':>10} {'lse KiB':>9} {'std bwd MiB':>12} {'flash bwd MiB':>14} {'ratio':>6}"]
    bar = _progress(len(TABLE_N), True, "backward table")
    try:
        for N in TABLE_N:
            kept = stored_between_passes(N, N, itemsize=itemsize)
            std = standard_backward_io(N, N, d, itemsize=itemsize).hbm_bytes
            fla = flash_backward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, causal=causal).hbm_bytes
            out.append(f"{N:>7} {kept['standard (P)'] / 2**20:>10.1f} {kept['flash (lse)'] / 1024:>9.1f} "
                       f"{std / 2**20:>12.1f} {fla / 2**20:>14.1f} {std / fla:>6.1f}")
            bar.update(1)
    finally:
        bar.close()
    return "\n".join(out)


def _progress(total: int, long: bool, desc: str):
    """A tqdm bar on stderr for long work on a terminal; a silent stand-in otherwise. The terminal
    bar always (tqdm.std, not tqdm.auto): inside an IPython kernel tqdm.auto would pick the widget
    bar, which ignores ``disable=None`` and displays itself on stdout."""
    from tqdm.std import tqdm

    return tqdm(total=total, desc=desc, leave=False, file=sys.stderr, disable=None if long else True)


RENDERABLE = {
    "tiles": ("flashviz.widgets.explorer", "TileExplorer"),
    "online-softmax": ("flashviz.widgets.online_softmax", "OnlineSoftmaxExplorer"),
    "block-size": ("flashviz.widgets.blocksize", "BlockSizeExplorer"),
    "causal": ("flashviz.widgets.causal", "CausalExplorer"),
    "loop-order": ("flashviz.widgets.loop_order", "LoopOrderExplorer"),
    "backward": ("flashviz.widgets.backward", "BackwardExplorer"),
    "decode": ("flashviz.widgets.decode", "DecodeExplorer"),
}


def _parse_setting(text: str):
    """'N=128' → ('N', 128); 'causal=True' → ('causal', True); strings stay strings."""
    import ast

    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise ValueError(f"--set takes NAME=VALUE, got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def render(widget: str, out, *, every: int = 1, frame=None, fps: float = 8, **kwargs):
    """Export widget ``widget`` (a key of RENDERABLE) to ``out``: .gif/.mp4 (every ``every``-th
    frame, with a progress bar; at most ``flashviz.views.export.MAX_EXPORT_FRAMES`` frames) or .png
    (frame ``frame``, default the last). Returns the Path. Every argument is checked before
    anything is drawn: ValueError/TypeError for an unknown widget or widget argument, a bad file
    type, --every, --frame or --fps; OSError (one line) for an output file that cannot be written."""
    import importlib
    import inspect

    import matplotlib

    matplotlib.use("Agg")

    from .views import export

    if not isinstance(widget, str) or widget not in RENDERABLE:
        raise ValueError(f"widget must be one of {', '.join(sorted(RENDERABLE))}, got {widget!r}")
    out = checks.check_output_path(out, (".gif", ".mp4", ".png"), name="--out")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"--every must be an integer >= 1, got {every!r}")
    if frame is not None and (isinstance(frame, bool) or not isinstance(frame, int) or frame < 0):
        raise ValueError(f"--frame must be a frame index >= 0, got {frame!r}")
    if out.suffix.lower() != ".png":
        export.check_fps(fps)
    module, cls = RENDERABLE[widget]
    widget_cls = getattr(importlib.import_module(module), cls)
    params = [n for n, p in inspect.signature(widget_cls).parameters.items()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n != "key"]
    for name in kwargs:
        if name not in params:
            raise ValueError(f"--set {name}=…: {cls} takes {', '.join(params)}; got {name!r}")
    w = widget_cls(**kwargs, key=("cli-render", widget))
    try:
        if out.suffix.lower() == ".png":
            if frame is not None and frame >= w.n_frames:
                raise ValueError(f"--frame must be from 0 to {w.n_frames - 1} ({cls} has {w.n_frames} frames "
                                 f"here), got {frame}")
            return w.save_png(out, w.n_frames - 1 if frame is None else frame)
        frames = list(range(0, w.n_frames, every))
        if len(frames) > export.MAX_EXPORT_FRAMES:
            need = -(-w.n_frames // export.MAX_EXPORT_FRAMES)
            raise ValueError(f"--every {every} keeps {len(frames):,} of {w.n_frames:,} frames, more than one export "
                             f"may hold ({export.MAX_EXPORT_FRAMES:,}: about a minute to write); use --every {need} "
                             f"or more")
        bar = _progress(len(frames), len(frames) > 30, f"render {widget}")
        try:
            return w.save_gif(out, frames=frames, fps=fps,
                              progress=(lambda i, n: bar.update(1)) if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()
    finally:
        w.close()


def plot_results(out_dir, mma_res: dict | None = None, dram_res: dict | None = None) -> list:
    """Draw the benchmark, the block sweeps (d = 64 and 128) and the DRAM comparison of the
    given (default: latest recorded) results to PNG files in out_dir, named after the JSON
    they come from. Returns the paths written. Needs no GPU."""
    from pathlib import Path

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .records.results import latest_results
    from .views import bench_plot as bp

    mma_res = mma_res if mma_res is not None else latest_results("mma")
    dram_res = dram_res if dram_res is not None else latest_results("dram")
    out = checks.check_output_dir(out_dir, name="out_dir")
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name):
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)

    if mma_res:
        stem = Path(mma_res.get("source_file", "mma-results.json")).stem
        if mma_res.get("bench"):
            save(bp.plot_mma_benchmark(mma_res), f"{stem}.png")
        for d in (64, 128):
            if any(r.get("d") == d and "kernel_ms" in r for r in mma_res.get("sweep", [])):
                save(bp.plot_block_sweep(mma_res, d=d), f"{stem}-sweep-d{d}.png")
    if dram_res and dram_res.get("rows"):
        save(bp.plot_dram(dram_res), f"{Path(dram_res.get('source_file', 'dram-results.json')).stem}.png")
    return written


def bench_methods() -> str:
    """The header naming the method of every figure ``flashviz bench`` draws."""
    from .records.results import METHOD_NAMES

    return (f"Benchmark figure: TFLOP/s by {METHOD_NAMES['call']}; block-sweep figures: "
            f"{METHOD_NAMES['kernel']}.")


def _bench_args(args):
    """Check the bench options before anything runs: (parts, variants, Ns, ab source). Each N
    must divide BENCH_TOKENS (B·N = 16,384 tokens, as every recorded run)."""
    parts = tuple(x for x in args.only.split(",") if x)
    bad = set(parts) - {"ceil", "check", "bench", "sweep"}
    if not parts or bad:
        raise ValueError(f"--only takes a comma list of ceil, check, bench, sweep; got {args.only!r}")
    variants = tuple(x for x in args.variants.split(",") if x)
    if not variants or set(variants) - set(ALL_VARIANTS):
        raise ValueError(f"--variants takes a comma list of {', '.join(ALL_VARIANTS)}; got {args.variants!r}")
    try:
        Ns = tuple(int(x) for x in args.N.split(",") if x)
    except ValueError:
        Ns = ()
    if not Ns or min(Ns) < 1 or any(BENCH_TOKENS % n for n in Ns):
        raise ValueError(f"--N takes a comma list of sequence lengths that divide {BENCH_TOKENS:,} (B·N = "
                         f"{BENCH_TOKENS:,} tokens: powers of two up to {BENCH_TOKENS:,}, e.g. "
                         f"{','.join(map(str, BENCH_N))}); got {args.N!r}")
    ab = None
    if args.ab:
        try:
            with open(args.ab, encoding="utf-8") as f:
                ab = f.read()
        except OSError as exc:
            raise ValueError(f"--ab: cannot read {args.ab!r}: {exc.strerror}") from None
    return parts, variants, Ns, ab


def bench(args) -> int:
    """``flashviz bench``: measure and plot on a GPU into --out (default ./flashviz-bench; give
    --out benchmarks/results to replace the recorded run); without a GPU, print the recorded
    summary (exit status 0), and with --plot-only draw it. Returns the exit status."""
    import json

    from .gpu import gpu_status
    from .gpu.tensorcore.run import run_benchmarks
    from .records.results import latest_results, mma_summary

    out = checks.check_output_dir(args.out, name="--out")
    if args.plot_only:
        res = latest_results("mma")
        print(f"Figures of the recorded run ({res.get('source_file', '?') if res else 'no tensor-core recording'}). "
              + bench_methods())
        for path in plot_results(out):
            print(f"wrote {path}")
        return 0
    parts, variants, Ns, ab = _bench_args(args)
    ok, reason = gpu_status()
    if not ok:
        print(f"No GPU here: {reason}. Nothing was measured; this is the recorded run, timed through each "
              f"implementation's public call (the headline) and kernel-only beside it:")
        print(mma_summary(latest_results("mma")))
        return 0
    path = run_benchmarks(out, quick=args.quick, parts=parts, variants=variants, Ns=Ns,
                          ab_source=ab, log=lambda line: print(line, flush=True))
    res = json.loads(path.read_text())
    res["source_file"] = path.name
    print(bench_methods())
    for p in plot_results(out, mma_res=res, dram_res={}):
        print(f"wrote {p}")
    print(mma_summary(res))
    print(f"wrote {path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line: 'flashviz render: error: … (see flashviz render -h)'
    and exit status 2 (no usage block above it)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} -h)\n")


def main(argv=None) -> int:
    p = _Parser(prog="flashviz", description="FlashAttention, seen and checked.")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables", help="the IO model's tables: traffic over N, a block-size sweep, backward storage")
    t.add_argument("--d", type=int, default=64)
    t.add_argument("--Br", type=int, default=128)
    t.add_argument("--Bc", type=int, default=128)
    t.add_argument("--itemsize", type=int, default=2, choices=(2, 4, 8))
    t.add_argument("--causal", action="store_true")
    t.add_argument("--N", type=int, default=4096, help="sequence length of the block-size sweep")
    t.add_argument("--sram", default="H100/H200", help="SRAM budget of the sweep: H100/H200, A100, toy, or bytes")
    t.add_argument("--order", default="fa2", choices=("fa2", "fa1"), help="loop order of the sweep")
    sub.add_parser("gpu", help="whether a GPU is usable here, and the recorded GPU results")
    r = sub.add_parser("render", help="export a widget's animation (GIF, or MP4 with ffmpeg) for slides")
    r.add_argument("widget", choices=sorted(RENDERABLE), help="which widget")
    r.add_argument("--out", required=True, help="file to write: .gif or .mp4 (or .png for one frame)")
    r.add_argument("--every", type=int, default=1, help="keep every n-th frame (default 1: all)")
    r.add_argument("--frame", type=int, default=None, help="with a .png: the frame to save (default: the last)")
    r.add_argument("--fps", type=float, default=8)
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a widget argument, e.g. --set N=128 --set causal=True (repeatable)")
    b = sub.add_parser("bench", help="benchmark the tensor-core kernels on this GPU (JSON + PNG), "
                                     "or show the recorded run when there is no GPU")
    b.add_argument("--out", default="flashviz-bench", help="folder for the JSON and PNGs (default ./flashviz-bench; "
                                                       "benchmarks/results replaces the recorded run)")
    b.add_argument("--quick", action="store_true", help="fewer correctness shapes")
    b.add_argument("--only", default="ceil,check,bench,sweep", help="comma list of ceil,check,bench,sweep")
    b.add_argument("--variants", default="wgmma,mma.sync,fa3")
    b.add_argument("--N", default=",".join(map(str, BENCH_N)), help="comma list of sequence lengths")
    b.add_argument("--ab", default=None, metavar="KERNEL.cu", help="also sweep this wgmma kernel source (A/B)")
    b.add_argument("--plot-only", action="store_true", help="only draw the latest recorded results to PNG")
    pr = sub.add_parser("present", help="serve the chapters as an app with Voilà (see flashviz.present)")
    pr.add_argument("rest", nargs=argparse.REMAINDER)
    rp = sub.add_parser("report", help="write docs/results.md and the README's GPU table from the records "
                                       "(see flashviz.report; --check: only compare)")
    rp.add_argument("rest", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:          # its own options (argparse's REMAINDER drops a leading --flag)
        from .report import main as report_main

        return report_main(argv[1:])
    args = p.parse_args(argv)
    if args.cmd == "present":
        from .present import main as present_main

        return present_main(args.rest)
    try:
        if args.cmd == "render":
            path = render(args.widget, args.out, every=args.every, frame=args.frame, fps=args.fps,
                          **dict(_parse_setting(kv) for kv in args.set))
            print(f"wrote {path}")
        elif args.cmd == "bench":
            return bench(args)
        elif args.cmd == "tables":
            for flag in ("d", "Br", "Bc"):
                checks.check_int(getattr(args, flag), f"--{flag}", 1, MAX_TABLE_SIZE)
            sram = int(args.sram) if args.sram.isdigit() else args.sram
            if isinstance(sram, int):
                checks.check_int(sram, "--sram (bytes)", 1, checks.MAX_SRAM_BYTES)
            text = [tables(args.d, args.Br, args.Bc, args.itemsize, args.causal),
                    sweep_table(args.N, args.d, sram, args.itemsize, args.causal, args.order),
                    backward_table(args.d, args.Br, args.Bc, args.itemsize, args.causal)]
            print("\n\n".join(text))
        else:
            from .gpu import gpu_status
            from .records.results import recorded_summary

            ok, reason = gpu_status()
            print(f"GPU usable: {ok} ({reason})")
            print(recorded_summary())
    except (TypeError, ValueError, OSError) as exc:       # bad input or an output that cannot be written
        print(f"flashviz: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
