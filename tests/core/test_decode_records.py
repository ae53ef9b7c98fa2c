"""records.decode_records reads a decode benchmark record as chapter 9 shows it: rows made by the
benchmark's own row builder (gpu.decode_bench.base_row / derive) with chosen times; the figures
checked against the closed forms (bytes of K and V over the time; ratios of times)."""

from __future__ import annotations

import pytest

from flashviz.gpu import decode_bench as db
from flashviz.records.decode_records import decode_lines, decode_rows, split_sweeps

COPY = 4250.0


def _record():
    rows = []
    for case, ours, cudnn in ((db.Case(8, 32, 8, 32768), 270.0, 290.0), (db.Case(1, 32, 8, 4096), 12.0, 25.0),
                              (db.Case(8, 32, 8, 32768, page_size=16), 300.0, None)):
        r = db.base_row(case)
        r.update(decode_kernel_us=ours, decode_call_us=ours + 9)
        if cudnn:
            r.update(sdpa_cudnn_kernel_us=cudnn, sdpa_cudnn_call_us=cudnn + 10)
        rows.append(db.derive(r, copy_GBps=COPY))
    rows.append(db.base_row(db.Case(1, 32, 8, 131072)))          # a row whose cells all failed: left out
    return {"copy_GBps": COPY, "bench": rows,
            "splits": [db.derive_sweep({**db.sweep_entry(1, 32, 8, 4096), "kernel_us": [30.0, 18.0, 12.0, 13.0, 15.0]})]}


def test_rows_carry_the_bandwidth_and_ratios_of_their_times():
    rec = _record()
    got = decode_rows(rec)
    assert [r["label"] for r in got] == [r["label"] for r in rec["bench"][:3]]
    for r, ours, cudnn in zip(got, (270.0, 12.0, 300.0), (290.0, 25.0, None)):
        kv = 2 * r["B"] * r["H_kv"] * r["Nk"] * r["d"] * 2
        assert r["impls"]["ours"]["kernel_GBps"] == pytest.approx(kv / ours / 1e3)
        assert r["ours_of_copy"] == pytest.approx(kv / ours / 1e3 / COPY)
        assert r["cudnn_over_ours"] == (pytest.approx(cudnn / ours) if cudnn else None)
        assert ("SDPA-cuDNN" in r["impls"]) == bool(cudnn)
    assert got[2]["page_size"] == 16
    lines = decode_lines(rec)
    assert len(lines) == 3 and "S=" in lines[0] and "cuDNN ÷ ours 1.07x" in lines[0] and lines[2].endswith("cuDNN ÷ ours –")
    assert decode_rows(None) == [] and decode_lines({}) == []


def test_every_implementation_of_ours_gets_its_share_of_copy_and_cudnns_ratio():
    rec = _record()
    rec["bench"][0].update(decode_mma_kernel_us=240.0, decode_mma_call_us=249.0)
    rec["bench"][0] = db.derive(rec["bench"][0], copy_GBps=COPY)
    r, r1 = decode_rows(rec)[:2]
    kv = 2 * r["B"] * r["H_kv"] * r["Nk"] * r["d"] * 2
    v2 = "ours, tensor cores (v2)"
    assert r["of_copy"][v2] == pytest.approx(kv / 240.0 / 1e3 / COPY)
    assert r["cudnn_over"][v2] == pytest.approx(290.0 / 240.0)
    assert r["of_copy"]["ours"] == r["ours_of_copy"] and r["cudnn_over"]["ours"] == r["cudnn_over_ours"]
    assert r1["of_copy"][v2] is None and r1["cudnn_over"][v2] is None          # v2 not timed on that row


def test_split_sweeps_as_recorded():
    sw = split_sweeps(_record())
    assert len(sw) == 1 and sw[0]["best"] == sw[0]["num_splits"][2] and sw[0]["kernel_us"][2] == 12.0
    assert split_sweeps(None) == []
