"""Exercises of chapter 6 (the backward pass): what recomputation saves and what it costs.

``check_stored_bytes((P_bytes, lse_bytes), N, itemsize)``: predict what the forward leaves in HBM
for the backward — P (standard attention) and lse (FlashAttention), one head.
``check_extra_flops(answer, N, d)``: predict the FLOPs the backward spends recomputing S = QKᵀ.
``check_recompute_P(fn)``: write P_ij = exp(S_ij − lse_i); ``check_dS(fn)``: write
dS_ij = P_ij ∘ (dP_ij − D_i). Both are run on tiles recorded from a real ``flash_backward`` run
and compared with what flashviz computed there.
``check_peak_ratio(answer, N=4096, d=64)`` and ``check_bwd_share(answer, N=4096, d=64, causal=False)``
(section 7) read their truth from the committed backward record (``records.bwd_records``): how many
times more memory SDPA-math's backward peaked at than ours, and the backward's share of the forward +
backward time, each within 1 % and naming the known wrong readings.
``check_recompute_share(answer, causal=False)`` (section 7, the measured tile) reads the recorded
teaching-backward timeline (``records.timeline_stats.recorded_backward_pair``): the share of a
backward tile's time that recompute_P takes, within 2 %.
``check_update_dQ_ratio(answer, causal=False)`` (section 7, the tensor-core tile) reads the recorded
tensor-core backward's timeline beside the teaching one (``recorded_backward_pair(against="bwd_mma")``):
how many times as long as accumulate_dK, a product of the same size, its update_dQ step takes, within 3 %.
``check_hopper_dQ_share(answer, causal=False)`` (section 7, the Hopper tile) reads the recorded wgmma
backward's timeline (``recorded_backward_pair(against="bwd_wgmma")``): update_dQ's share of its tile, within 2 %.

Each check prints its one line (✓ or ✗) and returns a CheckResult; none raises, whatever the
answer or the learner's code does.
"""

from __future__ import annotations

import numpy as np

from ..iomodel import recompute_extra_flops, stored_between_passes
from . import CheckResult, close_number, finite_number, guarded, known_mistake, never_raises, right, say, wrong  # noqa: F401


@never_raises(say)
def check_stored_bytes(answer, N: int, itemsize: int = 4) -> CheckResult:
    """answer = (bytes of P, bytes of lse) that the forward keeps in HBM for the backward, for one
    head of N queries and N keys with activations of ``itemsize`` bytes: standard attention keeps
    P, N×N elements of ``itemsize`` bytes; FlashAttention keeps lse, N numbers in float32 (4 bytes
    a row, as FlashAttention-2 keeps it, also for fp16/bf16 activations; float64 keeps float64).
    Compared exactly with iomodel.stored_between_passes. A wrong answer is told which part is off
    and why, never the expected numbers."""
    want = stored_between_passes(N, N, itemsize=itemsize)
    P, lse = want["standard (P)"], want["flash (lse)"]
    lse_b = lse // N
    try:
        a, b = answer
    except (TypeError, ValueError):
        return say(wrong(f"give two numbers, (bytes of P, bytes of lse); got {answer!r:.60}"))
    a, b = finite_number(a), finite_number(b)
    if a is None or b is None:
        return say(wrong(f"replace the placeholders with two numbers of bytes (P, lse); got {answer!r:.60}"))
    if a == P and b == lse:
        return say(right(f"P takes {P:,} B, lse {lse:,} B: {P // lse:,}× less to keep (N = {N}, {itemsize}-byte "
                          f"elements, lse in float{8 * lse_b})"))
    if (a, b) == (N * N, N):
        return say(wrong(f"P = {_fmt_b(a)}, lse = {_fmt_b(b)} — those are element counts: multiply each by "
                          "its bytes per number"))
    if a in (N * itemsize, N * lse_b) and b == N * N * itemsize:
        return say(wrong(f"P = {_fmt_b(a)}, lse = {_fmt_b(b)} — swapped: P is the N×N one"))
    p_note = "" if a == P else known_mistake(a, [
        (N * itemsize, "P has one number per (query, key) pair: N×N of them"),
        (N * lse_b, "P has one number per (query, key) pair: N×N of them"),
        *[(N * N * alt, f"P is kept in the activations' {itemsize}-byte numbers, not {alt}-byte ones")
          for alt in (2, 4, 8) if alt != itemsize],
        (N * N, f"that is P's element count: {itemsize} bytes each"),
        (P / 2**20, "give bytes, not MiB", 5e-3), (P / 1e6, "give bytes, not MB", 5e-3)])
    p_note = f" ({p_note})" if p_note else ""
    l_note = "" if b == lse else known_mistake(b, [
        *[(N * alt, f"lse is kept in float{8 * lse_b}, {lse_b} bytes a row, even when Q, K, V are "
                    f"{itemsize}-byte numbers") for alt in (2, 4, 8) if alt < lse_b and alt == itemsize],
        *[(N * alt, f"lse is kept in float{8 * lse_b}: {lse_b} bytes a row, not {alt}") for alt in (2, 4, 8)
          if alt != lse_b],
        (N * N * itemsize, "lse has one number per query row, not per (query, key) pair"),
        (N * N * lse_b, "lse has one number per query row, not per (query, key) pair"),
        (N, f"that is lse's element count: {lse_b} bytes each")])
    l_note = f" ({l_note})" if l_note else f" (lse is one number per query row, in float{8 * lse_b})" if b != lse else ""
    parts = [f"P = {_fmt_b(a)} " + ("✓" if a == P else "✗") + p_note,
             f"lse = {_fmt_b(b)} " + ("✓" if b == lse else "✗") + l_note]
    return say(wrong(", ".join(parts)))


def _fmt_b(x: float) -> str:
    return f"{x:,.0f} B" if float(x).is_integer() else f"{x:,.6g} B"


@never_raises(say)
def check_extra_flops(answer, N: int, d: int, causal: bool = False) -> CheckResult:
    """answer = the matmul FLOPs the backward spends recomputing S = scale·QKᵀ for one head
    (N queries, N keys, head dimension d; 2 FLOPs per multiply-add). Compared exactly with
    iomodel.recompute_extra_flops; a known wrong count (1 FLOP per multiply-add, PV counted too,
    the causal skip forgotten or its diagonal) gets the hint that names it."""
    expected = recompute_extra_flops(N, N, d, causal)
    a = finite_number(answer)
    if a is None:
        return say(wrong(f"replace the placeholder with your prediction (a number of FLOPs); got {answer!r:.60}"))
    hint = "recomputing S = QKᵀ is one matmul of N×d by d×N: N·N·d multiply-adds, 2 FLOPs each"
    mistakes = [(expected / 2, "a multiply-add counts as 2 FLOPs"),
                (2 * expected, "only S = QKᵀ is recomputed; PV is not needed again"),
                (expected / 1e9, "give FLOPs, not GFLOPs", 5e-3), (expected / 1e12, "give FLOPs, not TFLOPs", 5e-3)]
    if causal:
        full = recompute_extra_flops(N, N, d, False)
        hint += " (with the causal mask, only the (query, key) pairs a query sees)"
        mistakes += [(full, "with the causal mask, query r sees only keys 0…r: count only the visible pairs"),
                     (full / 2, "query r sees keys 0…r, r + 1 of them: N·(N + 1)/2 pairs, not N²/2"),
                     (full / 4, "a multiply-add counts as 2 FLOPs, and query r sees r + 1 keys: N·(N + 1)/2 pairs")]
    return say(close_number(a, expected, rel=0.0, what=f"the recomputation's extra FLOPs at N = {N}, d = {d}",
                            hint=hint, mistakes=mistakes))


def _recorded_tiles(runs):
    """Tiles recorded by real flash_backward runs: per computed tile, what its recompute_P and
    compute_dS events held (i, j, S, P, dP, D, dS) and the forward's lse of its rows."""
    from types import SimpleNamespace

    from ..backward import flash_backward
    from ..tiled import flash_forward

    out = []
    for seed, N, d, Br, Bc, causal in runs:
        rng = np.random.default_rng(seed)
        Q, K, V, dO = (rng.standard_normal((N, d)) for _ in range(4))
        Q *= 2.0                                  # peaked rows: a tile alone does not sum to 1
        f = flash_forward(Q, K, V, Br=Br, Bc=Bc, causal=causal)
        r = flash_backward(Q, K, V, f.O, dO, f.lse, Br=Br, Bc=Bc, causal=causal, record=True)
        for e in r.trace.events:
            if e.kind == "recompute_P":
                tile = SimpleNamespace(i=e.i, j=e.j, S=e.S, P=e.P, lse=f.lse[e.r0:e.r1])
            elif e.kind == "compute_dS":
                tile.dP, tile.D, tile.dS = e.dP, e.D, e.dS
                out.append(tile)
    return out


# square tiles first (a broadcasting slip gives wrong numbers, not an error), then oblong and causal ones
_RUNS = [(6, 24, 8, 8, 8, False), (7, 20, 4, 4, 8, True), (8, 12, 3, 8, 4, False)]


def _compare(fn, args, want, what):
    """Run the learner's fn on one tile; (None, None) if it matches, else (message, got)."""
    got, failed = guarded(fn, *(np.array(a, copy=True) for a in args), what=what)
    if failed is not None:
        return failed.message.removeprefix("✗ Not yet: "), None
    if got is None:
        return f"{what} returned None — did you forget the return?", None
    try:
        got = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"{what} should return an array, got {type(got).__name__}", None
    if got.shape != want.shape:
        return f"{what} returned shape {got.shape}, the tile is {want.shape}", None
    if not np.allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=False):
        return "", got
    return None, None


@never_raises(say)
def check_recompute_P(fn) -> CheckResult:
    """fn(S, lse) -> P for one tile: S (Br, Bc) scaled scores (−inf where masked), lse (Br,) the
    rows' log-sum-exp kept by the forward. Compared with the P flashviz recomputed, tile by tile."""
    if not callable(fn):
        return say(wrong(f"pass your function itself, e.g. check_recompute_P(recompute_P); got {fn!r:.60}"))
    tiles = _recorded_tiles(_RUNS)
    for e in tiles:
        lse = e.lse
        msg, got = _compare(fn, (e.S, lse), e.P, "recompute_P(S, lse)")
        if msg is None:
            continue
        if msg:
            return say(wrong(msg))
        where = f"tile (i = {e.i}, j = {e.j}) of {len(tiles)}"
        with np.errstate(all="ignore"):
            local = np.exp(e.S - np.max(e.S, axis=1, keepdims=True))
            local /= local.sum(axis=1, keepdims=True)
            per_col = np.exp(e.S - lse[None, :]) if e.S.shape[0] == e.S.shape[1] else None
        if np.allclose(got, local, equal_nan=True):
            hint = ("that is a softmax of this tile alone; a tile sees only Bc keys, "
                    "so use the whole row's lse: P = exp(S − lse[:, None])")
        elif per_col is not None and np.allclose(got, per_col, equal_nan=True):
            hint = "lse belongs to the rows (queries): subtract lse[:, None], not lse[None, :]"
        elif np.isnan(got).any():
            hint = "NaN in your P: masked scores are −inf and exp(−inf) = 0 — no special case needed"
        else:
            hint = f"max |P − flashviz| = {np.nanmax(np.abs(got - e.P)):.3g}; P_ij = exp(S_ij − lse_i)"
        return say(wrong(f"{where} differs: {hint}"))
    return say(right(f"your P matches the P flashviz recomputed on all {len(tiles)} tiles "
                      "(square, oblong and causal)"))


@never_raises(say)
def check_dS(fn) -> CheckResult:
    """fn(P, dP, D) -> dS for one tile: P, dP (Br, Bc), D (Br,) = rowsum(dO ∘ O) of the tile's rows.
    Compared with the dS flashviz computed, tile by tile, in real flash_backward runs."""
    if not callable(fn):
        return say(wrong(f"pass your function itself, e.g. check_dS(my_dS); got {fn!r:.60}"))
    tiles = _recorded_tiles(_RUNS)
    for e in tiles:
        msg, got = _compare(fn, (e.P, e.dP, e.D), e.dS, "dS(P, dP, D)")
        if msg is None:
            continue
        if msg:
            return say(wrong(msg))
        P, dP, D = e.P, e.dP, e.D
        where = f"tile (i = {e.i}, j = {e.j}) of {len(tiles)}"
        guesses = [(P * dP - D[:, None], "the ∘ multiplies the whole bracket: P ∘ (dP − D)"),
                   (dP - D[:, None], "multiply by P: dS = P ∘ (dP − D)"),
                   (P * (dP - P.sum(axis=1, keepdims=True)), "D is the given D (rowsum(dO ∘ O)), not a sum of P")]
        if P.shape[0] == P.shape[1]:
            guesses.insert(0, (P * (dP - D[None, :]), "D belongs to the rows (queries): use D[:, None]"))
        hint = next((h for g, h in guesses if np.allclose(got, g)),
                    f"max |dS − flashviz| = {np.max(np.abs(got - e.dS)):.3g}")
        return say(wrong(f"{where} differs: {hint}"))
    return say(right(f"dS = P ∘ (dP − D) matches flashviz on all {len(tiles)} tiles (square, oblong and causal)"))


# --- section 7: the recorded GPU backward (benchmarks/results/bwd-*.json; no GPU needed) -----------

def _bwd_record(res):
    from ..records.bwd_records import bwd_record

    return bwd_record(res)


def _far(expected: float, mistakes, gap: float):
    """The mistakes more than ``gap`` (relative) away from ``expected``: a value closer than that
    is the same answer read off another row or rounded, not a mistake to name."""
    return [m for m in mistakes if abs(m[0] - expected) > gap * abs(expected)]


@never_raises(say)
def check_peak_ratio(answer, N: int = 4096, d: int = 64, *, res: dict | None = None) -> CheckResult:
    """answer: how many times more memory SDPA-math's backward peaked at than ours (bwd_mma) at
    this N and d, in the recorded run (``records.bwd_records.peak_rows``: the peak of one backward
    call above what was allocated before it). Within 1 %, narrowed so that no named mistake
    passes: the inverse, the bytes the forward kept instead of the peak, the two added, SDPA-flash
    or cuDNN in place of ours, another N's row, a percentage, a difference of MiB."""
    from ..records.bwd_records import bwd_label, peak_rows

    res = _bwd_record(res)
    rows = {r["N"]: r for r in peak_rows(res) if r["d"] == d}
    row = rows.get(N)
    if row is None or "sdpa_math_bwd_peak_bytes" not in row or "bwd_mma_peak_bytes" not in row:
        return say(wrong(f"the record ({res.get('source_file', '?')}) has no peak of both SDPA-math and ours at "
                         f"N = {N}, d = {d}"))
    math, ours = row["sdpa_math_bwd_peak_bytes"], row["bwd_mma_peak_bytes"]
    want = math / ours
    mistakes = [(ours / math, "that is ours ÷ SDPA-math's; the question asks how many times more SDPA-math needs"),
                (100 * want, "give a factor (how many times), not a percentage"),
                ((math - ours) / 2**20, "that is a difference in MiB; divide the two peaks instead"),
                ((math - ours) / 2**30, "that is a difference in GiB; divide the two peaks instead")]
    if "sdpa_math_bwd_saved_bytes" in row and "bwd_mma_saved_bytes" in row:
        ms, os_ = row["sdpa_math_bwd_saved_bytes"], row["bwd_mma_saved_bytes"]
        mistakes += [(ms / os_, "those are the bytes the forward kept; the question asks for the backward's peak"),
                     ((ms + math) / (os_ + ours), "add nothing: compare the backward's peaks alone")]
    for other, name in (("sdpa_flash_bwd", "SDPA-flash"), ("sdpa_cudnn_bwd", "SDPA-cuDNN")):
        if f"{other}_peak_bytes" in row:
            mistakes.append((math / row[f"{other}_peak_bytes"], f"that divides by {name}'s peak; divide by ours "
                                                                f"(flashviz's tensor-core backward)"))
    for n, r in rows.items():
        if n != N and "sdpa_math_bwd_peak_bytes" in r and "bwd_mma_peak_bytes" in r:
            mistakes.append((r["sdpa_math_bwd_peak_bytes"] / r["bwd_mma_peak_bytes"],
                             f"that is the ratio in the row of N = {n}; read the row of N = {N}"))
    got = close_number(answer, want, rel=0.01, what=f"SDPA-math's peak ÷ ours at N = {N}", unit="x",
                       mistakes=_far(want, mistakes, 0.02),
                       hint="divide SDPA-math's peak by ours, the same N, the same units")
    if got.ok:
        other = [(n, r["sdpa_math_bwd_peak_bytes"] / r["bwd_mma_peak_bytes"]) for n, r in sorted(rows.items())
                 if n != N and "sdpa_math_bwd_peak_bytes" in r]
        grow = "; ".join(f"{v:.0f}x at N = {n}" for n, v in other)
        got = CheckResult(True, f"{got.message}. The factor grows with N ({grow}): SDPA-math stores N×N numbers per "
                                f"head, ours about N·d ({bwd_label(res).split(' (')[0]})")
    return say(got)


@never_raises(say)
def check_bwd_share(answer, N: int = 4096, d: int = 64, causal: bool = False, impl: str = "bwd_mma", *,
                    res: dict | None = None) -> CheckResult:
    """answer: the fraction of the forward + backward time (public call) that the backward takes
    for ``impl`` at this shape in the recorded run: <impl>_call_ms ÷ <impl>_fwdbwd_call_ms.
    Within 1 %, narrowed so that no named mistake passes (the forward's share, backward ÷
    forward, the FLOPs' 2.5 / 3.5, a percentage, another implementation's row); the right answer
    is told how it compares with 2.5 / 3.5."""
    from ..records.bwd_records import IMPLS, flop_ratio, impl_label, time_rows

    res = _bwd_record(res)
    row = next((r for r in time_rows(res, d=d, causal=causal) if r["N"] == N), None)
    if row is None or f"{impl}_bwd_share" not in row:
        return say(wrong(f"the record ({res.get('source_file', '?')}) has no forward + backward time of {impl} at "
                         f"N = {N}, d = {d}, causal = {bool(causal)}"))
    want = row[f"{impl}_bwd_share"]
    flops = flop_ratio() / (flop_ratio() + 1)
    mistakes = [(1 - want, "that is the forward's share; the question asks for the backward's"),
                (row[f"{impl}_bwd_over_fwd"], "that is backward ÷ forward; divide the backward by forward + backward"),
                (flops, "that is what the FLOPs predict (2.5 / 3.5); use the measured times"),
                (100 * want, "give a fraction, not a percentage")]
    for other in IMPLS:
        if other != impl and f"{other}_bwd_share" in row:
            mistakes.append((row[f"{other}_bwd_share"], f"that is {other}'s row ({impl_label(res, other)}); the "
                                                        f"question is about {impl} ({impl_label(res, impl)})"))
    got = close_number(answer, want, rel=0.01, what="the backward's share of forward + backward",
                       mistakes=_far(want, mistakes, 0.02),
                       hint="backward time ÷ (forward + backward time), both by public call")
    if got.ok:
        side = "above" if want > flops else "below"
        theirs = ", ".join(f"{IMPLS[o].split(' (')[0]} {row[f'{o}_bwd_share']:.3f}" for o in ("sdpa_flash_bwd",
                           "sdpa_cudnn_bwd") if f"{o}_bwd_share" in row and o != impl)
        got = CheckResult(True, f"{got.message}: {side} the {flops:.3f} (2.5 / 3.5) that the FLOPs predict"
                                + (f"; at the same shape {theirs}" if theirs else "")
                                + (". Our backward is slow for our forward: benchmarks/NOTES.md says why"
                                   if impl == "bwd_mma" and want > flops else ""))
    return say(got)


@never_raises(say)
def check_recompute_share(answer, causal: bool = False, *, pair: dict | None = None) -> CheckResult:
    """answer: the share (a fraction) of one backward tile's time that recompute_P takes in the
    recorded teaching-backward timeline — its mean time per tile over the sum of the six steps'
    (``records.timeline_stats.per_tile_steps``, the first warp of the recorded blocks). Within 2 %,
    narrowed so that no named mistake passes: the forward's S and softmax share of its own tile,
    recompute_P over the forward's whole tile, the complement, a percentage. pair: {"forward",
    "backward"} timelines to read instead of the installed ones."""
    from ..records.timeline_stats import per_tile_steps, recorded_backward_pair, step_shares

    pair = recorded_backward_pair(causal) if pair is None else pair
    if not pair:
        return say(wrong("no teaching-backward timeline is installed: this exercise reads the recorded one"))
    if answer is None:
        return say(wrong("replace the placeholder with recompute_P's share of a backward tile (a fraction); got None"))
    b, f = per_tile_steps(pair["backward"]), per_tile_steps(pair["forward"])
    if "recompute_P" not in b:
        return say(wrong("the recorded backward timeline has no recompute_P steps"))
    want = step_shares(pair["backward"])["recompute_P"]
    f_tile = sum(f.values())
    mistakes = [(1 - want, "that is everything but the recomputation; the question asks for recompute_P's share"),
                (100 * want, "give a fraction, such as 0.2, not a percentage"),
                (b["recompute_P"] / f_tile, "that divides by the forward's tile; divide by the backward's own"),
                ((f.get("compute_S", 0) + f.get("update_ml", 0)) / f_tile,
                 "that is the forward's S and softmax share of its own tile; read the backward's bar")]
    got = close_number(answer, want, rel=0.02, what="recompute_P's share of a backward tile",
                       mistakes=_far(want, mistakes, 0.04),
                       hint="recompute_P's µs ÷ the sum of the backward bar's six steps")
    if got.ok:
        got = CheckResult(True, f"{got.message}: recomputing S and P costs {b['recompute_P'] / 1e3:.2f} µs of a "
                                f"{sum(b.values()) / 1e3:.2f} µs tile here, against the forward's "
                                f"{(f.get('compute_S', 0) + f.get('update_ml', 0)) / 1e3:.2f} µs for S and its "
                                f"softmax ({pair['backward'].device}, {pair['backward'].date})")
    return say(got)


@never_raises(say)
def check_update_dQ_ratio(answer, causal: bool = False, *, pair: dict | None = None) -> CheckResult:
    """answer: how many times as long as accumulate_dK the update_dQ step takes in a tile of the recorded
    tensor-core backward (``records.timeline_stats.per_tile_steps``, the first warp of the recorded
    blocks): update_dQ ÷ accumulate_dK. Both do one product of the same FLOPs (dS_ij K_j and dS_ijᵀ Q_i);
    update_dQ also waits for the whole dS_ij and adds its piece into dQ with fp32 atomics. Within 3 %
    (the figure's µs, rounded to 0.01, read within 2 %), narrowed so that no named mistake passes: the
    inverse, the teaching kernel's ratio, the extra over the product (ratio − 1), update_dQ's share of
    the tile, update_dQ over recompute_P. pair: {"backward", "bwd_mma"} timelines to read instead of
    the installed ones."""
    from ..records.timeline_stats import per_tile_steps, recorded_backward_pair, step_shares

    pair = recorded_backward_pair(causal, against="bwd_mma") if pair is None else pair
    if not pair:
        return say(wrong("no tensor-core backward timeline is installed beside the teaching one: this exercise "
                         "reads the recorded ones"))
    if answer is None:
        return say(wrong("replace the placeholder with update_dQ's time ÷ accumulate_dK's (a ratio); got None"))
    m, t = per_tile_steps(pair["bwd_mma"]), per_tile_steps(pair["backward"])
    if not all(s in x for x in (m, t) for s in ("update_dQ", "accumulate_dK", "recompute_P")):
        return say(wrong("the recorded backward timelines lack an update_dQ, accumulate_dK or recompute_P step"))
    want = m["update_dQ"] / m["accumulate_dK"]
    theirs = t["update_dQ"] / t["accumulate_dK"]
    mistakes = [(1 / want, "that is accumulate_dK ÷ update_dQ; the question asks how many times as long update_dQ is"),
                (theirs, "that is the teaching kernel's bar; read the tensor-core one", 0.01),
                (want - 1, "that is the time beyond the product over the product; divide update_dQ's whole time", 0.01),
                (step_shares(pair["bwd_mma"])["update_dQ"], "that is update_dQ's share of the tile; divide by "
                                                            "accumulate_dK's time instead"),
                (m["update_dQ"] / m["recompute_P"], "that divides by recompute_P; accumulate_dK is the product of "
                                                    "update_dQ's size")]
    got = close_number(answer, want, rel=0.03, what="update_dQ ÷ accumulate_dK on the tensor cores", unit="x",
                       mistakes=_far(want, mistakes, 0.06),
                       hint="update_dQ's µs ÷ accumulate_dK's µs, both on the tensor-core bar")
    if got.ok:
        got = CheckResult(True, f"{got.message}; in the teaching kernel {theirs:.2f}x. Per tile, the tensor cores "
                                f"made accumulate_dK {t['accumulate_dK'] / m['accumulate_dK']:.1f}x faster than the "
                                f"teaching kernel (on twice the keys) and update_dQ "
                                f"{t['update_dQ'] / m['update_dQ']:.1f}x: the step that adds into dQ gained less than the product "
                                f"({pair['bwd_mma'].device}, {pair['bwd_mma'].date})")
    return say(got)


@never_raises(say)
def check_hopper_dQ_share(answer, causal: bool = False, *, pair: dict | None = None) -> CheckResult:
    """answer: the share (a fraction) of a tile of the recorded Hopper backward (kernels/flash_bwd_wgmma.cu,
    ``records.timeline_stats.per_tile_steps``, the first warpgroup of the recorded blocks) that update_dQ
    takes: dS_ij K_j on the tensor cores, the wait for every product of the step, and the bulk adds into
    dQ issued. Within 2 %, narrowed so that no named mistake passes: the teaching kernel's share, the
    complement, a percentage, update_dQ ÷ accumulate_dK. pair: {"backward", "bwd_wgmma"} timelines to
    read instead of the installed ones."""
    from ..records.timeline_stats import per_tile_steps, recorded_backward_pair, step_shares

    pair = recorded_backward_pair(causal, against="bwd_wgmma") if pair is None else pair
    if not pair:
        return say(wrong("no Hopper backward timeline is installed beside the teaching one: this exercise reads "
                         "the recorded ones"))
    if answer is None:
        return say(wrong("replace the placeholder with update_dQ's share of the Hopper tile (a fraction); got None"))
    h = per_tile_steps(pair["bwd_wgmma"])
    if not all(s in h for s in ("update_dQ", "accumulate_dK")):
        return say(wrong("the recorded Hopper backward timeline lacks an update_dQ or accumulate_dK step"))
    want = step_shares(pair["bwd_wgmma"])["update_dQ"]
    theirs = step_shares(pair["backward"]).get("update_dQ", float("nan"))
    mistakes = [(1 - want, "that is everything but update_dQ; the question asks for update_dQ's share"),
                (100 * want, "give a fraction, such as 0.2, not a percentage"),
                (theirs, "that is the teaching kernel's bar; read the Hopper one", 0.01),
                (h["update_dQ"] / h["accumulate_dK"], "that divides by accumulate_dK; divide by the whole tile")]
    got = close_number(answer, want, rel=0.02, what="update_dQ's share of the Hopper tile",
                       mistakes=_far(want, mistakes, 0.04),
                       hint="update_dQ's µs ÷ the sum of the Hopper bar's six steps")
    if got.ok:
        got = CheckResult(True, f"{got.message}; in the teaching kernel {theirs:.2f}. On Hopper the products are "
                                f"issued and run behind the threads, so the step that waits for them holds their "
                                f"time: update_dQ {h['update_dQ'] / 1e3:.2f} µs of a {sum(h.values()) / 1e3:.2f} µs "
                                f"tile ({pair['bwd_wgmma'].device}, {pair['bwd_wgmma'].date})")
    return say(got)
