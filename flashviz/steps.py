"""One vocabulary of steps: the names the trace, the replays, the NumPy code and the kernels share.

Every step of the tiled algorithms has one name here. The Trace's event kinds are these names
(``flashviz.trace.EVENT_KINDS`` is derived from ``STEPS``); the replays key their sentences by
them; and the code that implements a step opens each of its blocks with a *tag*, a comment line
that names the step and cites the algorithm line(s) it implements::

    // [compute_S] Alg. 1 line 8: S_ij = Q_i K_jᵀ ...        (kernels/*.cu)
    # [compute_S] Alg. 1 line 8: S_ij = scale · Q_i K_jᵀ     (flashviz/tiled.py, flashviz/backward.py)

"Alg. 1" and "Alg. 2" are FlashAttention-2 (Dao 2023), Algorithm 1 (forward) and Algorithm 2
(backward); "FA1 Alg. 1" is FlashAttention (Dao et al. 2022), Algorithm 1, cited where the FA1
loop order (key blocks outer, O, l, m in HBM) differs; "Flash-Decoding" is the split-KV decode
(Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context inference"), whose three numbered
steps (1 split the keys, 2 attend to each split with FlashAttention and write its lse, 3 reduce the
splits rescaled by their lse) are cited as "Flash-Decoding step 3" (``flashviz.decode``). A few
sub-steps exist only in code (``traced=False``): they have names so that their code can be tagged,
and ``parent`` names the step whose trace event covers them.

Chapter 7 cuts its kernel / NumPy code pairs between these tags
(``flashviz.views.code_pairs``), so the lesson shows the blocks that carry the step's name.

This module is part of the algorithm layer: it imports nothing from flashviz.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType

#: Where the algorithm lines come from (the key used in ``Step.lines`` and in a tag's citation).
PAPERS = {
    "Alg. 1": "FlashAttention-2 (Dao 2023), Algorithm 1: forward pass, query blocks outer",
    "Alg. 2": "FlashAttention-2 (Dao 2023), Algorithm 2: backward pass, key blocks outer",
    "FA1 Alg. 1": "FlashAttention (Dao et al. 2022), Algorithm 1: forward pass, key blocks outer",
    "Flash-Decoding": "Flash-Decoding (Dao, Haziza, Massa, Sizov 2023, blog post): split-KV decode in three "
                      "steps: 1 split K, V; 2 attend to each split, write its lse; 3 merge rescaled by the lse",
}
#: papers whose numbered units are steps, not algorithm lines ("Flash-Decoding step 3")
STEP_NUMBERED = frozenset({"Flash-Decoding"})


@dataclass(frozen=True)
class Step:
    """One step of the tiled algorithms.

    name: the one name (a Trace event kind when ``traced``; the tag ``[name]`` in the code);
    title: a short heading; formula: what the step computes or moves, in the paper's symbols;
    lines: the algorithm lines it implements, ``{"Alg. 1": (8,), "FA1 Alg. 1": (9,)}`` (keys of
    PAPERS); traced: whether the Trace emits events of this kind; parent: for a sub-step that
    exists only in code, the step whose event covers it (None otherwise); in_numpy: whether the
    NumPy code has a block for it (False: only the tensor-core kernels do it).
    """

    name: str
    title: str
    formula: str
    lines: dict
    traced: bool = True
    parent: str | None = None
    in_numpy: bool = True

    def __post_init__(self):
        object.__setattr__(self, "lines", MappingProxyType({k: tuple(v) for k, v in self.lines.items()}))

    def __hash__(self):
        return hash(self.name)

    @property
    def forward(self) -> bool:
        """True when the forward pass (Algorithm 1, FA2 or FA1 order) has this step."""
        return "Alg. 1" in self.lines or "FA1 Alg. 1" in self.lines

    @property
    def backward(self) -> bool:
        """True when the backward pass (FA2 Algorithm 2) has this step."""
        return "Alg. 2" in self.lines

    @property
    def decode(self) -> bool:
        """True when the split-KV decode (``flashviz.decode``, Flash-Decoding) has this step of its own."""
        return "Flash-Decoding" in self.lines

    def cite(self, paper: str = "Alg. 1") -> str:
        """The citation a tag of this step carries, e.g. "Alg. 1 line 8", "Alg. 1 lines 12-15" or
        "Flash-Decoding step 3".

        Raises KeyError when the step has no lines in ``paper``."""
        if paper not in self.lines:
            raise KeyError(f"step {self.name!r} cites no line of {paper!r}; it cites {', '.join(self.lines)}")
        return f"{paper} {_lines_text(self.lines[paper], 'step' if paper in STEP_NUMBERED else 'line')}"


def _lines_text(lines, unit: str = "line") -> str:
    lines = tuple(lines)
    if len(lines) == 1:
        return f"{unit} {lines[0]}"
    if lines == tuple(range(lines[0], lines[-1] + 1)):
        return f"{unit}s {lines[0]}-{lines[-1]}"
    return f"{unit}s " + ", ".join(str(n) for n in lines)


STEPS: tuple[Step, ...] = (
    # --- forward (FA2 Algorithm 1; FA1 Algorithm 1 where its order differs) ---------------------
    Step("init", "Initialise O, l, m",
         "O_i = 0, l_i = 0, m_i = −inf: on chip for each query block (FA2), or once for all rows in "
         "HBM (FA1; the only order whose trace has this event, since on-chip state costs no bytes)",
         {"Alg. 1": (5,), "FA1 Alg. 1": (2,)}),
    Step("load_Q", "Load Q_i",
         "Q_i from HBM to SRAM, once per query block (FA1: Q_i, O_i, l_i, m_i, for every (j, i))",
         {"Alg. 1": (4,), "FA1 Alg. 1": (8,)}),
    Step("load_KV", "Load K_j, V_j",
         "K_j, V_j from HBM to SRAM: once per (i, j) in FA2's forward, once per j in FA1 and the backward",
         {"Alg. 1": (7,), "Alg. 2": (6,), "FA1 Alg. 1": (6,)}),
    Step("load_K", "Load K_j",
         "K_j alone, in the tensor-core kernels' pipeline: its copy is issued a step ahead and waited "
         "for just before S_ij (a GPU timeline names its issue and landing)",
         {"Alg. 1": (7,)}, traced=False, parent="load_KV", in_numpy=False),
    Step("load_V", "Load V_j",
         "V_j alone, in the tensor-core kernels' pipeline: issued a step ahead, waited for just before "
         "P_ij V_j",
         {"Alg. 1": (7,)}, traced=False, parent="load_KV", in_numpy=False),
    Step("compute_S", "S_ij = Q_i K_jᵀ",
         "S_ij = scale · Q_i K_jᵀ on chip, never written to HBM",
         {"Alg. 1": (8,), "FA1 Alg. 1": (9,)}),
    Step("mask_S", "Mask S_ij",
         "S_ij = −inf where key c is past Nk or (causal) c > r + Nk − Nq; only tiles the boundary crosses",
         {"Alg. 1": (8,), "FA1 Alg. 1": (9,)}, traced=False, parent="compute_S"),
    Step("update_ml", "Online softmax: m_i, P_ij, l_i",
         "m_new = max(m_i, rowmax S_ij); P̃_ij = exp(S_ij − m_new); alpha = exp(m_i − m_new); "
         "l_i = alpha · l_i + rowsum P̃_ij",
         {"Alg. 1": (9,), "FA1 Alg. 1": (10, 11)}),
    Step("convert_P", "P_ij to 16 bits, in registers",
         "P̃_ij rounded to fp16 / bf16 in the registers that hold it: the A operand of P̃_ij V_j on the "
         "tensor cores (the NumPy code and the fp32 teaching kernel keep P̃_ij in full precision)",
         {"Alg. 1": (10,)}, traced=False, parent="accumulate_O", in_numpy=False),
    Step("accumulate_O", "O_i = alpha · O_i + P_ij V_j",
         "O_i = diag(alpha) O_i + P̃_ij V_j (unnormalised; FA1 normalises and writes it back every step)",
         {"Alg. 1": (10,), "FA1 Alg. 1": (12,)}),
    Step("write_O", "Write O_i and lse_i",
         "O_i = diag(l_i)⁻¹ O_i; L_i = m_i + log l_i; write O_i, L_i to HBM once (FA1: O_i, l_i, m_i "
         "back to HBM after every step)",
         {"Alg. 1": (12, 13, 14, 15), "FA1 Alg. 1": (12, 13)}),
    # --- backward (FA2 Algorithm 2: key blocks j outer, query blocks i inner) --------------------
    Step("compute_D", "D = rowsum(dO ∘ O)",
         "preprocessing: dQ = 0 in HBM; D = rowsum(dO ∘ O) written to HBM",
         {"Alg. 2": (3, 4)}),
    Step("init_dKdV", "dK_j = dV_j = 0",
         "dK_j = 0, dV_j = 0 on chip, once per key block (no bytes: covered by load_KV's event)",
         {"Alg. 2": (7,)}, traced=False, parent="load_KV"),
    Step("load_Qi", "Load Q_i, dO_i, L_i, D_i",
         "Q_i, dO_i, L_i (lse), D_i from HBM to SRAM for each (j, i) (dQ_i: see update_dQ)",
         {"Alg. 2": (9,)}),
    Step("recompute_P", "Recompute S_ij, P_ij",
         "S_ij = scale · Q_i K_jᵀ; P_ij = exp(S_ij − L_i): the recomputation instead of storing P",
         {"Alg. 2": (10, 11)}),
    Step("accumulate_dV", "dV_j += P_ijᵀ dO_i",
         "dV_j ← dV_j + P_ijᵀ dO_i on chip",
         {"Alg. 2": (12,)}),
    Step("compute_dS", "dP_ij, dS_ij",
         "dP_ij = dO_i V_jᵀ; dS_ij = P_ij ∘ (dP_ij − D_i)",
         {"Alg. 2": (13, 14)}),
    Step("accumulate_dK", "dK_j += dS_ijᵀ Q_i",
         "dK_j ← dK_j + scale · dS_ijᵀ Q_i on chip",
         {"Alg. 2": (16,)}),
    Step("update_dQ", "dQ_i += dS_ij K_j in HBM",
         "read dQ_i, dQ_i ← dQ_i + scale · dS_ij K_j, write it back (FA2's atomic add)",
         {"Alg. 2": (15,)}),
    Step("write_dKdV", "Write dK_j, dV_j",
         "dK_j, dV_j to HBM, once per key block",
         {"Alg. 2": (18,)}),
    # --- split-KV decode (Flash-Decoding; inside a split: the forward's steps above) -------------
    Step("write_partial", "Write the split's O_s and lse_s",
         "O_s = diag(l_s)⁻¹ O_s; lse_s = m_s + log l_s over the split's keys only; both to HBM for the "
         "merge (an empty split writes O_s = 0, lse_s = −inf)",
         {"Flash-Decoding": (2,)}),
    Step("merge", "Merge split s into O",
         "read O_s, lse_s; m_new = max(m, lse_s); alpha = exp(m − m_new); beta = exp(lse_s − m_new); "
         "l = alpha · l + beta; O = alpha · O + beta · O_s (the online-softmax rescale, one split at a time)",
         {"Flash-Decoding": (3,)}),
)

#: name → Step
BY_NAME: dict[str, Step] = {s.name: s for s in STEPS}
#: every name, in algorithm order
NAMES: tuple[str, ...] = tuple(BY_NAME)
#: the Trace's event kinds: the traced steps, in the order above
EVENT_KINDS: tuple[str, ...] = tuple(s.name for s in STEPS if s.traced)


def step(name: str) -> Step:
    """The Step called ``name``. Raises KeyError listing the valid names for an unknown one."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise KeyError(f"no step {name!r}; the steps are {', '.join(NAMES)}") from None


# --- tags in the code -----------------------------------------------------------------------------

#: a tag line: indent, comment mark (// or #), [name], the rest (citation and explanation)
TAG_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<mark>//|#)[ \t]*"
                    r"\[(?P<name>[A-Za-z_][A-Za-z0-9_]*)\][ \t]*(?P<rest>.*)$")
#: the citation at the start of a tag's text: "Alg. 1 line 8", "Alg. 2 lines 10-11", "FA1 Alg. 1 line 2"
CITE_RE = re.compile(r"^(?P<paper>(?:FA1 )?Alg\. [12]|Flash-Decoding) (?:lines?|steps?) "
                     r"(?P<lines>\d+(?:\s*[-–]\s*\d+)?(?:\s*,\s*\d+(?:\s*[-–]\s*\d+)?)*)")


@dataclass(frozen=True)
class Tag:
    """One tag line of a source text: ``index`` (0-based line), ``indent`` (columns), ``mark``
    ("//" or "#"), ``name``, ``paper`` and ``lines`` (the citation; "" and () when the tag cites
    none) and ``text`` (everything after the ``[name]``)."""

    index: int
    indent: int
    mark: str
    name: str
    paper: str
    lines: tuple
    text: str


def parse_cite(text: str) -> tuple[str, tuple[int, ...]]:
    """("Alg. 1", (12, 13, 14, 15)) for a text starting "Alg. 1 lines 12-15: …" (("Flash-Decoding",
    (3,)) for "Flash-Decoding step 3: …"); ("", ()) when the text starts with no citation."""
    m = CITE_RE.match(text.strip())
    if not m:
        return "", ()
    lines: list[int] = []
    for part in m["lines"].split(","):
        a, _, b = part.replace("–", "-").partition("-")
        lines.extend(range(int(a), int(b or a) + 1))
    return m["paper"], tuple(lines)


def find_tags(text: str) -> list[Tag]:
    """Every tag line of ``text`` (a whole source file), in order."""
    tags = []
    for k, line in enumerate(text.splitlines()):
        m = TAG_RE.match(line)
        if m:
            paper, lines = parse_cite(m["rest"])
            tags.append(Tag(k, len(m["indent"].expandtabs(4)), m["mark"], m["name"], paper, lines, m["rest"]))
    return tags
