"""Replay of one split-KV decode run (chapter 9, DecodeExplorer).

``DecodeReplay`` indexes a ``decode_attention(..., record=True)`` run (a DecodeTrace: every
(sequence b, KV head g, split s) block's steps, then the merge) for random access: ``state(k)``
is a ``DecodeState``, what frame k shows. Nothing here recomputes attention: every number is read
from the trace's events, the run's partials and the reference output the caller passes; the only
arithmetic of its own is the "break it" merge without rescaling (``decode.merge_step`` /
``merge_partials`` with ``rescale=False``) applied to the run's own partials. No drawing.

**Frames, and the model of the GPU they follow.** The run is NumPy; where its blocks would run
on a GPU is a *model*, not a measurement (the recorded GPU timelines of chapter 7 measure that):

* blocks are launched in the order (b, g, s), s fastest: block id = (b·H_kv + g)·S + s;
* block id runs on SM id mod ``num_sms`` (132 on an H100 SXM or H200, ``decode.NUM_SMS``), and an
  SM runs its blocks one after another: blocks 0..131 form the first wave, 132..263 the second;
* a block does one key block (``load_KV``, ``compute_S``, ``update_ml``, ``accumulate_O``) per
  step; its ``load_Q`` is in its first step and its ``write_partial`` (``write_O`` with one split)
  in its last; an empty split (more splits than key blocks) takes one step to write its partial;
* one frame per step of this schedule, until the last SM is done; then, with S > 1, one frame per
  split merged (Flash-Decoding step 3: every (b, g) folds in its split s's partial; a second,
  small kernel on the GPU) and a last frame that writes O and lse.

The bytes and FLOPs of a frame are the sums of the events the frame's steps contain (so the
last frame's totals are the run's ``io``, equal to ``iomodel.decode_io``).

**What frame k shows of the output**: one watched query row — sequence 0, query head 0 (KV
head 0), query row Nq − 1 (the newest token: it sees the whole cache, causal or not): each
split's partial m_s, l_s, lse_s, O_s once the split has written it, then the running merge
(m, l and the merged O = O/l) split by split, with its error against the dense reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..decode import NUM_SMS, merge_partials, merge_step
from ..tiled import normalise_rows

#: the byte groups the meters show, each a list of the run's tensor names (reads and writes)
BYTE_GROUPS = {
    "K, V": ("K", "V"),
    "Q": ("Q",),
    "partials": ("O_partial", "lse_partial"),
    "O, lse": ("O", "lse"),
    "block table": ("block_table",),
}
#: the event kinds of a block of work (sequence, KV head, split); the others belong to the merge
BLOCK_KINDS = ("load_Q", "load_KV", "compute_S", "update_ml", "accumulate_O", "write_partial")


@dataclass
class DecodeState:
    """What frame k shows. Arrays are fresh (safe to keep) unless said otherwise.

    phase: "run" (blocks on the SMs), "merge" (split ``s`` folded in) or "write" (O = O/l, lse);
    text: a sentence for the frame; short: a shorter wording of it; t: the schedule step (run
    phase; -1 otherwise); s: the split
    merged (merge phase; -1 otherwise); sm_block: (num_sms,) int, the block id each SM runs at this
    step (-1: idle); sm_split: (num_sms,) int, its split (-1: idle); sm_progress: (num_sms,) float,
    the share of its key blocks done (0 when idle); sms_busy: SMs running a block; blocks_done:
    blocks finished; page_read: (num_pages,) float, for each pool page the share of the KV heads
    whose blocks have read it; hbm_bytes, flops: sums over the frames 0..k; bytes_by: {group of
    BYTE_GROUPS: bytes so far}; partial_done: (S,) bool, the watched row's partials written so far;
    merged: splits of the watched row merged so far (0..S); m, l: the running merge (−inf, 0
    before); O: (dv,) the merged O = O/l so far (NaN before anything is merged; the final output
    in the "write" frame; the single split's output when S = 1); err: max |O − O_ref| of the
    watched row (NaN before); alpha, beta: this merge step's rescale and weight (NaN outside the
    merge); m_broken, l_broken, O_broken, err_broken: the same for the merge without rescaling.
    """

    k: int
    phase: str
    text: str
    short: str
    t: int
    s: int
    sm_block: np.ndarray
    sm_split: np.ndarray
    sm_progress: np.ndarray
    sms_busy: int
    blocks_done: int
    page_read: np.ndarray
    hbm_bytes: int
    flops: int
    bytes_by: dict
    partial_done: np.ndarray
    merged: int
    m: float
    l: float
    O: np.ndarray
    err: float
    alpha: float
    beta: float
    m_broken: float
    l_broken: float
    O_broken: np.ndarray
    err_broken: float


def _max_err(a, b) -> float:
    """max |a − b| in float64; NaN when a is not all finite."""
    d = np.abs(np.asarray(a, np.float64) - b)
    return float(d.max()) if np.isfinite(d).all() else float("nan")


class DecodeReplay:
    """Index a decode run for random access to frames (see the module docstring for the model).

    result: the DecodeResult of ``decode_attention(..., record=True)``; O_ref: the dense float64
    reference output, the shape of ``result.O`` (``reference.attention`` per query head against
    its KV head); num_sms: SMs of the model GPU (default ``decode.NUM_SMS``, 132).

    Attributes: ``trace``; ``n_frames``; ``run_frames`` (frames of the run phase); ``B, H, H_kv,
    G, S, Nq, dv``; ``n_blocks`` (B·H_kv·S); ``num_sms``; ``block_steps`` ((n_blocks,) steps of
    each block); ``block_start`` ((n_blocks,) its first step); ``waves`` (⌈n_blocks / num_sms⌉);
    ``sm_busy_share`` (busy SM-steps / (num_sms · run_frames): the run phase's SM use);
    ``paged`` (False for a contiguous cache, then drawn as pages of Bc keys in order),
    ``page_size``, ``block_table`` ((B, P) pool page of each logical page, read off the
    ``load_KV`` events; -1 for a page no block reads), ``num_pages`` (pool pages),
    ``page_split`` ((num_pages,) float: the split that reads each pool page's first key, NaN for
    a page no block reads); ``cum_bytes``, ``cum_flops`` ((n_frames,) int64), ``cum_by``
    ({group: (n_frames,) int64}); ``total`` (the run's IOCount); the watched row's
    ``lse_parts``, ``m_parts``, ``l_parts`` ((S,) float64), ``O_parts`` ((S, dv) float64),
    ``partial_frame`` ((S,) the frame each partial is written in), ``O_ref_row`` ((dv,)),
    ``merge_err`` and ``merge_err_broken`` ((S,) error after merging splits 0..s; with one
    split, the error of its O), ``final_row`` (the run's output of that row); ``O_broken`` (the
    whole output merged without rescaling) and ``O_broken_row`` (its watched row); ``err`` (max
    |result.O − O_ref| over every head), ``err_broken`` (the same for ``O_broken``). Raises
    ValueError for a result without a decode trace or an O_ref of another shape.
    """

    def __init__(self, result, O_ref, *, num_sms: int = NUM_SMS):
        tr = result.trace
        if tr is None or getattr(tr, "order", None) != "decode" or not tr.events:
            raise ValueError("need the result of decode_attention(..., record=True)")
        O_ref = np.asarray(O_ref, np.float64)
        if O_ref.shape != result.O.shape:
            raise ValueError(f"O_ref must have the shape of the output {result.O.shape}, got {O_ref.shape}")
        self.trace, self.result, self.num_sms = tr, result, int(num_sms)
        B, H, H_kv, S, Nq, dv = tr.B, tr.H, tr.H_kv, tr.num_splits, tr.Nq, tr.dv
        self.B, self.H, self.H_kv, self.G, self.S, self.Nq, self.dv = B, H, H_kv, H // H_kv, S, Nq, dv
        self.n_blocks = nb = B * H_kv * S
        self.total = tr.io()
        ev = tr.events
        # --- the schedule: each event's block and step ------------------------------------
        block_of = np.full(len(ev), -1, np.int64)
        step_of = np.zeros(len(ev), np.int64)
        kv_seen = np.zeros(nb, np.int64)
        for n, e in enumerate(ev):
            if e.kind in BLOCK_KINDS or (e.kind == "write_O" and S == 1):
                b = (e.batch * H_kv + e.kv_head) * S + max(e.split, 0)
                block_of[n] = b
                if e.kind == "load_KV":
                    kv_seen[b] += 1
                step_of[n] = max(kv_seen[b] - 1, 0)
        self.block_steps = np.maximum(kv_seen, 1)
        self.block_start = np.zeros(nb, np.int64)
        for b in range(self.num_sms, nb):            # an SM runs its blocks one after another
            self.block_start[b] = self.block_start[b - self.num_sms] + self.block_steps[b - self.num_sms]
        ends = self.block_start + self.block_steps
        self.run_frames = int(ends.max())
        self.waves = -(-nb // self.num_sms)
        self.sm_busy_share = float(self.block_steps.sum() / (self.num_sms * self.run_frames))
        self.n_frames = self.run_frames + (S + 1 if S > 1 else 0)
        frame_of = np.where(block_of >= 0, self.block_start[np.maximum(block_of, 0)] + step_of, 0)
        for n, e in enumerate(ev):
            if block_of[n] < 0:                      # the merge: one frame per split, then write_O
                frame_of[n] = self.run_frames + (e.split if e.kind == "merge" else S)
        self.frame_of = frame_of
        # --- bytes and FLOPs per frame ----------------------------------------------------
        def per_frame(values):
            return np.cumsum(np.bincount(frame_of, weights=values, minlength=self.n_frames)).round().astype(np.int64)

        self.cum_by = {g: per_frame([sum(e.reads.get(t, 0) + e.writes.get(t, 0) for t in names) for e in ev])
                       for g, names in BYTE_GROUPS.items()}
        self.cum_bytes = sum(self.cum_by.values())
        self.cum_flops = per_frame([e.flops for e in ev])
        # --- the paged cache: the block table and who reads each pool page ----------------
        # (a contiguous cache is drawn as pages of Bc keys laid out in order)
        self.paged = tr.page_size is not None
        self.page_size = ps = tr.page_size if self.paged else tr.Bc
        P = -(-tr.Nk // ps)
        self.block_table = np.full((B, P), -1, np.int64)
        first_read = {}
        for n, e in enumerate(ev):
            if e.kind == "load_KV":
                p0 = e.c0 // ps
                pages = e.pages or tuple(e.batch * P + p for p in range(p0, (e.c1 - 1) // ps + 1))
                self.block_table[e.batch, p0:p0 + len(pages)] = pages
                for p in pages:
                    key = (p, e.kv_head)
                    first_read[key] = min(first_read.get(key, frame_of[n]), frame_of[n])
        self.num_pages = int(self.block_table.max()) + 1
        self.page_first_read = np.full((self.num_pages, H_kv), np.iinfo(np.int64).max, np.int64)
        for (p, g), f in first_read.items():
            self.page_first_read[p, g] = f
        self.page_split = np.full(self.num_pages, np.nan)
        starts = np.array([c0 for c0, _ in tr.splits])
        split_of_page = np.searchsorted(starts, np.arange(P) * ps, side="right") - 1     # of its first key
        for b in range(B):
            read = self.block_table[b] >= 0
            self.page_split[self.block_table[b][read]] = split_of_page[read]
        # --- the watched row: sequence 0, query head 0, row Nq − 1 ------------------------
        row = Nq - 1
        self.O_ref = O_ref.reshape(B, H, Nq, -1)
        self.O_ref_row = self.O_ref[0, 0, row]
        parts = [e for e in ev if e.batch == 0 and e.kv_head == 0 and
                 (e.kind == "write_partial" or (e.kind == "write_O" and S == 1))]
        self.partial_frame = np.array([self.block_start[e.split] + self.block_steps[e.split] - 1 for e in parts],
                                      np.int64)
        self.m_parts = np.array([float(e.m[0, row]) for e in parts])
        self.l_parts = np.array([float(e.l[0, row]) for e in parts])
        self.lse_parts = np.array([float(e.lse[0, row]) for e in parts])
        self.O_parts = np.array([np.asarray(e.O[0, row], np.float64) for e in parts])
        merges = [e for e in ev if e.batch == 0 and e.kv_head == 0 and e.kind == "merge"]
        self._merge = [(float(e.m[0, row]), float(e.l[0, row]),
                        normalise_rows(np.asarray(e.O[0, row:row + 1], np.float64),
                                       np.asarray(e.l[0, row:row + 1], np.float64))[0],
                        float(e.rescale[0, row]), float(e.weight[0, row])) for e in merges]
        self.merge_err = np.array([_max_err(O, self.O_ref_row) for _, _, O, _, _ in self._merge])
        # the "break it" merge of the same partials, without rescaling
        m, l, O = np.array([-np.inf]), np.zeros(1), np.zeros((1, dv))
        self._broken = []
        for s in range(len(parts) if S > 1 else 0):
            m, l, O, a, bta = merge_step(m, l, O, self.lse_parts[s:s + 1], self.O_parts[s:s + 1], rescale=False)
            self._broken.append((float(m[0]), float(l[0]), normalise_rows(O, l)[0], float(a[0]), float(bta[0])))
        self.merge_err_broken = np.array([_max_err(O, self.O_ref_row) for _, _, O, _, _ in self._broken])
        if S == 1:                                   # no merge: the one split's O is the output
            self.merge_err = self.merge_err_broken = np.array([_max_err(self.O_parts[0], self.O_ref_row)])
        lead = result.O.shape[:-3]
        lse_all = np.stack([p.lse for p in result.partials]).astype(np.float64)
        O_all = np.stack([p.O for p in result.partials]).astype(np.float64)
        self.O_broken = merge_partials(lse_all, O_all, rescale=False)[0].reshape(*lead, H, Nq, dv)
        self.O_broken_row = self.O_broken.reshape(B, H, Nq, dv)[0, 0, row]
        self.err = _max_err(result.O, O_ref)
        self.err_broken = _max_err(self.O_broken, O_ref) if S > 1 else self.err
        self.final_row = np.asarray(result.O.reshape(B, H, Nq, dv)[0, 0, row], np.float64)

    # --- frames -------------------------------------------------------------------------
    def sm_state(self, t: int):
        """(block, split, progress) per SM at schedule step t of the run phase: (num_sms,) arrays
        (-1, -1, 0 for an idle SM)."""
        sms = np.arange(self.num_sms)
        block = np.full(self.num_sms, -1, np.int64)
        prog = np.zeros(self.num_sms)
        for w in range(self.waves):
            ids = w * self.num_sms + sms
            ok = ids < self.n_blocks
            idc = np.where(ok, ids, 0)
            run = ok & (self.block_start[idc] <= t) & (t < self.block_start[idc] + self.block_steps[idc])
            block[run] = ids[run]
            prog[run] = (t - self.block_start[idc][run] + 1) / self.block_steps[idc][run]
        split = np.where(block >= 0, block % self.S, -1)
        return block, split, prog

    def state(self, k: int) -> DecodeState:
        """The DecodeState after frame k (0 <= k < n_frames). Raises IndexError otherwise."""
        if not 0 <= k < self.n_frames:
            raise IndexError(f"frame {k} is out of range 0..{self.n_frames - 1}")
        S, dv = self.S, self.dv
        nan_row = np.full(dv, np.nan)
        run = k < self.run_frames
        if run:
            phase, t, s = "run", k, -1
            block, split, prog = self.sm_state(k)
        else:
            phase = "merge" if k < self.run_frames + S else "write"
            t, s = -1, (k - self.run_frames if phase == "merge" else -1)
            block, split, prog = np.full(self.num_sms, -1), np.full(self.num_sms, -1), np.zeros(self.num_sms)
        done_steps = min(k + 1, self.run_frames)
        blocks_done = int((self.block_start + self.block_steps <= done_steps).sum())
        page_read = (self.page_first_read <= k).mean(axis=1) if self.num_pages else np.zeros(0)
        partial_done = self.partial_frame <= k
        merged = 0 if run else (s + 1 if phase == "merge" else S)
        m = l = alpha = beta = float("nan")
        mb = lb = float("nan")
        O, Ob, err, errb = nan_row, nan_row, float("nan"), float("nan")
        if S == 1:
            if partial_done[0]:
                m, l, O = self.m_parts[0], self.l_parts[0], self.O_parts[0]
                err = float(self.merge_err[0])
        elif merged:
            m, l, O, a, bta = self._merge[merged - 1]
            mb, lb, Ob, ab, bb = self._broken[merged - 1]
            err, errb = float(self.merge_err[merged - 1]), float(self.merge_err_broken[merged - 1])
            if phase == "merge":
                alpha, beta = a, bta
            else:
                O = self.final_row
                err = _max_err(O, self.O_ref_row)
        text, short = self._text(phase, k, s, int((block >= 0).sum()))
        return DecodeState(
            k=k, phase=phase, text=text, short=short, t=t, s=s, sm_block=block, sm_split=split, sm_progress=prog,
            sms_busy=int((block >= 0).sum()), blocks_done=blocks_done, page_read=page_read,
            hbm_bytes=int(self.cum_bytes[k]), flops=int(self.cum_flops[k]),
            bytes_by={g: int(c[k]) for g, c in self.cum_by.items()}, partial_done=partial_done, merged=merged,
            m=float(m), l=float(l), O=np.array(O, np.float64), err=err, alpha=float(alpha), beta=float(beta),
            m_broken=float(mb), l_broken=float(lb), O_broken=np.array(Ob, np.float64), err_broken=errb)

    def _text(self, phase: str, k: int, s: int, busy: int) -> tuple[str, str]:
        """The frame's sentence in the paper's names, and a shorter wording of it."""
        if phase == "merge":
            return (f"merge split s = {s}: m = max(m, lse_s); l, O rescaled by α = exp(m_old − m); "
                    f"the split weighs β = exp(lse_s − m)",
                    f"merge split s = {s}: m = max(m, lse_s); l, O × α; split × β")
        if phase == "write":
            text = "write O = O / l and lse = m + log l to HBM, once: the output"
            return text, text
        n = self.num_sms
        ends = self.block_start + self.block_steps - 1
        finish = int((ends == k).sum())
        what = "partials (lse_s, O_s)" if self.S > 1 else "O and lse"
        head = f"{busy} of {n} SMs busy"
        if finish == 0:
            return (f"{head}: each block streams Kⱼ, Vⱼ of its split and updates m, l, O on chip",
                    f"{head}: each block streams its split's Kⱼ, Vⱼ")
        if finish == busy:
            return (f"{head}: the last key block; each block writes its {what} to HBM",
                    f"{head}: last key block; {what} → HBM")
        return (f"{head}: each block streams Kⱼ, Vⱼ of its split; {finish} finish and write their {what}",
                f"{head}; {finish} blocks write their {what}")
