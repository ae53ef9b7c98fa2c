"""records.decode_records reads a decode benchmark record as chapter 9 shows it: rows made by the
benchmark's own row builder (gpu.decode_bench.base_row / derive) with chosen times; the figures
checked against the closed forms (bytes of K and V over the time; ratios of times). Records of both
kinds: since v2 became the default (v1 beside it as decode_simt) and before (v2 beside v1 as
decode_mma); which kernel each timed is read off the record."""

from __future__ import annotations

import pytest

from flashviz.gpu import decode_bench as db
from flashviz.records.decode_records import alternative, decode_lines, decode_rows, kernel_names, split_sweeps

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


@pytest.mark.parametrize("impl, name", [("decode_simt", "ours, CUDA cores (v1)"),      # since v2 is the default
                                        ("decode_mma", "ours, tensor cores (v2)")])     # before
def test_every_implementation_of_ours_gets_its_share_of_copy_and_cudnns_ratio(impl, name):
    rec = _record()
    rec["bench"][0].update({f"{impl}_kernel_us": 800.0, f"{impl}_call_us": 809.0})
    rec["bench"][0] = db.derive(rec["bench"][0], db.ALL_IMPLS + ("decode_mma",), copy_GBps=COPY)
    r, r1 = decode_rows(rec)[:2]
    kv = 2 * r["B"] * r["H_kv"] * r["Nk"] * r["d"] * 2
    assert r["impls"][name] == {"call_us": 809.0, "kernel_us": 800.0, "call_GBps": pytest.approx(kv / 809.0 / 1e3),
                                "kernel_GBps": pytest.approx(kv / 800.0 / 1e3)}
    assert r["of_copy"][name] == pytest.approx(kv / 800.0 / 1e3 / COPY)
    assert r["cudnn_over"][name] == pytest.approx(290.0 / 800.0)
    assert r["of_copy"]["ours"] == r["ours_of_copy"] and r["cudnn_over"]["ours"] == r["cudnn_over_ours"]
    assert r1["of_copy"][name] is None and r1["cudnn_over"][name] is None      # not timed on that row
    assert f"{name} 800.0 µs = {kv / 800.0 / 1e6:.2f} TB/s [call 809.0 µs]" in decode_lines(rec)[0]


def _names(rec, impl, kernels):
    for r, k in zip(rec["bench"], kernels):
        r[f"{impl}_kernel_name"] = f"void fvdec::{k}(unsigned short const*, float*)"


def test_which_call_and_which_kernel_a_record_holds_is_read_off_it():
    new = _record()                                       # rows as the benchmark makes them now
    assert [r["impls"][-1] for r in new["bench"]] == ["decode_simt"] * 4 and alternative(new) == "decode_simt"
    _names(new, "decode", ["flash_decode_mma<0, 128, false>"] * 2 + ["flash_decode_mma<0, 128, true>"])
    _names(new, "decode_simt", ["flash_decode<0, 128, false, 4>", "flash_decode<0, 128, false, 4>"])
    assert kernel_names(new, "decode") == ["flash_decode_mma"] and kernel_names(new, "decode_simt") == ["flash_decode"]
    # a record made before v2 became the default: decode was v1, v2 beside it as decode_mma
    old = {"impls": ["decode", "sdpa_cudnn", "sdpa_flash", "decode_nosplit", "decode_mma"], "bench": [
        {"impls": ["decode", "decode_mma"], "decode_kernel_name": "void fvdec::flash_decode<0, 128, true, 4>()",
         "decode_mma_kernel_name": "void fvdec::flash_decode_mma<0, 128, true>()"},
        {"impls": ["decode"], "decode_kernel_name": "void fvdec::flash_decode<0, 64, false, 1>()"}]}
    assert alternative(old) == "decode_mma" and kernel_names(old, "decode") == ["flash_decode"]
    assert kernel_names(old, "decode_mma") == ["flash_decode_mma"] and kernel_names(old, "sdpa_cudnn") == []
    assert alternative({"bench": [{"decode_mma_kernel_us": 1.0}]}) == "decode_mma"       # from the rows' keys
    assert alternative({"impls": ["decode"], "bench": [{"impls": ["decode"]}]}) is None
    assert alternative(None) is None and kernel_names(None, "decode") == []


def test_split_sweeps_as_recorded():
    sw = split_sweeps(_record())
    assert len(sw) == 1 and sw[0]["best"] == sw[0]["num_splits"][2] and sw[0]["kernel_us"][2] == 12.0
    assert split_sweeps(None) == []
