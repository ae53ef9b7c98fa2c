"""Exercises of chapter 6 (the backward pass): what recomputation saves and what it costs.

``check_stored_bytes((P_bytes, lse_bytes), N, itemsize)``: predict what the forward leaves in HBM
for the backward — P (standard attention) and lse (FlashAttention), one head.
``check_extra_flops(answer, N, d)``: predict the FLOPs the backward spends recomputing S = QKᵀ.
``check_recompute_P(fn)``: write P_ij = exp(S_ij − lse_i); ``check_dS(fn)``: write
dS_ij = P_ij ∘ (dP_ij − D_i). Both are run on tiles recorded from a real ``flash_backward`` run
and compared with what flashviz computed there.

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
