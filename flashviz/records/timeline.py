"""Timeline: what a GPU did during one kernel run, measured inside the kernel (issue 12).

An instrumented kernel (compiled with ``-DFLASHVIZ_TRACE=1``; the normal build has none of it)
records, for every thread block (CTA), its SM (``%smid``) and its start and end on the GPU's
one clock (``%globaltimer``, ns, 32 ns steps on the H200), and for every key tile j and every
warpgroup (tensor-core kernels) or warp (teaching kernel) the start and end of each step,
named with the project's one vocabulary (``flashviz.steps``), on the SM's cycle counter
(``%clock64``, converted to ns with the block's own globaltimer / clock ratio).

``Timeline`` holds the result as three NumPy record arrays:

* ``blocks``: one row per CTA — ``cta, sm, i, h, b, n_j, t0_ns, t1_ns`` (i: query block; h:
  head; b: batch; n_j: key tiles it visited; times in ns from the first block's start);
* ``tiles``: one row per key tile a block visited — ``cta, i, j, t0_ns, t1_ns`` (from the first
  step of the tile in any group to the last one's end: the (i, j) tile "in flight");
* ``events``: one row per step — ``cta, sm, group, j, stage, t0_ns, t1_ns`` (group: warpgroup
  or warp; j = -1 for block-level steps such as load_Q and write_O; ``stage`` indexes
  ``stages``, the step names of ``STAGES``). A live trace has every block's events; a saved
  file keeps them for ``detail_ctas`` only (a sample of blocks, ``save(detail=…)``), the
  blocks and tiles for all.

and the run's facts: ``kernel`` ("teaching" | "wgmma" | "fa3" | "decode"; fa3's rows are the tiles
of its work list, its group 0 the producer warpgroup), ``grid`` (Tr, H, B), ``N``, ``d``,
``Br``, ``Bc``, ``causal``, ``dtype``, ``sm_count``, ``device``, ``date``, ``kernel_ms`` (the
uninstrumented kernel, same inputs, same run), ``traced_ms`` (the instrumented one), ``order``
(which query blocks the hardware starts first, ``ORDERS``: "kernel" — the kernel's own order,
causal long rows of each head first — or the lesson's experiments "ascending" and
"longest_first"; kernels/fv_trace.cuh, FV_BLOCK_ORDER).

The split-KV decode ("decode", kernels/flash_decode.cu, ``gpu.trace_decode``) reuses the
columns with its own meaning: ``grid`` is its launch grid (S splits, H_kv · row chunks, B), a
block's ``i`` is its split s and ``h`` its KV head (times row chunks), ``N`` is Nk (the cached
keys), ``Br`` the query rows a block takes (min(G·Nq, 32)), ``Bc`` = 64, the groups are its four
warps, and the tiles' ``j`` are the cache's key tiles (a split covers a range of them); the run's
B, H, H_kv, Nq and S are in ``notes``. Its step at the end is ``write_partial`` when S > 1 (the
block writes its split's O_s and lse_s for the merge) and ``write_O`` when S = 1.

The backwards ("bwd_teaching", kernels/flash_bwd.cu, "bwd_mma", kernels/flash_bwd_mma.cu, and
"bwd_wgmma", kernels/flash_bwd_wgmma.cu; ``gpu.trace_backward``) turn the loops round as FlashAttention-2's Algorithm 2 does: a block is a
key block, so ``blocks["i"]`` holds its key block j and the rows of ``tiles`` and ``events`` are
query blocks (their ``j`` column holds the query block i); ``grid`` is (Tc, H, B); their steps are
``BWD_STAGES``, their groups their warps (eight; the mma.sync one Bc/16) or warpgroups (the wgmma
one, Bc/64).

Files are JSON (``save`` / ``load``): the facts as plain values, each column as base64 of its
little-endian bytes (compact: a 4096-block run is a few MB, not tens), gzip-compressed when
the name ends in ``.gz``.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .files import package_dir

FORMAT = "flashviz-timeline/1"
#: the forward kernels (the TimelineExplorer's choices, ``gpu.trace_kernel``)
FORWARD_KERNELS = ("teaching", "wgmma", "fa3")
#: every kernel with a timeline switch: the forward ones, the split-KV decode (``gpu.trace_decode``) and
#: the backwards (``gpu.trace_backward``: the teaching one and the tensor-core ones)
KERNELS = FORWARD_KERNELS + ("decode", "bwd_teaching", "bwd_mma", "bwd_wgmma")
#: block orders (kernels/fv_trace.cuh FLASHVIZ_BLOCK_ORDER = 0, 1, 2): the kernel's own; i = blockIdx.x;
#: the longest rows of every head first
ORDERS = ("kernel", "ascending", "longest_first")
#: the stage numbers of kernels/fv_trace.cuh (FV_STAGE_*), by name: steps of flashviz.steps
STAGES = ("load_Q", "load_KV", "load_K", "load_V", "compute_S", "update_ml", "convert_P", "accumulate_O",
          "write_O")
#: the backward's steps (kernels/fv_trace.cuh FV_BSTAGE_*, in the same nine slots): FA2 Algorithm 2
BWD_STAGES = ("load_KV", "load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK", "update_dQ",
              "write_dKdV")

BLOCK_DTYPE = np.dtype([("cta", "<i4"), ("sm", "<i2"), ("i", "<i4"), ("h", "<i4"), ("b", "<i4"), ("n_j", "<i4"),
                        ("t0_ns", "<f8"), ("t1_ns", "<f8")])
TILE_DTYPE = np.dtype([("cta", "<i4"), ("i", "<i4"), ("j", "<i4"), ("t0_ns", "<f8"), ("t1_ns", "<f8")])
EVENT_DTYPE = np.dtype([("cta", "<i4"), ("sm", "<i2"), ("group", "<i2"), ("j", "<i4"), ("stage", "<i1"),
                        ("t0_ns", "<f8"), ("t1_ns", "<f8")])
_NAME = re.compile(rf"timeline-(?P<kernel>{'|'.join(KERNELS)})-d(?P<d>\d+)(?P<causal>-causal)?(?:-(?P<order>ascending|longest_first))?"
                   r"-n(?P<N>\d+)(?:-s(?P<splits>\d+))?-(?P<device>[a-z0-9]+(?:-[a-z0-9]+)*)-(?P<date>\d{4}-\d{2}-\d{2})\.json\.gz")
#: how each column is stored in a file (times as float32 ns: exact to well under the 32 ns tick)
_STORED = {"<f8": "<f4"}
META = ("kernel", "grid", "N", "d", "Br", "Bc", "causal", "dtype", "sm_count", "device", "date",
        "kernel_ms", "traced_ms", "commit", "order", "notes")


@dataclass
class Timeline:
    """One instrumented run: ``blocks`` and ``events`` (NumPy record arrays, see the module
    docstring), ``stages`` (the step names ``events["stage"]`` indexes) and the run's facts.
    Times in ns from the first block's start; ``kernel_ms`` / ``traced_ms`` in ms."""

    kernel: str
    grid: tuple[int, int, int]
    N: int
    d: int
    Br: int
    Bc: int
    causal: bool
    dtype: str
    sm_count: int
    device: str
    date: str
    blocks: np.ndarray
    tiles: np.ndarray
    events: np.ndarray
    stages: tuple[str, ...] = STAGES
    detail_ctas: tuple[int, ...] | None = None
    kernel_ms: float | None = None
    traced_ms: float | None = None
    commit: str = ""
    order: str = "kernel"
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {self.kernel!r}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {self.order!r}")
        self.grid = tuple(int(g) for g in self.grid)
        if len(self.grid) != 3 or min(self.grid) < 1:
            raise ValueError(f"grid must be three positive block counts (Tr, H, B), got {self.grid!r}")
        self.blocks = np.asarray(self.blocks, BLOCK_DTYPE)
        self.tiles = np.asarray(self.tiles, TILE_DTYPE)
        self.events = np.asarray(self.events, EVENT_DTYPE)
        self.stages = tuple(str(s) for s in self.stages)
        if self.detail_ctas is not None:
            self.detail_ctas = tuple(int(c) for c in self.detail_ctas)
        if len(self.blocks) != int(np.prod(self.grid)):
            raise ValueError(f"a grid of {self.grid} has {int(np.prod(self.grid))} blocks; the timeline has "
                             f"{len(self.blocks)}")
        if len(self.events) and not (0 <= self.events["stage"].min() and self.events["stage"].max() < len(self.stages)):
            raise ValueError("an event names a stage outside stages")
        for name, arr in (("blocks", self.blocks), ("tiles", self.tiles), ("events", self.events)):
            if len(arr) and not np.all(arr["t1_ns"] >= arr["t0_ns"]):
                raise ValueError(f"{name}: an end time precedes its start")

    # ------------------------------------------------------------------ derived figures
    @property
    def span_ns(self) -> float:
        """From the first block's start to the last block's end (ns)."""
        return float(self.blocks["t1_ns"].max() - self.blocks["t0_ns"].min()) if len(self.blocks) else 0.0

    def stage_events(self, stage: str) -> np.ndarray:
        """The events of one step (a name of ``stages``); KeyError for another name."""
        if stage not in self.stages:
            raise KeyError(f"stage must be one of {', '.join(self.stages)}; got {stage!r}")
        return self.events[self.events["stage"] == self.stages.index(stage)]

    def busy_sms(self, t_ns) -> np.ndarray:
        """How many SMs run at least one block at each time in ``t_ns`` (array of ns)."""
        t = np.atleast_1d(np.asarray(t_ns, float))
        out = np.zeros(t.shape, int)
        for sm in np.unique(self.blocks["sm"]):
            b = self.blocks[self.blocks["sm"] == sm]
            out += ((b["t0_ns"][None, :] <= t[:, None]) & (t[:, None] < b["t1_ns"][None, :])).any(axis=1)
        return out

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict:
        """The timeline as a JSON-ready dict (columns as base64 of little-endian bytes)."""
        def columns(arr):
            out = {}
            for name in arr.dtype.names:
                col = arr[name]
                dt = _STORED.get(col.dtype.str, col.dtype.str)
                out[name] = {"dtype": dt, "data": base64.b64encode(np.ascontiguousarray(col, dt).tobytes()).decode()}
            return out

        meta = {k: getattr(self, k) for k in META}
        meta["grid"] = list(self.grid)
        return {"format": FORMAT, **meta, "stages": list(self.stages),
                "detail_ctas": None if self.detail_ctas is None else list(self.detail_ctas),
                "n_blocks": len(self.blocks), "n_tiles": len(self.tiles), "n_events": len(self.events),
                "blocks": columns(self.blocks), "tiles": columns(self.tiles), "events": columns(self.events)}

    @classmethod
    def from_json(cls, data: dict) -> Timeline:
        """Inverse of ``to_json``; ValueError (one line) for anything that is not such a dict."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"not a flashviz timeline (expected format {FORMAT!r}, got {got!r})")

        def table(cols, dtype, n):
            arr = np.zeros(n, dtype)
            for name in dtype.names:
                c = cols[name]
                arr[name] = np.frombuffer(base64.b64decode(c["data"]), np.dtype(c["dtype"]), count=n)
            return arr

        try:
            blocks = table(data["blocks"], BLOCK_DTYPE, int(data["n_blocks"]))
            tiles = table(data["tiles"], TILE_DTYPE, int(data["n_tiles"]))
            events = table(data["events"], EVENT_DTYPE, int(data["n_events"]))
            meta = {k: data[k] for k in META if k in data}
            return cls(blocks=blocks, tiles=tiles, events=events, stages=tuple(data["stages"]),
                       detail_ctas=data.get("detail_ctas"), **meta)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a damaged flashviz timeline: {type(exc).__name__}: {exc}") from None

    def sampled(self, detail: int | None = 16) -> Timeline:
        """This timeline with step events kept for ``detail`` blocks only (None: all): the first
        and last to start, the longest, the shortest, and the rest evenly over the start order.
        Blocks and tiles are kept whole."""
        if detail is None or len(self.blocks) <= detail:
            return self
        order = np.argsort(self.blocks["t0_ns"], kind="stable")
        dur = self.blocks["t1_ns"] - self.blocks["t0_ns"]
        pick = {int(order[0]), int(order[-1]), int(np.argmax(dur)), int(np.argmin(dur))}
        for k in np.linspace(0, len(order) - 1, detail).round().astype(int):
            if len(pick) >= detail:
                break
            pick.add(int(order[k]))
        ctas = tuple(sorted(int(self.blocks["cta"][k]) for k in pick))
        keep = np.isin(self.events["cta"], ctas)
        meta = {k: getattr(self, k) for k in META}
        return Timeline(blocks=self.blocks, tiles=self.tiles, events=self.events[keep], stages=self.stages,
                        detail_ctas=ctas, **meta)

    def save(self, path, *, detail: int | None = None) -> Path:
        """Write the timeline as JSON (gzip-compressed when ``path`` ends in .gz); returns the Path.
        detail: keep the step events of this many blocks only (``sampled``); None keeps all.
        Raises the one-line OSErrors of ``flashviz.checks.check_output_path`` before writing."""
        from .. import checks

        p = checks.check_output_path(path, (".json", ".gz"))
        text = json.dumps(self.sampled(detail).to_json(), separators=(",", ":")).encode()
        p.write_bytes(gzip.compress(text, mtime=0) if p.suffix == ".gz" else text)
        return p

    @classmethod
    def load(cls, path) -> Timeline:
        """Read a file written by ``save`` (.json or .json.gz). FileNotFoundError / ValueError, one line."""
        if isinstance(path, bytes) or not isinstance(path, (str, Path)):
            raise TypeError(f"path must be a file name (str or pathlib.Path), got {type(path).__name__}")
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"no timeline file {str(p)!r}")
        raw = p.read_bytes()
        try:
            data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{str(p)!r} is not a timeline file ({type(exc).__name__})") from None
        return cls.from_json(data)

    def __repr__(self) -> str:
        return (f"Timeline({self.kernel}, N={self.N}, d={self.d}, Br×Bc={self.Br}×{self.Bc}, "
                f"{'causal, ' if self.causal else ''}{'' if self.order == 'kernel' else self.order + ' order, '}"
                f"{len(self.blocks)} blocks on {self.sm_count} SMs, "
                f"{len(self.events)} events, {self.span_ns / 1e3:.1f} µs; {self.device}, {self.date})")


def recorded_timelines() -> list[dict]:
    """The committed timelines (benchmarks/results/timeline-*.json.gz, package ``flashviz.results``)
    as [{"file", "kernel", "d", "causal", "order", "N", "splits", "device", "date"}] read from their
    names (``timeline-<kernel>-d<d>[-causal][-<order>]-n<N>[-s<S>]-<device>-<date>.json.gz``; no order
    part: the kernel's own, "kernel"; ``-s<S>``: a decode run's split count, else splits None),
    newest first; [] without any."""
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return []
    out = []
    for f in folder.iterdir():
        m = _NAME.fullmatch(f.name)
        if m:
            out.append({"file": f, "kernel": m["kernel"], "d": int(m["d"]), "causal": bool(m["causal"]),
                        "order": m["order"] or "kernel", "N": int(m["N"]),
                        "splits": int(m["splits"]) if m["splits"] else None, "device": m["device"], "date": m["date"]})
    return sorted(out, key=lambda r: (r["date"], r["file"].name), reverse=True)


def latest_timeline(kernel: str = "wgmma", causal: bool = False, d: int | None = None, N: int | None = None,
                    order: str = "kernel") -> Timeline:
    """The newest committed timeline of ``kernel`` (``FORWARD_KERNELS``: "teaching" | "wgmma" | "fa3"; the decode
    kernel's: ``timeline_stats.recorded_decode_runs``) with this causal flag
    and block ``order`` (``ORDERS``; default the kernel's own), and d, N when given (otherwise the
    smallest d and N recorded): works without a GPU.
    Raises ValueError for a bad kernel or order name and LookupError naming what is recorded when none matches."""
    if kernel not in FORWARD_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(FORWARD_KERNELS)}; got {kernel!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    rows = [r for r in recorded_timelines() if r["kernel"] == kernel and r["causal"] == bool(causal)
            and r["order"] == order and (d is None or r["d"] == d) and (N is None or r["N"] == N)]
    if not rows:
        have = ", ".join(sorted({f"{r['kernel']} d={r['d']} N={r['N']}{' causal' if r['causal'] else ''}"
                                 f"{'' if r['order'] == 'kernel' else ' ' + r['order']}"
                                 for r in recorded_timelines()})) or "none"
        raise LookupError(f"no recorded timeline of {kernel}{' causal' if causal else ''}"
                          f"{f' d={d}' if d else ''}{f' N={N}' if N else ''}"
                          f"{'' if order == 'kernel' else f' ({order})'}; recorded: {have}")
    newest = max(r["date"] for r in rows)
    best = min((r for r in rows if r["date"] == newest), key=lambda r: (r["d"], r["N"]))
    return Timeline.load(best["file"])
