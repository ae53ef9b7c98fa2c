"""Which committed records timed the kernels of this tree, and which timed an older version.

A GPU record names the kernel code it measured by hashes (the first 16 hex digits of a sha256), in
one of three forms the runners have written over time:

* ``kernel_sources`` at the top level or in ``env``: {kernel variant or kernel file: hash of the
  text NVRTC compiled, headers pasted in} (``files.source_sha256``); a variant ("wgmma",
  "mma.sync", "fa3") names its file through ``mma_limits.KERNEL_FILES``;
* ``env.files_sha256``: {"kernels/<file>": hash of the file's bytes as committed} (other paths in
  it are Python files, not kernels, and are not compared here);
* none: the record predates hashing, and only its commit says what ran.

``audit`` compares each named hash with the tree's and sorts the records into "current" (every
kernel it names is unchanged), "same binary" (a source changed, but every cubin the record timed
from it is byte-identical to the one another committed record compiled from today's source),
"changed" (a kernel it timed has changed since: its numbers describe an older kernel) and
"unnamed". A changed source can still compile to the same cubin (a comment, a renamed variable, code
a normal build compiles out): the cubin hashes records carry (``cubins``: name expression, arch,
options, sha256 of the binary and of the source text compiled; ``flashviz.gpu.nvrtc.loaded_cubins``)
tell, where some record (archive/ included) compiled the same expression from today's source; where
none did, only a GPU run can tell and the record stays "changed". ``flashviz report`` lists the audit
in docs/results.md.

Standard library only, like the rest of ``flashviz.records``: no CuPy, no GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..mma_limits import KERNEL_FILES, RECORD_KERNEL_FILES
from .files import include_closure, kernel_source, package_dir, short_sha256, source_sha256

#: the ways a record names a kernel's code: "compiled" (the text NVRTC compiles) or "file" (its bytes)
FORMS = ("compiled", "file")


@dataclass(frozen=True)
class KernelCheck:
    """One kernel a record names: its file under kernels/, how it was hashed (``FORMS``), the hash
    the record holds, the tree's hash of the same kind now (None: the file is gone) and whether
    the two are equal."""

    file: str
    form: str
    recorded: str
    now: str | None
    #: for a changed compiled source: "same" (each cubin the record timed from it has a byte-identical
    #: twin compiled from today's source in some committed record), "changed" (one differs) or None
    #: (no record compiled today's source the same way: a GPU run must tell)
    binary: str | None = None

    @property
    def same(self) -> bool:
        return self.now is not None and self.now == self.recorded


@dataclass
class RecordAudit:
    """One record: its file name, the kernels it names (``KernelCheck``) and its status: "current",
    "changed" or "unnamed" (it names no kernel hash)."""

    name: str
    kernels: list[KernelCheck] = field(default_factory=list)

    @property
    def status(self) -> str:
        if not self.kernels:
            return "unnamed"
        if all(k.same for k in self.kernels):
            return "current"
        return "same binary" if all(k.same or k.binary == "same" for k in self.kernels) else "changed"

    @property
    def changed(self) -> list[str]:
        """The kernel files whose compiled source (or bytes) differs from what the record timed
        (sorted, no repeats)."""
        return sorted({k.file for k in self.kernels if not k.same})

    def pasted(self, file: str) -> list[str]:
        """The kernels/ files whose text makes ``file``'s compiled source (``files.include_closure``:
        the file, then its headers): a changed hash means one of them changed since the run."""
        try:
            return include_closure(file)
        except FileNotFoundError:
            return [file]


def file_sha256(name: str) -> str | None:
    """The first 16 hex digits of the sha256 of ``kernels/<name>``'s bytes as stored (the text as
    UTF-8), or None if there is no such file."""
    try:
        return short_sha256(kernel_source(name).encode("utf-8"))
    except FileNotFoundError:
        return None


def _compiled_sha256(name: str) -> str | None:
    try:
        return source_sha256(name)
    except FileNotFoundError:
        return None


def named_kernels(record: dict) -> list[tuple[str, str, str]]:
    """The (kernel file, form, recorded hash) triples a record names, in the forms of the module
    docstring; an empty list when it names none. A name that is neither a known variant nor a
    kernels/ file ("teaching", say, in an old record) is kept as given, so ``audit`` reports it
    as a file it cannot find."""
    out = []
    for where in (record, record.get("env") or {}):
        for key, h in (where.get("kernel_sources") or {}).items():
            out.append((KERNEL_FILES[key][0] if key in KERNEL_FILES else RECORD_KERNEL_FILES.get(key, key),
                        "compiled", str(h)))
    for path, h in ((record.get("env") or {}).get("files_sha256") or {}).items():
        if path.startswith("kernels/"):
            out.append((path.split("/", 1)[1], "file", str(h)))
    return sorted(set(out))


def record_cubins(record: dict) -> list[dict]:
    """The cubins a record names (``cubins`` at its top level or in ``env``; [] when none): dicts
    with at least "expression", "arch", "options", "sha256" and "source_sha256"."""
    found = record.get("cubins") or (record.get("env") or {}).get("cubins") or []
    return [c for c in found if isinstance(c, dict) and c.get("sha256") and c.get("source_sha256")]


def _build(c: dict) -> tuple:
    """What makes one cubin: the source text compiled, the name expression, the arch, the options."""
    return c["source_sha256"], c.get("expression"), c.get("arch"), tuple(c.get("options") or ())


def cubin_index(records) -> dict:
    """{(source sha256, expression, arch, options): {cubin sha256, ...}} over the cubins of
    ``records`` (loaded dicts): the binaries committed records saw each build produce."""
    index: dict = {}
    for r in records:
        for c in record_cubins(r):
            index.setdefault(_build(c), set()).add(c["sha256"])
    return index


def _binary(record: dict, recorded: str, now: str | None, index: dict) -> str | None:
    """"same", "changed" or None for a compiled source that changed from ``recorded`` to ``now``:
    the record's cubins built from ``recorded`` against those ``index`` holds for the same builds
    from ``now``."""
    mine = [c for c in record_cubins(record) if c["source_sha256"] == recorded]
    if not mine or now is None:
        return None
    verdicts = []
    for c in mine:
        twins = index.get((now, *_build(c)[1:]))
        if not twins:
            return None                      # this build of today's source was never recorded
        verdicts.append(twins == {c["sha256"]})
    return "same" if all(verdicts) else "changed"


def check_record(name: str, record: dict, index: dict | None = None) -> RecordAudit:
    """The audit of one record (a loaded JSON dict) named ``name``: each kernel it names, compared
    with the tree's hash of the same form now; for a changed compiled source, its cubins compared
    with ``index`` (``cubin_index`` of the committed records; None: not compared)."""
    checks = []
    for file, form, recorded in named_kernels(record):
        now = _compiled_sha256(file) if form == "compiled" else file_sha256(file)
        binary = (_binary(record, recorded, now, index) if index is not None and form == "compiled"
                  and now != recorded else None)
        checks.append(KernelCheck(file, form, recorded, now, binary))
    return RecordAudit(name, checks)


def is_gpu_record(record) -> bool:
    """True for a record of a run on a GPU (its ``env`` names a ``device``); the browser stress
    runs and other CPU records time no kernel and are not audited."""
    return isinstance(record, dict) and isinstance(record.get("env"), dict) and "device" in record["env"]


#: the folder of records kept as history: read for their cubins, not audited
ARCHIVE = "archive"


def _records(base):
    """(name relative to ``base``, loaded dict) of every GPU record ``*.json`` in ``base`` and its
    sub-folders (a device's folder such as h100/, and archive/), sorted by name; ValueError for a
    file that is not valid JSON."""
    out = []
    for f in sorted(base.rglob("*.json")):
        if not f.is_file():
            continue
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{f.relative_to(base).as_posix()} is not valid JSON: {e}") from None
        if is_gpu_record(record):
            out.append((f.relative_to(base).as_posix(), record))
    return out


def audit(folder=None) -> list[RecordAudit]:
    """Every GPU record (``is_gpu_record``) ``*.json`` in ``folder`` (default: the committed results
    folder, ``benchmarks/results/``) and in its device folders (h100/, …), named by its path there
    and sorted so, each checked by ``check_record`` against the cubins of all of them (``archive/``
    included: history is not audited, but its cubins are evidence). A file that is not valid JSON
    raises ValueError naming it."""
    base = package_dir("flashviz.results") if folder is None else folder
    found = _records(base)
    index = cubin_index(r for _, r in found)
    return [check_record(name, r, index) for name, r in found if not name.startswith(ARCHIVE + "/")]
