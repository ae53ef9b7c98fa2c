"""Replay of the online softmax of one row (chapter 2, OnlineSoftmaxExplorer).

``OnlineRun`` streams one row x of scores in blocks with ``flashviz.online.online_softmax_steps``
(the running max m and sum l of FlashAttention's ``update_ml`` step, FlashAttention-2 Algorithm 1
line 9, on a single row) and, for each frame, gives an ``OnlineFrame``: one frame per block,
then a final "normalise" frame (the division by l of ``write_O``, Alg. 1 line 12). Next to the
exact algorithm it runs a broken variant (``BREAK_MODES``) for the "break it" lesson. No drawing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..online import naive_softmax, online_softmax_steps, safe_exp_diff

#: The "break it" variants: "none"; "no rescale" (the old sum is not multiplied by
#: exp(m_old − m) in ``update_ml``); "no max-subtraction" (naive softmax: exp(x) / Σ exp(x)).
BREAK_MODES = ("none", "no rescale", "no max-subtraction")


def softmax64(x) -> np.ndarray:
    """The reference: softmax of the 1-D scores ``x`` (any real dtype) computed in float64 with
    the max subtracted (two passes); returns a float64 array of x's length, summing to 1."""
    x = np.asarray(x, np.float64)
    e = safe_exp_diff(x, np.float64(x.max()))
    return e / e.sum()


def max_abs_error(p, ref) -> float:
    """max |p − ref| in float64 (the error of probabilities ``p``, any float dtype, against the
    float64 reference ``ref`` of the same shape); NaN when p holds a NaN or an inf."""
    d = np.abs(np.asarray(p, np.float64) - ref)
    return float("nan") if not np.isfinite(d).all() else float(d.max())


@dataclass(frozen=True)
class OnlineFrame:
    """What frame k shows. Blocks j = 0..T−1 have one frame each; frame T is the final normalise.

    c0, c1: the current block is x[c0:c1] (element indices); x[:c1] has been streamed. m_old, m,
    l, rescale: floats, as in ``OnlineSoftmaxStep`` (the ``update_ml`` step, Alg. 1 line 9:
    m = max(m_old, max x[c0:c1]), rescale = exp(m_old − m), l = rescale·l_old + Σ exp(x_block − m)),
    of the exact algorithm; applied: False when the broken variant is "no rescale" (it skips the
    factor; its running sum is l_broken). p_exact / p_broken: (c1,) arrays in the run's dtype, the
    softmax of x[:c1] by the online algorithm / by the broken variant (None when none); p_ref:
    (c1,) float64 softmax of x[:c1]. err_*: max |p − p_ref| (NaN if p has NaN/inf); sum_*: the sum
    of the weights (should be 1). l_broken: the broken variant's running sum (NaN when none).
    """

    k: int
    j: int
    final: bool
    c0: int
    c1: int
    m_old: float
    m: float
    l: float
    rescale: float
    applied: bool
    p_exact: np.ndarray
    p_broken: np.ndarray | None
    p_ref: np.ndarray
    err_exact: float
    err_broken: float
    sum_exact: float
    sum_broken: float
    l_broken: float


class OnlineRun:
    """All frames of one row streamed in blocks. x is rounded to ``dtype`` first (the scores as
    stored); m and l are kept in float64; results are rounded to ``dtype``; the reference is the
    float64 softmax of the same rounded scores, so an error is the algorithm's, not the input's.

    x: 1-D scores (N,); block: elements per block (≥ 1; T = ⌈N/block⌉ blocks); broken: one of
    BREAK_MODES; dtype: the element type (np.float32 or np.float64). Attributes: ``x`` ((N,)
    float64 holding the rounded scores), ``steps`` / ``steps_norescale`` (the T
    ``OnlineSoftmaxStep`` of flashviz.online, exact / without the rescale), ``l_naive`` ((N,)
    running Σ exp(x) in ``dtype``, inf once it overflows), ``T``, ``N``, ``n_frames`` (T + 1).
    Raises ValueError for an unknown ``broken``.
    """

    def __init__(self, x, block: int, *, broken: str = "none", dtype=np.float32):
        if broken not in BREAK_MODES:
            raise ValueError(f"broken must be one of {BREAK_MODES}, got {broken!r}")
        self.dtype = np.dtype(dtype)
        self.x = np.asarray(x, np.float64).astype(self.dtype).astype(np.float64)
        self.block, self.broken, self.N = block, broken, self.x.size
        self.steps = online_softmax_steps(self.x, block=block)
        self.steps_norescale = online_softmax_steps(self.x, block=block, rescale=False)
        self.T = len(self.steps)
        with np.errstate(over="ignore", invalid="ignore"):
            self.l_naive = np.cumsum(np.exp(self.x.astype(self.dtype)), dtype=self.dtype)
        self._cache = {}

    @property
    def n_frames(self) -> int:
        """T + 1: one frame per block, then the normalise frame."""
        return self.T + 1

    def frame(self, k: int) -> OnlineFrame:
        """The OnlineFrame of frame k (0 <= k <= T; the last one cached)."""
        if k not in self._cache:
            self._cache = {k: self._frame(k)}          # keep one: frames are cheap to recompute
        return self._cache[k]

    def _frame(self, k: int) -> OnlineFrame:
        final = k == self.T
        s = self.steps[min(k, self.T - 1)]
        c0, c1 = (0, self.N) if final else (s.c0, s.c1)
        xs, dt = self.x[:c1], self.dtype
        ref = softmax64(xs)
        e = safe_exp_diff(xs, np.float64(s.m))
        p_exact = (e / s.l).astype(dt)
        p_broken, l_broken = None, float("nan")
        if self.broken == "no rescale":
            l_broken = self.steps_norescale[min(k, self.T - 1)].l
            p_broken = (e / l_broken).astype(dt)
        elif self.broken == "no max-subtraction":
            l_broken = float(self.l_naive[c1 - 1])
            p_broken = naive_softmax(xs, dtype=dt)
        with np.errstate(invalid="ignore", over="ignore"):
            sum_b = float(np.sum(p_broken, dtype=np.float64)) if p_broken is not None else float("nan")
        applied = self.broken != "no rescale"          # the broken variant never applies the factor
        return OnlineFrame(k, min(k, self.T - 1), final, c0, c1, s.m_old, s.m, s.l, s.rescale, applied,
                           p_exact, p_broken, ref, max_abs_error(p_exact, ref),
                           max_abs_error(p_broken, ref) if p_broken is not None else float("nan"),
                           float(np.sum(p_exact, dtype=np.float64)), sum_b, l_broken)

    def weights(self, f: OnlineFrame) -> tuple[np.ndarray, np.ndarray]:
        """(now, as_computed) for frame ``f``: two (N,) float64 arrays of partial weights.

        now: exp(x − m) of the streamed elements x[:c1] with the frame's running max m (the P̃ of
        ``update_ml``, Alg. 1 line 9), 0 for elements not read yet; as_computed: each block's
        weights exp(x_block − m_then) as first computed, with the max of its own step (an older m:
        what the rescale corrects), 0 for the current block and later ones (final frame: every
        block)."""
        stale = np.zeros(self.N)
        for s in self.steps[: f.j + 1]:
            stale[s.c0:s.c1] = s.p_block              # weights as computed when the block arrived
        now = np.zeros(self.N)
        now[: f.c1] = safe_exp_diff(self.x[: f.c1], np.float64(f.m))
        if not f.final:
            stale[f.c0:] = 0
        return now, stale
