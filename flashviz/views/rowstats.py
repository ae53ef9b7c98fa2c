"""Per-row online-softmax state of the current query block: running max m, running
sum l, and the rescale factor exp(m_old − m_new) when it fires."""

from __future__ import annotations

import numpy as np

from . import style


class RowStatsPanel:
    """Three stacked axes (m, l, rescale) over the rows of the current block."""

    def __init__(self, ax_m, ax_l, ax_r, replay):
        tr = replay.trace
        self.axes = (ax_m, ax_l, ax_r)
        self.Br = tr.Br
        x = np.arange(tr.Br)
        nan = np.full(tr.Br, np.nan)
        (self.m_old,) = ax_m.plot(x, nan, "o", mfc="none", mec="0.5", ms=3, label="m before")
        (self.m,) = ax_m.plot(x, nan, "o-", color=style.TILED, ms=3, lw=1, label="m after")
        (self.l,) = ax_l.plot(x, nan, "o-", color="#9467bd", ms=3, lw=1)
        lw = max(1.0, 160.0 / tr.Br)  # bar-like stems, one LineCollection (cheap to redraw)
        self.bars = ax_r.vlines(x, 0, np.zeros(tr.Br), colors=style.CURRENT, linewidth=lw)
        self.fired = ax_r.text(0.02, 0.92, "", transform=ax_r.transAxes, va="top", fontsize=8)
        lo, hi = replay.S_range
        pad = 0.05 * max(hi - lo, 1e-9)
        ax_m.set_ylim(lo - pad, hi + pad)
        ls = [e.l for e in tr.events if e.l is not None]
        l_max = max(float(np.max(a)) for a in ls) if ls else 1.0
        ax_l.set_ylim(0, 1.05 * max(l_max, 1e-9))
        ax_r.set_ylim(0, 1.1)
        for ax in self.axes:
            ax.set_xlim(-0.5, tr.Br - 0.5)
            ax.tick_params(labelsize=7)
        ax_m.set_title("running max m  (● after this block, ○ before)", fontsize=9)
        ax_l.set_title("running sum l", fontsize=9)
        ax_r.set_title("rescale factor exp(m_old − m_new)", fontsize=9)
        ax_r.set_xlabel("row within the query block", fontsize=8)
        ax_m.tick_params(labelbottom=False)
        ax_l.tick_params(labelbottom=False)

    def _pad(self, a):
        out = np.full(self.Br, np.nan)
        if a is not None:
            out[: len(a)] = np.where(np.isfinite(a), a, np.nan)
        return out

    def update(self, s):
        self.m.set_ydata(self._pad(s.m))
        self.m_old.set_ydata(self._pad(s.m_old))
        self.l.set_ydata(self._pad(s.l))
        r = np.nan_to_num(self._pad(s.rescale))
        self.bars.set_segments([[(x, 0), (x, h)] for x, h in enumerate(r)])
        self.bars.set_color([style.CURRENT if h < 1 else "0.8" for h in r])  # orange: the factor fired
        if s.rescale is not None and not np.isfinite(s.m_old).any():
            self.fired.set_text("first key block: m was −inf, nothing to rescale yet")
        elif s.rescale is not None:
            fired = int(np.sum((s.rescale < 1) & np.isfinite(s.m_old)))
            self.fired.set_text(f"last update: fired on {fired} of {len(s.rescale)} rows"
                                if fired else "last update: max did not grow, no rescale")
        else:
            self.fired.set_text("")
