"""Chapter 6's figures of the recorded GPU backward (a "bwd" record,
``flashviz.records.results.latest_results("bwd")``; no GPU needed).

``plot_recompute_vs_store(res, d=64, causal=False)`` — recompute versus store, measured. Top, from
the record's peak-memory rows, against N on log–log axes, bytes per (batch, head) pair: what the
forward keeps for the backward (left) and the backward's peak memory (right), for ours and the
SDPA backends that recompute P (flash, cuDNN) against SDPA-math, which stores it (an N it did
not run at is said at the end of its line). Bottom, from the bench rows at (d, causal): each
implementation's backward time ÷ its forward time by public call (forward = fwdbwd_call_ms −
call_ms, a difference of two medians) against the FLOP ratios 2.5 (P recomputed) and 2.0 (P
stored), horizontal lines whose legend stands under the panel, outside the axes (inside, the
implementations' lines run through any place it could take).

``plot_bwd_speed(res)`` — the backward's TFLOP/s (FLOPs = 2.5 × the forward's matmul FLOPs,
causal: the visible half) against N, one panel per (d, mask): those of SPEED_IMPLS that the
record has — ours on tensor cores, the default call (``bwd_mma``) and the other dQ path beside it
(``bwd_mma_det`` or ``bwd_mma_atomic``), each named by the dQ path the record's kernels ran
(``short``), the fp32 teaching kernel, SDPA-flash and SDPA-cuDNN; public call (CUDA events, median:
solid, filled markers) and kernel-only (the profiler's GPU time per call, median: dotted, hollow
markers).

Both return a new Figure (``style.fit_dpi``: at most FIT_WIDTH_PX wide in a notebook), label it
with the record's device, date and commit, and raise ValueError (one line) for a record without
the rows they draw. Text sizes go through ``style.pt``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from ..records.bwd_records import (
    DQ_WORDS,
    IMPLS,
    MMA_IMPLS,
    PEAK_IMPLS,
    bwd_label,
    dq_path,
    flop_ratio,
    peak_rows,
    time_rows,
)
from . import style
from .text import wrap_text

#: (colour, line width, marker) of each implementation, in every figure of the chapter: ours, the
#: default call, dark red; the deterministic dQ beside it pale red, the scalar atomics pale orange
LOOK = {"bwd_mma": ("#d62728", 2.0, "o"), "bwd_mma_det": ("#ff9896", 1.4, "P"),
        "bwd_mma_atomic": ("#ffbb78", 1.4, "*"), "bwd_teaching": ("#2ca02c", 1.4, "s"),
        "bwd_teaching_det": ("#98df8a", 1.4, "D"), "sdpa_flash_bwd": ("#1f77b4", 1.4, "^"),
        "sdpa_cudnn_bwd": ("#9467bd", 1.4, "v"), "sdpa_math_bwd": ("#8c564b", 2.0, "X")}
#: short names for legends (``short`` adds the dQ path a record's kernels ran to bwd_mma's)
SHORT = {"bwd_mma": "ours, tensor cores", "bwd_mma_det": "ours, tensor cores (deterministic dQ)",
         "bwd_mma_atomic": "ours, tensor cores (atomic dQ)",
         "bwd_teaching": "ours, teaching fp32 (atomic dQ)",
         "bwd_teaching_det": "ours, teaching fp32 (deterministic dQ)", "sdpa_flash_bwd": "SDPA-flash",
         "sdpa_cudnn_bwd": "SDPA-cuDNN", "sdpa_math_bwd": "SDPA-math: stores P"}
#: what plot_bwd_speed draws, in this order, where the record has it (the teaching kernel's
#: deterministic twin is left out: at a few TFLOP/s its line would crowd the teaching one's; the
#: chapter prints its cost, bwd_records.det_cost)
SPEED_IMPLS = ("bwd_mma", "bwd_mma_det", "bwd_mma_atomic", "bwd_teaching", "sdpa_flash_bwd", "sdpa_cudnn_bwd")
SAFE = 0.96       #: wrap texts to this share of their room (Agg draws a little wider than measured)
PAD = 4.0         #: points between the figure's edge and a legend at its bottom


def short(res: dict, impl: str) -> str:
    """``impl``'s legend name in a figure of ``res``: for ours on tensor cores "ours, tensor cores"
    and the dQ path the record's kernels ran (``bwd_records.dq_path``), e.g. "ours, tensor cores
    (atomic dQ)"; ``SHORT[impl]`` for the others."""
    if impl in MMA_IMPLS:
        path = dq_path(res, impl)
        return SHORT["bwd_mma"] + (f" ({DQ_WORDS[path]})" if path else "")
    return SHORT[impl]


def _check(res, key: str, what: str) -> None:
    if not isinstance(res, dict) or key not in res:
        raise ValueError(f"expected a backward record with {what} (flashviz.records.results.latest_results('bwd')), "
                         f"got {type(res).__name__}")


def _n_axis(ax, Ns) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(Ns))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v) // 1024}k" if v >= 1024 else f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(min(Ns) / 1.25, max(Ns) * 1.25)


def _mib_ticks(ax) -> None:
    """A log y axis in MiB with ticks at 1, 2, 5 × powers of ten, written without exponents."""
    def fmt(v, _):
        return f"{v:g}" if v >= 0.01 else ""
    ax.yaxis.set_major_formatter(FuncFormatter(fmt))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _suptitle(fig, text: str, size: float) -> None:
    W = fig.get_figwidth() * 72
    fig.suptitle(wrap_text(text, size, SAFE * (W - 2 * PAD)), fontsize=size, x=0.01, ha="left")
    fig._suptitle.set_in_layout(False)      # the layouts below leave its room themselves (rect)


def _draw(ax, x, y, impl, *, label=None, under=False):
    """One implementation's line: ours thick and underneath, the others thinner on top with hollow
    markers, so that lines that coincide (the same bytes) stay visible."""
    colour, lw, mk = LOOK[impl]
    if impl == "bwd_mma":
        ax.plot(x, y, "-", color=colour, lw=3.2, marker=mk, ms=7, label=label, zorder=2, alpha=0.9)
    else:
        ax.plot(x, y, "-" if impl == "sdpa_math_bwd" else "--", color=colour, lw=lw, marker=mk, ms=5,
                mfc=colour if impl == "sdpa_math_bwd" else "white", label=label, zorder=3)


def _legend_under_title(fig, handles, labels, size: float, ncol: int) -> float:
    """A figure legend right under the suptitle; returns the figure fraction of its lower edge."""
    renderer = fig.canvas.get_renderer()
    H = fig.bbox.height
    title_bottom = fig._suptitle.get_window_extent(renderer).y0 / H
    leg = fig.legend(handles, labels, loc="upper center", ncol=ncol, fontsize=size, frameon=False,
                     bbox_to_anchor=(0.5, title_bottom - 3 / (fig.get_figheight() * 72)), borderaxespad=0)
    return leg.get_window_extent(renderer).y0 / H


def plot_recompute_vs_store(res: dict, *, d: int = 64, causal: bool = False, figsize=(9.4, 7.0)):
    """The recompute-versus-store figure of the module docstring; returns the Figure."""
    _check(res, "bench", "'bench' rows")
    peaks = peak_rows(res)
    if not peaks:
        raise ValueError(f"{res.get('source_file', 'the record')} holds no peak-memory rows ('peak_bytes')")
    times = time_rows(res, d=d, causal=causal)
    if not times:
        raise ValueError(f"{res.get('source_file', 'the record')} holds no bench row at d = {d}, causal = {causal}")
    pt = style.pt
    fig = plt.figure(figsize=figsize, dpi=style.fit_dpi(figsize[0]))
    grid = fig.add_gridspec(2, 2)
    ax_keep, ax_peak = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_time = fig.add_subplot(grid[1, :])
    shapes = sorted({(r["d"], r["causal"]) for r in peaks})
    shape_text = ", ".join(f"d = {a}{', causal' if c else ''}" for a, c in shapes)
    Ns = sorted({r["N"] for r in peaks})
    seen = {}
    for ax, what, title in ((ax_keep, "saved", "kept by the forward for the backward"),
                            (ax_peak, "peak", "the backward's peak memory")):
        for impl in PEAK_IMPLS:
            pts = [(r["N"], r[f"{impl}_{what}_per_head"] / 2**20) for r in peaks if f"{impl}_{what}_per_head" in r]
            if pts:
                x, y = zip(*pts)
                _draw(ax, x, y, impl, label=short(res, impl))
                seen.setdefault(impl, ax.get_lines()[-1])
        _n_axis(ax, Ns)
        ax.set_yscale("log")
        _mib_ticks(ax)
        ax.set_title(title, fontsize=pt(9.5), loc="left")
        ax.set_ylabel("MiB per (batch, head)", fontsize=pt(9))
        ax.set_xlabel(f"sequence length N ({shape_text})", fontsize=pt(9))
        ax.tick_params(which="both", labelsize=pt(8.5))
        ax.grid(True, which="major", alpha=0.3)
    lo = min(a.get_ylim()[0] for a in (ax_keep, ax_peak))
    hi = max(a.get_ylim()[1] for a in (ax_keep, ax_peak))
    for ax in (ax_keep, ax_peak):
        ax.set_ylim(lo, hi * 3)
    for impl in PEAK_IMPLS:                     # one label a line, at its end, right of its last point
        ran = [q for q in peaks if f"{impl}_peak_per_head" in q]
        missing = [q["N"] for q in peaks if f"{impl}_note" in q and ran and q["N"] > ran[-1]["N"]]
        if missing:
            last = ran[-1]
            ax_peak.annotate(f"not run\nat {', '.join(f'{n // 1024}k' for n in missing)}",
                             (last["N"], last[f"{impl}_peak_per_head"] / 2**20),
                             xytext=(6, 0), textcoords="offset points", ha="left", va="center",
                             fontsize=pt(8), color=LOOK[impl][0], linespacing=1.1)

    for impl in IMPLS:
        pts = [(r["N"], r[f"{impl}_bwd_over_fwd"]) for r in times if f"{impl}_bwd_over_fwd" in r]
        if pts:
            x, y = zip(*pts)
            _draw(ax_time, x, y, impl, label=short(res, impl))
            seen.setdefault(impl, ax_time.get_lines()[-1])
    Nt = [r["N"] for r in times]
    _n_axis(ax_time, Nt)
    top = max(max(ln.get_ydata()) for ln in ax_time.get_lines())
    ax_time.set_ylim(0, top * 1.1)
    flop_lines = [ax_time.axhline(ratio, color=colour, lw=1.2, ls=ls, zorder=1, label=f"{ratio:g} = {text}")
                  for ratio, ls, colour, text in ((flop_ratio(True), "--", "black", "FLOP ratio, P recomputed"),
                                                  (flop_ratio(False), ":", "0.35", "FLOP ratio if P were stored"))]
    ax_time.set_title(f"backward time ÷ forward time by public call (forward = fwd+bwd − bwd), d = {d}, "
                      f"{'causal' if causal else 'no mask'}", fontsize=pt(9.5), loc="left")
    ax_time.set_ylabel("backward ÷ forward", fontsize=pt(9))
    tokens = times[0]["B"] * times[0]["N"]
    ax_time.set_xlabel(f"sequence length N (B·N = {tokens // 1024}k tokens)", fontsize=pt(9))
    ax_time.tick_params(labelsize=pt(8.5))
    ax_time.grid(True, alpha=0.3)
    ptoks = peaks[0]["B"] * peaks[0]["N"]
    _suptitle(fig, f"Recompute versus store, measured: one backward call, fp16, B·N = {ptoks // 1024}k tokens"
              f"\n{bwd_label(res)}", pt(10))
    fig.draw_without_rendering()        # lays out the texts; a canvas draw before ipympl's canvas is shown
                                        # sends it a broken frame (ipympl #472: a console error)
    order = [k for k in IMPLS if k in seen]
    bottom = _legend_under_title(fig, [seen[k] for k in order], [short(res, k) for k in order], pt(8), 3)
    # the FLOP ratios' legend under the lower panel, outside every axes: inside, the lines of the
    # slower backwards run through wherever it stands (at 1k they span 3 to 7)
    H = fig.get_figheight() * 72
    leg = fig.legend(handles=flop_lines, loc="lower center", ncol=2, fontsize=pt(8), frameon=False,
                     bbox_to_anchor=(0.5, PAD / H), borderaxespad=0)
    if leg.get_window_extent(fig.canvas.get_renderer()).width > SAFE * (fig.bbox.width - 2 * PAD * fig.dpi / 72):
        leg.remove()                    # too wide for one row: one above the other
        leg = fig.legend(handles=flop_lines, loc="lower center", ncol=1, fontsize=pt(8), frameon=False,
                         bbox_to_anchor=(0.5, PAD / H), borderaxespad=0)
    h = leg.get_window_extent(fig.canvas.get_renderer()).height * 72 / fig.dpi
    fig.tight_layout(rect=(0, (h + PAD + 2) / H, 1, bottom - 0.01), h_pad=1.4)
    return fig


def plot_bwd_speed(res: dict, *, figsize=(9.4, 6.8)):
    """The backward-speed figure of the module docstring; returns the Figure."""
    _check(res, "bench", "'bench' rows")
    rows = time_rows(res)
    if not rows:
        raise ValueError(f"{res.get('source_file', 'the record')} holds no bench rows")
    panels = sorted({(r["d"], r["causal"]) for r in rows})
    pt = style.pt
    ncol = 2 if len(panels) > 1 else 1
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=figsize, squeeze=False, sharex=True, sharey=True,
                             dpi=style.fit_dpi(figsize[0]))
    top = 0.0
    for ax, (d, causal) in zip(axes.flat, panels):
        sel = [r for r in rows if (r["d"], r["causal"]) == (d, causal)]
        for impl in SPEED_IMPLS:
            colour, lw, mk = LOOK[impl]
            for m, ls, fill in (("call", "-", True), ("kernel", ":", False)):
                pts = [(r["N"], r[f"{impl}_{m}_tflops"]) for r in sel if f"{impl}_{m}_tflops" in r]
                if not pts:
                    continue
                x, y = zip(*pts)
                top = max(top, max(y))
                ax.plot(x, y, ls, color=colour, lw=lw if m == "call" else 1.1, marker=mk, ms=4.5,
                        mfc=colour if fill else "white",
                        label=f"{short(res, impl)}, {'public call' if m == 'call' else 'kernel-only'}")
        _n_axis(ax, [r["N"] for r in sel])
        ax.set_title(f"d = {d}, {'causal' if causal else 'no mask'}", fontsize=pt(9.5), loc="left")
        ax.tick_params(labelsize=pt(8.5))
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for ax in axes.flat:
        ax.set_ylim(0, top * 1.08)
    for ax in axes[:, 0]:
        ax.set_ylabel("TFLOP/s", fontsize=pt(9))       # the suptitle says whose: two rows
        # of "backward TFLOP/s" would touch at the presenter's text size
    for ax in axes[-1, :]:
        ax.set_xlabel(f"sequence length N (B·N = {rows[0]['B'] * rows[0]['N'] // 1024}k tokens)", fontsize=pt(9))
    handles, labels = axes.flat[0].get_legend_handles_labels()
    # two columns: public calls left, kernel-only right, one implementation a line
    order = [*range(0, len(handles), 2), *range(1, len(handles), 2)]
    leg = fig.legend([handles[k] for k in order], [labels[k] for k in order], loc="lower center", ncol=2,
                     fontsize=pt(8), frameon=False, bbox_to_anchor=(0.5, PAD / (figsize[1] * 72)), borderaxespad=0)
    teach = max((r["N"] for r in rows if "bwd_teaching_call_ms" in r), default=0)
    teach = f" (teaching kernel: fp32, up to N = {teach // 1024}k)" if teach else ""
    _suptitle(fig, f"The backward on the GPU: TFLOP/s (backward FLOPs = {flop_ratio():g} × the forward's matmul FLOPs; "
              f"causal: the visible half), fp16{teach}\n"
              f"{bwd_label(res)}\nsolid, filled: public call (CUDA events, median); dotted, hollow: kernel-only "
              "(the profiler's GPU time per call, median)", pt(9.5))
    fig.draw_without_rendering()        # lays out the texts; a canvas draw before ipympl's canvas is shown
                                        # sends it a broken frame (ipympl #472: a console error)
    renderer = fig.canvas.get_renderer()
    h = leg.get_window_extent(renderer).height * 72 / fig.dpi
    top = fig._suptitle.get_window_extent(renderer).y0 / fig.bbox.height - 0.01
    fig.tight_layout(rect=(0, (h + PAD + 4) / (figsize[1] * 72), 1, top))
    return fig
