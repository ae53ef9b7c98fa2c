"""Chapter 9's reading of a decode benchmark record (benchmarks/results/decode-<device>-<date>.json,
written by ``gpu.decode_bench``), without a GPU.

``decode_rows(rec)``: one entry per bench row that our kernel ran — its shape, our split count,
each implementation's kernel-only and public-call time (µs) and the bytes of K and V it read per
second (GB/s, kv_bytes over the time), ours as a share of the device's copy bandwidth measured in
the same run (``copy_GBps``), and cuDNN's time over ours. ``decode_lines(rec)`` prints them.
``split_sweeps(rec)``: the record's split-count sweeps (kernel µs per split count, the
heuristic's count and the best one).

"ours" (``decode``) is always the call without a variant, whichever split kernel that ran: v1
(``flash_decode``) in records made before v2 became the default, which time v2 beside it as
``decode_mma``; v2 (``flash_decode_mma``) since, with v1 beside it as ``decode_simt``.
``alternative(rec)`` says which of the two a record holds, ``kernel_names(rec, impl)`` which
kernels an implementation's rows timed (read off the record, never assumed).
"""

from __future__ import annotations

import re

#: the implementations a row may carry, as the chapter names them (gpu.decode_bench's prefixes)
NAMES = {"decode": "ours", "decode_nosplit": "ours, no split", "decode_mma": "ours, tensor cores (v2)",
         "decode_simt": "ours, CUDA cores (v1)", "sdpa_cudnn": "SDPA-cuDNN", "sdpa_flash": "SDPA-flash"}
#: the keys of NAMES that are ours
OURS = ("decode", "decode_nosplit", "decode_mma", "decode_simt")
#: the call with a variant a record times beside the default one: v1 in records since v2 became
#: the default, v2 in those before
ALTERNATIVES = ("decode_simt", "decode_mma")
#: the split kernels, as ``gpu.decode`` names them, and what they are
KERNELS = {"flash_decode": "v1, CUDA cores", "flash_decode_mma": "v2, tensor cores"}


def alternative(rec: dict | None) -> str | None:
    """The call with a variant that ``rec`` times beside the default one ("decode_simt" or
    "decode_mma", from the record's ``impls`` or else its rows' keys), or None when it has neither."""
    rec = rec or {}
    listed = rec.get("impls") or []
    for impl in ALTERNATIVES:
        if impl in listed or any(impl in (r.get("impls") or []) or f"{impl}_kernel_us" in r
                                 for r in rec.get("bench") or []):
            return impl
    return None


def kernel_names(rec: dict | None, impl: str) -> list[str]:
    """The split kernels (e.g. "flash_decode_mma") whose launches ``impl``'s rows of ``rec`` timed,
    sorted, read off the rows' ``<impl>_kernel_name`` (the longest GPU activity of a call); [] when
    none names one."""
    return sorted({m[1] for r in (rec or {}).get("bench") or []
                   if (m := re.search(r"fvdec::(\w+)<", r.get(f"{impl}_kernel_name") or ""))})


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def decode_rows(rec: dict | None) -> list[dict]:
    """[{label, B, H, H_kv, Nq, Nk, d, causal, page_size, num_splits, copy_GBps, impls: {name:
    {call_us, kernel_us, call_GBps, kernel_GBps}}, ours_of_copy (kernel-only GB/s ÷ copy_GBps),
    cudnn_over_ours (cuDNN's kernel-only time ÷ ours; > 1: ours faster), and the same two for every
    implementation of ours in the row, of_copy and cudnn_over: {name: ratio or None}}] for the rows
    where ours has a kernel-only time, in the record's order; [] for None or a record without rows.
    A missing figure is None."""
    if not rec:
        return []
    copy = rec.get("copy_GBps") if _num(rec.get("copy_GBps")) else None
    out = []
    for r in rec.get("bench") or []:
        if not _num(r.get("decode_kernel_us")):
            continue
        impls = {}
        for key, name in NAMES.items():
            cell = {t: r.get(f"{key}_{t}") for t in ("call_us", "kernel_us", "call_GBps", "kernel_GBps")}
            if any(_num(v) for v in cell.values()):
                impls[name] = {k: (v if _num(v) else None) for k, v in cell.items()}
        ours = r["decode_kernel_us"]
        cudnn = r.get("sdpa_cudnn_kernel_us")
        gbps = r.get("decode_kernel_GBps")
        of_copy, cudnn_over = {}, {}
        for key in OURS:
            t, g = r.get(f"{key}_kernel_us"), r.get(f"{key}_kernel_GBps")
            of_copy[NAMES[key]] = g / copy if copy and _num(g) else None
            cudnn_over[NAMES[key]] = cudnn / t if _num(cudnn) and _num(t) and t > 0 else None
        out.append({k: r.get(k) for k in ("label", "B", "H", "H_kv", "Nq", "Nk", "d", "causal", "page_size",
                                           "num_splits")}
                   | {"copy_GBps": copy, "impls": impls,
                      "ours_of_copy": gbps / copy if copy and _num(gbps) else None,
                      "cudnn_over_ours": cudnn / ours if _num(cudnn) and ours > 0 else None,
                      "of_copy": of_copy, "cudnn_over": cudnn_over})
    return out


def _f(v, fmt: str) -> str:
    return format(v, fmt) if _num(v) else "–"


def decode_lines(rec: dict | None) -> list[str]:
    """The rows of ``decode_rows`` as printed lines: shape and splits, then per implementation its
    kernel-only µs and TB/s (public call µs in brackets), ours' share of the copy bandwidth and
    cuDNN's time ÷ ours."""
    lines = []
    for r in decode_rows(rec):
        pages = f" pages of {r['page_size']}" if r["page_size"] else ""
        shape = (f"B={r['B']} H={r['H']}/{r['H_kv']} Nq={r['Nq']} Nk={r['Nk']:,} d={r['d']}"
                 f"{' causal' if r['causal'] else ''}{pages} S={r['num_splits']}")
        cells = [f"{name} {_f(c['kernel_us'], ',.1f')} µs = "
                 f"{_f(c['kernel_GBps'] / 1e3 if c['kernel_GBps'] else None, '.2f')} TB/s "
                 f"[call {_f(c['call_us'], ',.1f')} µs]" for name, c in r["impls"].items()]
        tail = (f"ours {_f(100 * r['ours_of_copy'] if r['ours_of_copy'] else None, '.0f')} % of copy, "
                f"cuDNN ÷ ours {_f(r['cudnn_over_ours'], '.2f') + 'x' if r['cudnn_over_ours'] else '–'}")
        lines.append(f"{shape}: " + "; ".join(cells) + f" | {tail}")
    return lines


def split_sweeps(rec: dict | None) -> list[dict]:
    """The record's split sweeps: [{B, H, H_kv, Nk, num_splits: [...], kernel_us: [...], heuristic,
    best, heuristic_over_best}], as recorded ([] when there are none)."""
    return [{k: s.get(k) for k in ("B", "H", "H_kv", "Nk", "num_splits", "kernel_us", "heuristic", "best",
                                   "heuristic_over_best")} for s in (rec or {}).get("splits") or []]
