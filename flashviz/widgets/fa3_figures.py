"""Fa3Figures: chapter 8 (FlashAttention-3 on Hopper) as captioned figures, for class and app mode.

Four tabs (a ``figure_tabs.FigureTabs``), no GPU needed:

* **roles** — one thread block's warpgroups: the producer's TMA copies into the K/V ring, the
  consumers in lock-step and with ping-pong (``views.fa3_roles.plot_fa3_roles`` for the d = 128
  block of ``records.fa3_records.fa3_config``, played by ``replay.fa3_roles.roles_schedule``). A
  schematic: the kernel's protocol and parameters, durations made up, and labelled so.
* **steps** — FA2 (the wgmma kernel) → + TMA and a producer warpgroup → + ping-pong → +
  intra-warpgroup overlap, kernel-only TFLOP/s from the one run of the steps probe
  (``views.fa3_plots.plot_fa3_steps`` of ``fa3_records.latest_probe("steps")``).
* **benchmark** — fa3, the wgmma kernel and SDPA-flash against SDPA-cuDNN over N, by public
  call and kernel-only (``plot_fa3_benchmark`` of ``records.results.latest_results("mma")``).
* **timeline** — one thread block's measured steps (GPU timeline) of the FA2 wgmma kernel at
  d = 128, N = 4096, and of the fa3 kernel beside it once one is recorded
  (``views.timeline_pair.plot_block_steps`` of ``measured_blocks()``).

Each tab has a one-line caption (``captions``) whose numbers are computed from the same data
as its figure, naming its method.
"""

from __future__ import annotations

from ..records.fa3_records import STEPS, fa3_bench_table, fa3_config, latest_probe, steps_table
from ..records.results import latest_results
from ..records.timeline import latest_timeline, recorded_timelines
from ..records.timeline_stats import softmax_overlap
from ..replay.fa3_roles import roles_schedule
from .figure_tabs import FigureTabs, Loaded

#: the block the roles tab draws (the notebook's): d = 128, two consumer warpgroups
ROLES_D = 128
#: the shape of the measured timelines the timeline tab shows (chapter 7's recorded runs)
TIMELINE_SHAPE = {"d": 128, "N": 4096}


def measured_blocks() -> dict:
    """{label: gpu.Timeline}: the newest recorded timeline of the FA2 wgmma kernel at
    TIMELINE_SHAPE (no mask), and the fa3 kernel's when one is recorded; {} without the wgmma one."""
    out = {}
    for kernel, label in (("wgmma", "FlashAttention-2 on wgmma (chapter 7), measured"),
                          ("fa3", "FlashAttention-3 (this chapter's kernel), measured")):
        if any(r["kernel"] == kernel and not r["causal"] and r["order"] == "kernel"
               and (r["d"], r["N"]) == (TIMELINE_SHAPE["d"], TIMELINE_SHAPE["N"]) for r in recorded_timelines()):
            out[label] = latest_timeline(kernel, **TIMELINE_SHAPE)
    return out if any(tl.kernel == "wgmma" for tl in out.values()) else {}


def _span(xs) -> str:
    return f"{min(xs):.2f}–{max(xs):.2f}x"


def roles_caption(cfg, schedules) -> str:
    """The roles tab's line: the block's parameters (from the kernel's Config) and the tensor
    cores' busy share of the schematic's two schedules (lock-step, ping-pong)."""
    lock, ping = schedules
    return (f"Schematic, not a measurement: the d = {cfg.d} block ({cfg.consumers} consumer warpgroups + 1 producer, "
            f"{cfg.stages}-slot K/V ring, from the kernel's Config) played with made-up durations: the tensor cores "
            f"are busy {100 * lock.tc_busy:.0f} % of the span in lock-step, {100 * ping.tc_busy:.0f} % with ping-pong.")


def steps_caption(rec: dict | None) -> str:
    """The steps tab's line, from a steps probe record (``steps_table``): over its shapes, each
    step's speed-up on the step before (the step before's kernel-only time ÷ this step's) and
    the default build's speed against SDPA-cuDNN (cuDNN's time ÷ its). "" without a record."""
    rows = steps_table(rec) if rec else []
    if not rows:
        return ""
    shapes = sorted({(r["d"], r["causal"]) for r in rows})
    by = {(r["d"], r["causal"], r["step"]): r for r in rows}
    order = [s.key for s in STEPS]
    gain = {s: [by[(*k, a)]["kernel_ms"] / by[(*k, s)]["kernel_ms"] for k in shapes]
            for a, s in zip(order, order[1:])}
    Ns = sorted({r["N"] for r in rows})
    words = {"producer": "TMA + producer", "pingpong": "ping-pong", "intra": "intra-warpgroup overlap"}
    return (f"One run, N = {'/'.join(f'{n:,}' for n in Ns)}, kernel-only (CUDA-graph replay of 10 calls, median of 7), "
            f"the step before's time ÷ this step's over {len(shapes)} shapes: "
            + ", ".join(f"{words.get(s, s)} {_span(g)}" for s, g in gain.items())
            + f"; the default build (ping-pong) at {_span([by[(*k, 'pingpong')]['kernel_vs_sdpa_cudnn'] for k in shapes])}"
              " cuDNN's speed.")


def benchmark_caption(mma: dict | None) -> str:
    """The benchmark tab's line, from an "mma" results dict (``fa3_bench_table``): fa3's speed
    against SDPA-cuDNN and SDPA-flash (their time ÷ fa3's) by public call (CUDA events, median;
    the headline) and kernel-only (the profiler), and the shapes where it reaches cuDNN by
    public call. "" without fa3 rows."""
    rows = fa3_bench_table(mma)
    if not rows:
        return ""
    Ns = [r["N"] for r in rows]

    def vs(other, m):
        return [r[f"{other}_{m}_ms"] / r[f"fa3_{m}_ms"] for r in rows]

    reach = sum(x >= 1.0 for x in vs("sdpa_cudnn", "call"))
    return (f"Over {len(rows)} shapes (N = {min(Ns):,}–{max(Ns):,}), fa3 runs at {_span(vs('sdpa_cudnn', 'call'))} "
            f"SDPA-cuDNN's speed and {_span(vs('sdpa_flash', 'call'))} SDPA-flash's (FA2) by public call (CUDA events, "
            f"median); kernel-only (profiler): {_span(vs('sdpa_cudnn', 'kernel'))} and "
            f"{_span(vs('sdpa_flash', 'kernel'))}; as fast as cuDNN or faster by public call in {reach} of "
            f"{len(rows)} shapes.")


def timeline_caption(blocks: dict) -> str:
    """The timeline tab's line, from ``measured_blocks()``: the shape, and per kernel its run
    (device, date) and the share of a warpgroup's softmax under another warpgroup's products
    (``softmax_overlap`` over the run's kept blocks). "" without a recording."""
    if not blocks:
        return ""
    tls = list(blocks.values())
    runs = "; ".join(f"{'fa3' if tl.kernel == 'fa3' else 'FA2 on wgmma'}, {tl.device}, {tl.date}: a warpgroup's "
                     f"softmax under another's products {100 * softmax_overlap(tl)[0]:.0f} % of its time" for tl in tls)
    more = "" if any(tl.kernel == "fa3" for tl in tls) else "; no fa3 timeline is recorded yet"
    return (f"Measured (GPU timeline, one traced run each, d = {tls[0].d}, N = {tls[0].N:,}): one block's steps over "
            f"the span of four of its key tiles. {runs}{more}.")


def captions(cfg, schedules, steps: dict | None, mma: dict | None, blocks: dict | None = None) -> dict:
    """{"roles", "steps", "benchmark", "timeline"}: one line each (``roles_caption``,
    ``steps_caption``, ``benchmark_caption``, ``timeline_caption``); a tab without its data gets ""."""
    return {"roles": roles_caption(cfg, schedules) if cfg is not None else "",
            "steps": steps_caption(steps), "benchmark": benchmark_caption(mma),
            "timeline": timeline_caption(blocks or {})}


def _file(rec: dict | None) -> str:
    return (rec or {}).get("source_file") or "no recording"


class Fa3Figures(FigureTabs):
    """Chapter 8's figures in four captioned tabs: the warpgroups' roles (a schematic), the
    measured steps from FA2 to FlashAttention-3, the benchmark against SDPA-flash and cuDNN, one
    block's measured steps (GPU timeline).

    figsize: (width, height) in inches; only the width counts (default 11: the roles figure
    11 × 6.8, the steps 11 × 6.4, the benchmark 11 × 7, one block 11 × 4.6, scaled together); dpi: resolution of the
    PNGs (default 84: 924 px wide); key: registry key (re-running a cell replaces the widget); text_scale:
    every text of the figures at this many times its notebook size (0.5–2.5, default 1; the
    app's presenter mode uses 1.4: the figures lay themselves out for it on the same inches).
    A tab whose data this installation lacks says so. Raises a one-line ValueError for a figsize
    or dpi out of range (sides of 1–50 inches, 20–600 dpi, at most 8 million pixels a figure),
    TypeError / ValueError for a bad text_scale. See FigureTabs for ``figure``, ``image``,
    ``close``.
    """

    TABS = {"roles": ("warpgroups' roles (schematic)", (11.0, 6.8)),
            "steps": ("measured steps", (11.0, 6.4)),
            "benchmark": ("vs SDPA-flash and cuDNN", (11.0, 7.0)),
            "timeline": ("one block, measured", (11.0, 4.6))}
    NAMES = tuple(TABS)
    MISSING = "Not available in this installation (no recording of this kind, or no kernel source)."

    def _load(self) -> Loaded:
        from ..views.fa3_plots import plot_fa3_benchmark, plot_fa3_steps
        from ..views.fa3_roles import plot_fa3_roles
        from ..views.timeline_pair import plot_block_steps

        try:
            cfg = fa3_config(ROLES_D)
            schedules = tuple(roles_schedule(cfg.consumers, cfg.stages, cfg.d, 4, pp) for pp in (False, True))
        except (LookupError, OSError):          # the kernel's source is not installed
            cfg, schedules = None, None
        steps, mma, blocks = latest_probe("steps"), latest_results("mma"), measured_blocks()
        device = (steps or mma or {}).get("env", {}).get("device", "a GPU")
        header = f"<b>Recorded on a GPU</b> — {device} · steps: {_file(steps)} · benchmark: {_file(mma)}"

        def roles(figsize):
            if cfg is None:
                raise LookupError("the fa3 kernel's source is not installed")
            return plot_fa3_roles(cfg, schedules, figsize=figsize)

        def timeline(figsize):
            if not blocks:
                raise LookupError("no recorded timeline of the wgmma kernel")
            return plot_block_steps(blocks, figsize=(figsize[0], figsize[1] * (1 + 0.75 * (len(blocks) - 1))))

        return Loaded(header=header, captions=captions(cfg, schedules, steps, mma, blocks),
                      draws={"roles": roles,
                             "steps": lambda figsize: plot_fa3_steps(steps, figsize=figsize),
                             "benchmark": lambda figsize: plot_fa3_benchmark(mma, figsize=figsize),
                             "timeline": timeline},
                      labels=(ROLES_D, _file(steps), (mma or {}).get("source_file"),
                              tuple((tl.kernel, tl.date) for tl in blocks.values())))
