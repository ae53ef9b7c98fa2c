"""benchmarks/record_timelines.py on a pretend GPU: the trace functions replaced by fakes that
return hand-written timelines, so the script's loop, names, files and summary are checked on the CPU
(the real runs need a GPU: tests/gpu)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from trace_buffers import trace_buffer

import flashviz.gpu as gpu
from flashviz.gpu import bwd_trace, common
from flashviz.gpu import decode as gd
from flashviz.gpu.decode_trace import GROUPS, decode_split_timeline
from flashviz.records.timeline import BWD_STAGES, Timeline

ROOT = Path(__file__).resolve().parents[2]
#: the pretend devices: an H200, and an sm_89 GPU of 8 SMs (v2 does not fit a block there at d = 128)
H200 = common.DeviceFacts(0, 90, 132, 232_448, 50 << 20, "Pretend GPU", 233_472, 1_024)
SMALL = common.DeviceFacts(0, 89, 8, 101_376, 6 << 20, "Pretend GPU", 102_400, 1_024)
META = dict(d=128, Bc=64, causal=False, dtype="float16", sm_count=132, device="Pretend GPU", date="2026-12-05",
            kernel_ms=0.05, traced_ms=0.052)


def _script():
    spec = importlib.util.spec_from_file_location("record_timelines", ROOT / "benchmarks" / "record_timelines.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_decode(B, H, H_kv, Nk, d, *, Nq=1, num_splits=None, **kw):
    S = num_splits or 4
    plan = {s + S * g: (s + S * g, (s, g, 0), 0, [(0, 0, "accumulate_O", 3000, 5000)], 6000)
            for g in range(H_kv) for s in range(S)}
    tl = decode_split_timeline(trace_buffer((S, H_kv, B), GROUPS, 2, plan), grid=(S, H_kv, B), Tc=2 * S,
                               **{**META, "N": Nk, "d": d, "Br": 4})
    tl.notes.update(heuristic_S=4, kernel_GBps=1234.0, B=B, H=H, H_kv=H_kv, Nq=Nq)
    return tl


def _fake_backward(Q, K, V, *, kernel="teaching", causal=False, **kw):
    B, H, N, d = Q.shape
    Tc = 2
    plan = {j + Tc * h: (j + Tc * h, (j, h, 0), 0, [(0, 0, "load_KV", 3000, 5000)], 6000)
            for h in range(B * H) for j in range(Tc)}
    tl = bwd_trace.backward_timeline(trace_buffer((Tc, H, B), 8, 2, plan), grid=(Tc, H, B), Tr=2,
                                     kernel=bwd_trace.KERNELS[kernel],
                                     **{**META, "N": N, "d": d, "Br": 64, "causal": causal, "dtype": "float32"})
    return tl


def test_the_script_records_decode_and_backward_runs_with_their_names(monkeypatch, tmp_path):
    mod = _script()
    monkeypatch.setattr(gpu, "environment", lambda: {"device": "Pretend GPU", "date": "2026-12-05"})
    monkeypatch.setattr(gpu, "trace_decode", _fake_decode)
    monkeypatch.setattr(gpu, "trace_backward", _fake_backward)
    monkeypatch.setattr(mod, "_cubins", lambda: [])
    monkeypatch.setattr(mod, "BWD_RUNS", [("bwd_teaching", 64, c, 256, 1, 2) for c in (False, True)]
                        + [("bwd_mma", 64, False, 256, 1, 2)])
    monkeypatch.setattr(common, "device_facts", lambda dev=None: H200)
    monkeypatch.setattr(gpu, "decode_launch", lambda *a, **kw: {"splits": a[6] or 4})
    assert mod.main(["--kernels", "decode,bwd_teaching,bwd_mma", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "timelines-decode-bwd_teaching-bwd_mma-pretend-gpu-2026-12-05.json").read_text())
    runs = summary["runs"]
    assert [r["kernel"] for r in runs] == ["decode"] * len(mod.DECODE_RUNS) + ["bwd_teaching"] * 2 + ["bwd_mma"]
    assert {"decode", "bwd_teaching", "bwd_mma"} <= set(summary["kernel_sources"])
    for r in runs:
        tl = Timeline.load(tmp_path / r["file"])
        assert r["blocks"] == len(tl.blocks) and r["overhead"] == pytest.approx(0.052 / 0.05 - 1)
    dec = [r for r in runs if r["kernel"] == "decode"]
    assert [r["file"] for r in dec[:2]] == ["timeline-decode-d128-n4096-s1-pretend-gpu-2026-12-05.json.gz",
                                            "timeline-decode-d128-n4096-s4-pretend-gpu-2026-12-05.json.gz"]
    assert dec[0]["S"] == 1 and dec[1]["heuristic_S"] == 4 and dec[1]["kernel_GBps"] == 1234.0
    bwd = [r for r in runs if r["kernel"] == "bwd_teaching"]
    assert [r["file"] for r in bwd] == ["timeline-bwd_teaching-d64-n256-pretend-gpu-2026-12-05.json.gz",
                                        "timeline-bwd_teaching-d64-causal-n256-pretend-gpu-2026-12-05.json.gz"]
    assert Timeline.load(tmp_path / bwd[1]["file"]).stages == BWD_STAGES
    mma = [r for r in runs if r["kernel"] == "bwd_mma"]
    assert mma[0]["file"] == "timeline-bwd_mma-d64-n256-pretend-gpu-2026-12-05.json.gz"
    assert Timeline.load(tmp_path / mma[0]["file"]).kernel == "bwd_mma"


def test_a_heuristic_that_chooses_one_split_is_not_traced_twice(monkeypatch, tmp_path):
    mod = _script()
    monkeypatch.setattr(gpu, "environment", lambda: {"device": "Pretend GPU", "date": "2026-12-05", "sm_count": 8})
    monkeypatch.setattr(gpu, "trace_decode", _fake_decode)
    monkeypatch.setattr(common, "device_facts", lambda dev=None: H200)
    monkeypatch.setattr(gpu, "decode_launch", lambda *a, **kw: {"splits": a[6] or 1})     # 8 blocks fill 8 SMs
    monkeypatch.setattr(mod, "_cubins", lambda: [])
    monkeypatch.setattr(mod, "DECODE_RUNS", [(1, 32, 8, 1, 4096, 128, 1), (1, 32, 8, 1, 4096, 128, None)])
    assert mod.main(["--kernels", "decode", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "timelines-decode-pretend-gpu-2026-12-05.json").read_text())["runs"]
    assert "file" in runs[0] and runs[1]["skipped"].startswith("the split count chosen here, 1")
    assert len(list(tmp_path.glob("timeline-decode-*.json.gz"))) == 1


def test_the_split_count_skipped_is_the_one_the_trace_runs_on_this_device(monkeypatch, tmp_path):
    """On a GPU where v2 does not fit a block at d = 128 and an SM holds one v1 block (SMALL: 8 SMs of
    102,400 bytes), the call at (1, 32, 8) Nq = 1 Nk = 4096 runs 8 blocks, which fill its 8 slots: one
    split, the run traced just before. The script asks ``decode_launch`` with the device's facts, as
    the trace's own plan reads them, and leaves that run out (with an H200's shared memory an SM it
    would count 16 slots, expect 2 splits, and trace the same S = 1 file twice)."""
    mod = _script()

    def trace(B, H, H_kv, Nk, d, *, Nq=1, num_splits=None, **kw):     # the split count plan_decode picks there
        variant = gd.check_variant(None, d, SMALL.smem_optin)
        chunks = -(-(H // H_kv) * Nq // gd.block_rm(variant))
        S = num_splits or gd.default_splits(B * H_kv * chunks, -(-Nk // 64), d, variant, num_sms=SMALL.sm_count,
                                            smem_per_sm=SMALL.smem_per_sm, smem_reserved=SMALL.smem_reserved)
        return _fake_decode(B, H, H_kv, Nk, d, Nq=Nq, num_splits=S)

    monkeypatch.setattr(gpu, "environment", lambda: {"device": "Pretend GPU", "date": "2026-12-05", "sm_count": 8})
    monkeypatch.setattr(common, "device_facts", lambda dev=None: SMALL)
    monkeypatch.setattr(gpu, "trace_decode", trace)
    monkeypatch.setattr(mod, "_cubins", lambda: [])
    monkeypatch.setattr(mod, "DECODE_RUNS", [(1, 32, 8, 1, 4096, 128, 1), (1, 32, 8, 1, 4096, 128, None)])
    assert trace(1, 32, 8, 4096, 128).grid[0] == 1
    assert mod.main(["--kernels", "decode", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "timelines-decode-pretend-gpu-2026-12-05.json").read_text())["runs"]
    assert runs[0]["file"] == "timeline-decode-d128-n4096-s1-pretend-gpu-2026-12-05.json.gz"
    assert "file" not in runs[1] and runs[1]["S"] == 1 and runs[1]["skipped"].startswith("the split count chosen here, 1")


def test_a_failing_run_is_recorded_and_the_exit_status_says_so(monkeypatch, tmp_path):
    mod = _script()
    monkeypatch.setattr(gpu, "environment", lambda: {"device": "Pretend GPU", "date": "2026-12-05"})

    def broken(*a, **k):
        raise RuntimeError("the traced decode kernel's O or lse differ")

    monkeypatch.setattr(gpu, "trace_decode", broken)
    monkeypatch.setattr(common, "device_facts", lambda dev=None: H200)
    monkeypatch.setattr(gpu, "decode_launch", lambda *a, **kw: {"splits": a[6] or 4})
    monkeypatch.setattr(mod, "_cubins", lambda: [])
    assert mod.main(["--kernels", "decode", "--out", str(tmp_path)]) == 1
    runs = json.loads((tmp_path / "timelines-decode-pretend-gpu-2026-12-05.json").read_text())["runs"]
    assert all(r["error"].startswith("RuntimeError: the traced decode") for r in runs)
