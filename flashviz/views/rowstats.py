"""Per-row online-softmax state of the current query block: running max m, running
sum l, and the rescale factor exp(m_old − m_new) when it fires."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from ..replay import sub
from . import style
from .text import presenter


def _finite_range(arrays, default=(0.0, 1.0)):
    vals = [a[np.isfinite(a)] for a in arrays if a is not None]
    vals = [v for v in vals if v.size]
    if not vals:
        return default
    lo, hi = float(min(v.min() for v in vals)), float(max(v.max() for v in vals))
    pad = 0.08 * max(hi - lo, 0.5)
    return lo - pad, hi + pad


class RowStatsPanel:
    """Three stacked axes (m, l, rescale) over the rows of the current block."""

    def __init__(self, ax_m, ax_l, ax_r, replay):
        tr = replay.trace
        self.axes = (ax_m, ax_l, ax_r)
        self.ax_r = ax_r
        self.Br = min(tr.Br, tr.Nq)
        self.applied = tr.rescale        # False: a "break it" run, the factor is computed but not applied
        x = np.arange(self.Br)
        nan = np.full(self.Br, np.nan)
        (self.m_old,) = ax_m.plot(x, nan, "o", mfc="none", mec="0.5", ms=3)
        (self.m,) = ax_m.plot(x, nan, "o-", color=style.TILED, ms=3, lw=1)
        (self.l,) = ax_l.plot(x, nan, "o-", color="#9467bd", ms=3, lw=1)
        lw = max(1.0, 140.0 / self.Br)  # bar-like stems, one LineCollection (cheap to redraw)
        self.bars = ax_r.vlines(x, 0, np.zeros(self.Br), colors=style.CURRENT, linewidth=lw)
        # ranges over the whole run, so the axes stay still while the run plays
        ev = tr.events
        ax_m.set_ylim(*_finite_range([e.m for e in ev] + [e.m_old for e in ev]))
        ax_l.set_ylim(0, _finite_range([e.l for e in ev], (0.0, 1.0))[1])
        ax_r.set_ylim(0, 1.12)
        for ax in self.axes:
            ax.set_xlim(-0.5, self.Br - 0.5)
            ax.tick_params(labelsize=style.pt(7))
            ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
            ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        # larger texts (presenter mode): titles that would run over the neighbouring panels wrap
        self.big = big = presenter()
        ax_m.set_title("running max m" + ("\n" if big else "  ") + "(● after this block, ○ before)",
                       fontsize=style.pt(9))
        ax_l.set_title("running sum l", fontsize=style.pt(9))
        self.fired = ax_r.set_title("rescale factor exp(m_old − m_new)", fontsize=style.pt(9))
        ax_r.set_xlabel("row within the query block", fontsize=style.pt(8))
        ax_m.tick_params(labelbottom=False)
        ax_l.tick_params(labelbottom=False)

    def _pad(self, a):
        out = np.full(self.Br, np.nan)
        if a is not None:
            n = min(len(a), self.Br)
            out[:n] = np.where(np.isfinite(a[:n]), a[:n], np.nan)
        return out

    def update(self, s):
        """Draw m, m_old, l and the rescale factors of frame state ``s``."""
        self.m.set_ydata(self._pad(s.m))
        self.m_old.set_ydata(self._pad(s.m_old))
        self.l.set_ydata(self._pad(s.l))
        r = np.nan_to_num(self._pad(s.rescale))
        self.bars.set_segments([[(x, 0), (x, h)] for x, h in enumerate(r)])
        fired_colour = style.CURRENT if self.applied else style.BAD
        self.bars.set_color([fired_colour if h < 1 else "0.8" for h in r])  # orange: the factor fired
        where = f" after K{sub(s.rescale_j)}" if s.rescale_j >= 0 else ""
        sep = "\n" if self.big else " "       # presenter mode: the longer one-line texts wrap
        if s.rescale is None:
            text = "rescale factor exp(m_old − m_new)"
        elif not np.isfinite(s.m_old).any():
            text = f"rescale{where}:{sep}first key block, m was −inf"
        else:
            fired = (s.rescale < 1) & np.isfinite(s.m_old)
            if not fired.any():
                text = f"rescale{where}:{sep}max did not grow, factor 1"
            else:
                smallest = float(np.min(s.m_old[fired] - s.m[fired]))   # log of the smallest factor
                power = f"${style.exp_math(smallest)}$" if smallest < -5 else ""
                n = f"{int(fired.sum())}/{len(fired)} rows"
                # two short lines: one long line runs over the neighbouring panels' labels
                if self.applied:
                    text = f"rescale{where}: fired on {n}" + (f"\nsmallest factor {power}" if power else "")
                else:
                    text = f"rescale OFF{where}: NOT applied\n{n} needed it" + (f", smallest {power}" if power else "")
        self.fired.set_text(text)
