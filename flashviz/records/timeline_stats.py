"""Numbers read off a measured timeline (issue 12, chapter 7 "What the GPU actually does").

Pure NumPy on a ``gpu.Timeline`` (recorded or live); no GPU needed.

* ``waves(tl)``: how the Tr·H·B thread blocks met the SMs — the most blocks one SM ran at once
  (its slots, as measured), the slots of the whole GPU and the number of waves, blocks / slots;
* ``softmax_overlap(tl)``: of the time a group (warpgroup or warp) spends in the softmax steps
  (update_ml, convert_P), the share during which another group *of the same block* runs a
  matmul step (compute_S or accumulate_O; tensor cores in the wgmma kernel) — the overlap
  FlashAttention-3's ping-pong schedule creates inside a block (0 when the groups move in
  lock-step). Other blocks sharing the SM are not counted: the files keep the steps of 16
  sampled blocks, which seldom run side by side on one SM;
* ``recorded_orders(kernel, d, N)``: the recorded causal runs of chapter 7's block-order
  experiment, {order: Timeline};
* ``sm_time_share(tl)``: the share of the GPU's SM-time (SMs × the run's span) during which an
  SM ran at least one block — chapter 9's "idle SMs" in one number;
* ``recorded_decode_runs(Nk)``: the recorded decode timelines of one cache length, {S: Timeline}
  (one split a block, and the split count the call chose);
* ``per_tile_steps(tl)``: each step's mean time per tile (ns) in one group of the detailed blocks,
  ``step_shares(tl)`` the same as shares of the tile, ``trace_cost(tl)`` what the traced build
  cost against the untraced one; ``recorded_backward(kernel, causal)``: a backward kernel's
  recorded timeline, and ``recorded_backward_pair(causal, against)``: the recorded teaching
  backward beside the teaching forward of the same shape, or beside the tensor-core backward
  (chapter 6: where a backward tile's time goes);
* what the TimelineExplorer's numbers read: ``tile_flops``, ``tail_share``, ``in_flight``,
  ``blocks_per_sm`` and ``tile_vs_ceiling`` (a block's time per tile against the measured matmul
  ceiling, ``Ceiling`` / ``TileCeiling``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timeline import KERNELS, ORDERS, Timeline, latest_timeline, recorded_timelines

SOFTMAX_STEPS = ("update_ml", "convert_P")
MATMUL_STEPS = ("compute_S", "accumulate_O")
#: the backward kernels with a timeline switch (``gpu.trace_backward``): the teaching one, the tensor-core one
BWD_KERNELS = tuple(k for k in KERNELS if k.startswith("bwd_"))
#: what ``recorded_backward_pair`` can set beside the teaching backward: the teaching forward, the tensor-core backwards
AGAINST = ("forward", "bwd_mma", "bwd_wgmma")


@dataclass(frozen=True)
class Waves:
    """``blocks`` (Tr·H·B), ``sms`` (SMs that ran one), ``per_sm`` (the most blocks one SM ran at
    the same time), ``slots`` = sms · per_sm and ``waves`` = blocks / slots (a float: 3.88 means
    three full waves and a last one 88 % full)."""

    blocks: int
    sms: int
    per_sm: int
    slots: int
    waves: float


def _check(tl) -> Timeline:
    if not isinstance(tl, Timeline):
        raise TypeError(f"expected a flashviz.gpu.Timeline, got {type(tl).__name__}")
    return tl


def most_at_once(t0: np.ndarray, t1: np.ndarray) -> int:
    """The most intervals [t0, t1) open at one instant (0 for none): a sweep over the ends."""
    if len(t0) == 0:
        return 0
    t = np.concatenate([np.asarray(t0, float), np.asarray(t1, float)])
    step = np.concatenate([np.ones(len(t0), int), -np.ones(len(t1), int)])
    order = np.lexsort((step, t))            # an end at the same instant as a start comes first
    return int(np.cumsum(step[order]).max())


def waves(tl: Timeline) -> Waves:
    """The run's waves (see ``Waves``), from the blocks' SMs and their start and end times.
    TypeError for anything but a Timeline."""
    b = _check(tl).blocks
    sms = np.unique(b["sm"])
    per_sm = max((most_at_once(b["t0_ns"][b["sm"] == s], b["t1_ns"][b["sm"] == s]) for s in sms), default=0)
    slots = len(sms) * per_sm
    return Waves(len(b), len(sms), per_sm, slots, len(b) / slots if slots else 0.0)


def _union(t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Disjoint sorted (k, 2) intervals covering the union of [t0, t1)."""
    if len(t0) == 0:
        return np.zeros((0, 2))
    order = np.argsort(t0, kind="stable")
    out = []
    for a, b in zip(np.asarray(t0, float)[order], np.asarray(t1, float)[order]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return np.array(out)


def _covered(t0: np.ndarray, t1: np.ndarray, cover: np.ndarray) -> float:
    """Total length of the intervals [t0, t1) inside the disjoint intervals ``cover``."""
    if len(cover) == 0 or len(t0) == 0:
        return 0.0
    lo = np.maximum(np.asarray(t0, float)[:, None], cover[None, :, 0])
    hi = np.minimum(np.asarray(t1, float)[:, None], cover[None, :, 1])
    return float(np.clip(hi - lo, 0, None).sum())


def softmax_overlap(tl: Timeline) -> tuple[float, float]:
    """(overlapped share, softmax ns): over the blocks whose steps the timeline keeps, the share of
    the groups' softmax time (``SOFTMAX_STEPS``) during which another group of the same block is
    in a matmul step (``MATMUL_STEPS``), and the softmax time summed over those groups (ns).
    ValueError when the timeline keeps no softmax step, or its blocks have one group each
    (e.g. the wgmma kernel at Br = 64: one warpgroup, nothing in the block to overlap with)."""
    tl = _check(tl)
    e = tl.events
    if len(e) and int(e["group"].max()) == 0:
        raise ValueError(f"one group per block here (Br = {tl.Br}): no other group in the block to overlap with")
    soft = np.isin(e["stage"], [tl.stages.index(s) for s in SOFTMAX_STEPS])
    mm = np.isin(e["stage"], [tl.stages.index(s) for s in MATMUL_STEPS])
    if not soft.any():
        raise ValueError("this timeline keeps no softmax step (update_ml, convert_P) to compare")
    total = over = 0.0
    for cta in np.unique(e["cta"][soft]):
        mine = e["cta"] == cta
        for g in np.unique(e["group"][mine & soft]):
            s = e[mine & soft & (e["group"] == g)]
            others = e[mine & mm & (e["group"] != g)]
            total += float((s["t1_ns"] - s["t0_ns"]).sum())
            # a group's own softmax steps never overlap each other; count each instant once
            cover = _union(others["t0_ns"], others["t1_ns"])
            over += _covered(s["t0_ns"], s["t1_ns"], cover)
    return (over / total if total else 0.0), total


def recorded_orders(kernel: str = "wgmma", d: int = 128, N: int = 4096) -> dict[str, Timeline]:
    """The recorded causal timelines of one shape in every block order of ``ORDERS`` that was
    recorded ({order: Timeline}, the kernel's own order first). LookupError (from
    ``latest_timeline``) when even the kernel's own order is not recorded."""
    out = {"kernel": latest_timeline(kernel, causal=True, d=d, N=N)}
    for order in ORDERS[1:]:
        try:
            out[order] = latest_timeline(kernel, causal=True, d=d, N=N, order=order)
        except LookupError:
            pass
    return out


def tile_flops(tl) -> np.ndarray:
    """Matmul FLOPs of each row of ``tl.tiles``: 4·rows·cols·d (QKᵀ and PV, the counting of
    ``iomodel.flash_forward_io``: a computed tile counts whole, clipped at N)."""
    Nk = int(tl.notes.get("Nk", tl.N)) if isinstance(tl.notes, dict) else tl.N
    rows = np.minimum(tl.Br, tl.N - tl.tiles["i"] * tl.Br)
    cols = np.minimum(tl.Bc, Nk - tl.tiles["j"] * tl.Bc)
    return 4.0 * rows * cols * tl.d


def tail_share(tl) -> tuple[float, float]:
    """(share of the span, start in ns) of the tail: from the first SM to go idle for good
    (the earliest of the SMs' last block ends) to the end of the run."""
    b = tl.blocks
    sms = np.unique(b["sm"])
    last = min(float(b["t1_ns"][b["sm"] == s].max()) for s in sms)
    t_end, t_start = float(b["t1_ns"].max()), float(b["t0_ns"].min())
    return (t_end - last) / (t_end - t_start), last


def in_flight(tl, now: float, Tr: int, Tc: int) -> np.ndarray:
    """(Tr, Tc) counts of the tiles (i, j) in flight at ``now`` (t0 <= now < t1), summed over heads."""
    t = tl.tiles
    on = (t["t0_ns"] <= now) & (now < t["t1_ns"])
    return np.bincount(t["i"][on] * Tc + t["j"][on], minlength=Tr * Tc).reshape(Tr, Tc)


def blocks_per_sm(tl) -> int:
    """How many blocks share an SM, as the run shows it: for every block, the blocks of its SM
    running at the block's midpoint (itself included); the most common of these counts (1 for
    an empty timeline)."""
    b = tl.blocks
    if not len(b):
        return 1
    mid = (b["t0_ns"] + b["t1_ns"]) / 2
    counts = np.zeros(len(b), int)
    for sm in np.unique(b["sm"]):
        on = np.flatnonzero(b["sm"] == sm)
        t0, t1, m = b["t0_ns"][on], b["t1_ns"][on], mid[on]
        counts[on] = ((t0[None, :] <= m[:, None]) & (m[:, None] < t1[None, :])).sum(axis=1)
    return int(np.bincount(counts).argmax())


@dataclass(frozen=True)
class Ceiling:
    """A device's measured dense-matmul rate: ``tflops`` (TFLOP/s, the whole GPU), ``what`` (e.g.
    "fp16 matmul"), ``device`` and ``date`` of the measurement, ``source`` (its file)."""

    tflops: float
    what: str
    device: str
    date: str
    source: str = ""


@dataclass(frozen=True)
class TileCeiling:
    """A block's time per tile against the matmul ceiling (``tile_vs_ceiling``). Times in ns.

    flops: 4·Br·Bc·d, the matmul FLOPs of one whole tile (QKᵀ and PV); measured_ns: a block's
    time per tile, the median over blocks of (block end − start) / key tiles it visited (load_Q
    and write_O included); blocks_per_sm: the blocks that share an SM (``blocks_per_sm``);
    one_sm_ns: the tile's FLOPs at one SM's share of the ceiling (ceiling / sm_count), None
    without a ceiling; allowed_ns: blocks_per_sm × one_sm_ns, the time a block's tile may take
    at the ceiling while that many blocks share the SM's tensor cores; ratio: measured_ns /
    allowed_ns (1 = at the ceiling, 2 = half its rate)."""

    flops: float
    measured_ns: float
    blocks_per_sm: int
    one_sm_ns: float | None
    allowed_ns: float | None
    ratio: float | None


def tile_vs_ceiling(tl, ceiling_tflops: float | None) -> TileCeiling:
    """A block's median time per tile against what the measured matmul ceiling (TFLOP/s for the
    whole GPU, or None) allows: at the ceiling each SM does ceiling / ``tl.sm_count`` FLOP/s, so
    one tile's 4·Br·Bc·d FLOPs take ``one_sm_ns`` on one SM; k blocks share an SM (as observed,
    ``blocks_per_sm``), so a block's tile may take k × that. A tile counts whole, masked or not
    (the FLOP convention of ``tile_flops``). See ``TileCeiling``."""
    b = tl.blocks
    flops = 4.0 * tl.Br * tl.Bc * tl.d
    measured = float(np.median((b["t1_ns"] - b["t0_ns"]) / np.maximum(b["n_j"], 1))) if len(b) else 0.0
    k = blocks_per_sm(tl)
    if not ceiling_tflops:
        return TileCeiling(flops, measured, k, None, None, None)
    one = flops / (ceiling_tflops * 1e12 / tl.sm_count) * 1e9
    return TileCeiling(flops, measured, k, one, k * one, measured / (k * one))


def sm_time_share(tl) -> float:
    """Σ over SMs of the time the SM ran at least one block, over (SM count × the run's span):
    1.0 when every SM is busy from the first block's start to the last block's end. TypeError for
    anything but a Timeline."""
    b = _check(tl).blocks
    span = tl.span_ns
    if not len(b) or span <= 0:
        return 0.0
    busy = sum(float(np.diff(_union(b["t0_ns"][b["sm"] == s], b["t1_ns"][b["sm"] == s]), axis=1).sum())
               for s in np.unique(b["sm"]))
    return busy / (tl.sm_count * span)


def recorded_decode_runs(Nk: int | None = None) -> dict[int, Timeline]:
    """The committed decode timelines (benchmarks/record_timelines.py, ``gpu.trace_decode``) of the
    newest date for cache length Nk (None: the longest recorded that day), {S: Timeline} in
    ascending split count; {} when none is recorded."""
    rows = [r for r in recorded_timelines() if r["kernel"] == "decode"]
    if not rows:
        return {}
    newest = max(r["date"] for r in rows)
    rows = [r for r in rows if r["date"] == newest]
    Nk = max(r["N"] for r in rows) if Nk is None else Nk
    return {r["splits"]: Timeline.load(r["file"]) for r in sorted(rows, key=lambda r: r["splits"] or 0)
            if r["N"] == Nk}


def per_tile_steps(tl, group: int = 0) -> dict[str, float]:
    """{step: mean ns per tile} over the key-tile (forward, decode) or query-block (backward) rows of
    the blocks whose steps ``tl`` keeps, in group ``group`` (a warp or warpgroup), in the order of
    ``tl.stages``; a step with no event is left out. Block-level steps (j = −1) are not per tile.
    TypeError for anything but a Timeline."""
    e = _check(tl).events
    e = e[(e["group"] == group) & (e["j"] >= 0)]
    if not len(e):
        return {}
    tiles = len(np.unique(e["cta"].astype(np.int64) * (1 << 24) + e["j"]))
    out = {}
    for k, name in enumerate(tl.stages):
        sel = e["stage"] == k
        if sel.any():
            out[name] = float((e["t1_ns"][sel] - e["t0_ns"][sel]).sum()) / tiles
    return out


def step_shares(tl, group: int = 0) -> dict[str, float]:
    """{step: its share of the tile}: ``per_tile_steps`` of the same group, each over their sum (the
    shares add up to 1); {} when the group has no per-tile step. TypeError for anything but a Timeline."""
    steps = per_tile_steps(tl, group)
    total = sum(steps.values())
    return {name: ns / total for name, ns in steps.items()} if total > 0 else {}


def trace_cost(tl) -> float | None:
    """What the traced build cost against the untraced one in the same run: traced_ms / kernel_ms − 1
    (0.045: 4.5 % slower), or None when the timeline has not both times. TypeError for anything but a
    Timeline."""
    tl = _check(tl)
    return tl.traced_ms / tl.kernel_ms - 1 if tl.kernel_ms and tl.traced_ms else None


def recorded_backward(kernel: str = "bwd_teaching", causal: bool = False, d: int | None = None,
                      N: int | None = None) -> Timeline | None:
    """The newest recorded timeline of a backward kernel (``BWD_KERNELS``: "bwd_teaching" | "bwd_mma")
    with this mask, of head dimension d and length N when given (otherwise the smallest d and N of
    the newest date among those recorded), or None when none is. ValueError for another kernel."""
    if kernel not in BWD_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(BWD_KERNELS)}; got {kernel!r}")
    rows = [r for r in recorded_timelines() if r["kernel"] == kernel and r["causal"] == bool(causal)
            and (d is None or r["d"] == d) and (N is None or r["N"] == N)]
    if not rows:
        return None
    newest = max(r["date"] for r in rows)
    best = min((r for r in rows if r["date"] == newest), key=lambda r: (r["d"], r["N"]))
    return Timeline.load(best["file"])


def recorded_backward_pair(causal: bool = False, against: str = "forward") -> dict[str, Timeline]:
    """The recorded teaching backward and, of the same d, N, mask **and device**, what it is set
    beside (``AGAINST``): against="forward" gives {"forward": the teaching forward's timeline,
    "backward": the teaching backward's} (what recomputation costs); against="bwd_mma" or
    "bwd_wgmma" gives {"backward": the teaching backward's, "bwd_mma" / "bwd_wgmma": the tensor-core
    backward's} (the same steps on tensor cores: mma.sync, or Hopper's wgmma). Of the teaching
    backward's recordings (newest first, at its smallest d and N of a date) the first one whose
    partner was recorded on the same device, with that device's newest partner; {} when there is
    none. ValueError for another ``against``."""
    if against not in AGAINST:
        raise ValueError(f"against must be one of {', '.join(AGAINST)}; got {against!r}")
    every = recorded_timelines()                        # newest first
    mine = [r for r in every if r["kernel"] == "bwd_teaching" and r["causal"] == bool(causal)]
    partner = "teaching" if against == "forward" else against
    for bwd in sorted(mine, key=lambda r: (r["date"], -r["d"], -r["N"]), reverse=True):
        match = [r for r in every if r["kernel"] == partner and r["causal"] == bool(causal) and r["order"] == "kernel"
                 and (r["d"], r["N"], r["device"]) == (bwd["d"], bwd["N"], bwd["device"])]
        if match:
            other, mine_tl = Timeline.load(match[0]["file"]), Timeline.load(bwd["file"])
            return {"forward": other, "backward": mine_tl} if against == "forward" else \
                {"backward": mine_tl, against: other}
    return {}
