"""Chapter 8: who does what, and when, in one thread block of the FlashAttention-3 kernel
(kernels/flash_fwd_fa3.cu) — a *schematic* schedule, not a measurement.

``roles_schedule(consumers, stages, d, n_tiles=4, pingpong=True)`` plays the kernel's protocol
for one tile of work (one query block Q_i) with ``n_tiles`` key tiles, in made-up time units,
and returns a ``RolesSchedule``: every interval during which a warpgroup loads, waits, has
matrix products on the tensor cores or runs its softmax, and what the tensor cores serve.

The protocol is the kernel's; the durations are not measured:

* the producer warpgroup (lane 0) copies Q_i, then K_j and V_j of every key tile, last tile
  first (j = Tc − 1 … 0, as the kernel visits them), into slot ``t mod stages`` of the K and V
  rings; a slot is reused only when every consumer has *released* it (its empty mbarrier):
  K_j's after the consumers' S_ij, V_j's after their O_i += P V_j;
* each consumer warpgroup (lanes 1 … consumers) waits until K_j has landed (its full mbarrier)
  and, from the second tile on, V of the previous tile; with ``pingpong`` it then waits for its
  *turn* (named barrier), issues S_ij = Q_i K_jᵀ together with O_i += P V of the previous tile
  and passes the turn on at once; it waits for its products, releases the slots and runs the
  softmax (m_i, P_ij, l_i, the rescale of O_i, P to fp16); after the last tile one more P V, then
  it writes O_i;
* the tensor cores (the last lane) serve the products in the order they were issued; products
  issued at the same instant, as the consumers do in lock-step (no ping-pong), are interleaved
  and finish together.

Time unit: one product of one warpgroup, S_ij or P_ij V_j (both 2·64·Bc·d FLOPs). A softmax of
one tile lasts ``softmax_units(d)``: FlashAttention-3's count for the H100 SXM5 (989 TFLOP/s of
fp16 matmul against 3.9 TFLOP/s of exponentials; one exponential per score against 2d FLOPs of
S per score) — 1.98 units at d = 64, 0.99 at d = 128. Copies last ``LOAD_UNITS``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: FlashAttention-3 (Shah et al. 2024), section 3: an H100 SXM5 has 989 TFLOP/s of fp16 matmul
#: and 3.9 TFLOP/s of special functions (exponentials)
MATMUL_TFLOPS, EXP_TFLOPS = 989.0, 3.9
LOAD_UNITS = 0.5        #: one K_j or V_j copy (schematic: the copy engine keeps ahead)
WRITE_UNITS = 0.4       #: writing O_i and lse_i (schematic)
TICKS = 20              #: simulation ticks per unit


def softmax_units(d: int) -> float:
    """The softmax of one tile in units of one warpgroup product: exponentials of 64·Bc scores at
    EXP_TFLOPS against 2·64·Bc·d FLOPs at MATMUL_TFLOPS, i.e. MATMUL / (2 d EXP)."""
    return MATMUL_TFLOPS / (2 * d * EXP_TFLOPS)


@dataclass(frozen=True)
class Bar:
    """One interval of one lane. lane: 0 the producer, 1..consumers a consumer warpgroup,
    consumers + 1 the tensor cores. kind: "load_Q", "load_K", "load_V", "wait_empty" (producer);
    "wait_full", "wait_turn", "gemm", "softmax", "write_O" (consumers); "tc" (tensor cores,
    ``wgs``: the warpgroups it serves then). j: the key tile; slot: its ring slot; what: "S",
    "S+PV" or "PV" for "gemm". Times t0 < t1 in units."""

    lane: int
    kind: str
    t0: float
    t1: float
    j: int = -1
    slot: int = -1
    what: str = ""
    wgs: tuple = ()


@dataclass(frozen=True)
class RolesSchedule:
    """A played schedule: its parameters, its bars, the span and the share of it during which
    the tensor cores served some product (``tc_busy``)."""

    consumers: int
    stages: int
    d: int
    n_tiles: int
    pingpong: bool
    bars: tuple
    span: float
    tc_busy: float


def _check(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {v!r}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {v}")
    return v


def roles_schedule(consumers: int, stages: int, d: int, n_tiles: int = 4, pingpong: bool = True) -> RolesSchedule:
    """Play one query block's protocol (module docstring). consumers in 1..4, stages in 1..8,
    d in {64, 128}, n_tiles in 1..12. TypeError / ValueError (one line) otherwise."""
    _check("consumers", consumers, 1, 4)
    _check("stages", stages, 1, 8)
    _check("n_tiles", n_tiles, 1, 12)
    if d not in (64, 128) or isinstance(d, bool):
        raise ValueError(f"d must be 64 or 128, got {d!r}")
    T, W = n_tiles, consumers
    load, soft, write = round(LOAD_UNITS * TICKS), round(softmax_units(d) * TICKS), round(WRITE_UNITS * TICKS)
    j_of = [T - 1 - t for t in range(T)]                     # key tiles, last first
    bars: list[Bar] = []
    # producer: its copies in order; a copy of tile t into slot t % stages needs the slot released
    copies = [("load_Q", -1)] + [(k, t) for t in range(T) for k in ("load_K", "load_V")]
    landed: set = set()                                     # ("Q"|"K"|"V", t), seen from the next tick on
    arriving: set = set()
    s_done = [set() for _ in range(T)]                      # consumers whose S of tile t completed
    pv_done = [set() for _ in range(T)]                     # consumers whose P V of tile t completed
    copy_i, copy_left, p_since, p_wait = 0, 0, 0, None
    # consumers: step t = 0..T (S of tile t and P V of tile t - 1)
    step = [0] * W
    phase = ["wait_full"] * W
    since = [0] * W
    turn = 0
    jobs: list[list] = []                                   # [wg, batch, left, step]
    batch_no, tc_busy, tc_seg = 0, 0, None                  # tc_seg: [t0, wgs]
    tick = 0
    while any(p != "done" for p in phase) or copy_i < len(copies):
        if tick > 10_000 * TICKS:
            raise RuntimeError("schedule did not finish (a bug in the protocol)")
        landed |= arriving
        arriving = set()
        # --- producer
        if copy_left == 0 and copy_i < len(copies):
            kind, t = copies[copy_i]
            free = t < stages or all(w in (s_done if kind == "load_K" else pv_done)[t - stages] for w in range(W))
            if free:
                if p_wait is not None and tick > p_wait:
                    bars.append(Bar(0, "wait_empty", p_wait / TICKS, tick / TICKS, j_of[t], t % stages))
                p_wait, copy_left, p_since = None, (load * 2 if kind == "load_Q" else load), tick
            elif p_wait is None:
                p_wait = tick
        if copy_left:
            copy_left -= 1
            if copy_left == 0:
                kind, t = copies[copy_i]
                bars.append(Bar(0, kind, p_since / TICKS, (tick + 1) / TICKS, -1 if t < 0 else j_of[t],
                                -1 if t < 0 else t % stages))
                arriving.add((kind[-1], t))
                copy_i += 1
        # --- consumers
        for w in range(W):
            t = step[w]
            if phase[w] == "wait_full":
                ready = ("Q", -1) in landed and (t == T or ("K", t) in landed) and (t == 0 or ("V", t - 1) in landed)
                if ready:
                    if tick > since[w]:
                        bars.append(Bar(1 + w, "wait_full", since[w] / TICKS, tick / TICKS, j_of[min(t, T - 1)]))
                    phase[w], since[w] = "wait_turn", tick
            if phase[w] == "wait_turn" and (not pingpong or turn == w):
                if tick > since[w]:
                    bars.append(Bar(1 + w, "wait_turn", since[w] / TICKS, tick / TICKS))
                units = (t < T) + (t > 0)
                jobs.append([w, batch_no if pingpong else -tick, units * TICKS, t])
                batch_no += 1
                turn = (turn + 1) % W
                phase[w], since[w] = "gemm", tick
        # --- tensor cores: the earliest batch, shared evenly by its jobs
        if jobs:
            first = min(jobs, key=lambda q: (q[1] if pingpong else -q[1]))[1]
            serving = [q for q in jobs if q[1] == first]
            wgs = tuple(sorted(q[0] for q in serving))
            for q in serving:
                q[2] -= 1 / len(serving)
            tc_busy += 1
        else:
            wgs = ()
        if tc_seg is not None and tc_seg[1] != wgs:
            bars.append(Bar(W + 1, "tc", tc_seg[0] / TICKS, tick / TICKS, wgs=tc_seg[1]))
            tc_seg = None
        if tc_seg is None and wgs:
            tc_seg = [tick, wgs]
        tick += 1
        for q in [q for q in jobs if q[2] <= 1e-9]:
            jobs.remove(q)
            w, t = q[0], q[3]
            if t < T:
                s_done[t].add(w)
            if t > 0:
                pv_done[t - 1].add(w)
            what = "S" if t == 0 else ("PV" if t == T else "S+PV")
            bars.append(Bar(1 + w, "gemm", since[w] / TICKS, tick / TICKS, j_of[min(t, T - 1)], what=what))
            phase[w], since[w] = ("softmax" if t < T else "write_O"), tick
        for w in range(W):
            if phase[w] in ("softmax", "write_O") and tick - since[w] >= (soft if phase[w] == "softmax" else write):
                bars.append(Bar(1 + w, phase[w], since[w] / TICKS, tick / TICKS, j_of[min(step[w], T - 1)]))
                if phase[w] == "write_O":
                    phase[w] = "done"
                else:
                    step[w] += 1
                    phase[w], since[w] = "wait_full", tick
    if tc_seg is not None:
        bars.append(Bar(W + 1, "tc", tc_seg[0] / TICKS, tick / TICKS, wgs=tc_seg[1]))
    span = max(b.t1 for b in bars)
    return RolesSchedule(consumers=W, stages=stages, d=d, n_tiles=T, pingpong=bool(pingpong),
                         bars=tuple(sorted(bars, key=lambda b: (b.lane, b.t0))), span=span,
                         tc_busy=tc_busy / TICKS / span)
