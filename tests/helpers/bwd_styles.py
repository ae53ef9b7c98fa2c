"""Backward records of both layouts, for the tests of their readers.

Records made while ``flash_backward_mma``'s default dQ was the fp32 atomics hold ``bwd_mma`` = the
atomic path (kernel ``flash_bwd_mma<…, true>``) and ``bwd_mma_det`` = the separate, deterministic
pass (``flash_bwd_mma<…, false>``). Records made since the separate pass became the default hold
``bwd_mma`` = the separate pass and ``bwd_mma_atomic`` = the atomics, without a forward + backward
figure for the latter (``no_fwdbwd``). ``new_style(rec)`` lays a record of the first kind out as the
benchmark (``gpu/tensorcore/bench_bwd.py``) writes the second: the same measurements under the
names they would have now, so a reader must give the same figures for either.
"""

from __future__ import annotations

import copy
import re

OLD_ATOMIC, OLD_DET = "bwd_mma", "bwd_mma_det"
NEW_DEFAULT, NEW_ATOMIC = "bwd_mma", "bwd_mma_atomic"


def _rename(key: str) -> str | None:
    """A bench-row key of the old layout under its new name (None: the new layout has no such key)."""
    if key.startswith(OLD_DET + "_"):
        return NEW_DEFAULT + key[len(OLD_DET):]
    if key.startswith(OLD_ATOMIC + "_"):
        rest = key[len(OLD_ATOMIC):]
        return None if rest.startswith("_fwdbwd") else NEW_ATOMIC + rest
    return key


def new_style(rec: dict) -> dict:
    """``rec`` (old layout, with bwd_mma_det rows) as a record of the new layout: bench rows,
    correctness and determinism entries, impls and no_fwdbwd renamed; ``<impl>_dq`` added as the
    benchmark writes it. Peak rows keep ``bwd_mma`` (the default call's memory: the same buffers
    on either dQ path)."""
    out = copy.deepcopy(rec)
    names = {OLD_ATOMIC: NEW_ATOMIC, OLD_DET: NEW_DEFAULT}
    rows = []
    for r in out["bench"]:
        row = {}
        for k, v in r.items():
            k2 = _rename(k)
            if k2 is not None:
                row[k2] = v
        if any(k.startswith(NEW_DEFAULT + "_") and k.endswith("_ms") for k in row):
            row[f"{NEW_DEFAULT}_dq"] = "separate"
        if any(k.startswith(NEW_ATOMIC + "_") and k.endswith("_ms") for k in row):
            row[f"{NEW_ATOMIC}_dq"] = "atomic"
        rows.append(row)
    out["bench"] = rows
    for e in out.get("correctness", []):
        e["impl"] = names.get(e["impl"], e["impl"])
    for e in out.get("deterministic", []):
        if e["impl"] in names:
            e["impl"] = names[e["impl"]]
            e["dq"] = "separate" if e["impl"] == NEW_DEFAULT else "atomic"
    out["impls"] = [names.get(i, i) for i in out.get("impls", [])]
    out["no_fwdbwd"] = [NEW_ATOMIC] if NEW_ATOMIC in out["impls"] else []
    return out


def raw_dq(rec: dict, impl: str) -> str | None:
    """How ``impl`` added up dQ in record ``rec``, read from its raw kernel names (not through
    flashviz): the main kernel flash_bwd_mma<DT, Bc, D, CAUSAL, ATOMIC_DQ, …> with ATOMIC_DQ true,
    or with four template arguments (before the flag: atomics only), is "atomic", ATOMIC_DQ false
    "separate"; the Hopper kernel flash_bwd_wgmma<DT, Bc, D, CAUSAL, DQ> by its DQ (0 "separate",
    1 "atomic", 2 "bulk"), and the dQ pass flash_bwd_mma_dq "separate"; None when no row names
    one of them. Asserts one path across the rows."""
    paths = set()
    for r in rec["bench"]:
        name = r.get(f"{impl}_kernel_name") or ""
        m = re.search(r"flash_bwd_mma<([^<>]*)>", name)
        w = re.search(r"flash_bwd_wgmma<([^<>]*)>", name)
        if m:
            a = [x.strip() for x in m[1].split(",")]
            paths.add("atomic" if len(a) == 4 or a[4] == "true" else "separate")
        elif w:
            paths.add({"0": "separate", "1": "atomic", "2": "bulk"}[w[1].split(",")[4].strip()])
        elif re.search(r"flash_bwd_mma_dq\b", name):
            paths.add("separate")
    assert len(paths) <= 1, (impl, paths)
    return paths.pop() if paths else None


def added_and_det(rec: dict) -> tuple[str | None, str | None]:
    """(non-deterministic, deterministic): of bwd_mma, bwd_mma_det, bwd_mma_atomic in that order, the
    first whose raw dQ path is "atomic" or "bulk" and the first whose path is "separate"."""
    paths = {i: raw_dq(rec, i) for i in ("bwd_mma", "bwd_mma_det", "bwd_mma_atomic")}
    return (next((i for i, p in paths.items() if p in ("atomic", "bulk")), None),
            next((i for i, p in paths.items() if p == "separate"), None))
