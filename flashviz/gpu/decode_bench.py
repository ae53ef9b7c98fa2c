"""The decode benchmark: flashviz's split-KV decode beside torch SDPA's, in one run (issue 24).

``run_decode_benchmark`` is what ``benchmarks/bench_decode.py`` calls on a GPU. One process, one
device, one run writes ``decode-<device>-<date>.json`` (``partial-decode-…`` for any subset, a run
cut short by its deadline or by a lost CUDA context included, so a partial run never replaces the
recorded one) and its ``.log`` (the printed lines). The record holds:

* ``kind`` ("flashviz decode benchmark"), ``argv``, ``full`` (the whole plan ran), ``impls``,
  ``parts``, ``cases`` (the planned rows' labels), ``dtype`` ("float16"), ``tol_rel``,
  ``ref_elements``, ``targets`` (the issue's figures to reach), ``method``, ``methods`` (how each
  figure is measured), ``notes``, ``cut_short`` (null, or why the run stopped early), ``wall_s``;
* ``env`` — device, SM count, versions (CuPy, CUDA runtime and driver, torch, NumPy, Python), date,
  ``commit`` ($FLASHVIZ_COMMIT, else ``git`` where there is a checkout; ``commit_from`` says which),
  ``nvrtc_options`` (only where $FLASHVIZ_NVRTC_OPTIONS was set: the options it added to every
  kernel build, ``gpu.nvrtc.env_options``) and the code timed (``provenance_env.code_hashes``):
  ``kernel_sources`` (kernels/flash_decode.cu and every kernel file a loaded cubin came from:
  sha256 of the compiled text), ``cubins`` (every cubin the process loaded: lowered name, sha256,
  source sha256), ``files_sha256`` (the Python files that make the calls);
* ``copy_GBps`` — the device's own copy bandwidth in this run: one ``torch.Tensor.copy_`` of
  ``COPY_BYTES`` (2 GiB) device to device, bytes read + written (2 × 2 GiB) over the median of
  ``COPY_REPEAT`` back-to-back calls timed by CUDA events, before any profiler session; ``copy``
  holds the same with ``copy_bytes``, ``copy_ms`` and ``method`` (or ``copy_error``);
* ``bench`` — one row per case (``FULL_CASES``: (B, H, H_kv) in (8, 32, 32), (8, 32, 8), (1, 32, 8)
  × Nk in 4k, 32k, 128k at d = 128, Nq = 1, not causal; then Nq = 4 causal (bottom-right) at
  (1, 32, 8) Nk = 32k; d = 64 at (8, 32, 8) Nk = 32k; a paged cache with pages of 256 and of 16
  keys (shuffled block table) at (8, 32, 8) Nk = 32k). Every row: ``label``, ``B``, ``H``, ``H_kv``,
  ``G`` (H / H_kv), ``Nq``, ``Nk``, ``d``, ``causal``, ``page_size`` (null: contiguous), ``paged``,
  ``dtype``, ``kv_bytes`` (2·B·H_kv·Nk·d·2: the cache's K and V), ``set_bytes`` (one input set),
  ``flops`` (4·B·H·Nq·Nk·d, never halved), ``variant`` (the split kernel of the default call on
  this device: "mma" (v2) where a block may opt in to its shared memory, else "simt" (v1);
  records made before v2 became the default have no ``variant`` and ran v1), ``num_splits`` (ours,
  as the heuristic chooses it on this device: ``num_sms`` SMs of ``smem_per_sm`` bytes of shared
  memory, ``smem_reserved`` kept per block — ``gpu.decode.decode_launch`` with the figures
  ``plan_decode`` reads, the rule ``flash_decode_gpu`` applies; records made before have no
  ``smem_per_sm`` and came from an H200's), ``blocks``, ``chunks``, ``rows`` (the query rows a
  block of the row's variant takes: v1's ``ROWS`` template argument, the smallest power of two
  >= min(G·Nq, 32); v2 always 16, its one m16 tile), ``tiles``, ``smem_bytes``,
  ``input_sets`` (sets rotated so calls do not find them in L2: ``timing.input_sets``), ``impls``
  (the implementations run on the row), and for each of them:

  - ``<impl>_call_us`` (public call) and ``<impl>_kernel_us`` (kernel-only), with
    ``<impl>_call_GBps`` / ``<impl>_kernel_GBps`` = kv_bytes / time (GB/s = bytes / µs / 1e3) and
    ``<impl>_call_of_copy`` / ``<impl>_kernel_of_copy`` = that GB/s ÷ copy_GBps;
    ``<impl>_kernel_name`` (the longest GPU activity), ``<impl>_launches`` (activities per call);
    ``<impl>_host_us`` (host time per public call, calls queued without synchronising: what the
    call costs the CPU, the latency floor of a call whose kernel is shorter);
  - correctness against a float64 reference (``reference_decode``: dense softmax in NumPy float64
    on the same fp16 values, batch 0, its first ``ref_heads`` query heads): ``<impl>_max_abs_err``
    of O, ``<impl>_nonfinite`` (any NaN / inf anywhere in O), ``<impl>_pass`` (finite and the error
    at most tol_rel × ``ref_max_abs``, the reference's largest |O|); ours also
    ``<impl>_lse_max_abs_err``; the row ``decode_err_over_sdpa_cudnn`` / ``…_flash`` (our error ÷
    theirs);
  - ours: ``decode_num_splits`` (= num_splits); ``decode_nosplit`` (ours with num_splits = 1, on
    the (1, 32, 8) rows at Nq = 1, d = 128: the "no split" lesson) ``decode_nosplit_num_splits`` = 1;
    ``decode_simt_num_splits``, ``decode_simt_chunks`` and ``decode_simt_rows`` (v1's launch, up to
    32 rows a block; records made before v2 became the default have ``decode_mma_num_splits`` and
    ``decode_mma_chunks`` instead);
    SDPA: ``<impl>_gqa`` ("native" for MHA, "enable_gqa", or "expanded": K and V repeated to H heads
    outside the timed region when the backend refused enable_gqa; ``<impl>_gqa_note`` says why) and
    ``<impl>_mask`` (how bottom-right causal was given to it);
  - a failed cell: ``<impl>_error`` (building, the first call, correctness or the public-call
    timing) or ``<impl>_kernel_error`` (the kernel-only pass); a cell not run: ``<impl>_skipped``
    (SDPA on the paged rows: it has no paged path);
* ``splits`` — the split-count sweep (kernel-only) of ours at ``SWEEP_SHAPES`` (Nq = 1, d = 128):
  ``B``, ``H``, ``H_kv``, ``Nq``, ``Nk``, ``d``, ``tiles``, ``num_sms``, ``smem_per_sm``,
  ``smem_reserved`` (as the rows'), ``heuristic`` (the split count the call chooses), ``variant``
  (its split kernel), ``num_splits`` (the counts timed) and ``kernel_us`` (one time each, null
  where it failed; ``errors`` by count), ``best``, ``best_us``, ``heuristic_us``,
  ``heuristic_over_best``;
* ``figures`` — the issue's figures to reach, read off the rows (``figures``): bandwidth at
  Nk ≥ 32k against copy_GBps and SDPA-cuDNN, the B = 1 Nk = 4k latency against cuDNN, the heuristic
  against the best split count, paged against contiguous, correctness against SDPA's.

Implementations (record prefixes; every one on the same seeded inputs, in the same process):

* ``decode`` — ``flashviz.gpu.flash_decode_gpu`` (kernels/flash_decode.cu) as called without a
  variant: the default split kernel (v2, ``flash_decode_mma``, on the tensor cores, where the
  device allows its shared memory: the row's ``variant``), the split count its heuristic chooses,
  K and V contiguous (B, H_kv, Nk, d) or pools with an int32 block table;
* ``decode_nosplit`` — the same call with num_splits = 1 (B·H_kv·chunks blocks): the default split
  kernel too, so v2 since v2 became the default (v1 in the records made before; its
  ``<impl>_kernel_name`` says which);
* ``decode_simt`` — the same call with ``variant="simt"``: the CUDA-core split kernel (v1,
  ``flash_decode``), its own heuristic split count, on every row. (Records made before v2 became
  the default time v1 as ``decode`` and v2 as ``decode_mma``, the call with ``variant="mma"``.)
* ``sdpa_cudnn`` / ``sdpa_flash`` — ``torch.nn.functional.scaled_dot_product_attention`` with the
  backend forced by ``torch.nn.attention.sdpa_kernel`` (entered outside the timed region), Q
  (B, H, Nq, d), K, V (B, H_kv, Nk, d). Causal (bottom-right, as ours): SDPA's ``is_causal`` is
  top-left when Nq ≠ Nk, so SDPA-flash gets ``torch.nn.attention.bias.causal_lower_right`` and
  SDPA-cuDNN an additive (1, 1, Nq, Nk) mask, both built outside the timed region.

Timing (``flashviz.gpu.timing.measure``, docs/measuring.md): ``_call_us`` is the public call by
CUDA events, median; ``_kernel_us`` kernel-only by torch.profiler (CUPTI), the GPU work of one
call summed, median — the same method for every implementation. The copy and every public-call
time and correctness check run first, every kernel-only time (and the split sweep) after, in a
second pass over the same inputs (regenerated from the same seeds), because a profiler session
leaves the process's later host times high. Repeats shrink for slow calls so one measurement takes
about ``budget_s``. GB/s counts the cache's bytes (B·H_kv·Nk·d·2 each of K and V) for every
implementation, SDPA's expanded K, V (if it needs them) included; Q, O, partials and the block
table are not counted.

Nothing here imports CuPy or torch at import time: the plan (``FULL_CASES``, ``base_row``,
``estimate_seconds``, ``plan_lines``, ``record_path``), the record's arithmetic (``derive``,
``derive_sweep``, ``figures``, ``row_line``), the float64 reference and the paging
(``reference_decode``, ``page_cache``) run on any machine.
"""

from __future__ import annotations

import math
import time
import zlib
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from .bench_util import RunRecord, error_text, free_torch_cache
from .decode import SMEM_OPTIN_H200, decode_launch, facts_kwargs
from .timing import CALL_METHOD, HOST_METHOD, KERNEL_METHOD, attention_flops, input_sets

IMPLS = ("decode", "sdpa_cudnn", "sdpa_flash")          #: the three of issue 24
EXTRA_IMPLS = ("decode_nosplit", "decode_simt")         #: also timed: ours without splitting; ours, v1
ALL_IMPLS = IMPLS + EXTRA_IMPLS
OURS_IMPLS = ("decode", "decode_nosplit", "decode_simt")
SDPA_IMPLS = ("sdpa_cudnn", "sdpa_flash")
OURS = "decode"
#: the split kernel each of ours names (None: the device's default, ``gpu.decode.check_variant``)
VARIANT_OF = {"decode": None, "decode_nosplit": None, "decode_simt": "simt"}
SHORT = {"decode": "ours", "decode_nosplit": "nosplit", "decode_simt": "simt", "sdpa_cudnn": "cudnn",
         "sdpa_flash": "flash"}
DTYPE, ITEMSIZE = "float16", 2
TABLE_ITEMSIZE = 4                 #: int32 block-table entries

PARTS = ("call", "kernel", "splits")
REPEAT, KERNEL_REPEAT, WARMUP = 50, 20, 3
BUDGET_S = 1.0                     #: seconds one measurement aims at (timing.measure's budget_s)
DEADLINE_S = 300.0                 #: no new row or part starts after this many seconds of the run
TOL_REL = 1e-2                     #: correctness: max |O − ref| <= TOL_REL x max |ref|
REF_ELEMENTS = 1 << 26             #: the reference covers max(1, this // (Nk·d)) KV heads of batch 0
COPY_BYTES, COPY_REPEAT = 2 << 30, 20
PLAN_L2_BYTES = 50 << 20           #: the H200's L2, for the plan only (the run asks the device)
NUM_SMS = 132                      #: the H200's SMs, for the plan only (the run asks the device)
SMEM_OPTIN = SMEM_OPTIN_H200       #: the H200's shared memory a block, for the plan only (likewise)
SMEM_RESERVED = 1_024              #: the shared memory the system keeps per block on it (likewise)


@dataclass(frozen=True)
class Case:
    """One bench row's shape: B sequences, H query heads sharing H_kv KV heads, Nq query rows
    against Nk keys, head dimension d, bottom-right causal or not, a contiguous cache
    (page_size None) or a paged one (pages of page_size keys, a shuffled block table)."""

    B: int
    H: int
    H_kv: int
    Nk: int
    Nq: int = 1
    d: int = 128
    causal: bool = False
    page_size: int | None = None

    def __post_init__(self):
        if min(self.B, self.H, self.H_kv, self.Nk, self.Nq, self.d) < 1 or self.H % self.H_kv:
            raise ValueError(f"a case needs positive sizes and H % H_kv == 0, got {self}")
        if self.page_size is not None and (self.page_size < 1 or self.Nk % self.page_size):
            raise ValueError(f"Nk must be a multiple of page_size, got Nk = {self.Nk}, page_size = {self.page_size}")

    @property
    def paged(self) -> bool:
        return self.page_size is not None

    @property
    def G(self) -> int:
        return self.H // self.H_kv

    @property
    def label(self) -> str:
        return (f"B={self.B} H={self.H} Hkv={self.H_kv} Nq={self.Nq} Nk={self.Nk} d={self.d}"
                + (" causal" if self.causal else "") + (f" paged{self.page_size}" if self.paged else ""))


GRID_BH = ((8, 32, 32), (8, 32, 8), (1, 32, 8))
GRID_NK = (4096, 32768, 131072)
NOSPLIT_BH = (1, 32, 8)            #: ours with num_splits = 1 is also timed at this (B, H, H_kv)
FULL_CASES = tuple(Case(B, H, H_kv, Nk) for B, H, H_kv in GRID_BH for Nk in GRID_NK) + (
    Case(1, 32, 8, 32768, Nq=4, causal=True),
    Case(8, 32, 8, 32768, d=64),
    Case(8, 32, 8, 32768, page_size=256),
    Case(8, 32, 8, 32768, page_size=16),
)
QUICK_CASES = (Case(1, 32, 8, 4096), Case(8, 32, 8, 4096), Case(1, 32, 8, 4096, Nq=4, causal=True),
               Case(8, 32, 8, 4096, d=64), Case(8, 32, 8, 4096, page_size=256))
SWEEP_SHAPES = ((1, 32, 8, 4096), (1, 32, 8, 32768), (8, 32, 8, 4096), (8, 32, 8, 32768))   #: (B, H, H_kv, Nk)
QUICK_SWEEP = ((1, 32, 8, 4096),)
SWEEP_SPLITS = (1, 2, 3, 4, 6, 8, 12, 15, 16, 24, 32, 33, 48, 64, 66, 128)
#: the issue's figures to reach: ours ≥ 0.9 x copy_GBps and ≥ 1.0 x SDPA-cuDNN at Nk ≥ 32k; the
#: heuristic within 5 % of the best split count; paged within 10 % of contiguous (pages ≥ 16)
TARGETS = {"copy_frac": 0.90, "cudnn_over_decode": 1.0, "heuristic_over_best": 1.05, "paged_over_contiguous": 1.10,
           "latency_case": Case(1, 32, 8, 4096).label}
FILES = ("flashviz/gpu/decode_bench.py", "flashviz/gpu/decode.py", "flashviz/gpu/timing.py", "flashviz/decode.py",
         "flashviz/gpu/provenance_env.py", "benchmarks/bench_decode.py")
KERNELS = ("flash_decode.cu",)

COPY_METHOD = (f"torch.Tensor.copy_ of {COPY_BYTES >> 30} GiB device to device (uint8), median of {COPY_REPEAT} "
               f"back-to-back calls timed with CUDA events after warm-up, before any profiler session; "
               f"copy_GBps = bytes read + written (2 x {COPY_BYTES >> 30} GiB) / time")
METHODS = {
    "call_us": "public call: " + CALL_METHOD + ". Ours: flash_decode_gpu(Q, K, V, causal=..., block_table=..., "
               "Nk=...) allocating O and lse (and the partials); SDPA: scaled_dot_product_attention with the "
               "backend forced (sdpa_kernel entered outside the timed region)",
    "kernel_us": "kernel-only: " + KERNEL_METHOD + "; the same public call as call_us, in a second pass after "
                 "every public-call time",
    "host_us": HOST_METHOD + "; the same public call, right after its call_us, before any profiler session",
    "GBps": "<impl>_call_GBps = kv_bytes / <impl>_call_us / 1e3; <impl>_kernel_GBps = kv_bytes / <impl>_kernel_us "
            "/ 1e3 (GB/s); kv_bytes = 2·B·H_kv·Nk·d·2 (the cache's K and V, fp16) for every implementation; "
            "<impl>_*_of_copy = that GB/s ÷ copy_GBps",
    "copy_GBps": COPY_METHOD,
    "correctness": "max |O − ref| (and |lse − ref| for ours) on batch 0, query heads 0..ref_heads−1; ref = dense "
                   "softmax attention in NumPy float64 on the same fp16 values (bottom-right causal); pass: "
                   "error <= tol_rel x max |ref O| and O finite over the whole tensor",
    "splits": "ours at each num_splits, kernel-only (as kernel_us), after the kernel-only pass; heuristic_over_best "
              "= the heuristic's time ÷ the best time",
    "input_sets": "timing.input_sets(set_bytes, the device's L2 size): enough sets rotated that together they "
                  "cover 3x L2 (at most 8), so a call does not find its K, V in L2",
}
METHOD = ("public call (<impl>_call_us) by CUDA events, kernel-only (<impl>_kernel_us) by torch.profiler (CUPTI), "
          "the same for every implementation")
NOTES = [
    "GB/s counts the cache's bytes, 2·B·H_kv·Nk·d·2, for every implementation. Where an SDPA backend refuses "
    "enable_gqa, K and V are repeated to H heads outside the timed region (<impl>_gqa = 'expanded') and that "
    "backend reads G = H/H_kv times more bytes than the figure counts",
    "SDPA's is_causal is top-left when Nq != Nk; the causal rows give SDPA-flash "
    "torch.nn.attention.bias.causal_lower_right(Nq, Nk) and SDPA-cuDNN an additive bottom-right mask, so all "
    "three compute the same (bottom-right) attention; the correctness columns check it",
    "the paged rows time ours only (SDPA has no paged KV path); compare them with the contiguous row of the same "
    "shape (figures.paged)",
    "ours' num_splits is the heuristic's choice for the device's SMs and their shared memory (row num_sms, "
    "smem_per_sm, smem_reserved; decode.num_splits_heuristic via gpu.decode.decode_launch, the rule "
    "flash_decode_gpu applies); decode_nosplit forces 1",
    "decode is the call without a variant: the default split kernel (row variant: 'mma', v2 on the tensor cores, "
    "where the device allows its shared memory, else 'simt'); decode_simt is the same call with variant='simt' "
    "(v1, on the CUDA cores)",
]


# ---------------------------------------------------------------------------------------------------
# The plan and the record's arithmetic: no GPU needed.

def kv_bytes(case: Case, itemsize: int = ITEMSIZE) -> int:
    """Bytes of K and V in the cache: 2·B·H_kv·Nk·d·itemsize (what every implementation must read)."""
    return 2 * case.B * case.H_kv * case.Nk * case.d * itemsize


def set_bytes(case: Case, itemsize: int = ITEMSIZE) -> int:
    """Bytes of one input set: K and V, Q (B·H·Nq·d) and, paged, the block table (B·Nk/page_size·4)."""
    table = case.B * (case.Nk // case.page_size) * TABLE_ITEMSIZE if case.paged else 0
    return kv_bytes(case, itemsize) + case.B * case.H * case.Nq * case.d * itemsize + table


def row_impls(case: Case, impls) -> list[str]:
    """The implementations among ``impls`` that run on a case, in ``ALL_IMPLS`` order: SDPA not on
    a paged cache; decode_nosplit only at (B, H, H_kv) = NOSPLIT_BH, Nq = 1, d = 128, not causal,
    contiguous."""
    out = []
    for impl in ALL_IMPLS:
        if impl not in impls or (impl in SDPA_IMPLS and case.paged):
            continue
        if impl == "decode_nosplit" and ((case.B, case.H, case.H_kv) != NOSPLIT_BH or case.Nq != 1 or case.d != 128
                                         or case.causal or case.paged):
            continue
        out.append(impl)
    return out


def skip_reason(impl: str, case: Case) -> str | None:
    """Why a planned implementation is not run on a case (SDPA on a paged cache), or None."""
    if impl in SDPA_IMPLS and case.paged:
        return "not run: SDPA has no paged KV cache path (the paged rows time ours only)"
    return None


def _device(num_sms: int, smem_optin: int, smem_per_sm, smem_reserved: int) -> dict:
    """``decode_launch``'s device arguments, smem_per_sm None made smem_optin + smem_reserved (as there)."""
    return {"num_sms": num_sms, "smem_optin": smem_optin,
            "smem_per_sm": smem_optin + smem_reserved if smem_per_sm is None else smem_per_sm,
            "smem_reserved": smem_reserved}


def base_row(case: Case, impls=ALL_IMPLS, *, num_sms: int = NUM_SMS, smem_optin: int = SMEM_OPTIN,
             smem_per_sm: int | None = None, smem_reserved: int = SMEM_RESERVED) -> dict:
    """A bench row's shape, byte and FLOP counts and our launch on a GPU of num_sms SMs whose blocks
    may opt in to smem_optin bytes of shared memory, smem_per_sm bytes an SM, smem_reserved kept
    per block (``decode_launch``: the split kernel, split count and rows ``flash_decode_gpu``
    chooses there, from the same figures of ``device_facts``; decode_simt's own launch as well).
    smem_per_sm None: smem_optin + smem_reserved (``decode_launch``; 233,472 with the H200's
    defaults)."""
    dev = _device(num_sms, smem_optin, smem_per_sm, smem_reserved)
    launch = decode_launch(case.B, case.H, case.H_kv, case.Nq, case.Nk, case.d, **dev)
    run = row_impls(case, impls)
    row = {"label": case.label, "B": case.B, "H": case.H, "H_kv": case.H_kv, "G": case.G, "Nq": case.Nq,
           "Nk": case.Nk, "d": case.d, "causal": case.causal, "page_size": case.page_size, "paged": case.paged,
           "dtype": DTYPE, "kv_bytes": kv_bytes(case), "set_bytes": set_bytes(case),
           "flops": attention_flops(case.B, case.H, case.Nq, case.Nk, case.d, False),
           "variant": launch["variant"], "num_splits": launch["splits"], "num_sms": num_sms,
           "smem_per_sm": dev["smem_per_sm"], "smem_reserved": smem_reserved,
           "blocks": launch["blocks"], "chunks": launch["chunks"],
           "rows": launch["rows"], "tiles": launch["tiles"], "smem_bytes": launch["smem_bytes"], "impls": run}
    for impl in impls:
        why = skip_reason(impl, case)
        if why:
            row[f"{impl}_skipped"] = why
    if "decode" in run:
        row["decode_num_splits"] = launch["splits"]
    if "decode_nosplit" in run:
        row["decode_nosplit_num_splits"] = 1
    if "decode_simt" in run:
        v1 = decode_launch(case.B, case.H, case.H_kv, case.Nq, case.Nk, case.d, variant="simt", **dev)
        row.update(decode_simt_num_splits=v1["splits"], decode_simt_chunks=v1["chunks"], decode_simt_rows=v1["rows"])
    return row


def case_of(row: dict) -> Case:
    """The Case a bench row was made from."""
    return Case(row["B"], row["H"], row["H_kv"], row["Nk"], Nq=row["Nq"], d=row["d"], causal=row["causal"],
                page_size=row.get("page_size"))


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def derive(row: dict, impls=ALL_IMPLS, copy_GBps=None) -> dict:
    """Add GB/s (kv_bytes / µs / 1e3) and the fraction of copy_GBps to a row from its raw times, and
    our error against each SDPA backend's. In place; returns the row. Missing times give nothing."""
    for impl in impls:
        for t in ("call", "kernel"):
            us = row.get(f"{impl}_{t}_us")
            if _num(us) and us > 0:
                gbps = row["kv_bytes"] / us / 1e3
                row[f"{impl}_{t}_GBps"] = gbps
                if _num(copy_GBps) and copy_GBps > 0:
                    row[f"{impl}_{t}_of_copy"] = gbps / copy_GBps
    ours = row.get("decode_max_abs_err")
    for th in SDPA_IMPLS:
        e = row.get(f"{th}_max_abs_err")
        if _num(ours) and _num(e) and e > 0:
            row[f"decode_err_over_{th}"] = ours / e
    return row


def ratio(row: dict, theirs: str, t: str, ours: str = OURS) -> float | None:
    """Their time ÷ ours by one method t ("call" or "kernel"): above 1, ours is faster. None when
    either time is missing."""
    a, b = row.get(f"{theirs}_{t}_us"), row.get(f"{ours}_{t}_us")
    if _num(a) and _num(b) and a > 0 and b > 0:
        return a / b
    return None


def pass_of(err, ref_max_abs, nonfinite, tol_rel: float = TOL_REL) -> bool:
    """Correctness: O finite and its max abs error at most tol_rel x the reference's max |O|."""
    return bool(_num(err) and _num(ref_max_abs) and not nonfinite and err <= tol_rel * ref_max_abs)


def _f(v, p: int = 1) -> str:
    return f"{v:.{p}f}" if _num(v) else "-"


def _g(v) -> str:
    return f"{v:.2g}" if _num(v) else "-"


def row_line(row: dict, impls=ALL_IMPLS) -> str:
    """One printed line per bench row: the shape and our split count, every implementation's µs by
    public call / kernel-only, GB/s by both, host µs per call (where measured), cuDNN and flash time ÷ ours by both, ours' GB/s ÷
    copy_GBps by both, the errors against float64, then the failed cells."""
    run = [i for i in row.get("impls", impls) if i in impls]
    out = [f"{row['label']} S={row.get('num_splits')}",
           "µs call/kernel: " + " ".join(f"{SHORT.get(i, i)} {_f(row.get(f'{i}_call_us'))}/"
                                         f"{_f(row.get(f'{i}_kernel_us'))}" for i in run),
           "GB/s: " + " ".join(f"{SHORT.get(i, i)} {_f(row.get(f'{i}_call_GBps'), 0)}/"
                               f"{_f(row.get(f'{i}_kernel_GBps'), 0)}" for i in run)]
    if any(f"{i}_host_us" in row for i in run):
        out.append("host µs: " + " ".join(f"{SHORT.get(i, i)} {_f(row.get(f'{i}_host_us'))}" for i in run))
    if OURS in run:
        for th in SDPA_IMPLS:
            if th in run:
                out.append(f"{SHORT[th]}/ours call {_f(ratio(row, th, 'call'), 2)}x kernel "
                           f"{_f(ratio(row, th, 'kernel'), 2)}x")
        out.append(f"ours/copy call {_f(row.get('decode_call_of_copy'), 2)} kernel "
                   f"{_f(row.get('decode_kernel_of_copy'), 2)}")
    errs = [f"{SHORT.get(i, i)} {_g(row.get(f'{i}_max_abs_err'))}" for i in run if f"{i}_max_abs_err" in row]
    if errs:
        out.append("err O " + " ".join(errs) + f" (ref max {_g(row.get('ref_max_abs'))}); lse ours "
                   f"{_g(row.get('decode_lse_max_abs_err'))}")
    bad = [i for i in run if f"{i}_pass" in row and not row[f"{i}_pass"]]
    if bad:
        out.append("correctness FAILED for " + ", ".join(bad))
    failed = [k for k in row if k.endswith("_error")]
    if failed:
        out.append("FAILED " + ", ".join(f"{k}: {str(row[k])[:80]}" for k in failed))
    return " | ".join(out)


def sweep_splits(tiles: int, heuristic: int, candidates=SWEEP_SPLITS) -> list[int]:
    """The split counts the sweep times: the candidates up to the number of key tiles (more
    leave splits empty), and the heuristic's own choice, ascending."""
    return sorted({s for s in candidates if s <= tiles} | {int(heuristic)})


def sweep_entry(B: int, H: int, H_kv: int, Nk: int, d: int = 128, *, num_sms: int = NUM_SMS,
                smem_optin: int = SMEM_OPTIN, smem_per_sm: int | None = None,
                smem_reserved: int = SMEM_RESERVED) -> dict:
    """A split sweep's entry before timing: the shape, the tiles, the default call's split kernel
    and the heuristic's count on num_sms SMs (blocks opting in to smem_optin bytes; smem_per_sm
    bytes an SM, smem_reserved kept per block: ``base_row``) and the counts to time
    (``sweep_splits``)."""
    dev = _device(num_sms, smem_optin, smem_per_sm, smem_reserved)
    launch = decode_launch(B, H, H_kv, 1, Nk, d, **dev)
    return {"B": B, "H": H, "H_kv": H_kv, "Nq": 1, "Nk": Nk, "d": d, "tiles": launch["tiles"], "num_sms": num_sms,
            "smem_per_sm": dev["smem_per_sm"], "smem_reserved": smem_reserved,
            "variant": launch["variant"], "heuristic": launch["splits"], "num_splits": sweep_splits(launch["tiles"], launch["splits"]),
            "kernel_us": [], "errors": {}}


def derive_sweep(entry: dict) -> dict:
    """best (the count with the lowest kernel_us), best_us, heuristic_us and heuristic_over_best
    (heuristic_us ÷ best_us) from a sweep entry's times; in place, returns it."""
    timed = [(s, us) for s, us in zip(entry["num_splits"], entry["kernel_us"]) if _num(us) and us > 0]
    if timed:
        best, best_us = min(timed, key=lambda p: p[1])
        entry.update(best=best, best_us=best_us)
        h = dict(timed).get(entry["heuristic"])
        if h is not None:
            entry.update(heuristic_us=h, heuristic_over_best=h / best_us)
    return entry


def sweep_line(entry: dict) -> str:
    """One printed line per sweep entry: each count's kernel µs, the heuristic's and the best."""
    times = " ".join(f"{s}:{_f(us)}" for s, us in zip(entry["num_splits"], entry["kernel_us"]))
    return (f"splits B={entry['B']} H={entry['H']} Hkv={entry['H_kv']} Nk={entry['Nk']}: kernel µs {times} | "
            f"heuristic {entry['heuristic']} ({_f(entry.get('heuristic_us'))} µs), best {entry.get('best')} "
            f"({_f(entry.get('best_us'))} µs): {_f(entry.get('heuristic_over_best'), 3)}x the best"
            + (f" | FAILED {entry['errors']}" if entry.get("errors") else ""))


def _same_shape(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("B", "H", "H_kv", "Nq", "Nk", "d", "causal"))


def figures(bench: list, splits: list, targets: dict = TARGETS) -> dict:
    """The issue's figures to reach, read off the rows (None where a figure is missing):

    * bandwidth — each contiguous Nq = 1, d = 128, not causal row with Nk ≥ 32768: ours' GB/s ÷
      copy_GBps and cuDNN's time ÷ ours, by public call and kernel-only; ``meets``: both by public
      call at least the targets;
    * latency — the (1, 32, 8) Nk = 4096 row: ours' and cuDNN's public call; ``meets``: ours <= cuDNN's;
    * heuristic — each sweep: heuristic_over_best; ``meets``: at most the target;
    * paged — each paged row ÷ the contiguous row of its shape, by both methods; ``meets``: kernel-only
      at most the target;
    * correctness — each row: ours passes and its error is no worse than the larger SDPA error there.
    """
    out = {"bandwidth": [], "latency": None, "heuristic": [], "paged": [], "correctness": []}
    for r in bench:
        contiguous = not r.get("paged")
        if contiguous and r["Nq"] == 1 and r["d"] == 128 and not r["causal"] and r["Nk"] >= 32768:
            e = {"label": r["label"], "decode_call_of_copy": r.get("decode_call_of_copy"),
                 "decode_kernel_of_copy": r.get("decode_kernel_of_copy"),
                 "cudnn_over_decode_call": ratio(r, "sdpa_cudnn", "call"),
                 "cudnn_over_decode_kernel": ratio(r, "sdpa_cudnn", "kernel")}
            a, b = e["decode_call_of_copy"], e["cudnn_over_decode_call"]
            e["meets"] = (None if a is None or b is None
                          else a >= targets["copy_frac"] and b >= targets["cudnn_over_decode"])
            out["bandwidth"].append(e)
        if contiguous and r["label"] == targets["latency_case"]:
            a, b = r.get("decode_call_us"), r.get("sdpa_cudnn_call_us")
            out["latency"] = {"label": r["label"], "decode_call_us": a, "sdpa_cudnn_call_us": b,
                              "decode_host_us": r.get("decode_host_us"), "sdpa_cudnn_host_us": r.get("sdpa_cudnn_host_us"),
                              "meets": None if not (_num(a) and _num(b)) else a <= b}
        if r.get("paged"):
            base = next((c for c in bench if not c.get("paged") and _same_shape(c, r)), None)
            e = {"label": r["label"], "page_size": r.get("page_size")}
            for t in ("call", "kernel"):
                a, b = r.get(f"decode_{t}_us"), (base or {}).get(f"decode_{t}_us")
                e[f"paged_over_contiguous_{t}"] = a / b if _num(a) and _num(b) and b > 0 else None
            k = e["paged_over_contiguous_kernel"]
            e["meets"] = None if k is None else k <= targets["paged_over_contiguous"]
            out["paged"].append(e)
        if "decode_max_abs_err" in r or "decode_pass" in r:
            theirs = [r[f"{i}_max_abs_err"] for i in SDPA_IMPLS if _num(r.get(f"{i}_max_abs_err"))]
            ours = r.get("decode_max_abs_err")
            out["correctness"].append({"label": r["label"], "decode_pass": r.get("decode_pass"),
                                       "decode_max_abs_err": ours, "sdpa_max_abs_err": max(theirs) if theirs else None,
                                       "no_worse_than_sdpa": (None if not theirs or not _num(ours)
                                                              else ours <= max(theirs))})
    for s in splits:
        h = s.get("heuristic_over_best")
        out["heuristic"].append({"B": s["B"], "H": s["H"], "H_kv": s["H_kv"], "Nk": s["Nk"],
                                 "heuristic": s["heuristic"], "best": s.get("best"), "heuristic_over_best": h,
                                 "meets": None if h is None else h <= targets["heuristic_over_best"]})
    return out


def figures_lines(fig: dict) -> list[str]:
    """The figures to reach as printed lines."""
    lines = []
    for e in fig["bandwidth"]:
        lines.append(f"bandwidth {e['label']}: ours/copy call {_f(e['decode_call_of_copy'], 2)} kernel "
                     f"{_f(e['decode_kernel_of_copy'], 2)}; cudnn/ours call {_f(e['cudnn_over_decode_call'], 2)}x "
                     f"kernel {_f(e['cudnn_over_decode_kernel'], 2)}x; meets: {e['meets']}")
    if fig["latency"]:
        e = fig["latency"]
        lines.append(f"latency {e['label']}: ours {_f(e['decode_call_us'])} µs, cudnn {_f(e['sdpa_cudnn_call_us'])} "
                     f"µs by public call (host {_f(e.get('decode_host_us'))} / {_f(e.get('sdpa_cudnn_host_us'))} µs a "
                     f"call); meets: {e['meets']}")
    for e in fig["heuristic"]:
        lines.append(f"heuristic B={e['B']} H={e['H']} Hkv={e['H_kv']} Nk={e['Nk']}: {e['heuristic']} splits, best "
                     f"{e['best']}: {_f(e['heuristic_over_best'], 3)}x; meets: {e['meets']}")
    for e in fig["paged"]:
        lines.append(f"paged {e['label']}: ÷ contiguous call {_f(e['paged_over_contiguous_call'], 3)} kernel "
                     f"{_f(e['paged_over_contiguous_kernel'], 3)}; meets: {e['meets']}")
    bad = [e["label"] for e in fig["correctness"] if e["decode_pass"] is False or e["no_worse_than_sdpa"] is False]
    lines.append(f"correctness: {len(fig['correctness'])} rows checked"
                 + (f"; ours fails or is worse than SDPA on: {'; '.join(bad)}" if bad else "; ours passes, no worse "
                    "than SDPA's larger error"))
    return lines


def device_slug_of(env: dict) -> str:
    """The device part of the file name ('h200'), as the other records name it."""
    from .tensorcore.run import device_slug
    return device_slug(env)


def record_path(out_dir, env: dict, full: bool) -> Path:
    """out_dir / decode-<device>-<date>.json, or partial-decode-… when the run is not the full one."""
    return Path(out_dir) / f"{'' if full else 'partial-'}decode-{device_slug_of(env)}-{env['date']}.json"


def is_full(*, cases, impls, parts, sweep) -> bool:
    """Whether a run with these choices is the full benchmark (the one a record may be)."""
    return (tuple(cases) == FULL_CASES and set(impls) == set(ALL_IMPLS) and set(parts) == set(PARTS)
            and tuple(map(tuple, sweep)) == SWEEP_SHAPES)


#: GB/s assumed by estimate_seconds (rough H200 figures: issue 24's SDPA anchors, ours (v2) and v1
#: about as decode-h200-2026-12-05.json measured them on the GQA rows, ours unsplit at B = 1 on 8
#: SMs); _FLOOR_US: a call's least
_RATE_GBPS = {"decode": 3500.0, "decode_nosplit": 300.0, "decode_simt": 1500.0, "sdpa_cudnn": 3500.0,
              "sdpa_flash": 3000.0}
_FLOOR_US = 25.0
_SESSION_S = 0.6                  #: one torch.profiler session: start, export, parse
#: imports, the copy, the NVRTC compiles of both variants' kernels for FULL_CASES: v1's five
#: (d, paged, ROWS), v2's three (d, paged: one build for every rows), the merge's two (d)
_STARTUP_S = 45.0


def call_seconds_of(impl: str, case: Case) -> float:
    """The planned seconds of one call of impl on a case (``_RATE_GBPS``, at least ``_FLOOR_US``)."""
    return max(_FLOOR_US, kv_bytes(case) / _RATE_GBPS[impl] / 1e3) / 1e6


def _measure_s(t: float, budget_s: float, kernel: bool) -> float:
    n = max(3, min(REPEAT, budget_s / 3 / t))
    k = max(3, min(KERNEL_REPEAT, n))
    host = 3 * max(n, min(50, budget_s / 9 / t)) * t          # timing.measure's host rounds (call pass only)
    return (WARMUP + 3 + (k if kernel else n)) * t + (_SESSION_S if kernel else 0.02 + host)


def estimate_seconds(cases, impls, *, parts=PARTS, sweep=SWEEP_SHAPES, budget_s: float = BUDGET_S) -> dict:
    """A rough plan of the run's wall time on an H200 (seconds per part and "total"), from
    ``_RATE_GBPS`` and ``timing.measure``'s repeat rule. For planning only: the record holds the
    measured wall_s."""
    est = {"startup": _STARTUP_S, "call": 0.0, "kernel": 0.0, "splits": 0.0}
    for case in cases:
        run = row_impls(case, impls)
        inputs = 0.1 + set_bytes(case) / 1e12                          # randn at ~1 TB/s, paging
        if "call" in parts:
            est["call"] += inputs + 0.2 + min(REF_ELEMENTS, case.Nk * case.d * case.H_kv) * 4 / 1e9   # reference
            for impl in run:
                t = call_seconds_of(impl, case)
                est["call"] += 0.05 + t + _measure_s(t, budget_s, False)
        if "kernel" in parts:
            est["kernel"] += inputs
            for impl in run:
                est["kernel"] += 0.05 + _measure_s(call_seconds_of(impl, case), budget_s, True)
    if "splits" in parts:
        for B, H, H_kv, Nk in sweep:
            case, e = Case(B, H, H_kv, Nk), sweep_entry(B, H, H_kv, Nk)
            est["splits"] += 0.1 + set_bytes(case) / 1e12
            for s in e["num_splits"]:
                t = call_seconds_of("decode_nosplit" if s == 1 else "decode", case)
                est["splits"] += _measure_s(t, budget_s, True)
    est["total"] = sum(est.values())
    return est


def plan_lines(cases, impls, *, parts=PARTS, sweep=SWEEP_SHAPES, budget_s: float = BUDGET_S, out_dir="$OUT",
               deadline_s: float = DEADLINE_S) -> list[str]:
    """What ``bench_decode.py --plan`` prints: the record's name, the rows (shape, bytes, our splits
    and blocks, input sets at the H200's L2, implementations), the sweep and the planned time."""
    full = is_full(cases=cases, impls=impls, parts=parts, sweep=sweep)
    lines = [f"writes {out_dir}/{'' if full else 'partial-'}decode-<device>-<date>.json (and .log)",
             f"parts: {','.join(parts)}; implementations: {','.join(impls)}; deadline {deadline_s:.0f} s"]
    for case in cases:
        r = base_row(case, impls)
        lines.append(f"  {case.label:44s} kv={r['kv_bytes'] / 1e6:9.1f} MB splits={r['num_splits']:3d} "
                     f"blocks={r['blocks']:4d} sets={input_sets(r['set_bytes'], PLAN_L2_BYTES)} "
                     f"impls={','.join(r['impls'])}")
    if "splits" in parts:
        for B, H, H_kv, Nk in sweep:
            e = sweep_entry(B, H, H_kv, Nk)
            lines.append(f"  sweep B={B} H={H} Hkv={H_kv} Nk={Nk}: heuristic {e['heuristic']}, timing "
                         f"{','.join(map(str, e['num_splits']))}")
    est = estimate_seconds(cases, impls, parts=parts, sweep=sweep, budget_s=budget_s)
    lines.append("planned seconds on an H200 (rough): " + ", ".join(f"{k} {v:.0f}" for k, v in est.items()))
    return lines


# ---------------------------------------------------------------------------------------------------
# The reference and the paging: NumPy or torch, no GPU needed.

def reference_decode(q, k, v, *, causal: bool = False, scale: float | None = None):
    """Dense attention in float64 for one sequence: q (H, Nq, d), k, v (H_kv, Nk, d) NumPy arrays,
    query head h reading KV head h // (H // H_kv); causal is bottom-right (query i sees key c iff
    c <= i + Nk − Nq). Returns (O (H, Nq, d), lse (H, Nq)), float64, natural log."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    H, Nq, d = q.shape
    H_kv, Nk = k.shape[:2]
    G = H // H_kv
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    qq = q.reshape(H_kv, G * Nq, d)                                  # rows of KV head g: its G heads' Nq rows
    s = np.matmul(qq, k.transpose(0, 2, 1)) * scale                  # (H_kv, G·Nq, Nk)
    if causal:
        i = np.arange(G * Nq) % Nq
        s = np.where(np.arange(Nk)[None, :] > (i[:, None] + Nk - Nq), -np.inf, s)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    O = np.matmul(p, v) / l
    lse = (m + np.log(l))[..., 0]
    return O.reshape(H, Nq, d), lse.reshape(H, Nq)


def ref_kv_heads(case: Case, ref_elements: int = REF_ELEMENTS) -> int:
    """KV heads of batch 0 the reference covers: max(1, min(H_kv, ref_elements // (Nk·d)))."""
    return max(1, min(case.H_kv, ref_elements // (case.Nk * case.d)))


def page_cache(x, page_size: int, perm):
    """A contiguous cache x (B, H_kv, Nk, d) as a page pool (B·Nk/page_size, page_size, H_kv, d)
    and a block table (B, Nk/page_size): page p of sequence b goes to pool page perm[b·P + p]
    (P = Nk/page_size), so pool[table[b, c // page_size], c % page_size, g] = x[b, g, c].
    NumPy arrays or torch tensors (perm a permutation of range(B·P) of the same kind); the table
    keeps perm's dtype."""
    B, H_kv, Nk, d = x.shape
    P = Nk // page_size
    if P * page_size != Nk:
        raise ValueError(f"Nk = {Nk} is not a multiple of page_size = {page_size}")
    y = x.reshape(B, H_kv, P, page_size, d)
    y = y.permute(0, 2, 3, 1, 4) if hasattr(y, "permute") else y.transpose(0, 2, 3, 1, 4)
    logical = y.reshape(B * P, page_size, H_kv, d)                   # the pages in (b, p) order
    pool = logical[perm.argsort()]                                   # pool[perm[j]] = logical[j]
    return pool, perm.reshape(B, P)


def case_seed(case: Case) -> int:
    """The inputs' seed: the shape without the page size (a paged row sees its contiguous row's values)."""
    return zlib.crc32(f"{case.B},{case.H},{case.H_kv},{case.Nq},{case.Nk},{case.d}".encode())


# ---------------------------------------------------------------------------------------------------
# On the GPU.

class ContextLost(RuntimeError):
    """The CUDA context no longer works (an illegal address, a launch failure): nothing later in
    this process can run. ``row``: the bench row or sweep entry being measured (its failed cell
    recorded), or None."""

    def __init__(self, message: str, row: dict | None = None):
        super().__init__(message)
        self.row = row


@dataclass
class _Impl:
    """One implementation at one case: calls (one public call per input set), ctx (a function
    returning the context manager its calls run in: SDPA's backend choice) and info for the row."""

    calls: list
    ctx: object = None
    info: dict = field(default_factory=dict)

    def context(self):
        return self.ctx() if self.ctx is not None else nullcontext()


def _check_context(after: str, row: dict | None = None) -> None:
    """Raise ContextLost (carrying ``row``) unless a tiny torch op still runs (called after a failure)."""
    try:
        import torch
        torch.cuda.synchronize()
        x = torch.ones(1, device="cuda")
        if float((x + 1).item()) != 2.0:
            raise RuntimeError("1 + 1 != 2 on the device")
    except Exception as exc:
        raise ContextLost(f"after {after}: {error_text(exc)}", row) from None
    free_torch_cache()


def _inputs(case: Case, nsets: int, ref: bool = True):
    """(sets, ref_src): ``nsets`` input sets, dicts with q (B, H, Nq, d), k, v (contiguous
    (B, H_kv, Nk, d), or page pools with table: an int32 (B, Nk/page_size) block table, pages
    shuffled) — unit-normal fp16, seeded by ``case_seed`` (both passes see the same values) — and
    ref_src = (q, k, v) of batch 0 of set 0 as NumPy fp16 arrays (KV heads 0..ref_kv_heads−1 and their
    query heads), or None when ref is False."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(case_seed(case))
    cpu = torch.Generator().manual_seed(case_seed(case))
    sets, src = [], None
    dt = torch.float16
    for i in range(nsets):
        q = torch.randn(case.B, case.H, case.Nq, case.d, device="cuda", dtype=dt, generator=g)
        k = torch.randn(case.B, case.H_kv, case.Nk, case.d, device="cuda", dtype=dt, generator=g)
        v = torch.randn(case.B, case.H_kv, case.Nk, case.d, device="cuda", dtype=dt, generator=g)
        if i == 0 and ref:
            nkv = ref_kv_heads(case)
            src = tuple(x[0, :n].cpu().numpy() for x, n in ((q, nkv * case.G), (k, nkv), (v, nkv)))
        if case.paged:
            perm = torch.randperm(case.B * (case.Nk // case.page_size), generator=cpu).to("cuda")
            kp, table = page_cache(k, case.page_size, perm)
            del k
            vp, _ = page_cache(v, case.page_size, perm)
            del v
            sets.append({"q": q, "k": kp.contiguous(), "v": vp.contiguous(), "table": table.to(torch.int32)})
        else:
            sets.append({"q": q, "k": k, "v": v, "table": None})
    return sets, src


def _sdpa_mask(impl: str, case: Case, q):
    """(attn_mask, how) for SDPA on a case: None unless causal; bottom-right for flash as
    ``causal_lower_right`` (CausalBias), for cuDNN as an additive (1, 1, Nq, Nk) mask."""
    import torch
    if not case.causal:
        return None, "none"
    if impl == "sdpa_flash":
        from torch.nn.attention.bias import causal_lower_right
        return (causal_lower_right(case.Nq, case.Nk),
                "torch.nn.attention.bias.causal_lower_right(Nq, Nk): bottom-right CausalBias")
    i = torch.arange(case.Nq, device=q.device)[:, None]
    c = torch.arange(case.Nk, device=q.device)[None, :]
    mask = torch.zeros(1, 1, case.Nq, case.Nk, dtype=q.dtype, device=q.device)
    mask.masked_fill_(c > i + case.Nk - case.Nq, float("-inf"))
    return mask, "additive (1, 1, Nq, Nk) mask in the input dtype, -inf above the bottom-right diagonal"


def _build(impl: str, case: Case, sets, num_splits=None) -> _Impl:
    """The public calls of one implementation on every input set (nothing timed here; SDPA's
    first call runs once to choose enable_gqa or expanded K, V)."""
    import torch
    if impl in OURS_IMPLS:
        from .decode import flash_decode_gpu
        kw = {"causal": case.causal}
        if VARIANT_OF[impl] is not None:
            kw["variant"] = VARIANT_OF[impl]
        if impl == "decode_nosplit":
            kw["num_splits"] = 1
        elif num_splits is not None:
            kw["num_splits"] = num_splits
        if case.paged:
            calls = [partial(flash_decode_gpu, s["q"], s["k"], s["v"], block_table=s["table"], Nk=case.Nk, **kw)
                     for s in sets]
        else:
            calls = [partial(flash_decode_gpu, s["q"], s["k"], s["v"], **kw) for s in sets]
        return _Impl(calls)
    if impl in SDPA_IMPLS:
        import torch.nn.functional as F
        from torch.nn.attention import sdpa_kernel

        from .tensorcore.bench import sdpa_backend
        backend = sdpa_backend(impl.split("_")[1])
        ctx = lambda: sdpa_kernel(backend)  # noqa: E731
        mask, how = _sdpa_mask(impl, case, sets[0]["q"])
        kw = {} if mask is None else {"attn_mask": mask}
        G = case.G
        failures = []
        for mode in (("native",) if G == 1 else ("enable_gqa", "expanded")):
            if mode == "expanded":
                kvs = [(s["k"].repeat_interleave(G, dim=1), s["v"].repeat_interleave(G, dim=1)) for s in sets]
            else:
                kvs = [(s["k"], s["v"]) for s in sets]
            extra = {"enable_gqa": True} if mode == "enable_gqa" else {}
            calls = [partial(F.scaled_dot_product_attention, s["q"], k, v, **kw, **extra)
                     for s, (k, v) in zip(sets, kvs)]
            try:
                with ctx():
                    calls[0]()
                torch.cuda.synchronize()
            except Exception as exc:
                failures.append(f"{mode}: {error_text(exc)}")
                del kvs, calls
                continue
            info = {f"{impl}_gqa": mode, f"{impl}_mask": how}
            if failures:
                info[f"{impl}_gqa_note"] = "; ".join(failures)
            return _Impl(calls, ctx, info)
        raise RuntimeError("; ".join(failures))
    raise ValueError(f"unknown implementation {impl!r}; one of {', '.join(ALL_IMPLS)}")


def _compare(impl: str, out, ref) -> dict:
    """<impl>_max_abs_err of O (and lse for ours) on the reference's heads of batch 0, and
    <impl>_nonfinite over the whole O."""
    import torch
    O, lse = (out if isinstance(out, tuple) else (out, None))
    refO, refL = ref
    nh = refO.shape[0]
    res = {f"{impl}_max_abs_err": float(np.abs(O[0, :nh].double().cpu().numpy() - refO).max()),
           f"{impl}_nonfinite": not bool(torch.isfinite(O).all())}
    if lse is not None:
        res[f"{impl}_lse_max_abs_err"] = float(np.abs(lse[0, :nh].double().cpu().numpy() - refL).max())
    return res


def _measure(it: _Impl, part: str, budget_s: float) -> dict:
    """``timing.measure`` of one implementation's calls: part "call" (the public call and the host
    time per call) or "kernel" (kernel-only)."""
    from .timing import measure
    with it.context():
        return measure(it.calls, repeat=REPEAT, warmup=WARMUP, kernel_repeat=KERNEL_REPEAT, budget_s=budget_s,
                       parts=("call", "host") if part == "call" else (part,))


def copy_bandwidth(nbytes: int = COPY_BYTES, repeat: int = COPY_REPEAT) -> dict:
    """The device's copy bandwidth (``COPY_METHOD``): {"copy_GBps", "copy_bytes" (read + written),
    "copy_ms", "method"}."""
    import torch

    from .timing import call_times_ms
    def timed() -> float:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        src.fill_(1)
        dst = torch.empty_like(src)
        return float(np.median(call_times_ms(lambda: dst.copy_(src), repeat=repeat, warmup=3)))

    t = timed()
    free_torch_cache()
    return {"copy_GBps": 2 * nbytes / t / 1e6, "copy_bytes": 2 * nbytes, "copy_ms": t, "method": COPY_METHOD}


def call_pass_case(case: Case, impls, *, budget_s: float = BUDGET_S, l2_bytes: int = PLAN_L2_BYTES,
                   copy_GBps=None, num_sms: int = NUM_SMS, smem_optin: int = SMEM_OPTIN,
                   smem_per_sm: int | None = None, smem_reserved: int = SMEM_RESERVED) -> dict:
    """One case's public-call pass: its bench row (``base_row`` on the device the figures describe).
    The float64 reference, then per implementation: the first call (compared with the reference),
    then its public call timed. A failure is recorded in its cell and the next one runs;
    ContextLost when the device no longer works after one."""
    import torch
    row = base_row(case, impls, num_sms=num_sms, smem_optin=smem_optin, smem_per_sm=smem_per_sm,
                   smem_reserved=smem_reserved)
    row["input_sets"] = input_sets(row["set_bytes"], l2_bytes)
    run = row["impls"]
    try:
        sets, src = _inputs(case, row["input_sets"])
    except Exception as exc:
        for impl in run:
            row[f"{impl}_error"] = f"inputs: {error_text(exc)}"
        _check_context("making the inputs", row)
        return row
    ref = None
    try:
        refO, refL = reference_decode(*src, causal=case.causal)
        ref = (refO, refL)
        row.update(ref_batch=0, ref_heads=int(refO.shape[0]), ref_max_abs=float(np.abs(refO).max()),
                   tol_rel=TOL_REL)
    except Exception as exc:
        row["ref_error"] = error_text(exc)
    del src
    for impl in run:
        try:
            it = _build(impl, case, sets)
            row.update(it.info)
            with it.context():
                out = it.calls[0]()
            torch.cuda.synchronize()
            if ref is not None:
                row.update(_compare(impl, out, ref))
                row[f"{impl}_pass"] = pass_of(row[f"{impl}_max_abs_err"], row["ref_max_abs"],
                                              row[f"{impl}_nonfinite"])
            del out
            t = _measure(it, "call", budget_s)
            row[f"{impl}_call_us"] = t["call_ms"] * 1e3
            if "host_us" in t:
                row[f"{impl}_host_us"] = t["host_us"]
            del it
        except Exception as exc:
            row[f"{impl}_error"] = error_text(exc)
            _check_context(f"{impl} on {case.label}", derive(row, impls, copy_GBps))
    del sets
    free_torch_cache()
    return derive(row, impls, copy_GBps)


def kernel_pass_case(row: dict, impls, *, budget_s: float = BUDGET_S, l2_bytes: int = PLAN_L2_BYTES,
                     copy_GBps=None) -> dict:
    """One case's kernel-only pass (torch.profiler), into its row: <impl>_kernel_us,
    <impl>_kernel_name, <impl>_launches, or <impl>_kernel_error. Implementations that failed in
    the public-call pass (<impl>_error) are not run again."""
    case = case_of(row)
    nsets = row.get("input_sets") or input_sets(row["set_bytes"], l2_bytes)
    row.setdefault("input_sets", nsets)
    todo = [i for i in row.get("impls", row_impls(case, impls)) if i in impls and f"{i}_error" not in row]
    if not todo:
        return row
    try:
        sets, _ = _inputs(case, nsets, ref=False)
    except Exception as exc:
        for impl in todo:
            row[f"{impl}_kernel_error"] = f"inputs: {error_text(exc)}"
        _check_context("making the inputs", row)
        return row
    for impl in todo:
        try:
            it = _build(impl, case, sets)
            row.update({k: v for k, v in it.info.items() if k not in row})
            t = _measure(it, "kernel", budget_s)
            row.update({f"{impl}_kernel_us": t["kernel_ms"] * 1e3, f"{impl}_kernel_name": t["kernel_name"],
                        f"{impl}_launches": t["per_call"]})
            if "kernel_note" in t:
                row[f"{impl}_kernel_note"] = t["kernel_note"]
            del it
        except Exception as exc:
            row[f"{impl}_kernel_error"] = error_text(exc)
            _check_context(f"{impl} (kernel-only) on {row['label']}", derive(row, impls, copy_GBps))
    del sets
    free_torch_cache()
    return derive(row, impls, copy_GBps)


def split_sweep(B: int, H: int, H_kv: int, Nk: int, *, d: int = 128, budget_s: float = BUDGET_S,
                l2_bytes: int = PLAN_L2_BYTES, num_sms: int = NUM_SMS, smem_optin: int = SMEM_OPTIN,
                smem_per_sm: int | None = None, smem_reserved: int = SMEM_RESERVED) -> dict:
    """Ours at every count of ``sweep_splits``, kernel-only, on one shape (Nq = 1): a ``splits``
    entry (``sweep_entry`` with kernel_us and errors filled, then ``derive_sweep``)."""
    case = Case(B, H, H_kv, Nk, d=d)
    entry = sweep_entry(B, H, H_kv, Nk, d, num_sms=num_sms, smem_optin=smem_optin, smem_per_sm=smem_per_sm,
                        smem_reserved=smem_reserved)
    try:
        sets, _ = _inputs(case, input_sets(set_bytes(case), l2_bytes), ref=False)
    except Exception as exc:
        entry["errors"]["inputs"] = error_text(exc)
        entry["kernel_us"] = [None] * len(entry["num_splits"])
        _check_context("making the sweep's inputs", entry)
        return entry
    for s in entry["num_splits"]:
        try:
            it = _build("decode", case, sets, num_splits=s)
            entry["kernel_us"].append(_measure(it, "kernel", budget_s)["kernel_ms"] * 1e3)
            del it
        except Exception as exc:
            entry["kernel_us"].append(None)
            entry["errors"][str(s)] = error_text(exc)
            _check_context(f"the sweep at {s} splits", derive_sweep(entry))
    del sets
    free_torch_cache()
    return derive_sweep(entry)


def run_decode_benchmark(out_dir, *, cases=FULL_CASES, impls=ALL_IMPLS, parts=PARTS, sweep=SWEEP_SHAPES,
                         budget_s: float = BUDGET_S, deadline_s: float = DEADLINE_S, argv=None, log=print) -> Path:
    """Measure on this GPU and write the record (see the module text) into out_dir; returns its
    path. The JSON (and a .log of the printed lines) is written after every row, so a run cut short
    keeps what it measured; no new row or part starts after deadline_s seconds, and a lost CUDA
    context stops the run (the record then says "cut_short" and is named partial-…). Raises
    RuntimeError without CuPy, torch or a GPU, ValueError for an unknown implementation or part."""
    t0 = time.time()
    from .common import device_facts, environment, gpu_status
    ok, reason = gpu_status()
    if not ok:
        raise RuntimeError(f"the decode benchmark needs a CUDA GPU with CuPy: {reason}")
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("the decode benchmark needs torch with CUDA")
    from .provenance_env import code_hashes, stamp_commit
    from .tensorcore.bench import check_streams
    bad = [i for i in impls if i not in ALL_IMPLS] + [p for p in parts if p not in PARTS]
    if bad:
        raise ValueError(f"unknown implementations or parts {bad}; implementations: {', '.join(ALL_IMPLS)}; "
                         f"parts: {', '.join(PARTS)}")
    impls = [i for i in ALL_IMPLS if i in impls]
    parts = [p for p in PARTS if p in parts]
    cases, sweep = tuple(cases), tuple(tuple(s) for s in sweep)
    check_streams()
    env = stamp_commit(environment())
    facts = device_facts()
    l2 = facts.l2_bytes or PLAN_L2_BYTES
    dev = facts_kwargs(facts)              # the figures plan_decode reads: every row's launch is the call's
    env["l2_bytes"] = l2
    full = is_full(cases=cases, impls=impls, parts=parts, sweep=sweep)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = record_path(out, env, full)
    data = {"kind": "flashviz decode benchmark", "env": env, "argv": list(argv or []), "full": full,
            "impls": list(impls), "parts": list(parts), "cases": [c.label for c in cases], "dtype": DTYPE,
            "tol_rel": TOL_REL, "ref_elements": REF_ELEMENTS,
            "targets": dict(TARGETS), "method": METHOD, "methods": dict(METHODS), "notes": list(NOTES),
            "copy_GBps": None, "copy": None, "bench": [], "splits": [], "figures": None, "cut_short": None}

    rec = RunRecord(path, data, t0=t0, deadline_s=deadline_s, log=log, hashes=lambda: code_hashes(FILES, KERNELS),
                    finish=lambda d: d.update(figures=figures(d["bench"], d["splits"])))
    say, save, late = rec.say, rec.save, rec.late

    est = estimate_seconds(cases, impls, parts=parts, sweep=sweep, budget_s=budget_s)
    say(f"{env['device']}: torch {env.get('torch')}, CuPy {env.get('cupy')}, commit {env.get('commit')}; "
        f"{len(cases)} cases x {len(impls)} implementations, parts {','.join(parts)}; planned about "
        f"{est['total']:.0f} s, deadline {deadline_s:.0f} s; writing {path}. Each row: µs by public call / "
        f"kernel-only, GB/s = K and V bytes / time, cudnn/ours and flash/ours = their time ÷ ours (above 1: "
        f"ours is faster), ours/copy = our GB/s ÷ the copy's")
    copy_GBps = None
    try:
        try:
            c = copy_bandwidth()
            data["copy"], data["copy_GBps"] = c, c["copy_GBps"]
            copy_GBps = c["copy_GBps"]
            say(f"[{time.time() - t0:5.0f} s] copy: {copy_GBps:,.0f} GB/s ({c['copy_bytes'] / 2**30:.0f} GiB read + "
                f"written in {c['copy_ms']:.3f} ms)")
        except Exception as exc:
            data["copy"] = {"copy_error": error_text(exc), "method": COPY_METHOD}
            say(f"copy bandwidth FAILED: {error_text(exc)}")
            _check_context("the copy")
        save()
        stop = False
        if "call" in parts:
            for case in cases:
                if late(f"the public-call pass at {case.label}"):
                    stop = True
                    break
                row = call_pass_case(case, impls, budget_s=budget_s, l2_bytes=l2, copy_GBps=copy_GBps, **dev)
                data["bench"].append(row)
                say(f"[{time.time() - t0:5.0f} s] call pass: " + row_line(row, impls))
                save()
        if "kernel" in parts and not stop:
            if "call" not in parts:
                data["bench"] = [base_row(cs, impls, **dev) for cs in cases]
            for row in data["bench"]:
                if late(f"the kernel-only pass at {row['label']}"):
                    stop = True
                    break
                kernel_pass_case(row, impls, budget_s=budget_s, l2_bytes=l2, copy_GBps=copy_GBps)
                say(f"[{time.time() - t0:5.0f} s] " + row_line(row, impls))
                save()
        if "splits" in parts and not stop:
            for B, H, H_kv, Nk in sweep:
                if late(f"the split sweep at B={B} H={H} Hkv={H_kv} Nk={Nk}"):
                    break
                entry = split_sweep(B, H, H_kv, Nk, budget_s=budget_s, l2_bytes=l2, **dev)
                data["splits"].append(entry)
                say(f"[{time.time() - t0:5.0f} s] " + sweep_line(entry))
                save()
    except ContextLost as exc:
        if exc.row is not None:
            kept = data["splits"] if "heuristic" in exc.row else data["bench"]
            if not any(x is exc.row for x in kept):
                kept.append(exc.row)
        data["cut_short"] = f"the CUDA context was lost {exc}; nothing later could run in this process"
        say(f"run stopped: {data['cut_short']}")
    except BaseException as exc:                       # record what there is, then let it go on
        data["cut_short"] = f"stopped by {error_text(exc)}"
        say(f"run stopped: {error_text(exc)}")
        raise
    finally:
        if data["cut_short"] and full:
            for p in (path, path.with_suffix(".log")):
                try:
                    p.unlink()
                except OSError:
                    pass
            data["full"] = False
            path = rec.path = record_path(out, env, False)
        save()
    for line in figures_lines(data["figures"]):
        say(line)
    say(f"done in {time.time() - t0:.0f} s: {path}")
    path.with_suffix(".log").write_text("\n".join(rec.lines) + "\n")
    return path


__all__ = ["run_decode_benchmark", "call_pass_case", "kernel_pass_case", "split_sweep", "copy_bandwidth", "Case",
           "base_row", "case_of", "row_impls", "skip_reason", "kv_bytes", "set_bytes", "derive", "ratio", "pass_of",
           "row_line", "sweep_splits", "sweep_entry", "derive_sweep", "sweep_line", "figures", "figures_lines",
           "record_path", "is_full", "estimate_seconds", "plan_lines", "reference_decode", "ref_kv_heads",
           "page_cache", "case_seed", "ContextLost", "IMPLS", "EXTRA_IMPLS", "ALL_IMPLS", "PARTS", "FULL_CASES",
           "QUICK_CASES", "SWEEP_SHAPES", "QUICK_SWEEP", "SWEEP_SPLITS", "TARGETS", "METHODS", "METHOD",
           "TOL_REL", "DEADLINE_S", "BUDGET_S", "COPY_BYTES"]
