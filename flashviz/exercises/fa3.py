"""Exercises of chapter 8 (FlashAttention-3 on Hopper), checked against the recorded probe and
the kernel's own parameters (no GPU needed).

``check_step_gain(step, gain, d=128, causal=False)``: which step of the recorded "steps" probe
(``records.fa3_records.STEPS``: "producer", "pingpong", "intra") sped the kernel up the most over
the step before it, and by what factor (the step before's kernel-only time ÷ this step's,
the same run); the factor within 2 %.
``check_consumer_registers(answer, Br=128)``: the share of an SM's 65,536 registers that the
consumer warpgroups hold after ``setmaxnreg`` (a fraction); within 0.001.
``check_fa3_smem(answer, d=128)``: the bytes of shared memory of the default fa3 block for d —
Q_i, the K and V rings, the mbarriers and the 1024-byte alignment slack — exactly
(``limits.mma_smem_bytes``).
``check_overlap_gain(answer, d=128, causal=False)``: how many times larger the share of a consumer
warpgroup's softmax time under the other consumer's products is in the recorded fa3 run than in
the FlashAttention-2 (wgmma) run of the same shape (``records.timeline_stats.softmax_overlap`` of
the two recorded timelines, N = 4096); within 3 %.

Each check prints its one line (✓ or ✗) and returns a CheckResult; none raises, whatever the
answer or the question's parameters.
"""

from __future__ import annotations

from . import (
    CheckResult,
    close_number,
    direction,
    finite_number,
    fmt_answer,
    known_mistake,
    never_raises,
    right,
    say,
    wrong,
)

#: names a learner may give a step by → the step's key in records.fa3_records.STEPS
STEP_NAMES = {"producer": "producer", "tma": "producer", "f0": "producer", "pingpong": "pingpong",
              "ping-pong": "pingpong", "ping pong": "pingpong", "f1": "pingpong", "intra": "intra",
              "intra-warpgroup": "intra", "f3": "intra"}


def _gains(d: int, causal: bool) -> tuple[dict, list]:
    """{step: previous kernel_ms / its kernel_ms} and the steps' rows of the steps probe."""
    from ..records.fa3_records import latest_probe, steps_table

    rec = latest_probe("steps")
    if rec is None:
        raise LookupError("no recorded steps probe (benchmarks/results/probe-fa3-steps-*.json)")
    rows = [r for r in steps_table(rec) if (r["d"], r["causal"]) == (d, bool(causal))]
    if not rows:
        raise LookupError(f"the steps probe has no row for d = {d}, causal = {bool(causal)}")
    return {b["step"]: a["kernel_ms"] / b["kernel_ms"] for a, b in zip(rows, rows[1:])}, rows


@never_raises(say)
def check_step_gain(step, gain, d: int = 128, causal: bool = False) -> CheckResult:
    """Is ``step`` ("producer", "pingpong" or "intra") the step with the largest gain over the
    step before it at this d and mask, and ``gain`` that factor (kernel-only, the one recorded
    run)? The factor within 2 % (less where a known mistake is nearer: the public call's times,
    the gain over the FA2 kernel, the inverse); the increase, a percentage are named."""
    gains, rows = _gains(d, causal)
    if not isinstance(step, str) or step.strip().lower() not in STEP_NAMES:
        return say(wrong(f"name the step as a string: 'producer', 'pingpong' or 'intra'; got {step!r:.40}"))
    key = STEP_NAMES[step.strip().lower()]
    best = max(gains, key=gains.get)
    if key != best:
        return say(wrong(f"'{key}' is not the step with the largest gain: compare each step's kernel-only time with "
                         "the step just before it (not with the FA2 kernel)"))
    want = gains[best]
    i = [r["step"] for r in rows].index(best)
    prev, now = rows[i - 1], rows[i]
    mistakes = [(want - 1, "the step is right; give the gain as a factor (the time before ÷ the time after, "
                           "above 1 when faster), not the increase"),
                (100 * (want - 1), "the step is right; give the gain as a factor such as 1.3, not a percentage", 0.02),
                (1 / want, "the step is right; divide the time of the step before by this step's, not the other way "
                           "round (a gain above 1 is faster)"),
                (rows[0]["kernel_ms"] / now["kernel_ms"], "the step is right; compare its time with the step just "
                                                          "before it, not with the FA2 kernel"),
                *([(prev["call_ms"] / now["call_ms"], "the step is right; use the kernel-only times (kernel_ms), "
                                                      "not the public call's")]
                  if prev.get("call_ms") and now.get("call_ms") else [])]
    res = close_number(gain, want, rel=0.02, what=f"gain of '{key}'", unit="x", mistakes=mistakes,
                       hint="the step is right: divide the kernel-only time of the step before by this step's")
    if res.ok:
        others = ", ".join(f"{k} {v:.2f}x" for k, v in gains.items() if k != best)
        res = CheckResult(True, f"{res.message}: {prev['kernel_ms']:.3f} → {now['kernel_ms']:.3f} ms kernel-only, "
                                f"one run; the others: {others}. Is the gap to the next one larger than the ±5 % "
                                "that separates two runs?")
    return say(res)


@never_raises(say)
def check_consumer_registers(answer, Br: int = 128) -> CheckResult:
    """Is ``answer`` the share (a fraction) of an SM's 65,536 registers held by the Br/64
    consumer warpgroups (128 threads each) after setmaxnreg? Within 0.001."""
    from ..records.fa3_records import REGISTER_FILE, fa3_registers

    producer, consumer = fa3_registers(Br)
    n = Br // 64
    want = n * 128 * consumer / REGISTER_FILE
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"give the share as a number, a fraction such as 0.5; got {answer!r:.60}"))
    if abs(a - want) <= 1e-3:
        total = (n * consumer + producer) * 128
        return say(right(f"{a:.4g} of the register file: {n} × 128 threads × {consumer} = {n * 128 * consumer:,} "
                         f"registers; with the producer's 128 × {producer} the block holds {total:,} of "
                         f"{REGISTER_FILE:,}, so one such block fills an SM"))
    hints = [
        (consumer / (consumer + producer), "that is one consumer thread's share of one producer and one consumer "
                                          "thread; count the threads: 128 in each warpgroup"),
        (consumer * (n + 1) * 128 / REGISTER_FILE, "only the consumer warpgroups get the larger count; the producer's "
                                                   "128 threads keep the small one"),
        (n * 128 * consumer / ((n * consumer + producer) * 128), "that is their share of the block's registers; "
                                                                 "the question asks for the share of the 65,536"),
        (100 * want, "give a fraction, not a percentage"),
        (n * 128 * consumer, "that is a number of registers; divide by the register file, 65,536"),
    ]
    hint = known_mistake(a, hints, want, rel=1e-3)
    if hint:
        return say(wrong(f"you said {fmt_answer(a)} — {hint}"))
    if 1 < a <= 100:
        return say(wrong(f"{fmt_answer(a)} is more than the whole register file: give a fraction (e.g. 0.5)"))
    return say(wrong(f"{fmt_answer(a)} is {direction(a, want)}. hint: consumer warpgroups × 128 threads × their "
                     "registers per thread, over 65,536"))


@never_raises(say)
def check_fa3_smem(answer, d: int = 128) -> CheckResult:
    """Is ``answer`` the shared memory, in bytes, of the runner's fa3 block for head dimension d
    (no mask): Q_i, the K and V rings, the mbarriers (8 bytes each) and 1024 bytes of alignment
    slack? Exact."""
    from ..records.fa3_records import fa3_config

    c = fa3_config(d)
    want = c.smem_bytes
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"give a number of bytes; got {answer!r:.60}"))
    if a == want:
        return say(right(f"{want:,} B: Q_i {c.q_bytes:,} + K ring {c.ring_bytes:,} + V ring {c.ring_bytes:,} + "
                         f"mbarriers {c.barrier_bytes} + alignment {c.align_bytes:,} (limits.mma_smem_bytes agrees)"))
    one_slot = 2 * c.Bc * c.d
    hints = [
        (want - c.align_bytes, "add the 1024 bytes of slack the kernel keeps to align the tiles to 1024 bytes"),
        (want - c.barrier_bytes, "the mbarriers live in shared memory too: 8 bytes each, a full and an empty one "
                                 "for Q_i and for every slot of each ring"),
        (want - c.barrier_bytes - c.align_bytes, "add the mbarriers (8 bytes each: full and empty for Q_i and for "
                                                 "every slot) and the 1024 bytes of alignment slack"),
        (want - c.ring_bytes, "there are two rings, one for K and one for V"),
        (want - 2 * c.ring_bytes + 2 * one_slot, "each ring has more than one slot (fa3_stages(d))"),
        (want - c.q_bytes, "Q_i stays in shared memory for the whole tile: count it"),
        ((want - c.barrier_bytes - c.align_bytes) / 2 + c.barrier_bytes + c.align_bytes,
         "Q, K and V are fp16: 2 bytes an element"),
        ((want - c.barrier_bytes - c.align_bytes) * 2 + c.barrier_bytes + c.align_bytes,
         "Q, K and V are fp16: 2 bytes an element, not 4"),
        (want / 1024, "give bytes, not KiB"),
    ]
    hint = known_mistake(a, [(v, h, 0.5 / v) for v, h in hints if v > 0], want)
    if hint:
        return say(wrong(f"you said {fmt_answer(a)} B — {hint}"))
    return say(wrong(f"{fmt_answer(a)} B is {direction(a, want)}. hint: Q_i (Br × d), stages slots of Bc × d for each "
                     "of K and V, 2 bytes an element; then the mbarriers and the alignment slack"))


@never_raises(say)
def check_overlap_gain(answer, d: int = 128, causal: bool = False) -> CheckResult:
    """answer: softmax_overlap of the recorded fa3 timeline ÷ that of the recorded wgmma (FA2)
    timeline, both at d, N = 4096 and this mask. Within 3 %, narrowed so that no named mistake
    passes: the inverse, the difference of the two shares (as a fraction or in points), the fa3
    share alone, the ratio at the other mask."""
    from ..records.timeline import latest_timeline
    from ..records.timeline_stats import softmax_overlap

    def shares(c: bool):
        return (softmax_overlap(latest_timeline("fa3", causal=c, d=d, N=4096))[0],
                softmax_overlap(latest_timeline("wgmma", causal=c, d=d, N=4096))[0])

    try:
        fa3, fa2 = shares(causal)
    except (LookupError, ValueError) as exc:
        return say(wrong(f"this exercise reads the recorded fa3 and wgmma timelines at d = {d}: {exc}"))
    if not fa2:
        return say(wrong(f"the recorded FA2 run at d = {d} overlaps nothing to compare with"))
    want = fa3 / fa2
    mistakes = [(fa2 / fa3, "that is FA2 ÷ fa3; divide fa3's share by FA2's"),
                (fa3 - fa2, "that is the difference of the shares; the question asks how many times larger"),
                (100 * (fa3 - fa2), "that is the difference in percentage points; divide the shares instead"),
                (fa3, "that is fa3's share alone; divide it by FA2's")]
    try:
        other = shares(not causal)
        if other[1]:
            mistakes.append((other[0] / other[1], f"that is the ratio of the {'causal' if not causal else 'unmasked'} "
                                                  f"runs; read the {'causal' if causal else 'unmasked'} ones"))
    except (LookupError, ValueError):
        pass
    got = close_number(answer, want, rel=0.03, what="fa3's overlap ÷ FA2's", unit="x",
                       mistakes=[m for m in mistakes if abs(m[0] - want) > 0.06 * want],
                       hint="softmax_overlap(t)[0] of the fa3 timeline ÷ that of the wgmma timeline")
    if got.ok:
        got = CheckResult(True, f"{got.message}: a consumer's softmax runs under the other's products {100 * fa3:.0f} % "
                                f"of its time in fa3, {100 * fa2:.0f} % in FA2, whose warpgroups move in lock-step")
    return say(got)
