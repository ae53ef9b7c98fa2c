"""Where the package's data files live: the committed records (``benchmarks/results/``, package
``flashviz.results``) and the kernel sources (``kernels/``, package ``flashviz.kernels``).

pyproject.toml maps the packages ``flashviz.kernels`` -> ``kernels/`` and ``flashviz.results`` ->
``benchmarks/results/``, so an installed (or editable) flashviz finds them with
``importlib.resources``. A plain source checkout on ``PYTHONPATH`` has no such packages; then the
folders next to the ``flashviz`` package directory are used. Standard library only: no CuPy, no
GPU.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]
_FALLBACK = {"flashviz.kernels": _REPO_ROOT / "kernels", "flashviz.results": _REPO_ROOT / "benchmarks" / "results"}


def package_dir(package: str):
    """A Traversable for ``package`` ("flashviz.kernels" or "flashviz.results").

    Uses importlib.resources when the package is importable (installed or editable),
    else the repository folder next to the flashviz package. Raises FileNotFoundError if
    neither exists.
    """
    try:
        return importlib.resources.files(package)
    except ModuleNotFoundError:
        path = _FALLBACK[package]
        if not path.is_dir():
            raise FileNotFoundError(f"{package} is not installed and {path} does not exist") from None
        return path


def kernel_source(name: str = "flash_fwd.cu") -> str:
    """The text of ``kernels/<name>`` (e.g. "flash_fwd_mma.cu"), from the installed package
    ``flashviz.kernels`` or, in a source checkout, the repository's ``kernels/`` folder.
    Needs no CuPy. Raises FileNotFoundError if there is no such kernel file."""
    path = package_dir("flashviz.kernels").joinpath(name)
    if not path.is_file():
        raise FileNotFoundError(f"no kernel file {name!r} in {package_dir('flashviz.kernels')}")
    return path.read_text(encoding="utf-8")


_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", re.M)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([\w.-]+)"[^\n]*$', re.M)


def expand_includes(text: str, name: str, _seen: set | None = None) -> str:
    """``text`` (the kernel file ``name``) with every ``#include "x.cuh"`` of a file in kernels/
    replaced by that file's text (recursively, each file once), framed by ``#line`` directives
    so compiler messages still name the right file and line. NVRTC then needs no include path,
    and the pasted headers are part of the compile-cache key. FileNotFoundError for a missing
    header."""
    seen = {name} if _seen is None else _seen
    out, last, line = [], 0, 1
    for m in _INCLUDE.finditer(text):
        header = m.group(1)
        out.append(text[last:m.start()])
        line += text.count("\n", last, m.end())
        if header not in seen:
            seen.add(header)
            body = expand_includes(kernel_source(header), header, seen)
            body = _PRAGMA_ONCE.sub("", body)          # pasted once; the pragma would warn in one text
            out.append(f'#line 1 "{header}"\n{body.rstrip()}\n#line {line + 1} "{name}"')
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def short_sha256(data: bytes) -> str:
    """The first 16 hex digits of the sha256 of ``data``: how records name a kernel source, a file
    or a cubin they timed."""
    return hashlib.sha256(data).hexdigest()[:16]


def compiled_source(name: str) -> str:
    """The text NVRTC compiles for ``kernels/<name>``: the file with its kernels/ headers pasted in
    (``expand_includes``). Read from disk on every call (``flashviz.gpu.common.source`` caches it
    per process). FileNotFoundError if there is no such kernel file or header."""
    return expand_includes(kernel_source(name), name)


def source_sha256(name: str) -> str:
    """The first 16 hex digits of the sha256 of ``compiled_source(name)``: how benchmark records
    name the kernel source they timed (``kernel_sources``), and the "source_sha256" of every cubin
    compiled from that file (``flashviz.gpu.nvrtc.loaded_cubins``). FileNotFoundError if there is
    no such kernel file."""
    return short_sha256(compiled_source(name).encode())


def include_closure(name: str) -> list[str]:
    """The kernels/ files whose text ``compiled_source(name)`` pastes together: ``name`` first, then
    each header it includes (recursively, each once, in pasting order). FileNotFoundError for a
    missing file."""
    out, todo = [], [name]
    while todo:
        f = todo.pop(0)
        if f in out:
            continue
        out.append(f)
        todo.extend(m.group(1) for m in _INCLUDE.finditer(kernel_source(f)))
    return out
