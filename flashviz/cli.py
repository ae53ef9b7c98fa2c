"""Command line: ``flashviz tables`` (the IO model's standard-vs-tiled table) and
``flashviz gpu`` (is a GPU usable here, and the recorded GPU results)."""

from __future__ import annotations

import argparse
import sys

from .iomodel import flash_forward_io, standard_attention_io


def tables(d: int = 64, Br: int = 128, Bc: int = 128, itemsize: int = 2, causal: bool = False) -> str:
    """HBM bytes (MiB) and GFLOP of standard vs tiled attention for N = 1k…64k, as text."""
    rows = [f"d = {d}, Br = {Br}, Bc = {Bc}, {itemsize}-byte elements{', causal' if causal else ''}",
            f"{'N':>7} {'standard MiB':>13} {'tiled MiB':>10} {'ratio':>6} {'GFLOP':>9}"]
    for N in (1024, 2048, 4096, 8192, 16384, 32768, 65536):
        std = standard_attention_io(N, N, d, itemsize=itemsize)
        til = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize, causal=causal)
        rows.append(f"{N:>7} {std.hbm_bytes / 2**20:>13.1f} {til.hbm_bytes / 2**20:>10.1f} "
                    f"{std.hbm_bytes / til.hbm_bytes:>6.1f} {til.flops / 1e9:>9.1f}")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="flashviz", description="FlashAttention, seen and checked.")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables", help="standard vs tiled HBM traffic over N (the IO model)")
    t.add_argument("--d", type=int, default=64)
    t.add_argument("--Br", type=int, default=128)
    t.add_argument("--Bc", type=int, default=128)
    t.add_argument("--itemsize", type=int, default=2, choices=(2, 4, 8))
    t.add_argument("--causal", action="store_true")
    sub.add_parser("gpu", help="whether a GPU is usable here, and the recorded GPU results")
    args = p.parse_args(argv)
    try:
        if args.cmd == "tables":
            print(tables(args.d, args.Br, args.Bc, args.itemsize, args.causal))
        else:
            from .gpu import gpu_status
            from .widgets.gpu_panel import recorded_summary

            ok, reason = gpu_status()
            print(f"GPU usable: {ok} ({reason})")
            print(recorded_summary())
    except (TypeError, ValueError) as exc:
        print(f"flashviz: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
