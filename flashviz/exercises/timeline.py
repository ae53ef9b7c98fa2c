"""Exercises of chapter 7, section 7 ("What the GPU actually does"): numbers read off the
recorded GPU timelines (``flashviz.gpu.latest_timeline``; no GPU needed).

``check_waves(answer, kernel="wgmma", causal=False, d=64, N=4096)``: how many waves the run's
Tr·H·B thread blocks make — blocks / (SMs × the most blocks one SM ran at once), as the
timeline shows them (``records.timeline_stats.waves``); within 2 %, narrowed so that no known
mistake (whole waves, the blocks per SM forgotten, slots ÷ blocks) passes.
``check_tail_share(answer, kernel="wgmma", d=128, N=4096)``: the tail's share of the causal run
in the kernel's own block order, as a fraction (``records.timeline_stats.tail_share``); within
0.01. A percentage (33 for 0.33) gets a hint.
``check_order_speedup(answer, kernel="wgmma", d=128, N=4096)``: how many times faster the
longest-first order ran than the kernel's own order, both timed kernel-only in the same run
(``notes["kernel_order_ms"]`` / ``kernel_ms`` of the longest-first record); within 2 %.

Each check prints its one line (✓ or ✗) and returns a CheckResult; none raises.
"""

from __future__ import annotations

import math

from . import (
    CheckResult,
    close_number,
    direction,
    finite_number,
    known_mistake,
    never_raises,
    right,
    safe_rel,
    say,
    wrong,
)


@never_raises(say)
def check_waves(answer, kernel: str = "wgmma", causal: bool = False, d: int = 64, N: int = 4096) -> CheckResult:
    """Is ``answer`` the waves of the recorded run (blocks / slots, a float: 3.5 is three full
    waves and a half)? Compared within 2 % (less where a known mistake is nearer)."""
    from ..records.timeline import latest_timeline
    from ..records.timeline_stats import waves

    w = waves(latest_timeline(kernel, causal=causal, d=d, N=N))
    mistakes = [(math.ceil(w.waves), "waves need not be whole: the last one may be partly full — give "
                                     "blocks ÷ slots with its decimals"),
                (math.floor(w.waves), "waves need not be whole: count the partly full last one as its fraction"),
                (w.blocks / w.sms, f"each SM runs {w.per_sm} blocks at once here: the slots are SMs × blocks per SM"),
                (w.slots / w.blocks, "that is slots over blocks: waves are blocks ÷ slots")]
    res = close_number(answer, w.waves, rel=0.02, what="waves", mistakes=mistakes, hint=(
        "count the blocks (Tr · H · B), then the slots: SMs × the blocks one SM runs at once"))
    if res.ok:
        full = int(w.waves)
        res = CheckResult(True, f"{res.message}: {w.blocks:,} blocks over {w.sms} SMs × {w.per_sm} at once = {w.slots} slots; "
                    f"{full} full wave{'s' if full != 1 else ''} and a last one {100 * (w.waves - full):.0f} % full")
    return say(res)


@never_raises(say)
def check_tail_share(answer, kernel: str = "wgmma", d: int = 128, N: int = 4096) -> CheckResult:
    """Is ``answer`` the tail's share (a fraction of the span) of the recorded causal run in the
    kernel's own order? Within 0.01 (one percentage point; less where a known mistake — the
    complement, the tail in ms — is nearer)."""
    from ..records.timeline import latest_timeline
    from ..records.timeline_stats import tail_share

    tl = latest_timeline(kernel, causal=True, d=d, N=N)
    share = tail_share(tl)[0]
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"give the share as a number, a fraction such as 0.25; got {answer!r:.60}"))
    if 1 < a <= 100:
        return say(wrong(f"{a:g} is more than the whole run: give the share as a fraction (e.g. 0.25 for 25 %)"))
    b = tl.blocks
    span_ms = (float(b["t1_ns"].max()) - float(b["t0_ns"].min())) / 1e6
    mistakes = [(1 - share, "that is the part before the tail: the tail runs from the first SM to go idle for good "
                            "to the end"),
                (share * span_ms, "that is the tail's length in ms: divide by the whole span")]
    tol = safe_rel(share, 0.01 / share, mistakes) * share if share else 0.01     # 0.01, or less: no mistake passes
    if abs(a - share) <= tol:
        return say(right(f"tail = {a:.3f} of the span (the timeline gives {share:.3f}): for that long, some SMs "
                          f"have no block left to run while the last, longest rows finish"))
    named = known_mistake(a, [(v, h, tol / abs(v)) for v, h in mistakes if v], share)
    if named:
        return say(wrong(f"tail share = {a:.4g} is {direction(a, share)}. hint: {named}"))
    return say(close_number(a, share, rel=0.0, what="tail share",
                            hint="from the first SM to go idle for good to the end, over the whole span"))


@never_raises(say)
def check_order_speedup(answer, kernel: str = "wgmma", d: int = 128, N: int = 4096) -> CheckResult:
    """Is ``answer`` own-order time / longest-first time, both kernel-only in the same recorded
    run? Within 2 %."""
    from ..records.timeline import latest_timeline

    tl = latest_timeline(kernel, causal=True, d=d, N=N, order="longest_first")
    own = tl.notes.get("kernel_order_ms")
    if not own or not tl.kernel_ms:
        return say(wrong("the recorded longest-first run has no time of the kernel's own order"))
    speed = own / tl.kernel_ms
    mistakes = [(1 / speed, "that is longest-first ÷ own order: divide the own order's time by the longest-first one"),
                (speed - 1, "give the factor (the own order's time ÷ the longest-first one), not the increase"),
                (100 * (speed - 1), "give the factor, such as 1.3, not a percentage"),
                (100 * (1 - 1 / speed), "give the factor, such as 1.3, not the percentage of time saved")]
    res = close_number(answer, speed, rel=0.02, what="speed-up", unit="x", mistakes=mistakes,
                       hint="divide the own order's kernel-only time by the longest-first one (same run)")
    if res.ok:
        res = CheckResult(True, f"{res.message}: {own:.4f} ms → {tl.kernel_ms:.4f} ms, kernel-only, the same run "
                    f"({tl.device}, {tl.date}); the same blocks, the same arithmetic, only their order changed")
    return say(res)
