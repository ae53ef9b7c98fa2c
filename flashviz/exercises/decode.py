"""Exercises of chapter 9 (decode): the bytes a decode step reads, the split count, GQA, the merge.

``check_kv_bytes(answer, B, H_kv, Nk, d, itemsize)``: the bytes of K and V one decode step reads
(truth: ``iomodel.decode_io``'s "K" + "V" reads). Exact.
``check_split_count(answer, n_blocks, Tc)``: the split count FlashAttention's rule picks for
``n_blocks`` = B·H_kv blocks of work and Tc key blocks on 132 SMs (truth:
``decode.num_splits_heuristic``). Exact.
``check_gqa_gain(answer, G, H, Nk, d)``: how many times the arithmetic intensity of a decode step
grows when G query heads share each KV head (truth: the ratio of two ``iomodel.decode_io``
intensities). Within 1 %.
``check_decode_intensity(answer, G, Nk, d, itemsize)``: the FLOPs per byte of one decode step
(truth: ``iomodel.decode_io(...).intensity``). Within 2 %.
``check_merged_lse(answer, lse_a, lse_b)``: the log-sum-exp of two splits merged (truth:
``decode.merge_partials``). Within 1e-6 (absolute).
``check_split_speedup(answer, Nk=None)``: how many times faster the decode kernel's split pass ran
with the split count the rule chose than with one split a block, both kernel-only in the recorded
timelines (``records.timeline_stats.recorded_decode_runs``). Within 2 %.

Each check shows its one line (✓ or ✗, ``say``) and returns a CheckResult; none raises. A known
wrong answer (V forgotten, elements for bytes, H for H_kv, the factor 2 of FLOPs, the max alone,
the merge without its rescale, …) gets the hint that names it; no tolerance lets one pass.
"""

from __future__ import annotations

import math

import numpy as np

from ..decode import MAX_SPLITS, NUM_SMS, merge_partials, num_splits_heuristic
from ..iomodel import decode_io
from . import CheckResult, close_number, finite_number, never_raises, say, wrong

#: the question of exercise 1 (a Llama-3-8B-like layer: 8 KV heads of d = 128, fp16, 20,000 tokens)
KV_QUESTION = dict(B=1, H_kv=8, Nk=20000, d=128, itemsize=2)
#: the query heads of that layer (4 per KV head): reading K, V for H heads is a named mistake
KV_QUESTION_H = 32


@never_raises(say)
def check_kv_bytes(answer, B: int = 1, H_kv: int = 8, Nk: int = 20000, d: int = 128, itemsize: int = 2,
                   *, H: int = KV_QUESTION_H) -> CheckResult:
    """answer = the bytes of K and V that one decode step (Nq = 1) reads for B sequences of Nk
    cached tokens, H_kv KV heads of dimension d, ``itemsize``-byte elements: B·H_kv·Nk·d·itemsize
    each. Compared exactly with the "K" and "V" reads of ``iomodel.decode_io`` (one split, a
    contiguous cache); H query heads (default 32) name the mistake of reading K, V per query head."""
    io = decode_io(1, Nk, d, H=H, H_kv=H_kv, num_splits=1, Bc=64, itemsize=itemsize, B=B)
    expected = io.reads["K"] + io.reads["V"]
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"replace the placeholder with your prediction (a number of bytes); got {answer!r:.60}"))
    elems = expected // itemsize
    k_only = "count V too: a decode step reads every cached key and every cached value"
    if expected // 2 == elems:                  # 2-byte elements: K alone in bytes = K and V in elements
        k_only = (f"that is K alone in bytes, or K and V in elements: count V too, at {itemsize} bytes an "
                  "element")
    mistakes = [(expected / 2, k_only),
                (elems, f"those are elements: multiply by {itemsize} bytes each"),
                (elems / 2, f"count V too, and give bytes: {itemsize} bytes an element"),
                *([(expected * H // H_kv, f"K and V are read per KV head (H_kv = {H_kv}), once for the query heads "
                                          "that share it, not per query head")] if H != H_kv else []),
                *[(elems * alt, f"the cache holds {itemsize}-byte numbers, not {alt}-byte ones")
                  for alt in (1, 4, 8) if alt != itemsize],
                (expected + io.reads["Q"] + io.writes["O"] + io.writes["lse"],
                 "only K and V were asked: leave out Q read and O, lse written"),
                (expected / 2**20, "give bytes, not MiB", 5e-3), (expected / 1e6, "give bytes, not MB", 5e-3),
                (expected / 2**30, "give bytes, not GiB", 5e-3)]
    return say(close_number(a, expected, rel=0.0, what=f"bytes of K and V at Nk = {Nk:,}", unit=" B",
                            mistakes=mistakes,
                            hint="every sequence, KV head and cached token: one row of K and one of V, "
                                 "d numbers each"))


@never_raises(say)
def check_split_count(answer, n_blocks: int = 12, Tc: int = 40, *, num_sms: int = NUM_SMS) -> CheckResult:
    """answer = the split count ``num_splits_heuristic(n_blocks, Tc)`` picks for one block an SM:
    at most s_max = min(⌊num_sms / n⌋, 128, Tc) splits (one wave), whose longest split has
    ⌈Tc / s_max⌉ key blocks; the fewest splits with a longest split that short, ⌈Tc / ⌈Tc / s_max⌉⌉
    (1 split when n >= 0.8·num_sms or Tc <= 4). Exact (a whole number)."""
    expected = num_splits_heuristic(n_blocks, Tc, num_sms=num_sms)
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"replace the placeholder with a number of splits; got {answer!r:.60}"))
    one_wave = min(num_sms // n_blocks, MAX_SPLITS, Tc)
    longest = -(-Tc // max(one_wave, 1))
    mistakes = [(1, f"one split gives {n_blocks} blocks for {num_sms} SMs: most SMs idle"),
                (one_wave, f"{one_wave} splits fit one wave, but fewer give the same longest split of {longest} key "
                           "blocks, and every extra split costs a partial written and read back"),
                (-(-num_sms // n_blocks), f"{n_blocks}·s must not pass {num_sms}: the blocks past {num_sms} make a "
                                           "second wave"),
                (longest, f"{longest} is the longest split's key blocks; the answer is the number of splits"),
                (num_sms, f"the splits multiply the {n_blocks} blocks: count splits per (sequence, KV head)"),
                (num_sms * n_blocks, f"the splits multiply the {n_blocks} blocks: count splits per "
                                     "(sequence, KV head)"),
                (Tc, "one split per key block is the most there can be, not the rule's pick")]
    if not float(a).is_integer():
        return say(wrong(f"the split count = {a:g} should be a whole number"))
    return say(close_number(a, expected, rel=0.0, what=f"the split count for {n_blocks} blocks on {num_sms} SMs",
                            mistakes=[(v, why) for v, why in mistakes if v != expected],
                            hint="one wave holds ⌊SMs / blocks⌋ splits; its longest split has ⌈Tc / that⌉ key "
                                 "blocks; how few splits keep it that short?"))


@never_raises(say)
def check_gqa_gain(answer, G: int = 16, H: int = 64, Nk: int = 8192, d: int = 128, *, itemsize: int = 2) -> CheckResult:
    """answer = intensity with G query heads per KV head ÷ intensity with G = 1 (MHA), one decode
    step (Nq = 1), H query heads, Nk keys, head dimension d. Truth: the ratio of two
    ``iomodel.decode_io`` intensities (about G: the FLOPs stay, K and V shrink G times). Within 1 %."""
    H_kv = H // G
    mha = decode_io(1, Nk, d, H=H, H_kv=H, num_splits=1, Bc=64, itemsize=itemsize).intensity
    gqa = decode_io(1, Nk, d, H=H, H_kv=H_kv, num_splits=1, Bc=64, itemsize=itemsize).intensity
    expected = gqa / mha
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"replace the placeholder with a ratio (a number); got {answer!r:.60}"))
    mistakes = [(1.0, "the FLOPs stay the same, but K and V are read once per group, not once per query head"),
                (1 / G, "sharing K, V raises the intensity: the same FLOPs over fewer bytes"),
                (G * G, "only the bytes change (G times fewer); the FLOPs stay the same"),
                *([(H_kv, "that is H_kv, the number of KV heads; the gain is the heads that share one")]
                  if H_kv != G else []),
                *([(H, "that is H, the query heads; the gain is the heads that share one KV head")] if H != G else [])]
    return say(close_number(a, expected, rel=0.01, what="the intensity gain",
                            mistakes=mistakes,
                            hint="write the FLOPs and the bytes of K and V for G = 1 and for G, and divide"))


@never_raises(say)
def check_decode_intensity(answer, G: int = 6, Nk: int = 8192, d: int = 128, *, itemsize: int = 2,
                           H: int = 48) -> CheckResult:
    """answer = matmul FLOPs per byte of HBM traffic of one decode step (Nq = 1) with G query heads
    per KV head (H query heads), Nk keys, head dimension d, ``itemsize``-byte elements. Truth:
    ``iomodel.decode_io(...).intensity`` (FLOPs 2·G·Nk·(d + d) per KV head, bytes mostly K and V:
    about 2·G / itemsize). Within 2 % (or less: no known mistake passes)."""
    io = decode_io(1, Nk, d, H=H, H_kv=H // G, num_splits=1, Bc=64, itemsize=itemsize)
    expected = io.intensity
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"replace the placeholder with your intensity (FLOPs per byte); got {answer!r:.60}"))
    mistakes = [(expected / 2, "a multiply-add is 2 FLOPs, and both QKᵀ and PV count: 2·d + 2·d FLOPs a key "
                               "a query row"),
                (expected * itemsize, f"divide by bytes, not elements: {itemsize} bytes each"),
                (expected / G, f"the {G} query heads of a group share one read of K and V: G times the FLOPs "
                               "per byte"),
                (1 / expected, "that is bytes per FLOP: the intensity is FLOPs per byte")]
    return say(close_number(a, expected, rel=0.02, what=f"FLOPs per byte of a decode step at G = {G}",
                            mistakes=mistakes,
                            hint="per KV head and cached token: the FLOPs of the G query rows against one "
                                 "row of K and one of V, over the bytes of those two rows"))


@never_raises(say)
def check_merged_lse(answer, lse_a: float = 3.1, lse_b: float = 4.6) -> CheckResult:
    """answer = the log-sum-exp of all keys of two splits whose row log-sum-exps are lse_a (the
    first split) and lse_b: log(e^lse_a + e^lse_b), as ``decode.merge_partials`` computes it.
    Within 1e-6 (or less: no known mistake passes)."""
    a_, b_ = float(lse_a), float(lse_b)
    parts, outs = np.array([a_, b_]), np.zeros((2, 1))
    _, lse = merge_partials(parts, outs)
    _, lse_broken = merge_partials(parts, outs, rescale=False)
    expected = float(lse)
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"replace the placeholder with your lse (a number); got {answer!r:.60}"))
    mistakes = [(max(a_, b_), "the max alone forgets the other split's keys: add its weight exp(lse − max)"),
                (a_ + b_, "lse values are logs: add the exponentials, then take the log"),
                ((a_ + b_) / 2, "not the average: the splits' sums of exp add, their logs do not"),
                (math.exp(a_) + math.exp(b_), "that is the sum of exp: take its log"),
                (float(lse_broken), "that is the merge without the rescale: the first split's weight must be "
                                    "rescaled by exp(m_old − m_new) when the second raises the max"),
                (math.log(a_ + b_) if a_ + b_ > 0 else math.nan, "exponentiate each lse before adding: log(e^a + e^b)")]
    mistakes = [(v, h, 1e-9) for v, h in mistakes if math.isfinite(v)]
    return say(close_number(a, expected, rel=1e-6 / max(abs(expected), 1e-12), what="the merged lse",
                            mistakes=mistakes,
                            hint="lse = log Σ exp over all keys, and each split's Σ exp is exp(lse_s)"))


@never_raises(say)
def check_split_speedup(answer, Nk: int | None = None, *, runs: dict | None = None) -> CheckResult:
    """answer: kernel-only time with one split a block ÷ time with the most splits recorded, for the
    recorded decode timelines of cache length Nk (None: the longest recorded). Within 2 %,
    narrowed so that no named mistake passes (the inverse, the split count, the ratio of SMs used,
    a percentage). runs: {S: Timeline} to read instead of the installed ones."""
    from ..records.timeline_stats import recorded_decode_runs

    runs = recorded_decode_runs(Nk) if runs is None else runs
    if 1 not in runs or len(runs) < 2:
        return say(wrong("this exercise reads the recorded decode timelines with and without splits; they are "
                         "not installed"))
    if answer is None:
        return say(wrong("replace the placeholder with the speed-up (a factor, a number); got None"))
    S = max(runs)
    one, split = runs[1], runs[S]
    want = one.kernel_ms / split.kernel_ms
    sms = len(set(split.blocks["sm"].tolist())) / len(set(one.blocks["sm"].tolist()))
    mistakes = [(1 / want, "that is split ÷ unsplit; divide the one-split time by the split one"),
                (float(S), "that is the split count; the time does not fall by as much"),
                (sms, "that is the ratio of SMs used; read the two kernel-only times"),
                (100 * (want - 1), "give a factor, such as 3.5, not a percentage")]
    got = close_number(answer, want, rel=0.02, what="the speed-up from splitting", unit="x",
                       mistakes=[m for m in mistakes if abs(m[0] - want) > 0.04 * want],
                       hint="the kernel-only time with S = 1 ÷ the kernel-only time with the most splits")
    if got.ok:
        got = CheckResult(True, f"{got.message}: {one.kernel_ms * 1e3:.1f} µs → {split.kernel_ms * 1e3:.1f} µs with "
                                f"{S} splits, {len(split.blocks)} blocks instead of {len(one.blocks)} "
                                f"({split.device}, {split.date}); less than {S}x: each split also pays its start, "
                                "its partial's write (the merge, a second small kernel, is not in these times)")
    return say(got)
