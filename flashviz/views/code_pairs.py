"""The tensor-core kernel beside the NumPy algorithm: matching snippets cut between step tags.

Chapter 7 shows each step of the FlashAttention-2 forward in ``kernels/flash_fwd_mma.cu`` (Hopper,
wgmma) — the kernel's own block and the code it calls in ``kernels/fv_attn.cuh``, the Hopper tile
vocabulary, under the same tag — beside ``flashviz/tiled.py`` (NumPy, the same names). The snippets are not
copied into the lesson, and not found by matching code text: every block of code that implements
a step opens with a *tag*, a comment line such as ``// [compute_S] Alg. 1 line 8: …`` (CUDA) or
``# [compute_S] Alg. 1 line 8: …`` (Python), whose name is one of ``flashviz.steps.NAMES``. A
block runs from its tag line to the line before the next tag, or to the end of the enclosing
block (the first line indented less than the tag; in CUDA also a preprocessor line other than
``#pragma``), whichever comes first; trailing blank lines are dropped. So what the lesson shows is
the code that runs, under the name the trace and the replays use. If a step's tag disappears
from a file, ``step_snippets`` raises a LookupError naming the tag and the file, and the
chapter's test fails.

The backward has its pairs too (``pair="backward"``): the tensor-core backward
``kernels/flash_bwd_mma.cu`` beside ``flashviz/backward.py``, FlashAttention-2's Algorithm 2 in both.

``tag_blocks(text, name)`` cuts the blocks of one step from a text; ``step_snippets(*names)``
cuts the kernel, its header and the NumPy file for one or several steps; ``side_by_side(*names)``
returns an object that Jupyter shows as two columns of highlighted code (``.html`` holds the HTML).
"""

from __future__ import annotations

import html
import inspect
import re
from dataclasses import dataclass

from .. import steps as _steps

KERNEL_FILE = "flash_fwd_mma.cu"
#: the Hopper kernels' tile vocabulary: the kernel calls its steps, this header holds their code
HEADER_FILE = "fv_attn.cuh"


@dataclass(frozen=True)
class Pair:
    """Which files a code pair cuts: the kernel (kernels/<kernel>), the headers whose tagged blocks
    follow it (kernels/<header>, in order), the NumPy module (flashviz.<module>) and the algorithm
    whose lines the titles cite."""

    kernel: str
    headers: tuple[str, ...]
    module: str
    algorithm: str

    @property
    def numpy_file(self) -> str:
        return "flashviz/" + self.module.replace(".", "/") + ".py"


#: the forward (FlashAttention-2 Algorithm 1, chapter 7) and the backward (Algorithm 2, chapter 6):
#: the tensor-core kernel beside the NumPy code that carries the same step tags
PAIRS: dict[str, Pair] = {
    "forward": Pair(KERNEL_FILE, (HEADER_FILE,), "tiled", "Alg. 1"),
    "backward": Pair("flash_bwd_mma.cu", (), "backward", "Alg. 2"),
}


@dataclass(frozen=True)
class Snippet:
    """A cut of one file: its text (dedented), 1-based first and last line numbers, and the step
    whose tag opens it."""

    source: str
    text: str
    first: int
    last: int
    step: str = ""


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


def _block_end(lines: list[str], tag: _steps.Tag, tag_lines: set[int]) -> int:
    """0-based index of the last line of the block that ``tag`` opens (see the module doc)."""
    end = tag.index
    for k in range(tag.index + 1, len(lines)):
        if k in tag_lines:
            break
        stripped = lines[k].strip()
        if not stripped:
            continue
        if tag.mark == "//" and stripped.startswith("#"):
            if stripped.startswith("#pragma"):     # written at column 0 inside a block: part of it
                end = k
                continue
            break                                  # #else, #endif, …: the block is over
        if _indent(lines[k]) < tag.indent:
            break
        end = k
    return end


def tag_blocks(text: str, name: str | None = None, source: str = "source") -> list[Snippet]:
    """The blocks of ``text`` (a whole file) opened by a tag ``[name]`` (every tag's block when
    ``name`` is None), in file order. Raises LookupError naming the tag and ``source`` when
    ``name`` has no tag in the text."""
    lines = text.splitlines()
    tags = _steps.find_tags(text)
    tag_lines = {t.index for t in tags}
    out = []
    for t in tags:
        if name is None or t.name == name:
            b = _block_end(lines, t, tag_lines)
            out.append(Snippet(source, _dedent(without_timeline_hooks(lines[t.index:b + 1])), t.index + 1, b + 1,
                               t.name))
    if name is not None and not out:
        raise LookupError(f"tag [{name}] not found in {source}: the code changed; tag the block that "
                          f"implements {name!r} (see flashviz/steps.py)")
    return out


_HOOK = re.compile(r"^\s*(if \(.*\)\s*)?FV_[A-Z0-9_]+\(.*\);")
#: a scoped step hook, the prefix of the statement it times: ``FV_SCOPE(j, stage, t0, t1) stmt`` and
#: its kin (kernels/fv_trace.cuh); group 1 the indent, group 2 the macro's name
_SCOPE = re.compile(r"^(\s*)(FV_(?:SCOPE|SCOPE_STAMP|SCOPE_FROM|SPAN|UNTIL))\(")


def _scope_end(line: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at ``line[start]``."""
    depth = 0
    for k in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[k], 0)
        if depth == 0:
            return k + 1
    raise ValueError(f"unbalanced parentheses in a timeline hook: {line.strip()!r}")


def _without_scopes(lines: list[str]) -> list[str]:
    """``lines`` with each scoped step hook taken off the statement it times: ``FV_SCOPE(...) stmt;``
    becomes ``stmt;``; ``FV_SCOPE(...) {`` goes with its closing ``}`` (the first later line at the
    hook's indent that starts with ``}``), and the block's lines come back to the hook's indent."""
    out = list(lines)
    k = 0
    while k < len(out):
        m = _SCOPE.match(out[k])
        if not m:
            k += 1
            continue
        indent = m.group(1)
        rest = out[k][_scope_end(out[k], m.end() - 1):].strip()
        if not rest.startswith("{"):                   # one statement: the hook's prefix goes, and
            code, sep, note = rest.partition("//")     # a comment after it stays in its column
            col = out[k].find("//", out[k].index(code.strip()))
            out[k] = (indent + code.rstrip()).ljust(col - 1) + " " + sep + note if sep else indent + rest
            k += 1
            continue
        close = next((c for c in range(k + 1, len(out))
                      if _indent(out[c]) == _indent(out[k]) and out[c].strip().startswith("}")), len(out))
        inner = [ln for ln in out[k + 1:close] if ln.strip() and not ln.lstrip().startswith("#")]
        cut = min((_indent(ln) for ln in inner), default=len(indent)) - len(indent)
        body = [ln[cut:] if ln[:cut].strip() == "" else ln for ln in out[k + 1:close]]
        out[k:close + 1] = body                        # the hook's line, the block, its closing brace
    return out


def without_timeline_hooks(lines: list[str]) -> list[str]:
    """``lines`` without the GPU timeline's hooks (``FV_NOW32(t);``, ``if (j == 0) FV_EVENT32(...);``,
    ``FV_WRITER_BLOCK({ ... })``: kernels/fv_trace.cuh, compiled out of every normal build) and the
    comment lines right above them, so a code pair shows the algorithm; a scoped step hook
    (``FV_SCOPE(j, stage, t0, t1) stmt;`` or ``FV_SCOPE(...) { ... }``, and FV_SPAN, FV_UNTIL, ...)
    leaves the statement or the block's lines it times, at the hook's indent. The line numbers
    shown stay the file's."""
    lines = _without_scopes(lines)
    keep = [not _HOOK.match(ln) for ln in lines]
    depth = 0                                          # FV_WRITER_BLOCK({ ... }): the writer's stores,
    for k, ln in enumerate(lines):                     # one line or many, to its closing parenthesis
        if depth == 0 and not ln.lstrip().startswith("FV_WRITER_BLOCK("):
            continue
        keep[k] = False
        code = ln.split("//", 1)[0]
        depth += code.count("(") - code.count(")")
    for k in range(len(lines) - 2, -1, -1):            # a comment that only introduces hooks goes too
        c = lines[k].lstrip()
        if c.startswith("//") and not c.startswith("// [") and not keep[k + 1] and _HOOK.match(lines[k + 1]):
            keep[k] = False                            # (a step's tag always stays)
    out = [ln for ln, ok in zip(lines, keep) if ok]
    while out and not out[-1].strip():
        out.pop()
    return out


def _dedent(lines: list[str]) -> str:
    """Remove the common indent of the code lines; preprocessor lines (#pragma) stay put."""
    code = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    cut = min((len(ln) - len(ln.lstrip()) for ln in code), default=0)
    return "\n".join(ln[cut:] if ln[:cut].strip() == "" else ln.lstrip() for ln in lines)


def kernel_text(name: str = KERNEL_FILE) -> str:
    """The current text of kernels/<name> (default: kernels/flash_fwd_mma.cu)."""
    from ..records.files import kernel_source

    return kernel_source(name)


def numpy_text(module: str = "tiled") -> str:
    """The current text of flashviz/<module>.py (default: flashviz/tiled.py)."""
    import importlib

    return inspect.getsource(importlib.import_module(f"flashviz.{module}"))


def _pair(pair: str) -> Pair:
    if pair not in PAIRS:
        raise ValueError(f"pair must be one of {', '.join(map(repr, PAIRS))}, got {pair!r}")
    return PAIRS[pair]


def _check_names(names) -> tuple[str, ...]:
    if not names:
        raise KeyError(f"name at least one step: {', '.join(_steps.NAMES)}")
    for n in names:
        _steps.step(n)                             # KeyError listing the valid names
    return tuple(dict.fromkeys(names))


def _cut(text: str, names, source: str) -> list[Snippet]:
    return sorted((s for n in names for s in tag_blocks(text, n, source)), key=lambda s: s.first)


def step_snippets(*names: str, pair: str = "forward") -> tuple[list[Snippet], list[Snippet]]:
    """(kernel snippets, NumPy snippets) of the steps ``names`` (flashviz.steps names), cut from
    the current files of ``pair`` (a key of ``PAIRS``). The kernel side holds the kernel's own
    blocks (forward: kernels/flash_fwd_mma.cu; backward: kernels/flash_bwd_mma.cu) and then the
    blocks of the headers it calls (forward: the tile vocabulary kernels/fv_attn.cuh) tagged with
    the same steps, each file in line order. A step that only the tensor-core kernels have
    (``in_numpy=False``, e.g. convert_P) has no NumPy snippets. Raises KeyError for an unknown
    name (listing the valid ones), ValueError for an unknown pair, LookupError when a step's tag
    is missing from the kernel or the NumPy file (a header need not tag every step)."""
    names = _check_names(names)
    p = _pair(pair)
    kernel = _cut(kernel_text(p.kernel), names, "kernels/" + p.kernel)
    for h in p.headers:
        kernel += [s for s in tag_blocks(kernel_text(h), None, "kernels/" + h) if s.step in names]
    in_numpy = [n for n in names if _steps.step(n).in_numpy]
    return kernel, (_cut(numpy_text(p.module), in_numpy, p.numpy_file) if in_numpy else [])


def _highlight(code: str, language: str) -> str:
    pre = ("margin:0;padding:6px 8px;font-size:11.5px;line-height:1.35;white-space:pre;background:#f7f7f7;"
           "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace")
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import CudaLexer, PythonLexer
    except ImportError:  # pygments comes with IPython; plain text without it
        return f"<pre style='{pre}'>{html.escape(code)}</pre>"
    lexer = CudaLexer() if language == "cuda" else PythonLexer()
    return highlight(code, lexer, HtmlFormatter(noclasses=True, nobackground=True, prestyles=pre))


def _column(snips: list[Snippet], language: str, grow: int = 1, source: str = "", empty: str = "") -> str:
    if not snips:
        head = f"<div style='font:600 12px sans-serif;margin:2px 0 4px'>{html.escape(source)}</div>"
        body = f"<div style='padding:6px 8px;font:12px sans-serif;color:#666'>{html.escape(empty)}</div>"
        return (f"<div style='flex:{grow} 1 0;min-width:0'>{head}"
                f"<div style='border:1px solid #ddd;border-radius:4px'>{body}</div></div>")
    parts = []
    for src in dict.fromkeys(s.source for s in snips):          # one box a file, in the given order
        mine = [s for s in snips if s.source == src]
        where = ", ".join(f"{s.first}–{s.last}" if s.last > s.first else f"{s.first}" for s in mine)
        plural = "s" if len(mine) > 1 or mine[0].last > mine[0].first else ""
        head = (f"<div style='font:600 12px sans-serif;margin:2px 0 4px'>{html.escape(src)} "
                f"<span style='font-weight:normal;color:#666'>· line{plural} {where}</span></div>")
        gap = "<div style='color:#999;font:12px monospace;padding:0 8px'>⋮</div>"
        body = gap.join(_highlight(s.text, language) for s in mine)
        parts.append(f"{head}<div style='overflow-x:auto;border:1px solid #ddd;border-radius:4px;"
                     f"margin-bottom:6px'>{body}</div>")
    return f"<div style='flex:{grow} 1 0;min-width:0'>{''.join(parts)}</div>"


def title(*names: str, pair: str = "forward") -> str:
    """The heading of a pair: each step's title and its line(s) in the pair's algorithm (forward:
    Algorithm 1, backward: Algorithm 2), e.g. "S_ij = Q_i K_jᵀ (compute_S, Alg. 1 line 8)"."""
    alg = _pair(pair).algorithm
    parts = []
    for n in _check_names(names):
        s = _steps.step(n)
        cite = s.cite(alg) if alg in s.lines else s.cite(next(iter(s.lines)))
        parts.append(f"{s.title} ({n}, {cite})")
    return " · ".join(parts)


class SideBySide:
    """One or several steps as two columns (kernel left, NumPy right); Jupyter shows ``html``."""

    def __init__(self, *names: str, pair: str = "forward"):
        self.names = _check_names(names)
        self.kernel, self.numpy = step_snippets(*self.names, pair=pair)
        self.title = title(*self.names, pair=pair)
        only = ", ".join(n for n in self.names if not _steps.step(n).in_numpy)
        numpy_col = _column(self.numpy, "python", 2, _pair(pair).numpy_file,
                            f"No NumPy block: {only} exists only in the tensor-core kernels.")
        self.html = (f"<div style='margin:4px 0 10px'><div style='font:600 13px sans-serif;margin-bottom:4px'>"
                     f"{html.escape(self.title)}</div><div style='display:flex;gap:10px;align-items:flex-start'>"
                     f"{_column(self.kernel, 'cuda', 3)}{numpy_col}</div></div>")  # CUDA lines are longer

    def _repr_html_(self):
        return self.html

    def __repr__(self):
        parts = [self.title]
        for s in self.kernel + self.numpy:
            parts.append(f"--- {s.source}, lines {s.first}-{s.last} [{s.step}]\n{s.text}")
        return "\n".join(parts)


def side_by_side(*names: str, pair: str = "forward") -> SideBySide:
    """The steps ``names`` (flashviz.steps names, e.g. "compute_S", or "load_Q", "load_KV"
    together) as two columns of code: the kernel's tagged blocks beside NumPy's. ``pair``:
    "forward" (kernels/flash_fwd_mma.cu and fv_attn.cuh beside flashviz/tiled.py) or "backward"
    (kernels/flash_bwd_mma.cu beside flashviz/backward.py)."""
    return SideBySide(*names, pair=pair)
