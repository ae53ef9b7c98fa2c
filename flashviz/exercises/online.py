"""Exercises for chapter 2, online softmax.

``check_rescale(update)``: the learner writes one step of the online softmax,
``update(m_old, l_old, x_block) -> (m_new, l_new)``; the check streams several rows through it
(a real attention row, a row whose max arrives late, scores near 800, one-element blocks) and
compares every block with flashviz.online_softmax_steps. ``check_alpha`` / ``check_l``: predict
the rescale factor and the running sum for the small row ``PREDICT_X``.

Every check shows one line, ✓ or ✗ (with the first wrong block), the way every chapter's checks
do (``say``), returns it as a CheckResult, and never raises, whatever the learner's code does.
A known wrong prediction (the factor inverted, the old sum not rescaled, …) gets the hint that
names it.
"""

from __future__ import annotations

import math

import numpy as np

from ..online import online_softmax_steps
from . import CheckResult, close_number, direction, guarded, never_raises, right, say, wrong

PREDICT_X = np.array([1.0, 3.0, 2.0, 5.0, 0.0, 4.0])
PREDICT_BLOCK = 2


def _rows():
    """(name, x, block) streamed by check_rescale: easy first, then the traps."""
    rng = np.random.default_rng(2)
    rows = [("small row", np.array([0.5, 2.0, 1.0, 3.5, 3.0, 1.5]), 2),
            ("random row", 2 * rng.standard_normal(10), 3),
            ("max in the last block", np.array([0.5, 1.0, 0.0, 2.0, 1.5, 3.0, 2.5, 9.0]), 2)]
    try:
        from ..data import load_real_qkv

        Q, K, _, _ = load_real_qkv(N=48)
        rows.append(("real attention row 29", Q[29] @ K.T / math.sqrt(Q.shape[1]), 16))
    except Exception:  # the data file is missing (a stripped install): the other rows still check
        pass
    rows += [("scores near 800", np.array([795.0, 796.5, 794.0, 798.0, 797.0, 800.0, 799.0]), 3),
             ("one element per block", np.array([-1.0, 2.0, 0.5, 4.0, 3.0]), 1)]
    return rows


def _as_pair(out):
    """(m, l) as floats from what the learner returned, or a reason it is not a pair of numbers."""
    try:
        m, l = out
        return float(m), float(l), None
    except Exception:
        return None, None, f"update must return two numbers (m_new, l_new), got {out!r:.60}"


@never_raises(say)
def check_rescale(update) -> CheckResult:
    """Stream test rows through the learner's ``update(m_old, l_old, x_block) -> (m_new, l_new)``
    (starting from m = -inf, l = 0) and compare each block with flashviz. Shows one line."""
    return say(_rescale_result(update))


def _rescale_result(update) -> CheckResult:
    if not callable(update):
        return wrong(f"pass your function itself, e.g. check_rescale(update); got {update!r:.60}")
    blocks, rows = 0, _rows()
    for name, x, block in rows:
        steps = online_softmax_steps(x, block=block)
        m, l = -math.inf, 0.0
        for s in steps:
            xb = np.array(x[s.c0:s.c1], dtype=np.float64)
            out, err = guarded(update, m, l, xb, what=f"update on the {name}, block j = {s.j}")
            if err is not None:
                return err
            m_new, l_new, bad = _as_pair(out)
            if bad:
                return wrong(bad)
            where = f"{name} (block = {block}), block j = {s.j} (elements {s.c0}…{s.c1 - 1})"
            if not math.isclose(m_new, s.m, rel_tol=1e-9, abs_tol=1e-12):
                side = "too high" if m_new > s.m else "too low"
                return wrong(f"{where}: m_new = {m_new:.6g} is {side}. hint: the running max is the larger of "
                             "the old max and this block's max, max(m_old, max(x_block))")
            if not math.isclose(l_new, s.l, rel_tol=1e-7, abs_tol=1e-12):
                off = direction(l_new, s.l) if math.isfinite(l_new) else "not finite"
                return wrong(f"{where}: l_new = {l_new:.6g} is {off}. {_hint(m, l, xb, s, l_new)}")
            m, l = s.m, s.l                            # continue from the right state
            blocks += 1
    return right(f"your update matches flashviz on {len(rows)} rows, {blocks} blocks "
                 "(including a late max, scores near 800 and one-element blocks)")


def _hint(m_old, l_old, xb, s, l_new) -> str:
    """Name the likely mistake from the learner's wrong l."""
    if not math.isfinite(l_new):
        return "Yours overflowed: subtract the running max before exp, exp(x_block − m_new)."
    no_rescale = l_old + float(np.exp(xb - s.m).sum())
    if math.isclose(l_new, no_rescale, rel_tol=1e-7):
        return ("That is l_old + Σ exp(x_block − m_new): the old sum was taken against the old max, "
                "so rescale it by exp(m_old − m_new) first.")
    with np.errstate(over="ignore"):
        unshifted = l_old + float(np.exp(xb).sum())
    if math.isclose(l_new, unshifted, rel_tol=1e-7) or math.isclose(l_new, math.exp(min(s.m, 700)) * s.l, rel_tol=1e-7):
        return "That is Σ exp(x) without the max subtracted: use exp(x_block − m_new) (exp(800) = inf)."
    if math.isclose(l_new, float(np.exp(xb - s.m).sum()), rel_tol=1e-7):
        return "That is only this block's sum: add the (rescaled) old sum l_old."
    return "Check l_new = exp(m_old − m_new)·l_old + Σ exp(x_block − m_new)."


def _predict_steps():
    return online_softmax_steps(PREDICT_X, block=PREDICT_BLOCK)


def _predict_mistakes():
    """(alpha, l, [(wrong alpha, hint)], [(wrong l, hint)]) at block j = 1 of PREDICT_X: the
    answers as flashviz.online_softmax_steps computes them, the mistakes a learner plausibly makes
    worked out from the row (m0, l0 after block 0)."""
    x, B = PREDICT_X, PREDICT_BLOCK
    b0, b1 = x[:B], x[B:2 * B]
    m0 = float(b0.max())
    l0 = float(np.exp(b0 - m0).sum())
    m1 = max(m0, float(b1.max()))
    alpha = math.exp(m0 - m1)
    s1 = float(np.exp(b1 - m1).sum())
    alphas = [(1 / alpha, "that is exp(m_new − m_old): the factor shrinks the old sum, exp(m_old − m_new) ≤ 1"),
              (m0 - m1, "that is m_old − m_new itself: the factor is its exponential"),
              (m1 - m0, "the factor is exp(m_old − m_new), the exponential of the change of max"),
              (1.0, "the max changes at block j = 1, so the old sum needs rescaling: exp(m_old − m_new)")]
    ls = [(l0 + s1, "that is l_old + Σ exp(x − m_new): the old sum was taken against the old max, rescale it by "
                    "exp(m_old − m_new) first"),
          (s1, "that is block 1's sum alone: add the rescaled sum of block 0"),
          (alpha * l0, "that is block 0's rescaled sum alone: add Σ exp(x − m_new) over block 1"),
          (float(np.exp(x[:2 * B]).sum()), "that is Σ exp(x) without the max subtracted: use exp(x − m_new)"),
          (l0 / alpha + s1, "the rescale factor is exp(m_old − m_new) (≤ 1), not its inverse"),
          (l0 + float(np.exp(b1 - m0).sum()), "take both blocks against the new max m_new, not the old one")]
    step = _predict_steps()[1]                     # what flashviz computes: the answers
    return step.rescale, step.l, alphas, ls


@never_raises(say)
def check_alpha(answer) -> CheckResult:
    """Your prediction of the rescale factor exp(m_old − m_new) at block j = 1 of PREDICT_X (blocks
    of 2). Within 2 % (or less: no known mistake passes)."""
    alpha, _, mistakes, _ = _predict_mistakes()
    return say(close_number(answer, alpha, rel=0.02, what="the rescale factor at block j = 1", mistakes=mistakes,
                            hint="it is exp(m_old − m_new): the max before block j = 1 against the max after it"))


@never_raises(say)
def check_l(answer) -> CheckResult:
    """Your prediction of the running sum l after block j = 1 of PREDICT_X (blocks of 2). Within 2 %
    (or less: no known mistake passes)."""
    _, l1, _, mistakes = _predict_mistakes()
    return say(close_number(answer, l1, rel=0.02, what="l after block j = 1", mistakes=mistakes,
                            hint="rescale block 0's sum to the new max, then add Σ exp(x − m_new) over block 1"))
