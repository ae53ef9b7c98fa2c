"""DecodeExplorer (chapter 9): decode attention — split-KV (Flash-Decoding), grouped-query heads
and a paged KV cache — with the bytes it moves and the SMs it keeps busy.

Controls (ipywidgets) drive one recorded run: changing N_k, the batch B, the group size H/H_kv,
the split count (or "auto": ``decode.num_splits_heuristic``), the page size or Nq re-runs
``decode_attention(..., block_table=…, record=True)`` on seeded inputs stored as a paged cache
(pages in a shuffled pool, as vLLM's allocator leaves them), checks the output against
``reference.attention`` head by head (dense, float64) and the counted bytes against
``iomodel.decode_io``. Play / the step slider replay the run through
``flashviz.views.decode_view.DecodeFigure``: the blocks on the SMs, then the merge split by split.

"Break it" toggles: no splits (num_splits = 1: B·H_kv blocks, most SMs idle), merging the
partials without rescaling (``decode.merge_partials(..., rescale=False)``: the wrong answer and its
error) and tiny pages (one token a page: the block-table reads grow; their bytes are shown).

A change recomputes only what it changes: the inputs and the dense reference (the slow part:
``reference.attention`` of every query head) are kept while N_k, B, H/H_kv and Nq stay; the last
RUNS_KEPT runs of those inputs (the run, its block table, replay and checks), by split count and
page size, are kept too. So "merge without rescaling" (which changes no run: the replay always
holds both merges) only redraws, and a toggle switched back finds its run.
"""

from __future__ import annotations

from collections import OrderedDict

import ipywidgets as W
import numpy as np

from .. import iomodel
from ..checks import check_choice, shown
from ..decode import MAX_SPLITS, decode_attention, paginate
from ..reference import attention
from ..replay.decode import DecodeReplay
from ..views.decode_view import DecodeFigure
from ..views.drawlock import serialised
from ..views.style import NOTEBOOK_FIGSIZE_SHORT, fmt_bytes, sci_html
from .base import NOTEBOOK_DPI, FrameWidget, check_bool, check_int
from .options import DTYPES, match_option

NK_OPTIONS = (256, 512, 1024, 2048, 4096, 8192, 16384)
GROUPS = (1, 2, 4, 8)
PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (16, 32, 64, 128)
KEY_BLOCKS = (16, 32, 64, 128)
SOURCES = ("rising", "random")
#: Largest N_k, batch, group size, KV heads and query rows a run may have.
MAX_NK, MAX_B, MAX_GROUP, MAX_H_KV, MAX_NQ, MAX_PAGE = 16384, 16, 16, 16, 8, 256
#: Most cached (token, KV head) rows, B·H_kv·N_k: the NumPy run records every key block of every
#: (sequence, KV head) and keeps float32 copies of the cache, so time and memory grow with it;
#: 131,072 rows (B = 1, H_kv = 8, N_k = 16k; or B = 8, N_k = 2k) run in about a second and
#: ~0.3 GB at d = 128. The constructor refuses more, a slider keeps the previous run.
MAX_CACHE_ROWS = 131_072
#: "tiny pages": the page size the toggle forces (one token a page)
TINY_PAGE = 1
#: runs of the current inputs kept for a control switched back (each holds its trace and replay:
#: ~5 MB at the lesson's default, ~50 MB at MAX_CACHE_ROWS); 4 = every mix of the two toggles
#: that change the run (no splits, tiny pages)
RUNS_KEPT = 4
#: the check passes when max |O − O_ref| <= TOL over every head (rounding of the output's type)
TOL = {np.float64: 1e-12, np.float32: 2e-5, np.float16: 3e-3}
#: how far the keys drift toward the queries in the "rising" inputs: scores rise by about this
#: much from the oldest key to the newest
RISE = 4.0


def decode_inputs(B, H, H_kv, Nq, Nk, d, *, source="rising", seed=0, dtype=np.float16):
    """Seeded Q (B, H, Nq, d), K, V (B, H_kv, Nk, d) in ``dtype`` and a one-line description.

    "random": unit normal. "rising": the same, plus a shared direction u in Q and in K that grows
    along the cache (key j gets (j / (Nk − 1))·c·u), so the scores rise by about RISE from the
    oldest key to the newest and each later split's max is larger — a made-up pattern in which
    merging without rescaling goes wrong (in real models the largest scores are often the first
    token's and the latest ones)."""
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((B, H, Nq, d), dtype=np.float32)
    K = rng.standard_normal((B, H_kv, Nk, d), dtype=np.float32)
    V = rng.standard_normal((B, H_kv, Nk, d), dtype=np.float32)
    if source == "rising":
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        c = np.sqrt(RISE * np.sqrt(d))
        Q += (c * u).astype(np.float32)
        K += (np.linspace(0, 1, Nk)[:, None] * c * u).astype(np.float32)
        desc = f"random normal, scores rising by ~{RISE:g} along the cache (seed {seed})"
    else:
        desc = f"random normal (seed {seed})"
    return Q.astype(dtype), K.astype(dtype), V.astype(dtype), desc


def paged_cache(K, V, page_size: int, seed: int = 0):
    """K, V (B, H_kv, Nk, d) as page pools (B·P, page_size, H_kv, d) in a shuffled order (seeded), and
    the block table (B, P) int32 that finds them (``decode.paginate``; P = ⌈Nk/page_size⌉)."""
    B, _, Nk, _ = K.shape
    perm = np.random.default_rng(seed + 1).permutation(B * -(-Nk // page_size))
    Kp, table = paginate(K, page_size, perm)
    Vp, _ = paginate(V, page_size, perm)
    return Kp, Vp, table


def cache_problem(B: int, H_kv: int, Nk: int) -> str | None:
    """Why a configuration is too big to record (more than MAX_CACHE_ROWS cached rows), or None."""
    rows = B * H_kv * Nk
    if rows <= MAX_CACHE_ROWS:
        return None
    return (f"B·H_kv·Nk = {B}·{H_kv}·{Nk:,} = {rows:,} cached rows — too many to record "
            f"(limit {MAX_CACHE_ROWS:,}). Pick a smaller Nk or B.")


def max_batch(H_kv: int, Nk: int) -> int:
    """The largest B (sequences) a run with H_kv KV heads and Nk cached keys may record: at most
    MAX_B, and B·H_kv·Nk <= MAX_CACHE_ROWS; at least 1 (``cache_problem`` then says why a
    cache too long even for one sequence is refused)."""
    return max(1, min(MAX_B, MAX_CACHE_ROWS // (H_kv * Nk)))


def _err(e: float) -> str:
    """An error for a status line or caption: 6.1e-05, or 0 when it is exactly 0."""
    return f"{e:.1e}" if e else "0"


def _with(options, value):
    return tuple(sorted(set(options) | {value}))




class DecodeExplorer(FrameWidget):
    """Split-KV decode on a paged, grouped-query KV cache: the blocks on the SMs, the bytes, the merge.

    Parameters
    ----------
    Nk : int, 1..16384 — keys in the cache of each sequence.
    B : int, 1..8 — sequences (the batch).
    group : int, 1..16 — query heads per KV head, G = H / H_kv (1: multi-head attention).
    num_splits : "auto" or int 1..128 — split count; "auto" is ``decode.num_splits_heuristic``
        for B·H_kv blocks on 132 SMs.
    page_size : int, 1..256 — tokens a page of the paged cache holds.
    Nq : int, 1..8 — query rows per head (1: plain decoding; more: speculative decoding).
    H_kv : int, 1..16 — KV heads (H = group · H_kv query heads).
    d : int — head dimension, one of 16, 32, 64, 128.
    Bc : int — keys per key block, one of 16, 32, 64, 128.
    no_splits, no_rescale, tiny_pages : bool — the "break it" toggles: one split; merge the
        partials without rescaling (shown beside the exact merge); pages of one token.
    source : "rising" | "random" — the inputs (``decode_inputs``).
    dtype : "float16" | "float32" | "float64" (or the dropdown's label, or a NumPy dtype) — the
        element type; bytes are counted in its size (partials in float32, float64 for float64).
    causal : bool — bottom-right aligned mask (query row i sees keys j <= i + Nk − Nq).
    seed : int >= 0 — seeds the inputs and the page shuffle.
    canvas, figsize, dpi, key, text_scale : as for every FrameWidget (see flashviz.widgets.base).

    Public: ``n_frames``, ``show_frame(k)`` → DecodeState, ``close()``, ``widget``, ``save_png``,
    ``save_gif``; after each run: ``result`` (the DecodeResult, with ``.trace``), ``inputs``
    (Q, K, V: the contiguous cache, before paging), ``block_table``, ``reference`` (O of
    ``reference.attention`` per head, float64), ``model`` (``iomodel.decode_io`` of the shape),
    ``errors`` ({"merge": max |O − O_ref|, "no rescale": the same for the merge without
    rescaling}), ``ok`` (the check passed), ``replay``, ``state``. Raises TypeError/ValueError
    (one line) for arguments outside those ranges; sliders moved past MAX_CACHE_ROWS keep the
    previous run and say why in the status line.
    """

    kind = "DecodeExplorer"
    export_stem = "flashviz-decode"

    def __init__(self, Nk: int = 4096, B: int = 1, group: int = 4, num_splits="auto", page_size: int = 16,
                 Nq: int = 1, *, H_kv: int = 8, d: int = 128, Bc: int = 64, no_splits: bool = False,
                 no_rescale: bool = False, tiny_pages: bool = False, source: str = "rising",
                 dtype="float16 (2 B)", causal: bool = True, seed: int = 0, canvas: str = "auto",
                 figsize=NOTEBOOK_FIGSIZE_SHORT, dpi: float = NOTEBOOK_DPI, key=None, text_scale: float = 1.0):
        Nk, B = check_int(Nk, "Nk", 1, MAX_NK), check_int(B, "B", 1, MAX_B)
        group = check_int(group, "group", 1, MAX_GROUP)
        if not (isinstance(num_splits, str) and num_splits == "auto"):
            if isinstance(num_splits, str):
                raise ValueError(f"num_splits must be 'auto' or an integer between 1 and {MAX_SPLITS}, "
                                 f"got {shown(num_splits)}")
            num_splits = check_int(num_splits, "num_splits", 1, MAX_SPLITS)
        page_size = check_int(page_size, "page_size", 1, MAX_PAGE)
        Nq, H_kv = check_int(Nq, "Nq", 1, MAX_NQ), check_int(H_kv, "H_kv", 1, MAX_H_KV)
        d, Bc = check_choice(d, "d", HEAD_DIMS), check_choice(Bc, "Bc", KEY_BLOCKS)
        toggles = {n: check_bool(v, n) for n, v in (("no_splits", no_splits), ("no_rescale", no_rescale),
                                                     ("tiny_pages", tiny_pages))}
        check_choice(source, "source", SOURCES)
        dtype = match_option(dtype, DTYPES, "dtype")
        causal = check_bool(causal, "causal")
        seed = check_int(seed, "seed", 0)
        problem = cache_problem(B, H_kv, Nk)
        if problem:
            raise ValueError(problem.replace(" — too many to record", ", more than a run can record"))
        super().__init__(canvas=canvas, figsize=figsize, dpi=dpi, key=key, text_scale=text_scale, interval=300)
        try:
            self._build(Nk, B, group, num_splits, page_size, Nq, H_kv, d, Bc, toggles, source, dtype, causal, seed)
        except BaseException:
            self.close()       # a failed constructor leaves no figure behind
            raise

    def _build(self, Nk, B, group, num_splits, page_size, Nq, H_kv, d, Bc, toggles, source, dtype, causal, seed):
        self.H_kv, self.d_head, self.Bc, self.source, self.dtype, self.causal, self.seed = (
            H_kv, d, Bc, source, dtype, causal, seed)
        self.result = self.inputs = self.block_table = self.reference = self.model = self.replay = None
        self.errors, self.ok = {}, None
        self._data_key, self._data = None, None      # (Nk, B, H, Nq) → (Q, K, V, desc, reference)
        self._runs = OrderedDict()                     # (num_splits asked, page size) → the run, for _data
        lay, wide = W.Layout, {"description_width": "initial"}
        self.Nk = W.SelectionSlider(options=list(_with(NK_OPTIONS, Nk)), value=Nk, description="Nk (keys)",
                                    continuous_update=False, style=wide, layout=lay(width="300px"))
        self.B = W.IntSlider(value=B, min=1, max=max_batch(H_kv, Nk), description="B (sequences)", continuous_update=False,
                             style=wide, layout=lay(width="250px"))
        self.group = W.SelectionSlider(options=list(_with(GROUPS, group)), value=group, description="H/H_kv",
                                       continuous_update=False, style=wide, layout=lay(width="220px"))
        self.Nq = W.IntSlider(value=Nq, min=1, max=MAX_NQ, description="Nq", continuous_update=False,
                              layout=lay(width="230px"))
        auto = num_splits == "auto"
        self.auto = W.Checkbox(value=auto, description="auto (heuristic)", indent=False, layout=lay(width="140px"))
        self.num_splits = W.IntSlider(value=1 if auto else num_splits, min=1, max=MAX_SPLITS, description="splits",
                                      continuous_update=False, disabled=auto, layout=lay(width="300px"))
        self.page_size = W.SelectionSlider(options=list(_with(PAGE_SIZES, page_size)), value=page_size,
                                           description="page size", continuous_update=False, style=wide,
                                           layout=lay(width="260px"))
        self.no_splits = W.Checkbox(value=toggles["no_splits"], description="break it: no splits", indent=False,
                                    layout=lay(width="170px"))
        self.no_rescale = W.Checkbox(value=toggles["no_rescale"], description="break it: merge without rescaling",
                                     indent=False, layout=lay(width="260px"))
        self.tiny_pages = W.Checkbox(value=toggles["tiny_pages"], description=f"break it: tiny pages ({TINY_PAGE})",
                                     indent=False, layout=lay(width="200px"))
        self.Nk.observe(self._cap_batch, names="value")       # before _watch: B's cap moves first
        self._watch(self.Nk, self.B, self.group, self.Nq, self.num_splits, self.page_size, self.auto, self.no_splits,
                    self.no_rescale, self.tiny_pages)
        self._layout(W.HBox([self.Nk, self.B, self.group, self.Nq]),
                     W.HBox([self.auto, self.num_splits, self.page_size]),
                     W.HBox([self.no_splits, self.no_rescale, self.tiny_pages]))
        self._rebuild()

    # --- the run -------------------------------------------------------------------------------
    def _choices(self):
        """(Nk, B, H, Nq, requested num_splits or None for the heuristic, page size) from the controls."""
        ns = 1 if self.no_splits.value else (None if self.auto.value else self.num_splits.value)
        ps = TINY_PAGE if self.tiny_pages.value else self.page_size.value
        return self.Nk.value, self.B.value, self.group.value * self.H_kv, self.Nq.value, ns, ps

    def _config_problem(self):
        return cache_problem(self.B.value, self.H_kv, self.Nk.value)

    @serialised
    def _cap_batch(self, change):
        """A new Nk moves the B slider's end to ``max_batch`` (a B past it would be refused as too
        many cached rows to record): a lower end clamps B, in the same rebuild as the new Nk."""
        top = max_batch(self.H_kv, change["new"])
        if top != self.B.max:
            self._suspended = True         # the clamp of B is part of this change: one rebuild (Nk's)
            try:
                self.B.max = top
            finally:
                self._suspended = False

    def _inputs(self, Nk, B, H, Nq):
        """(Q, K, V, desc, reference) for this shape: made once, kept while the shape stays (a new
        shape drops them and every run of them)."""
        key = (Nk, B, H, Nq)
        if self._data_key != key:
            self._data_key, self._data = None, None
            self._runs.clear()
            Q, K, V, desc = decode_inputs(B, H, self.H_kv, Nq, Nk, self.d_head, source=self.source,
                                          seed=self.seed, dtype=DTYPES[self.dtype])
            G = H // self.H_kv
            ref = np.zeros((B, H, Nq, self.d_head))
            for b in range(B):               # the G query heads of KV head g against it (a view, no copy)
                for g in range(self.H_kv):
                    heads = slice(g * G, (g + 1) * G)
                    K_g, V_g = (np.broadcast_to(X[b, g], (G, *X.shape[2:])) for X in (K, V))
                    ref[b, heads] = attention(Q[b, heads], K_g, V_g, causal=self.causal)
            for X in (Q, K, V, ref):          # shared by the kept runs: read-only
                X.flags.writeable = False
            self._data_key, self._data = key, (Q, K, V, desc, ref)
        return self._data

    def _record(self, Q, K, V, ref, Nk, ns, ps):
        """(block table, DecodeResult, DecodeReplay, decode_io model, errors, ok) of one run; the
        last RUNS_KEPT of the current inputs are kept, by (ns, ps)."""
        key = (ns, ps)
        if key in self._runs:
            self._runs.move_to_end(key)
            return self._runs[key]
        B, H, Nq = Q.shape[0], Q.shape[1], Q.shape[2]
        dt = DTYPES[self.dtype]
        Kp, Vp, table = paged_cache(K, V, ps, self.seed)
        r = decode_attention(Q, Kp, Vp, num_splits=ns, Bc=self.Bc, causal=self.causal, block_table=table, Nk=Nk,
                             record=True)
        model = iomodel.decode_io(Nq, Nk, self.d_head, H=H, H_kv=self.H_kv, num_splits=r.num_splits, Bc=self.Bc,
                                  itemsize=np.dtype(dt).itemsize, page_size=ps, causal=self.causal, B=B)
        rp = DecodeReplay(r, ref)
        run = (table, r, rp, model, {"merge": rp.err, "no rescale": rp.err_broken},
               bool(rp.err <= TOL[dt]) and r.io == model)
        self._runs[key] = run
        while len(self._runs) > RUNS_KEPT:
            self._runs.popitem(last=False)
        return run

    def _run(self):
        Nk, B, H, Nq, ns, ps = self._choices()
        Q, K, V, desc, ref = self._inputs(Nk, B, H, Nq)
        table, r, rp, model, errors, ok = self._record(Q, K, V, ref, Nk, ns, ps)
        self.inputs, self.block_table, self.result, self.reference = (Q, K, V), table, r, ref
        self.model, self.replay, self.errors, self.ok = model, rp, dict(errors), ok
        return desc, ns

    def _status(self, ns):
        r, rp, name = self.result, self.replay, np.dtype(DTYPES[self.dtype]).name
        how = "no splits" if self.no_splits.value else ("heuristic" if ns is None else "chosen")
        parts = []
        if self.ok:
            parts.append(f"<span style='color:#2ca02c'>✓ O = reference.attention (dense, float64) for all "
                         f"{rp.B * rp.H} heads: max error {_err(rp.err)} ({name} output) · bytes counted from the run "
                         f"= iomodel.decode_io: {fmt_bytes(r.io.hbm_bytes)}</span>")
        else:
            parts.append(f"<span style='color:#d62728'>✗ check failed: max error {rp.err:.2e} (allowed "
                         f"{TOL[DTYPES[self.dtype]]:.0e}); bytes {'=' if r.io == self.model else '≠'} "
                         f"iomodel.decode_io</span>")
        parts.append(f"{r.num_splits} split{'s' * (r.num_splits > 1)} ({how})")
        if self.no_rescale.value:
            if r.num_splits == 1:
                parts.append("merge without rescaling: nothing to merge with one split")
            else:
                wrong = rp.err_broken > 10 * max(TOL[DTYPES[self.dtype]], rp.err)
                colour, mark = ("#d62728", "✗") if wrong else ("#2ca02c", "✓")
                verdict = "WRONG" if wrong else "still right on these inputs"
                parts.append(f"<span style='color:{colour}'>{mark} merged without rescaling: max error "
                             f"{rp.err_broken:.3g} — {verdict}</span>")
        return sci_html("  ·  ".join(parts))

    def _caption(self, desc, ns):
        r, rp, tr = self.result, self.replay, self.result.trace
        how = "no splits" if self.no_splits.value else ("auto: heuristic" if ns is None else "chosen")
        name = np.dtype(DTYPES[self.dtype]).name
        check = (f"✓ O = dense attention, max error {_err(rp.err)}" if self.ok else
                 "✗ check failed: see the status line")
        return (f"inputs: {desc}  ·  B = {rp.B}, H = {rp.H}, H_kv = {rp.H_kv} (G = {rp.G}), Nq = {rp.Nq}, "
                f"Nk = {tr.Nk:,}, d = {tr.d}, Bc = {tr.Bc}, {name}{', causal' if tr.causal else ''}\n"
                f"{r.num_splits} split{'s' * (r.num_splits > 1)} ({how}) → {rp.n_blocks} blocks on "
                f"{rp.num_sms} SMs  ·  "
                f"pages of {tr.page_size} token{'s' * (tr.page_size > 1)}, shuffled  ·  "
                f"{r.io.intensity:.1f} FLOP/byte  ·  {check}")

    @serialised
    def _rebuild(self):
        """Keep the split slider showing the count that runs (the heuristic's under "auto")."""
        self.num_splits.disabled = bool(self.auto.value or self.no_splits.value)
        self.auto.disabled = bool(self.no_splits.value)
        self.page_size.disabled = bool(self.tiny_pages.value)
        super()._rebuild()
        if self.result is not None and self.auto.value and not self.no_splits.value:
            self.num_splits.unobserve(self._on_config, names="value")
            self.num_splits.value = self.result.num_splits
            self.num_splits.observe(self._on_config, names="value")

    def close(self):
        """Close the figure and every control, and drop the kept inputs and runs (idempotent)."""
        super().close()
        if hasattr(self, "_runs"):                  # not when the constructor failed before _build
            self._runs.clear()
            self._data_key = self._data = None

    def _make_view(self):
        desc, ns = self._run()
        self.status.value = self._status(ns)
        view = DecodeFigure(self.fig, self.replay, caption=self._caption(desc, ns), broken=self.no_rescale.value)
        if not self._png_mode:
            view.enable_blitting()
        return view
