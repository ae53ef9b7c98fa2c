"""The committed timelines read straight from their files, without flashviz: gzip, JSON, base64
columns (benchmarks/results/timeline-*.json.gz) and the recording's run list (timelines-*.json).
The tests' own account of what a record holds, to compare flashviz's readings with."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
_NAME = re.compile(r"timeline-(?P<kernel>bwd_teaching|bwd_mma|bwd_wgmma)-d(?P<d>\d+)(?P<causal>-causal)?-n(?P<N>\d+)"
                   r"-(?P<device>[a-z0-9-]+)-(?P<date>\d{4}-\d{2}-\d{2})\.json\.gz")


def backward_files(causal: bool = False) -> dict[str, Path]:
    """{"bwd_teaching": file, "bwd_mma": file, "bwd_wgmma": file}: the teaching backward's newest recorded
    timeline of this mask at its smallest (d, N), and each tensor-core backward's newest of the same d, N
    and device (a kernel missing from the dict when not recorded)."""
    rows = [(m, f) for f in RESULTS.glob("timeline-bwd_*.json.gz") if (m := _NAME.fullmatch(f.name))
            and bool(m["causal"]) == causal]
    teach = [(m, f) for m, f in rows if m["kernel"] == "bwd_teaching"]
    if not teach:
        return {}
    newest = max(m["date"] for m, _ in teach)
    m0, f0 = min(((m, f) for m, f in teach if m["date"] == newest), key=lambda r: (int(r[0]["d"]), int(r[0]["N"])))
    out = {"bwd_teaching": f0}
    for kernel in ("bwd_mma", "bwd_wgmma"):
        same = sorted((m["date"], f) for m, f in rows if m["kernel"] == kernel
                      and (m["d"], m["N"], m["device"]) == (m0["d"], m0["N"], m0["device"]))
        if same:
            out[kernel] = same[-1][1]
    return out


def load(path) -> dict:
    return json.loads(gzip.decompress(Path(path).read_bytes()))


def column(data: dict, table: str, name: str) -> np.ndarray:
    c = data[table][name]
    return np.frombuffer(base64.b64decode(c["data"]), np.dtype(c["dtype"]), count=int(data[f"n_{table}"]))


def steps_per_tile(path, group: int = 0) -> dict[str, float]:
    """{step: ns per tile}: each step's summed time in ``group`` over the rows (j ≥ 0) of the blocks whose
    events the file keeps, over the number of distinct (block, row) pairs; the file's step order."""
    data = load(path)
    g, j, stage, cta = (column(data, "events", k) for k in ("group", "j", "stage", "cta"))
    dt = column(data, "events", "t1_ns").astype(float) - column(data, "events", "t0_ns").astype(float)
    mine = (g == group) & (j >= 0)
    tiles = len(set(zip(cta[mine].tolist(), j[mine].tolist())))
    return {name: float(dt[mine & (stage == k)].sum()) / tiles for k, name in enumerate(data["stages"])
            if (mine & (stage == k)).any()}


def run_row(path) -> dict:
    """The row of the recording's run list (benchmarks/results/timelines-*.json) that wrote this file."""
    name = Path(path).name
    for f in sorted(RESULTS.glob("timelines-*.json")):
        for r in json.loads(f.read_text()).get("runs", []):
            if r.get("file") == name:
                return r
    raise LookupError(f"no run list names {name}")
