"""The output: the current O_i accumulator (shown divided by l_i, the running estimate)
and the rows of O already written to HBM."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from . import style
from .text import presenter


class OutputPanel:
    """The O_i accumulator (shown divided by its l_i) and the rows of O written to HBM."""

    def __init__(self, ax_acc, ax_O, replay):
        tr = replay.trace
        self.Br, self.dv = tr.Br, tr.dv
        fin = replay.O_full[np.isfinite(replay.O_full)]
        v = float(np.percentile(np.abs(fin), 99)) if fin.size else 1.0
        v = v if v > 0 else 1.0
        cmap = style.output_cmap()
        self._acc = np.full((tr.Br, tr.dv), np.nan)
        self.acc = ax_acc.imshow(self._acc, cmap=cmap, vmin=-v, vmax=v, interpolation="nearest", aspect="auto")
        self.O = ax_O.imshow(replay.O_full * np.nan, cmap=cmap, vmin=-v, vmax=v, interpolation="nearest",
                             aspect="auto", extent=(0, tr.dv, tr.Nq, 0))
        big = presenter()      # larger texts (presenter mode): a two-line title, fewer ticks
        ax_acc.set_title("O_i accumulator ÷ l_i" + ("\n" if big else " ") + "(on chip)", fontsize=style.pt(9))
        ax_acc.set_ylabel("row in block", fontsize=style.pt(8))
        ax_O.set_title("O: rows written to HBM", fontsize=style.pt(9))
        ax_O.set_ylabel("query index", fontsize=style.pt(8))
        ax_O.set_xlabel("feature (d)", fontsize=style.pt(8))
        for ax in (ax_acc, ax_O):
            ax.tick_params(labelsize=style.pt(7))
            ax.xaxis.set_major_locator(MaxNLocator(5 if big else 6, integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(3 if big and ax is ax_acc else 5, integer=True))

    def update(self, s):
        """Draw the accumulator and the written rows of frame state ``s``."""
        self._acc[:] = np.nan
        if s.O_acc is not None and s.O_acc_l is not None:
            n = len(s.O_acc)          # the accumulator and the l of the same step: both relative to one m
            l = s.O_acc_l
            with np.errstate(invalid="ignore", divide="ignore"):
                self._acc[:n] = np.where(l[:, None] > 0, s.O_acc / np.where(l > 0, l, 1)[:, None], np.nan)
        self.acc.set_data(self._acc)
        self.O.set_data(s.O_done)
