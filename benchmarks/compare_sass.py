"""Does a change to a kernel's text change its machine code? Compare two commits without a GPU.

    python benchmarks/compare_sass.py flash_fwd_fa3.cu [flash_fwd_mma.cu ...] [--base HEAD] [--traced]

Each named kernels/ file is compiled twice with nvcc for sm_90a (``-DFLASHVIZ_PTX_CHECK``: every
instantiation the runner may launch), once from the working tree and once from ``--base`` (a
commit: the file and its headers as they were there), and each kernel function's SASS
(``cuobjdump -sass``) is compared. A function is

* ``same``      the same instructions in the same order (its code cannot behave differently);
* ``reordered`` the same multiset of instructions, constants included, once register numbers,
  predicates, ``.reuse`` hints and code addresses (branch targets, call return addresses) are set
  aside: the compiler scheduled or allocated differently (a swapped register operand would also
  land here: read such a function's diff);
* ``differs``   other instructions: the change is a change of the kernel;
* ``only-old`` / ``only-new``: instantiated on one side only.

``--traced`` also compares the timeline builds (``-DFLASHVIZ_TRACE=1``). Needs nvcc and
cuobjdump (CUDA toolkit, or ``pip install nvidia-cuda-cuobjdump``; ``--cuobjdump PATH``). Prints
one line a function and a summary; exit status 1 if any function ``differs`` or is on one side
only. For refactors (benchmarks/NOTES.md: "the tile vocabulary"), not a test: a CPU-only CI has
no cuobjdump.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FUNC = re.compile(r"^\s*Function : (\S+)", re.M)
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?;)")


def export_kernels(rev: str | None, dest: Path) -> Path:
    """kernels/ of commit ``rev`` (None: the working tree) copied into ``dest``; returns dest."""
    dest.mkdir(parents=True)
    if rev is None:
        for f in (ROOT / "kernels").iterdir():
            if f.suffix in (".cu", ".cuh"):
                shutil.copy(f, dest / f.name)
        return dest
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:kernels"], check=True,
                           capture_output=True, text=True).stdout.split()
    for n in names:
        if n.endswith((".cu", ".cuh")):
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:kernels/{n}"], check=True,
                                  capture_output=True).stdout
            (dest / n).write_bytes(text)
    return dest


def sass(folder: Path, name: str, traced: bool, cuobjdump: str) -> dict[str, list[str]]:
    """{mangled kernel name: its SASS instructions} of kernels ``name`` compiled in ``folder``."""
    cubin = folder / f"{name}.{int(traced)}.cubin"
    cmd = ["nvcc", "-std=c++17", "-arch=sm_90a", "-cubin", "-DFLASHVIZ_PTX_CHECK", f"-DFLASHVIZ_TRACE={int(traced)}",
           "-o", str(cubin), str(folder / name)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"nvcc failed for {folder / name}:\n{r.stderr[-3000:]}")
    text = subprocess.run([cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    out, marks = {}, list(_FUNC.finditer(text))
    for k, m in enumerate(marks):
        body = text[m.end(): marks[k + 1].start() if k + 1 < len(marks) else len(text)]
        out[m.group(1)] = _INSN.findall(body)
    return out


def _abstract(insn: str) -> str:
    insn = re.sub(r"\.reuse\b", "", insn)
    insn = re.sub(r"\bU?R[0-9]+\b", "R", insn)
    return re.sub(r"\bU?P[0-9]\b", "P", insn)


def _data_insns(insns: list[str]) -> list[str]:
    """``insns`` without the ones that hold code addresses: branches, calls and the move of a
    call's return address just before it."""
    out = []
    for k, i in enumerate(insns):
        if i.startswith(("BRA", "BSSY", "CALL")) or "BRA " in i:
            continue
        if k + 1 < len(insns) and insns[k + 1].startswith("CALL") and i.startswith("MOV"):
            continue
        out.append(i)
    return out


def verdict(old: list[str] | None, new: list[str] | None) -> str:
    """"same", "reordered", "differs", "only-old" or "only-new" (see the module docstring)."""
    if old is None:
        return "only-new"
    if new is None:
        return "only-old"
    if old == new:
        return "same"
    a = collections.Counter(_abstract(i) for i in _data_insns(old))
    b = collections.Counter(_abstract(i) for i in _data_insns(new))
    return "reordered" if a == b else "differs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="kernels/ files, e.g. flash_fwd_fa3.cu")
    ap.add_argument("--base", default="HEAD", help="the commit to compare against (default HEAD)")
    ap.add_argument("--traced", action="store_true", help="also compare the -DFLASHVIZ_TRACE=1 builds")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    args = ap.parse_args(argv)
    if shutil.which("nvcc") is None:
        raise SystemExit("compare_sass: nvcc not found (the CUDA toolkit's compiler)")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        old_dir = export_kernels(args.base, Path(tmp) / "old")
        new_dir = export_kernels(None, Path(tmp) / "new")
        jobs = [(f, tr) for f in args.files for tr in ((False, True) if args.traced else (False,))]
        with ThreadPoolExecutor(max_workers=2) as pool:
            futs = {(f, tr, side): pool.submit(sass, d, f, tr, args.cuobjdump)
                    for f, tr in jobs for side, d in (("old", old_dir), ("new", new_dir))}
        for f, tr in jobs:
            old, new = futs[(f, tr, "old")].result(), futs[(f, tr, "new")].result()
            counts = collections.Counter()
            for fn in sorted(set(old) | set(new)):
                v = verdict(old.get(fn), new.get(fn))
                counts[v] += 1
                print(f"{f} {'traced' if tr else 'normal'} {v:9} {fn}")
            bad += counts["differs"] + counts["only-old"] + counts["only-new"]
            print(f"== {f} ({'traced' if tr else 'normal'} build) against {args.base}: "
                  + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
