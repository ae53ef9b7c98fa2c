"""flashviz.records.provenance: which committed GPU records timed the kernels of this tree.

The synthetic records below use hashes computed here from the files themselves (sha256 of the
bytes for the "file" form); the "compiled" form is the runners' own hash (``source_sha256``), and a
record holding any other value must come out as changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flashviz.mma_limits import KERNEL_FILES
from flashviz.records import provenance as pv
from flashviz.records.files import source_sha256

KERNELS = Path(__file__).resolve().parents[2] / "kernels"


def _bytes_sha(name: str) -> str:
    return hashlib.sha256((KERNELS / name).read_bytes()).hexdigest()[:16]


def _write(folder: Path, name: str, record) -> None:
    (folder / name).write_text(json.dumps(record))


def _gpu(**kw) -> dict:
    env = {"device": "NVIDIA H200", **kw.pop("env", {})}
    return {"env": env, **kw}


def test_each_form_of_naming_a_kernel_is_read_and_compared(tmp_path):
    fa3_file = KERNEL_FILES["fa3"][0]
    _write(tmp_path, "a-current.json", _gpu(kernel_sources={"fa3": source_sha256(fa3_file)}))
    _write(tmp_path, "b-changed.json", _gpu(kernel_sources={"fa3": "0" * 16, "mma.sync": source_sha256(
        KERNEL_FILES["mma.sync"][0])}))
    _write(tmp_path, "c-file-form.json", _gpu(env={"files_sha256": {
        "kernels/flash_bwd.cu": _bytes_sha("flash_bwd.cu"), "flashviz/gpu/autograd.py": "ffff"}}))
    _write(tmp_path, "d-env-compiled.json", _gpu(env={"kernel_sources": {"flash_bwd_mma.cu": "1234"}}))
    _write(tmp_path, "e-unnamed.json", _gpu(bench=[]))
    _write(tmp_path, "f-cpu.json", {"front_end": "lab", "bursts": 3})      # a CPU record: not audited
    _write(tmp_path, "g-gone.json", _gpu(kernel_sources={"no_such_kernel.cu": "abcd"}))
    (tmp_path / "notes.txt").write_text("not a record")
    got = {a.name: a for a in pv.audit(tmp_path)}
    assert list(got) == ["a-current.json", "b-changed.json", "c-file-form.json", "d-env-compiled.json",
                         "e-unnamed.json", "g-gone.json"]
    assert got["a-current.json"].status == "current" and got["a-current.json"].changed == []
    assert got["b-changed.json"].status == "changed" and got["b-changed.json"].changed == [fa3_file]
    (check,) = got["c-file-form.json"].kernels                  # the Python file is not a kernel
    assert (check.file, check.form, check.same) == ("flash_bwd.cu", "file", True)
    assert got["c-file-form.json"].status == "current"
    assert got["d-env-compiled.json"].changed == ["flash_bwd_mma.cu"]
    assert got["e-unnamed.json"].status == "unnamed"
    (gone,) = got["g-gone.json"].kernels
    assert gone.now is None and not gone.same and got["g-gone.json"].status == "changed"


def test_an_edited_kernel_makes_its_records_changed(tmp_path, monkeypatch):
    from flashviz.records import files
    name = "flash_bwd.cu"
    _write(tmp_path, "r.json", _gpu(kernel_sources={name: source_sha256(name)},
                                    env={"files_sha256": {f"kernels/{name}": _bytes_sha(name)}}))
    assert pv.audit(tmp_path)[0].status == "current"
    real = files.kernel_source
    monkeypatch.setattr(files, "kernel_source", lambda n: real(n) + ("// edited\n" if n == name else ""))
    monkeypatch.setattr(pv, "kernel_source", files.kernel_source)
    (a,) = pv.audit(tmp_path)
    assert a.status == "changed" and a.changed == [name] and {k.form for k in a.kernels} == {"compiled", "file"}


def test_a_broken_record_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        pv.audit(tmp_path)


@pytest.mark.recorded_data
def test_data_check_the_committed_records_file_hashes_match_the_bytes():
    """Data check of the committed records (not a speed test): every kernel a record names in the
    "file" form is compared with the sha256 of the file's bytes as read here."""
    audits = pv.audit()
    assert audits, "no GPU record in benchmarks/results/"
    for a in audits:
        for k in a.kernels:
            if k.form == "file" and (KERNELS / k.file).is_file():
                assert k.same == (k.recorded == _bytes_sha(k.file)), (a.name, k)


def test_a_changed_kernel_names_the_files_its_compiled_source_pastes(monkeypatch):
    from flashviz.records import files
    tree = {"k.cu": '#include "a.cuh"\n#include "b.cuh"\n', "a.cuh": '#include "b.cuh"\nint a;\n', "b.cuh": "int b;\n"}
    def source(n):
        if n not in tree:
            raise FileNotFoundError(n)
        return tree[n]
    monkeypatch.setattr(files, "kernel_source", source)
    assert files.include_closure("k.cu") == ["k.cu", "a.cuh", "b.cuh"]          # each once, in pasting order
    a = pv.RecordAudit("r.json", [pv.KernelCheck("k.cu", "compiled", "0", "1")])
    assert a.status == "changed" and a.pasted("k.cu") == ["k.cu", "a.cuh", "b.cuh"]
    assert a.pasted("gone.cu") == ["gone.cu"]


def test_device_folders_are_audited_and_archive_only_lends_its_cubins(tmp_path):
    """h100/ (a device's folder) is audited like the top folder, by its path; archive/ is history:
    not listed, but a cubin it holds built from today's source still tells whether a record's
    binary changed."""
    name = "flash_decode.cu"
    now = source_sha256(name)
    (tmp_path / "h100").mkdir()
    (tmp_path / "archive").mkdir()
    build = {"expression": "fvdec::flash_decode_mma<0,128,16,false,0>", "arch": "sm_90", "options": []}
    old_cubin = {**build, "sha256": "c" * 16, "source_sha256": "0" * 16}
    _write(tmp_path / "h100", "decode-x.json", _gpu(kernel_sources={"decode": "0" * 16}, cubins=[old_cubin]))
    _write(tmp_path / "archive", "decode-y.json", _gpu(env={"kernel_sources": {name: now},
                                                            "cubins": [{**build, "sha256": "c" * 16,
                                                                        "source_sha256": now}]}))
    (a,) = pv.audit(tmp_path)
    assert a.name == "h100/decode-x.json"                        # archive/ is not listed
    (k,) = a.kernels                                             # "decode", a record's name, is flash_decode.cu
    assert (k.file, k.same, k.binary) == (name, False, "same") and a.status == "same binary"


@pytest.mark.parametrize("twin_sha, twin_build, binary, status", [
    ("c" * 16, {}, "same", "same binary"),                       # today's source gives the very same bytes
    ("d" * 16, {}, "changed", "changed"),                        # ... other bytes: the numbers are an old kernel's
    ("c" * 16, {"arch": "sm_80"}, None, "changed"),              # only another build was recorded: a GPU must tell
    ("c" * 16, {"options": ["-DFLASHVIZ_TRACE=1"]}, None, "changed"),
])
def test_a_changed_source_is_judged_by_the_cubins_committed_records_hold(tmp_path, twin_sha, twin_build, binary,
                                                                           status):
    name = KERNEL_FILES["fa3"][0]
    now = source_sha256(name)
    build = {"expression": "flash_fwd_fa3<0,128,128,128,false>", "arch": "sm_90a", "options": []}
    _write(tmp_path, "a-old.json", _gpu(kernel_sources={"fa3": "0" * 16},
                                        env={"cubins": [{**build, "sha256": "c" * 16, "source_sha256": "0" * 16}]}))
    _write(tmp_path, "b-new.json", _gpu(kernel_sources={"fa3": now},
                                        env={"cubins": [{**build, **twin_build, "sha256": twin_sha,
                                                         "source_sha256": now}]}))
    got = {a.name: a for a in pv.audit(tmp_path)}
    (k,) = got["a-old.json"].kernels
    assert k.binary == binary and got["a-old.json"].status == status
    assert got["b-new.json"].status == "current" and got["b-new.json"].kernels[0].binary is None


def test_a_record_without_cubins_stays_changed(tmp_path):
    _write(tmp_path, "r.json", _gpu(kernel_sources={"bwd_mma": "0" * 16}))
    (a,) = pv.audit(tmp_path)
    assert a.changed == ["flash_bwd_mma.cu"] and a.kernels[0].binary is None and a.status == "changed"


@pytest.mark.recorded_data
def test_data_check_every_committed_gpu_record_outside_archive_is_audited():
    """Data check of the committed records (not a speed test): the audit lists every GPU record of
    benchmarks/results/ and its device folders, and names each kernel by a file that exists."""
    from flashviz.records.files import package_dir
    base = package_dir("flashviz.results")
    expected = set()
    for f in base.rglob("*.json"):
        rel = f.relative_to(base).as_posix()
        if rel.startswith("archive/"):
            continue
        try:
            rec = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue
        if pv.is_gpu_record(rec):
            expected.add(rel)
    audits = pv.audit()
    assert {a.name for a in audits} == expected and any(n.startswith("h100/") for n in expected)
    for a in audits:
        for k in a.kernels:
            assert (KERNELS / k.file).is_file(), (a.name, k.file)
