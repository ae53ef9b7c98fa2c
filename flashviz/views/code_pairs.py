"""The tensor-core kernel beside the NumPy algorithm: matching snippets cut from the sources.

Chapter 7 shows each step of the FlashAttention-2 forward twice: in ``kernels/flash_fwd_mma.cu``
(Hopper, wgmma) and in ``flashviz/tiled.py`` (NumPy, the same names). The snippets are not
copied into the lesson: each is found by marker text in the current files, so what the lesson
shows is the code that runs. If a marker disappears (the code changed), ``snippet`` raises a
LookupError naming the marker and the file, and the chapter's test fails.

``STEPS``: the steps in the order of the algorithm (key → Step). ``snippet(text, cut)`` cuts
one; ``step_snippets(key)`` cuts both sides of a step; ``side_by_side(key)`` returns an object
that Jupyter shows as two columns of highlighted code (``.html`` holds the HTML).
"""

from __future__ import annotations

import html
import inspect
from dataclasses import dataclass

KERNEL_FILE = "flash_fwd_mma.cu"
NUMPY_FILE = "flashviz/tiled.py"


@dataclass(frozen=True)
class Cut:
    """Where a snippet is: from the first line containing ``start`` (searched from the first
    line containing ``after``, if given) to the first later line containing ``end`` (the line
    itself when ``inclusive``, else the line before it). ``end=None``: the start line only."""

    start: str
    end: str | None = None
    inclusive: bool = True
    after: str | None = None


@dataclass(frozen=True)
class Snippet:
    """A cut of one file: its text (dedented) and 1-based first and last line numbers."""

    source: str
    text: str
    first: int
    last: int


@dataclass(frozen=True)
class Step:
    """One step of the algorithm: a title, the kernel's cuts and the NumPy code's cuts."""

    key: str
    title: str
    kernel: tuple[Cut, ...]
    numpy: tuple[Cut, ...]


def _find(lines: list[str], marker: str, start: int, source: str) -> int:
    for k in range(start, len(lines)):
        if marker in lines[k]:
            return k
    raise LookupError(f"marker {marker!r} not found in {source} (after line {start + 1}): "
                      f"the code changed; update flashviz/views/code_pairs.py")


def snippet(text: str, cut: Cut, source: str = "source") -> Snippet:
    """Cut ``text`` (a whole file) at ``cut``. Raises LookupError when a marker is missing."""
    lines = text.splitlines()
    k0 = _find(lines, cut.after, 0, source) if cut.after else 0
    a = _find(lines, cut.start, k0, source)
    if cut.end is None:
        b = a
    else:
        b = _find(lines, cut.end, a + 1, source)
        if not cut.inclusive:
            b -= 1
    while b > a and not lines[b].strip():           # no trailing blank lines
        b -= 1
    return Snippet(source, _dedent(lines[a:b + 1]), a + 1, b + 1)


def _dedent(lines: list[str]) -> str:
    """Remove the common indent of the code lines; preprocessor lines (#pragma) stay put."""
    code = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    cut = min((len(ln) - len(ln.lstrip()) for ln in code), default=0)
    return "\n".join(ln[cut:] if ln[:cut].strip() == "" else ln.lstrip() for ln in lines)


def kernel_text() -> str:
    """The current text of kernels/flash_fwd_mma.cu."""
    from ..gpu.common import kernel_source

    return kernel_source(KERNEL_FILE)


def numpy_text() -> str:
    """The current text of flashviz/tiled.py."""
    from .. import tiled

    return inspect.getsource(tiled)


STEPS: dict[str, Step] = {s.key: s for s in (
    Step("load", "Load the tiles: Q_i once, then K_j and V_j, two stages deep",
         kernel=(Cut("// Copy rows [row0, row0 + ROWS)", "}  // namespace fvmma", inclusive=False),
                 Cut("load_tile<Br, D, NT>(sQ, Qp", "// group: V_0"),
                 Cut("for (int j = 0; j < Tc; ++j) {", "cp_async_commit();", after="float o[NO];")),
         numpy=(Cut("for i, r0 in enumerate(range(0, Nq, Br)):", "r1 = min(r0 + Br, Nq)", after="def _forward_fa2"),
                Cut("Q_i = Q[r0:r1]", after="def _forward_fa2"),
                Cut("for j in range(n_j):", "K_j, V_j = K[c0:c1], V[c0:c1]", after="def _forward_fa2"))),
    Step("S", "S_ij = Q_i K_jᵀ on the tensor cores",
         kernel=(Cut("// S_ij = Q_i K_jᵀ on the tensor cores", "wgmma_wait0();"),),
         numpy=(Cut("S_ij = scale * (Q_i @ K_j.T)"),)),
    Step("mask", "Mask: keys past the end, and (causal) keys after the query",
         kernel=(Cut("// Mask: key columns past Nk", "// Online softmax (exp2 domain)", inclusive=False),),
         numpy=(Cut("if causal and kind == \"partial\":", "S_ij = np.where(visible(", after="def _scores"),)),
    Step("softmax", "Online softmax in registers: m_i, the rescale factor, P_ij, l_i, O_i rescaled",
         kernel=(Cut("// Online softmax (exp2 domain)", "// P_ij as the A operand", inclusive=False),),
         numpy=(Cut("m_new = np.maximum(m_i, S_ij.max(axis=1))", "l_new = alpha * l_i + P_ij.sum(axis=1)",
                    after="def _online_update"),)),
    Step("P", "P_ij stays in registers, converted to fp16 / bf16: the A operand of the next product",
         kernel=(Cut("// P_ij as the A operand", "// V_j landed", inclusive=False),),
         numpy=(Cut("P_ij = safe_exp_diff(S_ij, m_new[:, None])", after="def _online_update"),)),
    Step("PV", "O_i = alpha · O_i + P_ij V_j on the tensor cores",
         kernel=(Cut("// V_j landed", "wgmma_wait0();"),),
         numpy=(Cut("O_new = alpha[:, None] * O_i + P_ij @ V_j", after="def _online_update"),)),
    Step("epilogue", "Epilogue: O = O_i / l_i and lse_i = m_i + log l_i, written once",
         kernel=(Cut("// O = O_i / l_i; lse_i", "if (row1 < Nq) L[row1]"),),
         numpy=(Cut("O[r0:r1] = np.where(l_i[:, None] > 0", "lse_i = _finish_row_stats(m_i, l_i)",
                    after="def _forward_fa2"),
                Cut("def _finish_row_stats(m, l):", "return np.where(l > 0, m + np.log("))),
)}


def step_snippets(key: str) -> tuple[list[Snippet], list[Snippet]]:
    """(kernel snippets, NumPy snippets) of the step ``key`` (one of STEPS), cut from the
    current files. Raises KeyError for an unknown step, LookupError for a missing marker."""
    if key not in STEPS:
        raise KeyError(f"step must be one of {', '.join(STEPS)}; got {key!r}")
    step = STEPS[key]
    k, n = kernel_text(), numpy_text()
    return ([snippet(k, c, "kernels/" + KERNEL_FILE) for c in step.kernel],
            [snippet(n, c, NUMPY_FILE) for c in step.numpy])


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


def _column(snips: list[Snippet], language: str, grow: int = 1) -> str:
    where = ", ".join(f"{s.first}–{s.last}" if s.last > s.first else f"{s.first}" for s in snips)
    plural = "s" if len(snips) > 1 or snips[0].last > snips[0].first else ""
    head = (f"<div style='font:600 12px sans-serif;margin:2px 0 4px'>{html.escape(snips[0].source)} "
            f"<span style='font-weight:normal;color:#666'>· line{plural} {where}</span></div>")
    gap = "<div style='color:#999;font:12px monospace;padding:0 8px'>⋮</div>"
    body = gap.join(_highlight(s.text, language) for s in snips)
    return (f"<div style='flex:{grow} 1 0;min-width:0'>{head}"
            f"<div style='overflow-x:auto;border:1px solid #ddd;border-radius:4px'>{body}</div></div>")


class SideBySide:
    """One step as two columns (kernel left, NumPy right); Jupyter shows ``html``."""

    def __init__(self, key: str):
        self.key = key
        self.kernel, self.numpy = step_snippets(key)
        title = html.escape(STEPS[key].title)
        self.html = (f"<div style='margin:4px 0 10px'><div style='font:600 13px sans-serif;margin-bottom:4px'>"
                     f"{title}</div><div style='display:flex;gap:10px;align-items:flex-start'>"
                     f"{_column(self.kernel, 'cuda', 3)}{_column(self.numpy, 'python', 2)}</div></div>")  # CUDA lines are longer

    def _repr_html_(self):
        return self.html

    def __repr__(self):
        parts = [f"{STEPS[self.key].title}"]
        for s in self.kernel + self.numpy:
            parts.append(f"--- {s.source}, lines {s.first}-{s.last}\n{s.text}")
        return "\n".join(parts)


def side_by_side(key: str) -> SideBySide:
    """The step ``key`` of STEPS as two columns of code: the kernel's lines beside NumPy's."""
    return SideBySide(key)
