"""latest_results_each_device: the newest record of one kind for each device its files name, and the
decode section of docs/results.md built from them (one sub-section a device, newest first)."""

from __future__ import annotations

import json

import pytest

from flashviz import report
from flashviz.records import results as R


def _write(folder, name, device):
    (folder / name).write_text(json.dumps({"env": {"device": device, "date": name[-15:-5]}, "bench": [],
                                           "splits": []}))


@pytest.fixture
def records(monkeypatch, tmp_path):
    _write(tmp_path, "decode-h200-2026-12-01.json", "NVIDIA H200")
    _write(tmp_path, "decode-h200-2026-12-05.json", "NVIDIA H200")
    _write(tmp_path, "decode-h100-80gb-hbm3-2026-12-03.json", "NVIDIA H100 80GB HBM3")
    _write(tmp_path, "partial-decode-h200-2026-12-09.json", "NVIDIA H200")     # not a decode-* record
    _write(tmp_path, "mma-h200-2026-12-07.json", "NVIDIA H200")
    (tmp_path / "h100").mkdir()                      # a device's folder: the docs read it, chapters do not
    _write(tmp_path / "h100", "decode-h100-80gb-hbm3-2026-12-04.json", "NVIDIA H100 80GB HBM3")
    _write(tmp_path / "h100", "decode-h100-80gb-hbm3-2026-12-02.json", "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(R, "package_dir", lambda pkg: tmp_path)
    monkeypatch.setattr(report, "package_dir", lambda pkg: tmp_path)
    return tmp_path


def test_the_newest_record_of_each_device_newest_first(records):
    got = [r["source_file"] for r in R.latest_results_each_device("decode")]
    assert got == ["decode-h200-2026-12-05.json", "h100/decode-h100-80gb-hbm3-2026-12-04.json"]
    assert R.latest_results("decode")["source_file"] == got[0]
    _write(records / "h100", "decode-h100-80gb-hbm3-2026-12-09.json", "NVIDIA H100 80GB HBM3")
    assert R.latest_results("decode")["source_file"] == "decode-h200-2026-12-05.json"     # the top folder only
    assert R.latest_results_each_device("decode")[0]["source_file"] == "h100/decode-h100-80gb-hbm3-2026-12-09.json"
    assert [r["source_file"] for r in R.latest_results_each_device("mma")] == ["mma-h200-2026-12-07.json"]
    assert R.latest_results_each_device("bwd") == []
    with pytest.raises(ValueError, match="kind must be one of"):
        R.latest_results_each_device("decodes")


def test_the_decode_section_has_one_part_a_device(records):
    lines = report._decode_section(R.latest_results_each_device("decode"))
    heads = [x for x in lines if x.startswith("### ")]
    assert heads == ["### NVIDIA H200", "### NVIDIA H100 80GB HBM3"]
    text = "\n".join(lines)
    assert text.index("decode-h200-2026-12-05.json") < text.index("(../benchmarks/results/h100/decode-h100-80gb-hbm3-2026-12-04.json)")
    assert "decode-h200-2026-12-01.json" not in text
    one = report._decode_section(R.latest_results_each_device("decode")[:1])
    assert not any(x.startswith("### ") for x in one) and "decode-h200-2026-12-05.json" in "\n".join(one)
    assert report._decode_section([])[-1].startswith("No record")
