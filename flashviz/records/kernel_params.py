"""A kernel's parameters as C lays them out, read from its ``__global__`` signature in kernels/.

The signature in the .cu file is the one description of a kernel's parameters: the runner packs
its launch arguments with the layout derived here (``flashviz.gpu.tensorcore``: one parameter
block per thread, handed to cuLaunchKernel as pointers to each field), and the PTX check
instantiates the kernels by taking their addresses (``-DFLASHVIZ_PTX_CHECK``), which needs no
copy of the signature either. Nothing keeps offsets by hand.

CUDA passes kernel parameters in a buffer where each one sits at the next multiple of its own
alignment (the PTX ``.param`` space; ``tests/core/test_kernel_params.py`` compares this layout
with the ``.param`` declarations nvcc writes). ``FV_TRACE_PARAMS`` (kernels/fv_trace.cuh: the
timeline build's two extra parameters) is expanded for ``traced=True`` and dropped otherwise.

Standard library only, like the rest of ``flashviz.records``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cache

from .files import kernel_source

#: C type -> (bytes, alignment, struct format); a pointer of any type is 8 bytes ("Q")
SCALARS = {"int": (4, 4, "i"), "unsigned": (4, 4, "I"), "unsigned int": (4, 4, "I"), "float": (4, 4, "f"),
           "long long": (8, 8, "q"), "unsigned long long": (8, 8, "Q"), "double": (8, 8, "d")}
#: structs passed by value (kernels/fv_tma.cuh: ``struct __align__(64) TensorMap { u64 v[16]; }``)
STRUCTS = {"TensorMap": (128, 64, "128s")}
_QUALIFIERS = re.compile(r"\b(const|__restrict__|__grid_constant__|volatile)\b")


@dataclass(frozen=True)
class Param:
    """One parameter: its name, C type (qualifiers removed), bytes, alignment, offset in the
    parameter buffer and struct format character(s)."""

    name: str
    ctype: str
    size: int
    align: int
    offset: int
    fmt: str


@dataclass(frozen=True)
class Layout:
    """The parameters of one kernel, in order, and the size of their buffer (bytes)."""

    kernel: str
    params: tuple[Param, ...]

    @property
    def size(self) -> int:
        last = self.params[-1]
        return last.offset + last.size

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(p.offset for p in self.params)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def struct(self, first: int = 0, stop: int | None = None) -> tuple[int, struct.Struct]:
        """(offset of parameter ``first``, a little-endian ``struct.Struct`` that packs parameters
        ``first`` .. ``stop`` - 1 from there, padding included). IndexError for an empty range."""
        ps = self.params[first:stop]
        if not ps:
            raise IndexError(f"{self.kernel}: no parameters in [{first}, {stop})")
        fmt, at = "<", ps[0].offset
        for p in ps:
            if p.offset > at:
                fmt += f"{p.offset - at}x"
            fmt += p.fmt
            at = p.offset + p.size
        return ps[0].offset, struct.Struct(fmt)


def _signature(text: str, kernel: str) -> str:
    """The text between the parentheses of ``kernel``'s ``__global__`` definition (not a
    declaration: the parameter list must be followed by its body), comments removed."""
    text = re.sub(r"/\*.*?\*/", " ", re.sub(r"//[^\n]*", "", text), flags=re.S)
    head = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
                      + re.escape(kernel) + r"\s*\(")
    for m in head.finditer(text):
        depth, k = 1, m.end()
        while depth:
            if k >= len(text):
                raise LookupError(f"{kernel}: unbalanced parentheses in its signature")
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        if text[k:].lstrip().startswith("{"):
            return text[m.end():k - 1]
    raise LookupError(f"no __global__ void {kernel}(...) {{...}} definition found")


def _trace_params() -> str:
    m = re.search(r"#define FV_TRACE_PARAMS (.*)", kernel_source("fv_trace.cuh"))
    if m is None:
        raise LookupError("kernels/fv_trace.cuh defines no FV_TRACE_PARAMS")
    return m.group(1).strip()


def _param(decl: str, offset: int) -> Param:
    decl = " ".join(_QUALIFIERS.sub(" ", decl).split())
    m = re.fullmatch(r"(.*?)\s*(\**)\s*(\w+)", decl)
    if m is None or not m.group(1):
        raise ValueError(f"cannot read the kernel parameter {decl!r}")
    ctype, stars, name = m.group(1).strip(), m.group(2), m.group(3)
    if stars:
        size, align, fmt = 8, 8, "Q"
        ctype += " " + stars
    elif ctype in SCALARS:
        size, align, fmt = SCALARS[ctype]
    elif ctype.split("::")[-1] in STRUCTS:
        size, align, fmt = STRUCTS[ctype.split("::")[-1]]
    else:
        raise ValueError(f"kernel parameter {name!r}: unknown type {ctype!r} (known: pointers, "
                         f"{', '.join(SCALARS)}, {', '.join(STRUCTS)})")
    offset = -(-offset // align) * align
    return Param(name, ctype, size, align, offset, fmt)


@cache
def layout(file: str, kernel: str, traced: bool = False) -> Layout:
    """The parameter layout of ``kernel`` defined in kernels/``file`` (the timeline build's when
    ``traced``). Raises FileNotFoundError for a missing file, LookupError when the file defines
    no such kernel, ValueError for a parameter type it cannot lay out."""
    sig = _signature(kernel_source(file), kernel)
    sig = sig.replace("FV_TRACE_PARAMS", _trace_params() if traced else "")
    params, offset = [], 0
    for decl in (d.strip() for d in sig.split(",")):
        if not decl:
            continue
        p = _param(decl, offset)
        params.append(p)
        offset = p.offset + p.size
    if not params:
        raise LookupError(f"{file}: {kernel} takes no parameters")
    return Layout(kernel, tuple(params))
