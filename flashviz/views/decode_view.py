"""Decode attention, replayed: ``DecodeFigure``, the picture of the state of frame k that
``DecodeReplay`` (flashviz.replay.decode) reads from a ``decode_attention(..., record=True)`` run.

At decode one query row per head (a few, for speculative decoding) meets a KV cache of Nk keys:
the arithmetic is about one multiply-add per byte of K and V, so the HBM bandwidth sets the time,
and FlashAttention-2's one block per (sequence, KV head) leaves most SMs idle unless the keys are
split (Flash-Decoding) and the partial results merged. The figure:

* top left — the KV cache as a pool of pages (vLLM's paged cache; the block table maps each
  sequence's pages to pool pages, shuffled here), each page in the colour of the split that
  reads it, pale until its K and V have been read;
* top middle — the model GPU's SMs (132, an H200's): which (sequence, KV head, split) block runs
  where, in its split's colour, filling as it streams its key blocks (a model of the schedule:
  block id → SM id mod 132, see flashviz.replay.decode; not a measurement);
* top right — the watched row's partials (sequence 0, query head 0, the newest query row): each
  split's m_s, l_s and O_s as it writes them;
* bottom right — the merge, split by split: the merged O so far against the exact output
  (``reference.attention``) and, in "break it" mode, the merge without rescaling; the error of
  the merge after each split;
* bottom left — meters: HBM bytes so far by tensor (the run's counts, = ``iomodel.decode_io``)
  with the least time the bandwidth allows (``records.results.hbm_bandwidth``: the H200's copy bandwidth from
  the committed record, else its data-sheet figure), and the SMs busy now and over the run.

Text sizes go through ``style.pt``; the layout is computed in points from them, so the presenter
scale (1.4) gets the same picture with larger texts (and a few shorter wordings). Frames are
blitted in two layers (``views.blit.Blitter``): the images (slow) under the rest (fast).
"""

from __future__ import annotations

from matplotlib.gridspec import GridSpec

from ..records.results import hbm_bandwidth
from ..replay.decode import DecodeReplay, DecodeState  # noqa: F401 (DecodeReplay re-exported)
from . import style
from .backward_panels import robust_max
from .blit import BlittedView, Blitter
from .decode_panels import DecodeMeters, MergePanel, PagesPanel, PartialsPanel, SMPanel, split_colours
from .text import drawn_width, fit_lines, font_height, line_height, presenter, text_width, tick_row


class DecodeFigure(BlittedView):
    """The decode explainer's figure on ``fig`` (cleared first) for one decode run.

    replay: a DecodeReplay (the run and the dense reference); caption: lines under the step
    line (inputs, configuration, the check); broken: also show the merge without rescaling.
    Public: ``n_frames``, ``draw_frame(k)`` → DecodeState, ``render(k)``, ``enable_blitting()``,
    ``animated_artists()`` ((slow, fast)), ``replay``, ``fig``, ``bandwidth`` ((bytes/s, label,
    source)), the panels ``pages``, ``sms``, ``partials``, ``merge``, ``meters``.
    """

    def __init__(self, fig, replay: DecodeReplay, *, caption: str = "", broken: bool = False):
        fig.clear()
        self.fig, self.replay, self.broken = fig, replay, broken
        rp = replay
        self.big = big = presenter()
        self.bandwidth = bw, bw_label, bw_source = hbm_bandwidth()
        W, H = fig.get_figwidth() * 72, fig.get_figheight() * 72
        pt = style.pt
        # --- the header: step line (one line; two in presenter mode), caption --------------
        self._step_font = {"fontsize": pt(10), "weight": "bold"}
        self._where_font = {"fontsize": pt(9)}
        cap_font = {"fontsize": pt(8), "linespacing": 1.3}
        widest_where = max(drawn_width(fig, self._where_text(k), **self._where_font) / fig.dpi * 72
                           for k in {rp.run_frames - 1, rp.n_frames - 2, rp.n_frames - 1} if k >= 0)
        self._step_room = (0.985 - 0.012) * W - widest_where - 12        # points
        step_lines = 2 if big else 1
        caption = fit_lines(fig, caption, 0.975 * fig.bbox.width, **cap_font) if big else style.sci_math(caption)
        n_cap = caption.count("\n") + 1
        y = 5 + line_height(pt(10), step_lines) + 3
        cap_y = y
        y += font_height(pt(8), n_cap, 1.3) + 7
        head_h = y
        # --- row A: pages | SMs | partials (m_s, l_s, O_s); below: the merge (right), meters (left)
        title = line_height(pt(8.5)) + 5
        tick = tick_row(7)
        a_top = y + title
        below_right = tick + line_height(pt(7.5)) + 4             # tick labels, x label (m_s, l_s, O_s)
        rows = 3 if broken else 2
        cmp_h = rows * 1.6 * pt(7)
        body = H - a_top - below_right - (title + cmp_h + tick + line_height(pt(7.5)) + 8 + title + tick
                                          + line_height(pt(7)) + 4)
        a_bottom = a_top + 0.6 * body
        b0 = a_bottom + below_right

        def gs(x0, x1, top, bottom):
            return GridSpec(1, 1, figure=fig, left=x0, right=x1, top=1 - top / H, bottom=1 - bottom / H)[0]

        colours = split_colours(rp.S)
        xr = 0.605 + (line_height(pt(7)) + 0.62 * 3 * pt(7) + 8) / W     # "split s" and its tick labels
        # the left column: pages and SMs above their notes and the meters; the bandwidth's source last
        note_h = line_height(pt(7), 2, 1.25) + 6
        legend_rows = 2 if big else 1
        foot = line_height(pt(7)) + 4
        bar_h = 3.6 * pt(7.5)
        meters_h = title + bar_h + tick + line_height(pt(7), legend_rows) + 8 + title + bar_h + tick
        left_bottom = H - foot - meters_h - note_h
        self.ax_pages = fig.add_subplot(gs(0.012, 0.30, a_top, left_bottom))
        self.ax_sms = fig.add_subplot(gs(0.325, 0.575, a_top, left_bottom))
        hbm_top = left_bottom + note_h + title
        hbm_bot = hbm_top + bar_h
        sm_top = hbm_bot + tick + line_height(pt(7), legend_rows) + 8 + title
        self._legend_dy = tick + 2
        xm = 0.012 + (0.62 * pt(7.5) * len("whole run") + 8) / W
        ax_hbm = fig.add_subplot(gs(xm, 0.575, hbm_top, hbm_bot))
        ax_sm = fig.add_subplot(gs(xm, 0.575, sm_top, sm_top + bar_h))
        wm = (0.985 - xr) * 0.17
        ax_m = fig.add_subplot(gs(xr, xr + wm, a_top, a_bottom))
        ax_l = fig.add_subplot(gs(xr + wm + 0.012, xr + 2 * wm + 0.012, a_top, a_bottom))
        ax_O = fig.add_subplot(gs(xr + 2 * wm + 0.026, 0.985, a_top, a_bottom))
        # the merge (right): the rows of O, then the error after each split
        cmp_top = b0 + title
        cmp_lab = 0.6 * pt(7) * len("merged so far") + 10
        ax_cmp = fig.add_subplot(gs(0.605 + cmp_lab / W, 0.985, cmp_top, cmp_top + cmp_h))
        err_top = cmp_top + cmp_h + tick + line_height(pt(7.5)) + 8 + title
        err_lab = 0.6 * pt(7) * 6 + 10
        ax_err = fig.add_subplot(gs(0.605 + err_lab / W, 0.985, err_top, H - tick - line_height(pt(7)) - 4))
        # --- the panels ----------------------------------------------------------------------
        vmax = robust_max([rp.O_parts], 99.5)
        vmax_row = robust_max([rp.O_ref_row[None], rp.final_row[None]] + ([rp.O_broken_row[None]] if broken else []))
        self.pages = PagesPanel(self.ax_pages, rp, colours)
        self.sms = SMPanel(self.ax_sms, rp, colours)
        self.partials = PartialsPanel(ax_m, ax_l, ax_O, rp, colours, vmax)
        self.merge = MergePanel(ax_cmp, ax_err, rp, vmax_row, broken, below=tick, x0=0.605)
        self.meters = DecodeMeters(ax_hbm, ax_sm, rp, bw, self._legend_dy)
        self._titles(fig, W, H, a_top, (hbm_top, cmp_top), sm_top, err_top, bw_label, bw_source)
        # --- the header (in an axes: savefig draws an axes' animated artists) ------------------
        self.head_y = head_y = 1 - head_h / H
        head = fig.add_axes((0, head_y, 1, 1 - head_y))
        head.set_axis_off()
        top = 1 - 5 / head_h
        self.step = head.text(0.012, top, "", **self._step_font, va="top", transform=head.transAxes,
                              linespacing=1.2)
        self.where = head.text(0.985, top, "", **self._where_font, va="top", ha="right", transform=head.transAxes)
        self.caption = fig.text(0.012, 1 - cap_y / H, caption, **cap_font, va="top", color="0.25")
        self._fit_cache = {}
        self.k = None
        self.blitter = None

    def _titles(self, fig, W, H, a_top, b_tops, sm_top, err_top, bw_label, bw_source):
        """The panels' titles and notes, in the shorter wordings where presenter texts would not fit."""
        rp, big, pt = self.replay, self.big, style.pt
        tfont = {"fontsize": pt(8.5), "va": "bottom"}
        ps = rp.page_size
        y = 1 - (a_top - 4) / H
        fig.text(0.012, y, f"KV cache: {rp.num_pages:,} pages of {ps} token{'s' * (ps > 1)}" if rp.paged else
                 f"KV cache: contiguous, in {rp.num_pages:,} blocks of {ps} keys", **tfont)
        fig.text(0.325, y, f"{rp.num_sms} SMs" + (" (model schedule)" if big else " (a model, not measured)"),
                 **tfont)
        if rp.S > 1:
            fig.text(0.605, y, "partials of the watched row" if big else
                     "each split's partial: the watched row (seq 0, head 0, row Nq−1)", **tfont)
        else:
            fig.text(0.605, y, "one split: the output" if big else
                     "one split, no merge: the watched row (seq 0, head 0, row Nq−1)", **tfont)
        note = dict(fontsize=pt(7), va="top", color="0.3", transform=self.ax_pages.transAxes, linespacing=1.25)
        room = self.ax_pages.get_position().width * W - 4                # points
        key = "colour: split; pale: not yet read" if big else "colour: the split that reads it; pale: not yet read"
        table = [str(int(p)) for p in rp.block_table[0][:13]]
        n = min(len(table), 12)
        lead = ("block table, seq 0: " if big else "block table of sequence 0: ") if rp.paged else \
            ("blocks, seq 0: " if big else "blocks of sequence 0: ")
        while n > 1 and text_width(lead + ", ".join(table[:n]) + ", …", pt(7)) > room:
            n -= 1
        bt = ", ".join(table[:n]) + (", …" if n < rp.block_table.shape[1] else "")
        self.ax_pages.text(0, -0.02, f"{key}\n{lead}{bt}", **note)
        note["transform"] = self.ax_sms.transAxes
        self.ax_sms.text(0, -0.02, f"block (b, g, s) → SM id mod {rp.num_sms}\n"
                                   + "id = (b·H_kv + g)·S + s" + ("" if big else "; colour: split s"),
                         **note)
        self.sms.note.set_text("merging the partials:\na second, small kernel" if rp.S > 1 else "")
        ax_m, ax_l, ax_O = self.partials.axes
        ax_m.set_xlabel("$m_s$ •  lse$_s$ ○", fontsize=pt(7.5), labelpad=1)
        ax_l.set_xlabel("$l_s$", fontsize=pt(7.5), labelpad=1)
        ax_O.set_xlabel("$O_s$ (feature)", fontsize=pt(7.5), labelpad=1)
        yb, yc = (1 - (t - 4) / H for t in b_tops)
        unit = self.meters.unit
        fig.text(0.012, yb, (f"HBM, {unit}; time ≥ bytes / {bw_label}*" if big else
                             f"HBM bytes read + written ({unit}); time ≥ bytes / {bw_label}*"), **tfont)
        fig.text(0.012, 1 - (sm_top - 4) / H, "SMs busy" if big else f"SMs busy (of {rp.num_sms})", **tfont)
        what = "merged O" if rp.S > 1 else "O"
        self.ax_cmp_title = fig.text(0.605, yc, f"{what} vs exact (fv.attention)" if big else
                                     f"the watched row's {what}{' so far' * (rp.S > 1)} vs exact (fv.attention)",
                                     **tfont)
        fig.text(0.605, 1 - (err_top - 4) / H, "max |O − O_exact|" if big else
                 ("max |merged O − exact O| after each split" if rp.S > 1 else "max |O − exact O|: no merge"),
                 **tfont)
        fig.text(0.012, 0.006, f"* {bw_source}", fontsize=pt(7), color="0.4", ha="left", va="bottom")

    def _fits(self, text: str) -> bool:
        """Whether a step sentence fits its room (in presenter mode: each of its two lines)."""
        if text not in self._fit_cache:
            lines = text.split(": ", 1) if self.big else [text]
            width = [drawn_width(self.fig, ln, **self._step_font) / self.fig.dpi * 72 for ln in lines]
            self._fit_cache[text] = max(width) <= self._step_room
        return self._fit_cache[text]

    # --- frames -------------------------------------------------------------------------------
    @property
    def n_frames(self) -> int:
        return self.replay.n_frames

    def _where_text(self, k: int) -> str:
        rp = self.replay
        if k < rp.run_frames:
            return f"step {k + 1}/{rp.n_frames} · key block {k + 1}/{rp.run_frames}"
        if k < rp.run_frames + rp.S:
            return f"step {k + 1}/{rp.n_frames} · merge {k - rp.run_frames + 1}/{rp.S}"
        return f"step {k + 1}/{rp.n_frames} · write O"

    def animated_artists(self):
        """(slow, fast): the images (pages, partial outputs, the merged row) with what a full draw
        puts over them (the page borders, the image axes' spines), then everything else that moves,
        each axes' artists in their drawing order and its spines over them."""
        p, m, mt, sm = self.partials, self.merge, self.meters, self.sms
        ax_m, ax_l, ax_O = p.axes

        def spines(ax):
            return [sp for sp in ax.spines.values() if sp.get_visible()]

        slow = [self.pages.image, *self.pages.lines, p.image, *spines(ax_O), m.image, *spines(m.image.axes)]
        fast = [sm.bg, sm.fill, sm.note, p.m_line, p.m_dots, p.lse_dots, *spines(ax_m), p.l_bars, *spines(ax_l),
                *p.marks, m.numbers, m.err_line, m.bad_line, *mt.bars.values(), mt.label, *spines(mt.axes[0]),
                mt.sm_bar, mt.sm_label, *spines(mt.axes[1]), self.step, self.where]
        return slow, fast

    def make_blitter(self):
        return Blitter(self.fig, *self.animated_artists())

    def blit_key(self, s: DecodeState):
        """The slow layer's key: changes exactly when an image's content changes."""
        return (min(s.k, self.replay.run_frames), int(s.partial_done.sum()), s.merged)

    def draw_frame(self, k: int) -> DecodeState:
        """Update all artists to frame k (does not render; the caller draws the canvas)."""
        s = self.replay.state(k)
        self.pages.update(s)
        self.sms.update(s)
        self.partials.update(s)
        self.merge.update(s)
        self.meters.update(s)
        text = s.text if self._fits(s.text) else s.short
        if self.big:
            text = text.replace(": ", ":\n", 1)
        self.step.set_text(text)
        self.where.set_text(self._where_text(k))
        self.k = k
        return s
