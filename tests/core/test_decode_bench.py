"""The decode benchmark (benchmarks/bench_decode.py, flashviz/gpu/decode_bench.py) on the CPU: its
plan, shapes, byte counts and derived figures, the record's name, the float64 reference and the
paging, and the run's bookkeeping on a pretend GPU (failed cells, the deadline, a lost context);
plus a data check of the newest committed decode-<device>-<date>.json (skipped while there is none).

The expected values are computed here, independently of ``decode_bench``: bytes of K and V =
2·B·H_kv·Nk·d·2 (fp16), GB/s = bytes / µs / 1e3, the reference against a literal row-by-row loop.
The data check recomputes every figure from the record's raw keys. It checks the record, never the
speed of anything.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import naive_attention_loops

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_decode.py"
NAME = re.compile(r"^decode-([a-z0-9-]+)-(\d{4}-\d{2}-\d{2})\.json$")
IMPLS = ("decode", "sdpa_cudnn", "sdpa_flash")             #: what issue 24 asks of the record
KERNEL_OF = {"simt": "flash_decode", "mma": "flash_decode_mma"}   #: gpu.decode's variants' split kernels
GRID = [(B, H, H_kv, Nk) for B, H, H_kv in ((8, 32, 32), (8, 32, 8), (1, 32, 8)) for Nk in (4096, 32768, 131072)]


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _kv(B, H_kv, Nk, d) -> int:
    return 2 * B * H_kv * Nk * d * 2


# ------------------------------------------------------------------- the data check of a record

def decode_record_problems(rec: dict, name: str | None = None) -> list[str]:
    """Everything wrong with a decode record, one line each (empty: whole and consistent)."""
    p: list[str] = []
    for k in ("env", "impls", "bench", "splits", "methods", "copy_GBps", "tol_rel"):
        if k not in rec:
            p.append(f"no {k!r}")
    if p:
        return p
    env, impls, copy, tol = rec["env"], rec["impls"], rec["copy_GBps"], rec["tol_rel"]
    for k in ("device", "date", "commit", "torch", "cupy", "kernel_sources", "cubins"):
        if not env.get(k):
            p.append(f"env has no {k!r}")
    if name is not None:
        m = NAME.match(name)
        if not m or m.group(2) != env.get("date"):
            p.append(f"file name {name!r} does not name the run's date {env.get('date')!r}")
    if "decode" in impls and "flash_decode.cu" not in (env.get("kernel_sources") or {}):
        p.append("env.kernel_sources does not name kernels/flash_decode.cu")
    if not (_num(copy) and copy > 0):
        p.append(f"copy_GBps is {copy!r}")
    for k in ("call_us", "kernel_us", "GBps", "copy_GBps"):
        if not isinstance(rec["methods"].get(k), str):
            p.append(f"methods has no {k!r}")
    if rec.get("full"):
        if rec.get("cut_short"):
            p.append(f"a full record cut short: {rec['cut_short']}")
        missing = [i for i in IMPLS if i not in impls]
        if missing:
            p.append(f"a full record without {missing}")
        have = {(r["B"], r["H"], r["H_kv"], r["Nk"]) for r in rec["bench"]
                if r.get("Nq") == 1 and r.get("d") == 128 and not r.get("causal") and not r.get("paged")}
        if set(GRID) - have:
            p.append(f"a full record's rows miss {sorted(set(GRID) - have)}")
        if not any(r.get("paged") for r in rec["bench"]):
            p.append("a full record without a paged row")
        if not rec["splits"]:
            p.append("a full record without the split sweep")
    for r in rec["bench"]:
        where = r.get("label", "?")
        if any(k not in r for k in ("B", "H", "H_kv", "Nq", "Nk", "d", "causal", "kv_bytes", "num_splits", "impls")):
            p.append(f"{where}: shape keys missing")
            continue
        # decode is the call without a variant: the kernel it timed is the row's variant (v1 before rows had one)
        for impl, kernel in (("decode", KERNEL_OF[r.get("variant", "simt")]), ("decode_simt", "flash_decode"),
                             ("decode_mma", "flash_decode_mma")):
            m = re.search(r"fvdec::(\w+)<", r.get(f"{impl}_kernel_name") or "")
            if m and m[1] != kernel:
                p.append(f"{where}: {impl} timed {m[1]}, not {kernel}")
        if r["kv_bytes"] != _kv(r["B"], r["H_kv"], r["Nk"], r["d"]):
            p.append(f"{where}: kv_bytes {r['kv_bytes']} is not 2·B·H_kv·Nk·d·2")
        if r["H"] % r["H_kv"]:
            p.append(f"{where}: H % H_kv != 0")
        for impl in impls:
            if impl in IMPLS and impl not in r["impls"] and not r.get(f"{impl}_skipped"):
                p.append(f"{where}: {impl} neither run nor skipped")
        for impl in r["impls"]:
            for t in ("call", "kernel"):
                us = r.get(f"{impl}_{t}_us")
                if not (_num(us) and us > 0):
                    why = r.get(f"{impl}_{t}_error") or r.get(f"{impl}_error") or "no value and no error"
                    p.append(f"{where}: {impl}_{t}_us missing: {why}")
                    continue
                gbps = r["kv_bytes"] / us / 1e3
                if not math.isclose(r.get(f"{impl}_{t}_GBps", -1), gbps, rel_tol=1e-9):
                    p.append(f"{where}: {impl}_{t}_GBps = {r.get(f'{impl}_{t}_GBps')} is not kv_bytes / us / 1e3 "
                             f"= {gbps}")
                if _num(copy) and not math.isclose(r.get(f"{impl}_{t}_of_copy", -1), gbps / copy, rel_tol=1e-9):
                    p.append(f"{where}: {impl}_{t}_of_copy is not GB/s ÷ copy_GBps")
            if f"{impl}_error" in r:
                continue
            err, ref, bad = r.get(f"{impl}_max_abs_err"), r.get("ref_max_abs"), r.get(f"{impl}_nonfinite")
            if not (_num(err) and _num(ref) and isinstance(bad, bool)):
                p.append(f"{where}: {impl}'s correctness missing")
                continue
            ok = not bad and err <= tol * ref
            if r.get(f"{impl}_pass") is not ok:
                p.append(f"{where}: {impl}_pass is {r.get(f'{impl}_pass')} but the errors say {ok}")
            if not ok:
                p.append(f"{where}: {impl} above tolerance: {err:.3g} / {ref:.3g}" + (", non-finite" if bad else ""))
    for s in rec["splits"]:
        timed = [(n, us) for n, us in zip(s["num_splits"], s["kernel_us"]) if _num(us)]
        if s["heuristic"] not in s["num_splits"]:
            p.append(f"sweep Nk={s['Nk']}: the heuristic's count was not timed")
        if timed:
            best, best_us = min(timed, key=lambda x: x[1])
            h = dict(timed).get(s["heuristic"])
            if s.get("best_us") != best_us or (h is not None and not math.isclose(s["heuristic_over_best"],
                                                                                   h / best_us)):
                p.append(f"sweep Nk={s['Nk']}: best / heuristic_over_best do not follow from kernel_us")
    return p


def _newest_records() -> list:
    """[(record, file name)]: the newest decode record of each device, newest device first."""
    from flashviz.records.files import package_dir
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return []
    newest = {}
    for f in folder.iterdir():
        m = NAME.match(f.name)
        if m and (m.group(1) not in newest or (m.group(2), f.name) > newest[m.group(1)][0]):
            newest[m.group(1)] = ((m.group(2), f.name), f)
    found = sorted(newest.values(), key=lambda e: e[0], reverse=True)
    return [(json.loads(f.read_text(encoding="utf-8")), f.name) for _, f in found]


def _newest_record():
    recs = _newest_records()
    return recs[0] if recs else (None, None)


@pytest.mark.recorded_data
def test_recorded_data_the_heuristic_picks_a_recorded_near_best_split_count():
    """A data check, not a speed test: in every split sweep of each device's newest decode record, the
    count the heuristic picks now (one wave of ``split_slots_per_sm`` blocks an SM for the variant the
    sweep timed) was timed within 5 % of that sweep's best count. (The record's kernel is named by its
    hashes; a new kernel needs a new record.)"""
    from flashviz.gpu.decode import decode_launch
    sweeps = [(sw, name) for rec, name in _newest_records() for sw in rec.get("splits") or ()]
    if not sweeps:
        pytest.skip("no decode record with a split sweep yet (benchmarks/bench_decode.py on a GPU)")
    for sw, name in sweeps:
        times = dict(zip(sw["num_splits"], sw["kernel_us"]))
        # the kernel the sweep timed: its variant, or v1 in records made before v2 became the default;
        # the device's shared memory an SM as recorded (records before it have none: an H200's)
        pick = decode_launch(sw["B"], sw["H"], sw["H_kv"], sw["Nq"], sw["Nk"], sw["d"], num_sms=sw["num_sms"],
                             variant=sw.get("variant", "simt"), smem_per_sm=sw.get("smem_per_sm"),
                             smem_reserved=sw.get("smem_reserved", 1_024))
        assert times.get(pick["splits"]) is not None, (name, sw["Nk"], pick["splits"])
        assert times[pick["splits"]] <= 1.05 * sw["best_us"], (name, sw["B"], sw["Nk"], pick["splits"], sw["best"])


@pytest.mark.recorded_data
def test_recorded_data_decode_record_is_whole_and_consistent():
    """The newest decode record: every implementation has both times (or a recorded error), GB/s =
    bytes of K and V / time, the bytes by the formula, every output within tolerance of float64,
    the sweep's best read off its times, the code timed named by hashes."""
    rec, name = _newest_record()
    if rec is None:
        pytest.skip("no decode-<device>-<date>.json recorded yet (benchmarks/bench_decode.py on a GPU)")
    assert decode_record_problems(rec, name) == []


# ------------------------------------------------------------------- the plan, without a GPU

def test_bench_decode_help_and_plan_run_without_a_gpu():
    code = ("import runpy, sys; sys.argv = ['bench_decode.py', '--plan']; "
            f"rc = runpy.run_path({str(SCRIPT)!r}, run_name='not_main')['main'](); "
            "print(rc, [m for m in ('cupy', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip().splitlines()[-1] == "0 []"
    assert "/decode-<device>-<date>.json" in out and "partial-" not in out
    assert out.count(" kv=") == 13 and out.count("  sweep ") == 4 and "planned seconds on an H200" in out
    # the B = 1, H_kv = 8, Nk = 4096 row: 16.8 MB of K and V, 16 splits of 8 KV heads = 128 blocks, 8 sets
    assert re.search(r"B=1 H=32 Hkv=8 Nq=1 Nk=4096 d=128 +kv= +16\.8 MB splits= +16 blocks= +128 sets=8 "
                     r"impls=decode,sdpa_cudnn,sdpa_flash,decode_nosplit", out)
    assert re.search(r"paged16 +kv= +1073\.7 MB .* impls=decode,decode_simt\n", out)
    quick = subprocess.run([sys.executable, str(SCRIPT), "--plan", "--quick"], capture_output=True, text=True,
                           check=True, cwd=ROOT).stdout
    assert "partial-decode-<device>-<date>.json" in quick and quick.count(" kv=") == 5
    nk = subprocess.run([sys.executable, str(SCRIPT), "--plan", "--nk", "131072"], capture_output=True, text=True,
                        check=True, cwd=ROOT).stdout
    assert "partial-decode" in nk and nk.count(" kv=") == 3 and "  sweep " not in nk
    helptext = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True,
                              cwd=ROOT).stdout
    assert "--quick" in helptext and "--plan" in helptext and "--deadline-s" in helptext
    for bad, flag in ((["--impls", "decode_nope"], "--impls"), (["--only", "host"], "--only"), (["--nk", "5"], "--nk")):
        r = subprocess.run([sys.executable, str(SCRIPT), "--plan", *bad], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and flag in r.stderr, (bad, r.stderr)


def test_the_cases_are_the_issues_grid_and_the_extras():
    from flashviz.gpu import decode_bench as db
    grid = [c for c in db.FULL_CASES if c.Nq == 1 and c.d == 128 and not c.causal and not c.paged]
    assert [(c.B, c.H, c.H_kv, c.Nk) for c in grid] == GRID
    extras = [c for c in db.FULL_CASES if c not in grid]
    assert [(c.B, c.H, c.H_kv, c.Nq, c.Nk, c.d, c.causal, c.page_size) for c in extras] == [
        (1, 32, 8, 4, 32768, 128, True, None), (8, 32, 8, 1, 32768, 64, False, None),
        (8, 32, 8, 1, 32768, 128, False, 256), (8, 32, 8, 1, 32768, 128, False, 16)]
    assert len({c.label for c in db.FULL_CASES}) == len(db.FULL_CASES)
    # who runs where: SDPA never on a paged cache, ours unsplit only at (1, 32, 8), Nq = 1, d = 128
    for c in db.FULL_CASES:
        run = db.row_impls(c, db.ALL_IMPLS)
        want = ["decode"] if c.paged else ["decode", "sdpa_cudnn", "sdpa_flash"]
        if (c.B, c.H, c.H_kv, c.Nq, c.d, c.causal, c.paged) == (1, 32, 8, 1, 128, False, False):
            want.append("decode_nosplit")
        assert run == want + ["decode_simt"], c.label                     # v1 beside the default on every row
    assert sum("decode_nosplit" in db.row_impls(c, db.ALL_IMPLS) for c in db.FULL_CASES) == 3
    with pytest.raises(ValueError, match="multiple of page_size"):
        db.Case(1, 32, 8, 1000, page_size=256)
    with pytest.raises(ValueError, match="H % H_kv"):
        db.Case(1, 32, 12, 4096)


def test_a_rows_bytes_flops_and_splits():
    from flashviz.gpu import decode_bench as db
    r = db.base_row(db.Case(8, 32, 8, 32768), db.ALL_IMPLS)
    assert r["kv_bytes"] == 2 * 8 * 8 * 32768 * 128 * 2 == 1_073_741_824
    assert r["set_bytes"] == r["kv_bytes"] + 8 * 32 * 1 * 128 * 2
    assert r["flops"] == 4 * 8 * 32 * 1 * 32768 * 128 and r["G"] == 4
    assert "decode_nosplit_num_splits" not in r and "sdpa_cudnn_skipped" not in r
    # B = 1, H_kv = 8, Nk = 4096: v2 counts one block an SM -> 16 splits (v1, 2 blocks an SM: the
    # heuristic's docstring example, 32)
    one = db.base_row(db.Case(1, 32, 8, 4096))
    assert one["num_splits"] == one["decode_num_splits"] == 16 and one["blocks"] == 16 * 8
    assert one["decode_nosplit_num_splits"] == 1 and one["tiles"] == 4096 // 64
    assert (one["variant"], one["rows"], one["smem_bytes"]) == ("mma", 16, 102_400)  # the default: v2
    # v1 beside it: the same 2 blocks an SM, its own ROWS (the fewest that hold G·Nq = 4 rows)
    assert (one["decode_simt_num_splits"], one["decode_simt_chunks"], one["decode_simt_rows"]) == (32, 1, 4)
    wide = db.base_row(db.Case(1, 32, 4, 4096, Nq=4, causal=True))                   # 32 rows: 2 chunks of 16, or 1
    assert (wide["chunks"], wide["rows"], wide["decode_simt_chunks"], wide["decode_simt_rows"]) == (2, 16, 1, 32)
    # a GPU whose blocks may not opt in to v2's 102,400 bytes (sm_86 / sm_89): the default call is v1
    small = db.base_row(db.Case(1, 32, 4, 4096, Nq=4, causal=True), smem_optin=101_376)
    assert (small["variant"], small["chunks"], small["rows"], small["smem_bytes"]) == ("simt", 1, 32, 90_496)
    assert db.base_row(db.Case(8, 32, 8, 32768, d=64), smem_optin=101_376)["variant"] == "mma"   # 51,200 fits
    # and its split count is the call's there: an SM of 101,376 + 1,024 bytes holds one v1 block, not two
    assert db.base_row(db.Case(1, 32, 8, 32768), num_sms=84, smem_optin=101_376)["num_splits"] == 10
    assert db.base_row(db.Case(1, 32, 8, 32768), num_sms=84, smem_optin=101_376, smem_per_sm=233_472)[
        "num_splits"] == 21                                                       # what an H200's SM would hold
    # MHA at B = 8: 256 blocks already fill the 132 SMs: no split
    assert db.base_row(db.Case(8, 32, 32, 131072))["num_splits"] == 1
    paged = db.base_row(db.Case(8, 32, 8, 32768, page_size=16))
    assert paged["kv_bytes"] == r["kv_bytes"] and paged["paged"] and paged["page_size"] == 16
    assert paged["set_bytes"] == r["set_bytes"] + 8 * (32768 // 16) * 4
    assert paged["impls"] == ["decode", "decode_simt"] and "SDPA has no paged" in paged["sdpa_flash_skipped"]
    causal = db.base_row(db.Case(1, 32, 8, 32768, Nq=4, causal=True))
    assert causal["flops"] == 4 * 1 * 32 * 4 * 32768 * 128            # decode counts every score, causal or not
    assert db.case_of(paged) == db.Case(8, 32, 8, 32768, page_size=16) and db.case_of(causal).causal


def test_derived_figures_and_the_printed_line():
    from flashviz.gpu import decode_bench as db
    r = db.base_row(db.Case(1, 32, 8, 32768))
    kv = 2 * 1 * 8 * 32768 * 128 * 2
    r.update(decode_call_us=50.0, decode_kernel_us=40.0, sdpa_cudnn_call_us=100.0, sdpa_cudnn_kernel_us=60.0,
             sdpa_flash_error="RuntimeError: no kernel", decode_nosplit_call_us=400.0, decode_max_abs_err=2e-4,
             sdpa_cudnn_max_abs_err=1e-4, ref_max_abs=0.05, decode_pass=True, sdpa_cudnn_pass=False)
    db.derive(r, db.ALL_IMPLS, copy_GBps=4000.0)
    assert r["decode_call_GBps"] == pytest.approx(kv / 50.0 / 1e3) == pytest.approx(2684.35456)
    assert r["decode_kernel_GBps"] == pytest.approx(kv / 40.0 / 1e3)
    assert r["decode_call_of_copy"] == pytest.approx(kv / 50.0 / 1e3 / 4000.0)
    assert r["decode_nosplit_call_GBps"] == pytest.approx(kv / 400.0 / 1e3) and "decode_nosplit_kernel_GBps" not in r
    assert "sdpa_flash_call_GBps" not in r and r["decode_err_over_sdpa_cudnn"] == pytest.approx(2.0)
    assert db.ratio(r, "sdpa_cudnn", "call") == 2.0 and db.ratio(r, "sdpa_cudnn", "kernel") == 1.5
    assert db.ratio(r, "sdpa_flash", "call") is None
    line = db.row_line(r)
    assert line.startswith("B=1 H=32 Hkv=8 Nq=1 Nk=32768 d=128 S=16 | ")
    assert "cudnn/ours call 2.00x kernel 1.50x" in line and "flash/ours call -x kernel -x" in line
    assert f"ours/copy call {kv / 50.0 / 1e3 / 4000:.2f} kernel {kv / 40.0 / 1e3 / 4000:.2f}" in line
    assert "ours 50.0/40.0" in line and "nosplit 400.0/-" in line and "host µs" not in line     # none measured
    assert "host µs: ours 9.5 cudnn - flash - nosplit -" in db.row_line(r | {"decode_host_us": 9.5})
    assert "correctness FAILED for sdpa_cudnn" in line and "FAILED sdpa_flash_error: RuntimeError: no kernel" in line
    # no copy figure: GB/s still, no fraction of it
    r2 = db.derive(db.base_row(db.Case(1, 32, 8, 4096)) | {"decode_call_us": 10.0})
    assert r2["decode_call_GBps"] == pytest.approx(2 * 8 * 4096 * 128 * 2 / 10.0 / 1e3)
    assert "decode_call_of_copy" not in r2
    assert db.pass_of(1e-4, 0.05, False) and not db.pass_of(1e-3, 0.05, False) and not db.pass_of(1e-6, 0.05, True)


def test_only_the_full_run_gets_the_record_name():
    from flashviz.gpu import decode_bench as db
    full = dict(cases=db.FULL_CASES, impls=db.ALL_IMPLS, parts=db.PARTS, sweep=db.SWEEP_SHAPES)
    assert db.is_full(**full) and db.is_full(**{**full, "sweep": [list(s) for s in db.SWEEP_SHAPES]})
    for change in (dict(cases=db.QUICK_CASES), dict(cases=db.FULL_CASES[:-1]), dict(impls=db.IMPLS),
                   dict(parts=("call", "kernel")), dict(sweep=db.QUICK_SWEEP)):
        assert not db.is_full(**{**full, **change}), change
    env = {"device": "NVIDIA H200", "date": "2026-12-05"}
    assert db.record_path("out", env, True) == Path("out") / "decode-h200-2026-12-05.json"
    assert db.record_path("out", env, False).name == "partial-decode-h200-2026-12-05.json"
    assert NAME.match(db.record_path("out", env, True).name)


def test_the_split_sweep_arithmetic():
    from flashviz.gpu import decode_bench as db
    assert db.sweep_splits(64, 15) == [1, 2, 3, 4, 6, 8, 12, 15, 16, 24, 32, 33, 48, 64]
    assert db.sweep_splits(8, 5) == [1, 2, 3, 4, 5, 6, 8]                  # the heuristic's own count is added
    e = db.sweep_entry(1, 32, 8, 4096)
    assert (e["heuristic"], e["tiles"], e["num_splits"], e["variant"]) == (16, 64, db.sweep_splits(64, 16), "mma")
    assert db.sweep_entry(1, 32, 8, 4096, num_sms=84, smem_optin=101_376)["variant"] == "simt"
    e["kernel_us"] = [10.0 + (s - 8) ** 2 / 10 for s in e["num_splits"]]
    e["kernel_us"][0] = None                                                # a failed count
    db.derive_sweep(e)
    assert e["best"] == 8 and e["best_us"] == 10.0
    assert e["heuristic_us"] == pytest.approx(16.4) and e["heuristic_over_best"] == pytest.approx(1.64)
    line = db.sweep_line(e)
    assert "heuristic 16 (16.4 µs), best 8 (10.0 µs): 1.640x the best" in line and "1:-" in line


def _made_up_bench():
    from flashviz.gpu import decode_bench as db
    rows = []
    for c in db.FULL_CASES:
        r = db.base_row(c)
        for i, impl in enumerate(r["impls"]):
            us = r["kv_bytes"] / (3000.0 + 200 * i) / 1e3                   # ours 3.0, cudnn 3.2, flash 3.4 TB/s
            r.update({f"{impl}_call_us": us * 1.02, f"{impl}_kernel_us": us, f"{impl}_max_abs_err": 1e-5 * (1 + i),
                      f"{impl}_nonfinite": False})
            r[f"{impl}_pass"] = db.pass_of(r[f"{impl}_max_abs_err"], 0.05, False)
        if c.paged:                                                         # paged: 5 % slower than contiguous
            r["decode_call_us"] *= 1.05
            r["decode_kernel_us"] *= 1.05
        r.update(ref_max_abs=0.05, ref_heads=4, tol_rel=db.TOL_REL)
        rows.append(db.derive(r, copy_GBps=4000.0))
    return rows


def test_the_figures_to_reach_are_read_off_the_rows():
    from flashviz.gpu import decode_bench as db
    bench = _made_up_bench()
    sweep = db.derive_sweep(db.sweep_entry(1, 32, 8, 4096) | {"kernel_us": [20.0 - s / 10 for s in
                                                                            db.sweep_splits(64, 16)]})
    fig = db.figures(bench, [sweep])
    assert [e["label"] for e in fig["bandwidth"]] == [f"B={B} H={H} Hkv={H_kv} Nq=1 Nk={Nk} d=128"
                                                      for B, H, H_kv, Nk in GRID if Nk >= 32768]
    e = fig["bandwidth"][0]
    assert e["decode_kernel_of_copy"] == pytest.approx(3000 / 4000) and e["decode_call_of_copy"] == pytest.approx(
        3000 / 1.02 / 4000)
    assert e["cudnn_over_decode_call"] == pytest.approx(3000 / 3200) and e["meets"] is False   # 0.74 < 0.9
    assert fig["latency"]["label"] == "B=1 H=32 Hkv=8 Nq=1 Nk=4096 d=128" and fig["latency"]["meets"] is False
    assert [p["page_size"] for p in fig["paged"]] == [256, 16]
    assert fig["paged"][0]["paged_over_contiguous_kernel"] == pytest.approx(1.05) and fig["paged"][0]["meets"]
    h = fig["heuristic"][0]
    assert h["best"] == 64 and h["heuristic_over_best"] == pytest.approx((20 - 1.6) / (20 - 6.4)) and not h["meets"]
    assert len(fig["correctness"]) == len(db.FULL_CASES)
    assert all(c["decode_pass"] for c in fig["correctness"])
    assert [c["no_worse_than_sdpa"] for c in fig["correctness"]] == [True] * 11 + [None, None]   # paged: no SDPA
    lines = db.figures_lines(fig)
    assert any(x.startswith("latency B=1 H=32 Hkv=8 Nq=1 Nk=4096 d=128: ours") for x in lines)
    assert lines[-1] == f"correctness: {len(db.FULL_CASES)} rows checked; ours passes, no worse than SDPA's larger error"


def test_the_full_plan_fits_the_device_budget():
    """The planned time leaves the deadline room, and the deadline leaves the device's 10 minutes room."""
    from flashviz.gpu import decode_bench as db
    est = db.estimate_seconds(db.FULL_CASES, db.ALL_IMPLS)
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"))
    assert est["total"] < 0.75 * db.DEADLINE_S and db.DEADLINE_S <= 0.6 * 600
    assert db.estimate_seconds(db.QUICK_CASES, db.ALL_IMPLS, sweep=db.QUICK_SWEEP)["total"] < est["total"]


# ------------------------------------------------------------------- the reference and the paging

@pytest.mark.parametrize("H, H_kv, Nq, Nk, causal", [(4, 4, 1, 37, False), (6, 2, 3, 40, True), (8, 1, 2, 9, True)])
def test_the_float64_reference_is_dense_attention_with_gqa_and_bottom_right_causal(rng, H, H_kv, Nq, Nk, causal):
    from flashviz.gpu import decode_bench as db
    d = 16
    q = rng.standard_normal((H, Nq, d)).astype(np.float16)
    k = rng.standard_normal((H_kv, Nk, d)).astype(np.float16)
    v = rng.standard_normal((H_kv, Nk, d)).astype(np.float16)
    O, lse = db.reference_decode(q, k, v, causal=causal)
    assert O.dtype == lse.dtype == np.float64 and O.shape == (H, Nq, d) and lse.shape == (H, Nq)
    G = H // H_kv
    for h in range(H):
        want_O, want_lse = naive_attention_loops(q[h], k[h // G], v[h // G], causal=causal)
        np.testing.assert_allclose(O[h], want_O, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(lse[h], want_lse, rtol=1e-12)


def test_the_reference_covers_as_many_kv_heads_as_the_budget_allows():
    from flashviz.gpu import decode_bench as db
    assert db.ref_kv_heads(db.Case(8, 32, 32, 131072)) == (1 << 26) // (131072 * 128) == 4
    assert db.ref_kv_heads(db.Case(8, 32, 8, 32768)) == 8 and db.ref_kv_heads(db.Case(1, 32, 8, 1 << 22)) == 1


def test_the_paged_cache_holds_every_key_where_the_block_table_says(rng):
    from flashviz.gpu import decode_bench as db
    B, H_kv, Nk, d, ps = 3, 2, 48, 4, 8
    x = rng.standard_normal((B, H_kv, Nk, d))
    perm = rng.permutation(B * Nk // ps)
    pool, table = db.page_cache(x, ps, perm)
    assert pool.shape == (B * Nk // ps, ps, H_kv, d) and table.shape == (B, Nk // ps)
    assert sorted(table.ravel()) == list(range(B * Nk // ps)) and (table.ravel() == perm).all()
    for b in range(B):
        for g in range(H_kv):
            for c in range(Nk):
                assert (pool[table[b, c // ps], c % ps, g] == x[b, g, c]).all()
    with pytest.raises(ValueError, match="multiple of page_size"):
        db.page_cache(x[:, :, :44], ps, perm)


def test_a_paged_row_sees_its_contiguous_rows_values():
    from flashviz.gpu import decode_bench as db
    a, b = db.Case(8, 32, 8, 32768), db.Case(8, 32, 8, 32768, page_size=16)
    assert db.case_seed(a) == db.case_seed(b) != db.case_seed(db.Case(8, 32, 8, 32768, d=64))


# ------------------------------------------------------------------- the run, on a pretend GPU

@pytest.fixture
def pretend_gpu(monkeypatch):
    """run_decode_benchmark on a pretend GPU: torch, the environment, the inputs and every
    implementation's calls replaced. state["fail"]: {(stage, impl, Nk)} to raise at ("build",
    "call", "kernel"); state["lost"]: the context check raises; state["sm_count"], state["smem_optin"],
    state["smem_per_sm"]: the device's SMs, the shared memory a block may opt in to and an SM's (an
    H200's); times come from TIMES_US."""
    from flashviz.gpu import common, provenance_env
    from flashviz.gpu import decode_bench as db
    from flashviz.gpu.tensorcore import bench as mb
    cuda = types.SimpleNamespace(is_available=lambda: True, synchronize=lambda: None, empty_cache=lambda: None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(common, "gpu_status", lambda: (True, "pretend"))
    monkeypatch.setattr(common, "environment", lambda: {"device": "NVIDIA H200", "date": "2026-12-05",
                                                        "commit": "abc1234", "torch": "2.11", "cupy": "14.2"})
    state = {"fail": set(), "lost": False, "case": None, "sm_count": 132, "smem_optin": 232_448,
             "smem_per_sm": 233_472}
    monkeypatch.setattr(common, "device_facts", lambda dev=None: common.DeviceFacts(
        0, 90, state["sm_count"], state["smem_optin"], 50 << 20, "NVIDIA H200", state["smem_per_sm"], 1_024))
    monkeypatch.setattr(mb, "check_streams", lambda: None)
    h = "0123456789abcdef"
    monkeypatch.setattr(provenance_env, "code_hashes", lambda files, kernels=(): {
        "kernel_sources": {"flash_decode.cu": h}, "cubins": [{"name": "k", "sha256": h, "source_sha256": h}],
        "files_sha256": {f: h for f in files}})
    monkeypatch.setattr(db, "copy_bandwidth", lambda: {"copy_GBps": 4000.0, "copy_bytes": 2 << 31, "copy_ms": 1.07,
                                                       "method": db.COPY_METHOD})
    rng = np.random.default_rng(7)

    def inputs(case, nsets, ref=True):
        state["case"] = case
        src = (rng.standard_normal((4, case.Nq, 8)), rng.standard_normal((2, 16, 8)), rng.standard_normal((2, 16, 8)))
        return [{"q": None, "k": None, "v": None, "table": None}] * nsets, (src if ref else None)

    def build(impl, case, sets, num_splits=None):
        if ("build", impl, case.Nk) in state["fail"] or ("splits", num_splits) in state["fail"]:
            raise RuntimeError(f"no {impl} here")
        it = db._Impl([lambda: "O"], None, {f"{impl}_gqa": "enable_gqa"} if impl.startswith("sdpa") else {})
        it.name, it.splits = impl, num_splits
        return it

    def measure(it, part, budget_s):
        case = state["case"]
        if (part, it.name, case.Nk) in state["fail"]:
            raise MemoryError("pretend")
        us = TIMES_US[it.name] * case.Nk / 4096 if it.splits is None else 10.0 + abs(it.splits - 8)
        return {"call_ms": us / 1e3, "host_us": us / 2} if part == "call" else {"kernel_ms": 0.9 * us / 1e3,
                                                                                 "kernel_name": "k", "per_call": 2}

    def compare(impl, out, ref):
        return {f"{impl}_max_abs_err": 1e-5, f"{impl}_nonfinite": False} | (
            {f"{impl}_lse_max_abs_err": 1e-6} if impl.startswith("decode") else {})

    def check_context(after, row=None):
        if state["lost"]:
            raise db.ContextLost(f"after {after}: pretend", row)

    monkeypatch.setattr(db, "_inputs", inputs)
    monkeypatch.setattr(db, "_build", build)
    monkeypatch.setattr(db, "_measure", measure)
    monkeypatch.setattr(db, "_compare", compare)
    monkeypatch.setattr(db, "_check_context", check_context)
    return db, state


TIMES_US = {"decode": 12.0, "sdpa_cudnn": 15.0, "sdpa_flash": 18.0, "decode_nosplit": 60.0, "decode_simt": 30.0}


def test_a_failing_cell_is_recorded_and_the_run_goes_on(pretend_gpu, tmp_path):
    db, state = pretend_gpu
    state["fail"] |= {("build", "sdpa_flash", 32768), ("kernel", "sdpa_cudnn", 4096), ("splits", 33)}
    cases = (db.Case(1, 32, 8, 4096), db.Case(1, 32, 8, 32768), db.Case(1, 32, 8, 4096, page_size=256))
    lines: list[str] = []
    path = db.run_decode_benchmark(tmp_path, cases=cases, sweep=((1, 32, 8, 4096),), log=lines.append)
    assert path.name == "partial-decode-h200-2026-12-05.json" and path.with_suffix(".log").is_file()
    rec = json.loads(path.read_text())
    assert rec["copy_GBps"] == 4000.0 and rec["cut_short"] is None and not rec["full"]
    assert [r["label"] for r in rec["bench"]] == [c.label for c in cases]
    a, b, paged = rec["bench"]
    kv = 2 * 1 * 8 * 4096 * 128 * 2
    assert a["decode_call_us"] == pytest.approx(12.0) and a["decode_kernel_us"] == pytest.approx(10.8)
    assert a["decode_host_us"] == pytest.approx(6.0) and a["sdpa_cudnn_host_us"] == pytest.approx(7.5)
    assert a["decode_call_GBps"] == pytest.approx(kv / 12.0 / 1e3) and a["decode_kernel_GBps"] == pytest.approx(
        kv / 10.8 / 1e3)
    assert a["decode_call_of_copy"] == pytest.approx(kv / 12.0 / 1e3 / 4000.0)
    assert a["decode_nosplit_call_us"] == pytest.approx(60.0) and a["decode_pass"] and a["ref_heads"] == 4
    assert a["sdpa_cudnn_kernel_error"] == "MemoryError: pretend" and "sdpa_cudnn_kernel_us" not in a
    assert a["sdpa_cudnn_call_us"] == pytest.approx(15.0)
    assert b["sdpa_flash_error"] == "RuntimeError: no sdpa_flash here" and "sdpa_flash_kernel_error" not in b
    assert b["decode_call_us"] == pytest.approx(12.0 * 8)
    assert paged["impls"] == ["decode", "decode_simt"] and paged["sdpa_cudnn_skipped"] and paged["page_size"] == 256
    assert a["variant"] == "mma" and a["decode_simt_call_us"] == pytest.approx(30.0) and a["decode_simt_rows"] == 4
    sweep = rec["splits"][0]
    assert sweep["errors"] == {"33": "RuntimeError: no decode here"}
    assert sweep["kernel_us"][sweep["num_splits"].index(33)] is None and len(sweep["kernel_us"]) == 14
    assert sweep["best"] == 8 and sweep["heuristic"] == 16 and sweep["heuristic_over_best"] == pytest.approx(
        (0.9 * 18) / (0.9 * 10))                                           # 10 + |s − 8| µs at s = 16 and 8
    assert rec["figures"]["paged"][0]["paged_over_contiguous_kernel"] == pytest.approx(1.0)
    assert rec["env"]["commit_from"] == "FLASHVIZ_COMMIT" and rec["env"]["l2_bytes"] == 50 << 20
    problems = decode_record_problems(rec)
    assert sorted(problems) == sorted([
        f"{a['label']}: sdpa_cudnn_kernel_us missing: MemoryError: pretend",
        f"{b['label']}: sdpa_flash_call_us missing: RuntimeError: no sdpa_flash here",
        f"{b['label']}: sdpa_flash_kernel_us missing: RuntimeError: no sdpa_flash here"])
    log = path.with_suffix(".log").read_text()
    assert "cudnn/ours call 1.25x kernel -x" in log and "flash/ours call 1.50x kernel 1.50x" in log
    assert "FAILED sdpa_flash_error" in log and lines[-1].startswith("done in ")


def test_the_full_run_gets_the_record_name_and_a_deadline_makes_it_partial(pretend_gpu, tmp_path):
    db, _ = pretend_gpu
    path = db.run_decode_benchmark(tmp_path, log=lambda line: None)
    assert path.name == "decode-h200-2026-12-05.json"
    rec = json.loads(path.read_text())
    assert rec["full"] and len(rec["bench"]) == 13 and len(rec["splits"]) == 4
    assert decode_record_problems(rec, path.name) == []
    row = rec["bench"][0]                                   # the default call timing v1 where the row says v2
    row["decode_kernel_name"] = "void fvdec::flash_decode<0, 128, false, 1>(unsigned short const*)"
    assert row["variant"] == "mma" and decode_record_problems(rec, path.name) == [
        f"{row['label']}: decode timed flash_decode, not flash_decode_mma"]
    cut = db.run_decode_benchmark(tmp_path / "cut", deadline_s=0.0, log=lambda line: None)
    assert cut.name == "partial-decode-h200-2026-12-05.json"
    assert not (tmp_path / "cut" / "decode-h200-2026-12-05.json").exists()
    rec = json.loads(cut.read_text())
    assert rec["cut_short"].startswith("deadline of 0 s reached before the public-call pass at B=8 H=32 Hkv=32")
    assert rec["bench"] == [] and rec["copy_GBps"] == 4000.0
    assert any("cut short" in x for x in decode_record_problems(rec | {"full": True}))


def test_a_lost_context_stops_the_run_and_keeps_the_row(pretend_gpu, tmp_path):
    db, state = pretend_gpu
    state["fail"].add(("build", "decode", 32768))
    state["lost"] = True
    cases = (db.Case(1, 32, 8, 4096), db.Case(1, 32, 8, 32768), db.Case(8, 32, 8, 4096))
    path = db.run_decode_benchmark(tmp_path, cases=cases, sweep=(), log=lambda line: None)
    rec = json.loads(path.read_text())
    assert path.name.startswith("partial-") and "the CUDA context was lost after decode on B=1" in rec["cut_short"]
    assert [r["label"] for r in rec["bench"]] == [c.label for c in cases[:2]]
    assert rec["bench"][1]["decode_error"] == "RuntimeError: no decode here"
    assert "decode_kernel_us" not in rec["bench"][0]                        # the kernel pass never started


def test_on_a_gpu_without_room_for_v2_the_default_call_is_v1(pretend_gpu, tmp_path):
    """Where a block may not opt in to v2's shared memory at d = 128 (sm_86 / sm_89: 101,376 bytes),
    the rows and the sweep say the default call runs v1 there, with v1's launch; at d = 64 v2 fits.
    The split counts are the call's there too: an SM of 102,400 bytes holds one block of either
    kernel (v1 90,496 + 1,024, v2 at d = 64 51,200 + 1,024), so 84 SMs give 84 slots, not the 168
    (v1) or 336 (v2, d = 64) an H200's 233,472 bytes an SM would."""
    from flashviz.gpu import decode as gd
    db, state = pretend_gpu
    state.update(sm_count=84, smem_optin=101_376, smem_per_sm=102_400)
    cases = (db.Case(1, 32, 4, 4096, Nq=4, causal=True), db.Case(8, 32, 8, 4096, d=64), db.Case(1, 32, 8, 32768))
    rec = json.loads(db.run_decode_benchmark(tmp_path, cases=cases, sweep=((1, 32, 8, 4096),),
                                             log=lambda line: None).read_text())
    wide, d64, long = rec["bench"]
    assert (wide["variant"], wide["chunks"], wide["rows"], wide["smem_bytes"]) == ("simt", 1, 32, 90_496)
    assert (wide["decode_simt_chunks"], wide["decode_simt_rows"]) == (1, 32)
    assert (d64["variant"], d64["smem_bytes"]) == ("mma", 51_200)
    assert rec["splits"][0]["variant"] == "simt"
    # the split counts: num_splits_heuristic with 84 slots (the H200's figures gave 32, 5, 21 and 16)
    assert (wide["num_splits"], wide["decode_num_splits"], wide["decode_simt_num_splits"]) == (16, 16, 16)
    assert (d64["num_splits"], d64["blocks"]) == (1, 64)                  # 64 blocks: one each, 84 // 64 = 1
    assert (long["num_splits"], long["decode_simt_num_splits"], long["blocks"]) == (10, 10, 80)
    assert rec["splits"][0]["heuristic"] == 10 and 10 in rec["splits"][0]["num_splits"]
    assert {(r["num_sms"], r["smem_per_sm"], r["smem_reserved"]) for r in rec["bench"] + rec["splits"]} == {
        (84, 102_400, 1_024)}
    # the same counts as the call's own plan on that device (plan_decode's figures)
    for r in rec["bench"]:
        chunks = -(-r["G"] * r["Nq"] // gd.block_rm(r["variant"]))
        assert r["num_splits"] == gd.default_splits(r["B"] * r["H_kv"] * chunks, r["tiles"], r["d"], r["variant"],
                                                    num_sms=84, smem_per_sm=102_400, smem_reserved=1_024)


def test_ours_are_the_default_call_v1_named_and_the_default_unsplit(monkeypatch):
    """The public calls each of ours times: decode names no variant (the device's default),
    decode_simt names "simt", decode_nosplit asks for one split; the sweep's count goes to decode."""
    from flashviz.gpu import decode as gd
    from flashviz.gpu import decode_bench as db
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())
    sets = [{"q": "q0", "k": "k0", "v": "v0", "table": None}, {"q": "q1", "k": "k1", "v": "v1", "table": None}]
    case = db.Case(1, 32, 8, 4096, Nq=4, causal=True)
    kw = {impl: [(c.func, c.args, c.keywords) for c in db._build(impl, case, sets).calls] for impl in db.OURS_IMPLS}
    assert kw["decode"] == [(gd.flash_decode_gpu, (f"q{i}", f"k{i}", f"v{i}"), {"causal": True}) for i in (0, 1)]
    assert kw["decode_simt"][1] == (gd.flash_decode_gpu, ("q1", "k1", "v1"), {"causal": True, "variant": "simt"})
    assert kw["decode_nosplit"][0][2] == {"causal": True, "num_splits": 1}
    assert db._build("decode", case, sets, num_splits=5).calls[0].keywords == {"causal": True, "num_splits": 5}
    paged = db._build("decode_simt", db.Case(1, 32, 8, 4096, page_size=256), [{**sets[0], "table": "t"}]).calls[0]
    assert paged.keywords == {"causal": False, "variant": "simt", "block_table": "t", "Nk": 4096}


def test_the_script_exits_1_on_holes_and_0_on_a_whole_run(pretend_gpu, tmp_path, monkeypatch, capsys):
    import runpy
    db, state = pretend_gpu
    main = runpy.run_path(str(SCRIPT), run_name="not_main")["main"]
    assert main(["--quick", "--out", str(tmp_path / "ok")]) == 0
    state["fail"].add(("call", "sdpa_flash", 4096))
    assert main(["--quick", "--out", str(tmp_path / "holes")]) == 1
    assert "failed cells:" in capsys.readouterr().out
