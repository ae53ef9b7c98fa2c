"""The project's own docs: data checks and pointer checks, never checks of wording.

* ``test_docs_match_records``: docs/results.md and the README's table of GPU results (between its
  marker lines) are exactly what ``flashviz report`` makes from the committed records now — a
  data check: a new record, or a changed reader, needs ``make docs``.
* The figures of that table, recomputed here from the record's raw keys (not through
  flashviz.records.results), equal the generator's.
* Every link in the docs resolves inside the repository, and every ``*.md`` a source file names
  exists in it (no pointer leads outside the repository).
* The README's picture is a small animated GIF.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from flashviz import cli, report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "NOTES.md", ROOT / "tests" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]


def _newest(kind: str) -> dict:
    """The newest record ``<kind>-<device>-<date>.json`` in benchmarks/results or a folder in it (by date)."""
    files = [*RESULTS.glob(f"{kind}-*.json"), *RESULTS.glob(f"*/{kind}-*.json")]
    f = max(files, key=lambda f: re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0])
    return json.loads(f.read_text(encoding="utf-8"))


def _newest_mma() -> dict:
    return _newest("mma")


@pytest.mark.recorded_data
def test_docs_match_records():
    stale = report.stale(ROOT)
    assert stale == [], f"{', '.join(map(str, stale))} differ from what the records make: run `make docs`"
    assert cli.main(["report", "--check"]) == 0


@pytest.mark.recorded_data
def test_recorded_data_the_readme_table_recomputed_from_the_raw_keys():
    """Each span of the README's table: their time ÷ ours under one method (call or kernel) over
    the rows with N ≥ the kernel's threshold, and the host medians, from the raw record."""
    raw = _newest_mma()
    rows = raw["bench"]
    h = report.headline(report.newest_record("mma"))
    assert "mma-" in h["record"] and h["env"]["date"] == raw["env"]["date"] and h["shapes"] == len(rows)
    assert h["env"]["device"] == raw["env"]["device"]
    for kernel, lo in (("wgmma", 1024), ("fa3", 2048)):
        pick = [r for r in rows if r["N"] >= lo]
        k = h["kernels"][kernel]
        assert (k["from_N"], k["n"]) == (lo, len(pick))
        for m in ("call", "kernel"):
            for other in ("sdpa_flash", "sdpa_cudnn"):
                ratios = [r[f"{other}_{m}_ms"] / r[f"{kernel}_{m}_ms"] for r in pick]
                assert k[(m, other)] == pytest.approx((min(ratios), max(ratios)), rel=1e-12), (kernel, m, other)
    for impl in ("wgmma", "fa3", "sdpa_flash", "sdpa_cudnn"):
        assert h["host_us"][impl] == pytest.approx(statistics.median(r[f"{impl}_host_us"] for r in rows))
    # the README's table holds these spans, under the method each row names
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split(report.RESULTS_BEGIN, 1)[1].split(report.RESULTS_END, 1)[0]
    for kernel in ("wgmma", "fa3"):
        for m in ("call", "kernel"):
            row = next(ln for ln in table.splitlines() if report.KERNEL_LABEL[kernel] in ln and report.RATIO_METHOD[m] in ln)
            cells = [c.strip() for c in row.strip("|").split("|")]
            k = h["kernels"][kernel]
            assert cells[3:5] == [report.span(k[(m, "sdpa_flash")]), report.span(k[(m, "sdpa_cudnn")])]
    # the backward's rows: SDPA's backward time ÷ ours (bwd_mma) over every row of the newest backward record
    bwd = _newest("bwd")
    for m in ("call", "kernel"):
        row = next(ln for ln in table.splitlines() if report.BWD_LABEL in ln and report.RATIO_METHOD[m] in ln)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == f"N ≥ {min(r['N'] for r in bwd['bench']):,} ({len(bwd['bench'])})"
        for cell, other in zip(cells[3:5], ("sdpa_flash_bwd", "sdpa_cudnn_bwd")):
            ratios = [r[f"{other}_{m}_ms"] / r[f"bwd_mma_{m}_ms"] for r in bwd["bench"]]
            assert cell == report.span((min(ratios), max(ratios)))
    assert f"{bwd['env']['device']}, {bwd['env']['date']}, one run: [`bwd-" in table


def test_the_readme_needs_its_markers():
    with pytest.raises(ValueError, match="results:begin"):
        report.with_readme_table("# no markers here\n", "table")
    text = f"a\n{report.RESULTS_BEGIN}\nold\n{report.RESULTS_END}\nb\n"
    assert report.with_readme_table(text, "new") == f"a\n{report.RESULTS_BEGIN}\nnew\n{report.RESULTS_END}\nb\n"


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_in_the_docs_resolves_inside_the_repository(page):
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue                                   # a web page or an anchor of the same page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name}: {target} leads outside the repository"
        assert path.exists(), f"{page.name}: {target} does not exist"


#: names of .md files that are templates or other people's files, not pointers into this repository
_NOT_POINTERS = re.compile(r"NN_name\.md$|^model/README\.md$")


def test_every_markdown_file_named_in_the_sources_exists():
    """A ``*.md`` named in the code, kernels, benchmarks, tests, scripts, notebooks or docs is a file
    of this repository: by its path (from the root or the naming file's folder) or, named bare, by
    the name of one."""
    names = {p.name for p in ROOT.rglob("*.md") if not {".venv", ".git", "lessons", "build"} & set(p.parts)}
    token = re.compile(r"(?<![\w/.-])([\w./-]*[A-Za-z0-9_-]+\.md)\b")
    files = [p for d in ("flashviz", "kernels", "benchmarks", "tests", "scripts", "docs", "notebooks")
             for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".md", ".toml")]
    files += [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    missing = []
    for f in files:
        for t in token.findall(f.read_text(encoding="utf-8", errors="replace")):
            if _NOT_POINTERS.search(t) or (ROOT / t).exists() or (f.parent / t).exists() or ("/" not in t and t in names):
                continue
            missing.append(f"{f.relative_to(ROOT)}: {t}")
    assert missing == []


def test_the_readme_picture_is_a_small_animation():
    from PIL import Image

    gif = ROOT / "docs" / "images" / "tile_explorer.gif"
    assert "docs/images/tile_explorer.gif" in _LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert gif.stat().st_size < 1_500_000
    with Image.open(gif) as im:
        assert im.format == "GIF" and im.n_frames > 10


def test_partial_timeline_runs_and_failed_runs_get_their_own_lines(monkeypatch, tmp_path):
    """A run of some kernels only (record_timelines.py --kernels decode,bwd_teaching) is shown under
    the full record, not instead of it; a run that failed is one line with its error, not a crash."""
    import json

    from flashviz.records import timeline as T

    env = {"device": "NVIDIA H200", "date": "2026-12-01"}
    fwd = {"kernel": "wgmma", "d": 64, "causal": False, "order": "kernel", "N": 4096, "B": 1, "H": 32, "Br": 128,
           "Bc": 64, "kernel_ms": 0.25, "traced_ms": 0.26, "overhead": 0.04, "tail_share": 0.1}
    dec = {"kernel": "decode", "d": 128, "causal": False, "order": "kernel", "N": 32768, "B": 1, "H": 32, "H_kv": 8,
           "S": 16, "Br": 4, "Bc": 64, "kernel_ms": 0.03, "traced_ms": 0.031, "overhead": 0.033, "tail_share": 0.2}
    bad = {"kernel": "bwd_teaching", "d": 64, "causal": True, "order": "kernel", "N": 4096, "B": 1, "H": 32,
           "error": "RuntimeError: the traced backward's dK or dV differ"}
    (tmp_path / "timelines-h200-2026-12-01.json").write_text(json.dumps({"env": env, "runs": [fwd]}))
    (tmp_path / "timelines-decode-bwd_teaching-h200-2026-12-05.json").write_text(
        json.dumps({"env": {**env, "date": "2026-12-05"}, "runs": [dec, bad]}))
    monkeypatch.setattr(report, "package_dir", lambda pkg: tmp_path)
    monkeypatch.setattr(T, "package_dir", lambda pkg: tmp_path)
    text = report.results_page()
    assert "timelines-h200-2026-12-01.json" in text.split("decode alone")[0]
    assert "| wgmma | 64 | no | kernel | 4,096 | 1×32 | 128×64 | 0.2500 |" in text
    assert "| decode | 128 | no | kernel | 32,768 | 1×32 (H_kv 8, S 16) | 4×64 | 0.0300 |" in text
    assert "| bwd_teaching | 64 | yes | kernel | 4,096 | 1×32 | failed: RuntimeError: the traced backward" in text


def test_the_decode_and_store_sections_show_their_records(monkeypatch, tmp_path):
    """When a decode record and a recompute-versus-store record are installed, results.md shows each
    row's figures as the records hold them (rows made by the benchmarks' own row builders)."""
    import json

    from flashviz.gpu import decode_bench as db
    from flashviz.gpu.teaching import store_bench as sb

    row = db.derive({**db.base_row(db.Case(8, 32, 8, 32768)), "decode_kernel_us": 270.0, "decode_call_us": 280.0,
                     "sdpa_cudnn_kernel_us": 290.0, "sdpa_cudnn_call_us": 300.0, "decode_simt_kernel_us": 700.0,
                     "decode_simt_call_us": 710.0,
                     "decode_kernel_name": "void fvdec::flash_decode_mma<0, 128, false>(unsigned short const*)",
                     "decode_simt_kernel_name": "void fvdec::flash_decode<0, 128, false, 4>(unsigned short const*)"},
                    copy_GBps=4250.0)
    dec = {"env": {"device": "NVIDIA H200", "date": "2026-12-06"}, "copy_GBps": 4250.0, "bench": [row], "splits": []}
    store = {"env": {"device": "NVIDIA H200", "date": "2026-12-06"}, "d": 64, "BH": 8, "Br": 64, "Bc": 64,
             "bench": [{"N": N, "recompute_kernel_ms": r, "stored_kernel_ms": s, "naive_kernel_ms": 0.5 * s,
                        "make_P_kernel_ms": 0.1 * s, "recompute_peak_bytes": 2**20, "stored_peak_bytes": 2**21,
                        "naive_peak_bytes": sb.kept_bytes(N, "naive")}
                       for N, r, s in ((1024, 1.0, 0.8), (2048, 4.0, 4.5))]}
    (tmp_path / "decode-h200-2026-12-06.json").write_text(json.dumps(dec))
    (tmp_path / "storep-h200-2026-12-06.json").write_text(json.dumps(store))
    from flashviz.records import results as R
    monkeypatch.setattr(report, "package_dir", lambda pkg: tmp_path)
    monkeypatch.setattr(R, "package_dir", lambda pkg: tmp_path)
    text = report.results_page()
    gbps = row["kv_bytes"] / 270.0 / 1e3
    assert (f"| 8 | 32 / 8 | 1 | 32,768 | 128 | no | — | {row['num_splits']} | 270.0 | {gbps / 1e3:.2f} | "
            f"{100 * gbps / 4250:.0f} % | {row['sdpa_cudnn_kernel_GBps'] / 1e3:.2f} | — | {290 / 270:.2f}x | 280.0 | 300.0 | "
            f"700.0 | {100 * row['kv_bytes'] / 700.0 / 1e3 / 4250:.0f} % | {290 / 700:.2f}x | 710.0 |\n") in text
    # which kernel "ours" is comes from the record: here the default call ran v2, with v1 beside it
    assert ('"ours" is the default call, `flash_decode_gpu` without a variant; its split kernel in this record: '
            '`flash_decode_mma` (v2, tensor cores). "v1" is the same call with `variant="simt"`, split kernel '
            '`flash_decode` (v1, CUDA cores), on the same rows. The default call\'s split kernel on this device, as '
            'the rows record it: "mma" (v2).\n') in text
    assert "| cuDNN µs (call) | v1 µs (kernel) | v1 of copy | cuDNN ÷ v1 | v1 µs (call) |\n" + "| --- " * 20 + "|\n" in text
    assert "this record was made before" not in text
    assert "the device's copy bandwidth measured in the same run: 4.25 TB/s" in text
    assert "| 1,024 | 1.000 | 1 | 0.800 | 2 | 0.400 |" in text and "| 2,048 | 4.000 | 1 |" in text
    assert "Recomputing is at least as fast as reading the stored P from N = 2,048 on" in text


def test_the_decode_section_names_the_kernels_of_a_record_made_before_v2_was_the_default(monkeypatch, tmp_path):
    """A record whose default call ran v1 (v2 beside it as decode_mma) is shown as it is, with v2's
    columns and a note that the call's default has changed since."""
    import json

    from flashviz.gpu import decode_bench as db
    row = db.base_row(db.Case(1, 32, 8, 32768), db.IMPLS + ("decode_mma",))
    for k in ("variant", "decode_simt_num_splits", "decode_simt_chunks", "decode_simt_rows"):
        row.pop(k, None)
    row = db.derive(row | {"impls": ["decode", "sdpa_cudnn", "sdpa_flash", "decode_mma"], "decode_kernel_us": 96.0,
                           "decode_call_us": 100.0, "sdpa_cudnn_kernel_us": 36.0, "decode_mma_kernel_us": 38.0,
                           "decode_mma_call_us": 43.0,
                           "decode_kernel_name": "void fvdec::flash_decode<0, 128, false, 4>(unsigned short const*)",
                           "decode_mma_kernel_name": "void fvdec::flash_decode_mma<0, 128, false>(int)"},
                    db.ALL_IMPLS + ("decode_mma",), copy_GBps=4000.0)
    dec = {"env": {"device": "NVIDIA H200", "date": "2026-12-06"}, "copy_GBps": 4000.0, "bench": [row], "splits": [],
           "impls": ["decode", "sdpa_cudnn", "sdpa_flash", "decode_nosplit", "decode_mma"]}
    (tmp_path / "decode-h200-2026-12-06.json").write_text(json.dumps(dec))
    from flashviz.records import results as R
    monkeypatch.setattr(report, "package_dir", lambda pkg: tmp_path)
    monkeypatch.setattr(R, "package_dir", lambda pkg: tmp_path)
    text = report.results_page()
    assert ('its split kernel in this record: `flash_decode` (v1, CUDA cores). "v2" is the same call with '
            '`variant="mma"`, split kernel `flash_decode_mma` (v2, tensor cores), on the same rows. (The call\'s '
            'default on an H100 / H200 is now `flash_decode_mma`: this record was made before.)\n') in text
    assert "| cuDNN µs (call) | v2 µs (kernel) | v2 of copy | cuDNN ÷ v2 | v2 µs (call) |\n" in text
    assert "as the rows record it" not in text
    assert (f"| 96.0 | {row['decode_kernel_GBps'] / 1e3:.2f} | {100 * row['decode_kernel_of_copy']:.0f} % | "
            f"{row['sdpa_cudnn_kernel_GBps'] / 1e3:.2f} | — | {36 / 96:.2f}x | 100.0 | — | 38.0 | "
            f"{100 * row['decode_mma_kernel_of_copy']:.0f} % | {36 / 38:.2f}x | 43.0 |\n") in text


def test_a_new_record_where_the_default_fell_back_to_v1_is_not_called_old(monkeypatch, tmp_path):
    """A record made since v2 became the default, on a GPU whose blocks may not opt in to v2's shared
    memory at d = 128 (sm_89: 101,376 bytes), ran v1 as "ours" at d = 128 and v2 at d = 64: its rows
    say so (``variant``), and results.md states it instead of calling the record old; "ours, no
    split" (chapter 9) is named with the kernel it ran."""
    import json

    from flashviz.gpu import decode_bench as db
    dev = dict(num_sms=84, smem_optin=101_376, smem_per_sm=102_400)
    v1 = "void fvdec::flash_decode<0, 128, false, 4>(unsigned short const*)"
    v2 = "void fvdec::flash_decode_mma<0, 64, false>(unsigned short const*)"
    rows = []
    for case, ours in ((db.Case(1, 32, 8, 32768), v1), (db.Case(8, 32, 8, 32768, d=64), v2)):
        row = db.base_row(case, **dev)
        row |= {"decode_kernel_us": 100.0, "decode_call_us": 110.0, "decode_kernel_name": ours,
                "decode_simt_kernel_us": 100.0, "decode_simt_kernel_name": v1.replace("128", str(case.d))}
        if "decode_nosplit" in row["impls"]:
            row |= {"decode_nosplit_kernel_us": 900.0, "decode_nosplit_kernel_name": ours}
        rows.append(db.derive(row, copy_GBps=1000.0))
    assert [r["variant"] for r in rows] == ["simt", "mma"]
    dec = {"env": {"device": "NVIDIA GeForce RTX 4090", "date": "2026-12-07"}, "copy_GBps": 1000.0, "bench": rows,
           "splits": [], "impls": list(db.ALL_IMPLS)}
    (tmp_path / "decode-rtx-4090-2026-12-07.json").write_text(json.dumps(dec))
    from flashviz.records import results as R
    monkeypatch.setattr(report, "package_dir", lambda pkg: tmp_path)
    monkeypatch.setattr(R, "package_dir", lambda pkg: tmp_path)
    text = report.results_page()
    assert "this record was made before" not in text
    assert ('its split kernel in this record: `flash_decode` (v1, CUDA cores), `flash_decode_mma` (v2, tensor cores). '
            '"v1" is the same call with `variant="simt"`, split kernel `flash_decode` (v1, CUDA cores), on the same '
            'rows. Chapter 9 also shows "ours, no split", the default call with `num_splits=1`: split kernel '
            '`flash_decode` (v1, CUDA cores). The default call\'s split kernel on this device, as the rows record '
            'it: "simt" (v1) at d = 128, "mma" (v2) at d = 64.\n') in text
    # rows without ``variant`` are an old record's, whatever kernels they name
    for r in rows:
        del r["variant"]
    (tmp_path / "decode-rtx-4090-2026-12-07.json").write_text(json.dumps(dec))
    text = report.results_page()
    assert "`flash_decode_mma`: this record was made before.)\n" in text and "as the rows record it" not in text


_BWD_KERNELS = {"atomic": "void flash_bwd_mma<0, 128, 64, false, true>(unsigned short const*, unsigned short co",
                "separate": "void flash_bwd_mma<0, 128, 64, false, false>(unsigned short const*, unsigned short c",
                "first": "void flash_bwd_mma<0, 128, 64, false>(unsigned short const*, unsigned short const*",
                "bulk": "void flash_bwd_wgmma<0, 64, 64, false, 2>(unsigned short const*, unsigned short const*",
                "wgmma separate": "void flash_bwd_wgmma<0, 128, 64, false, 0>(unsigned short const*, unsigned s",
                "wgmma atomic": "void flash_bwd_wgmma<0, 128, 64, false, 1>(unsigned short const*, unsigned sho"}


def _bwd_record(layout: str) -> dict:
    """A one-row backward record as the benchmark's own row builders make it, of one layout: "new"
    (bwd_mma the separate dQ pass, 2.0 ms, bwd_mma_atomic 2.6 ms beside it, no forward + backward for
    the atomics), "old" (bwd_mma the atomics, 2.6 ms, bwd_mma_det the pass, 2.0 ms), "first"
    (bwd_mma alone, a kernel from before ATOMIC_DQ) or "wgmma" (bwd_mma the wgmma kernel's bulk dQ,
    1.5 ms, bwd_mma_det its separate pass, 2.0 ms, bwd_mma_atomic its atomics, 2.6 ms). Made on an
    sm_90 GPU, where the default call now runs the bulk dQ."""
    from flashviz.gpu.tensorcore import bench_bwd as bb
    mma = {"new": {"bwd_mma": "separate", "bwd_mma_atomic": "atomic"},
           "old": {"bwd_mma": "atomic", "bwd_mma_det": "separate"}, "first": {"bwd_mma": "first"},
           "wgmma": {"bwd_mma": "bulk", "bwd_mma_det": "wgmma separate", "bwd_mma_atomic": "wgmma atomic"}}[layout]
    row = bb.base_row(1024, 64, False)
    row.update(sdpa_flash_bwd_call_ms=1.6, sdpa_flash_bwd_kernel_ms=1.6, sdpa_flash_bwd_fwdbwd_call_ms=2.0,
               sdpa_cudnn_bwd_call_ms=0.9, sdpa_cudnn_bwd_kernel_ms=0.9, sdpa_cudnn_bwd_fwdbwd_call_ms=1.2)
    det = []
    for impl, path in mma.items():
        ms = {"separate": 2.0, "wgmma separate": 2.0, "bulk": 1.5}.get(path, 2.6)
        row.update({f"{impl}_call_ms": ms, f"{impl}_kernel_ms": ms, f"{impl}_kernel_name": _BWD_KERNELS[path]})
        if impl != "bwd_mma_atomic":
            row[f"{impl}_fwdbwd_call_ms"] = ms + 0.4
        if layout == "new":
            row[f"{impl}_dq"] = path
        same = path in ("separate", "wgmma separate")
        det.append({"impl": impl, "N": 1024, "d": 64, "causal": False, "runs": 5, "deterministic": same,
                    "bitwise_equal": same})
    impls = [*mma, "sdpa_flash_bwd", "sdpa_cudnn_bwd"]
    return {"env": {"device": "NVIDIA H200", "date": "2026-12-07", "compute_capability": "90"}, "method": "m",
            "impls": impls,
            "bench": [bb.derive(row, impls)], "deterministic": det, "peak_bytes": [],
            "source_file": "bwd-h200-2026-12-07.json"}


def test_the_backward_section_labels_ours_by_the_kernels_each_record_ran():
    """results.md's backward table names bwd_mma's dQ path from the record's kernel names: the
    deterministic pass in a record made since it became the default (bwd_mma_atomic beside it),
    the atomics in one made before (bwd_mma_det beside it, and a note that the default changed
    since), the atomics alone in the first record; the other path and deterministic ÷ atomic get
    their own columns where the record has them."""
    tf = _bwd_record("new")["bench"][0]["flops_bwd"] / 1e9
    head = ("| d | causal | N | B×H | bwd_mma ({}) TFLOP/s (call) | ÷ flash call | ÷ flash kernel | ÷ cuDNN call | "
            "÷ cuDNN kernel | fwd+bwd ÷ flash | fwd+bwd ÷ cuDNN |")
    new = "\n".join(report._bwd_section(_bwd_record("new")))
    assert (head.format("deterministic dQ") + " bwd_mma_atomic (atomic dQ) ÷ flash kernel | deterministic ÷ "
            "non-deterministic, kernel-only | teaching fp32 ms (call) |\n" + "| --- " * 14 + "|\n") in new
    assert (f"| 64 | no | 1,024 | 16×32 | {tf / 2.0:.0f} | 0.80x | 0.80x | 0.45x | 0.45x | {2.0 / 2.4:.2f}x | "
            f"{1.2 / 2.4:.2f}x | {1.6 / 2.6:.2f}x | {2.0 / 2.6:.2f}x | — |") in new
    assert ("Ours is `bwd_mma`, `flash_backward_mma`'s default call. Its dQ in this record, as the record's kernel "
            "names say (`<impl>_kernel_name`, the longest kernel of a call): deterministic dQ (the main kernel without "
            "atomics, then the separate pass `flash_bwd_mma_dq` in a fixed order) — `flash_bwd_mma` with ATOMIC_DQ = "
            "false. Beside it, `bwd_mma_atomic` is the same call with `dq=\"atomic\"`: atomic dQ (fp32 `atomicAdd` in "
            "the main kernel, then a convert kernel) — `flash_bwd_mma` with ATOMIC_DQ = true. (On a GPU like this one") in new
    assert ("(On a GPU like this one (sm_90) the default call now runs the bulk dQ (`backward_plan`, chosen from "
            "the H100 records named there): this record was made before, and its `bwd_mma` ran the deterministic dQ.)") in new
    assert ("bwd_mma (deterministic dQ): 1 of 1 shapes (5 runs each); bwd_mma_atomic (atomic dQ): 0 of 1 shapes "
            "(5 runs each).") in new

    old = "\n".join(report._bwd_section(_bwd_record("old")))
    assert (head.format("atomic dQ") + " bwd_mma_det (deterministic dQ) ÷ flash kernel | deterministic ÷ "
            "non-deterministic, kernel-only | teaching fp32 ms (call) |\n") in old
    assert (f"| 64 | no | 1,024 | 16×32 | {tf / 2.6:.0f} | {1.6 / 2.6:.2f}x | {1.6 / 2.6:.2f}x | {0.9 / 2.6:.2f}x | "
            f"{0.9 / 2.6:.2f}x | {2.0 / 3.0:.2f}x | {1.2 / 3.0:.2f}x | 0.80x | {2.0 / 2.6:.2f}x | — |") in old
    assert ("atomic dQ (fp32 `atomicAdd` in the main kernel, then a convert kernel) — `flash_bwd_mma` with "
            "ATOMIC_DQ = true. Beside it, `bwd_mma_det` is the same call with `deterministic=True`: deterministic dQ"
            ) in old
    assert ("(On a GPU like this one (sm_90) the default call now runs the bulk dQ (`backward_plan`, chosen from "
            "the H100 records named there): this record was made before, and its `bwd_mma` ran the atomic dQ.)") in old
    assert "bwd_mma_det (deterministic dQ): 1 of 1 shapes" in old and "bwd_mma (atomic dQ): 0 of 1 shapes" in old

    first = "\n".join(report._bwd_section(_bwd_record("first")))
    assert head.format("atomic dQ") + " teaching fp32 ms (call) |\n" + "| --- " * 12 + "|\n" in first
    assert "`flash_bwd_mma` with 4 template arguments (built before ATOMIC_DQ existed)." in first
    assert "Beside it" not in first and "this record was made before" in first

    wg = "\n".join(report._bwd_section(_bwd_record("wgmma")))
    assert (head.format("bulk dQ") + " bwd_mma_det (deterministic dQ) ÷ flash kernel | bwd_mma_atomic (atomic dQ) ÷ "
            "flash kernel | deterministic ÷ non-deterministic, kernel-only | teaching fp32 ms (call) |\n"
            + "| --- " * 15 + "|\n") in wg
    assert (f"| 64 | no | 1,024 | 16×32 | {tf / 1.5:.0f} | {1.6 / 1.5:.2f}x | {1.6 / 1.5:.2f}x | {0.9 / 1.5:.2f}x | "
            f"{0.9 / 1.5:.2f}x | {2.0 / 1.9:.2f}x | {1.2 / 1.9:.2f}x | 0.80x | {1.6 / 2.6:.2f}x | {2.0 / 1.5:.2f}x | — |") in wg
    assert ("bulk dQ (each query block's fp32 dQ_i added into HBM by one reduction of the copy engine, then a convert "
            "kernel) — `flash_bwd_wgmma` with DQ = 2 (bulk). Beside it, `bwd_mma_det` is the same call with "
            "`deterministic=True`: deterministic dQ") in wg
    assert "`flash_bwd_wgmma` with DQ = 1 (atomic)." in wg and "this record was made before" not in wg
