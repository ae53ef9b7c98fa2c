"""One vocabulary of steps (flashviz.steps): the trace's event kinds, the replays' sentences, the
NumPy code's and the kernels' tags (``// [compute_S] Alg. 1 line 8: …``) all use its names; each tag
cites lines the vocabulary gives that step; every forward kernel tags the six traced forward steps
in the algorithm's order; and chapter 7's code pairs are cut between tags (checked here on small
synthetic texts: tag → next tag, end of the enclosing block, a missing tag)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import flashviz as fv
from flashviz import steps, trace
from flashviz.backward import flash_backward
from flashviz.steps import BY_NAME, EVENT_KINDS, NAMES, STEPS, find_tags, parse_cite, step
from flashviz.views.code_pairs import tag_blocks

ROOT = Path(__file__).resolve().parents[2]
KERNELS = sorted((ROOT / "kernels").glob("*.cu"))
FORWARD_KERNELS = ["flash_fwd.cu", "flash_fwd_mma.cu", "flash_fwd_mma_sm80.cu"]
# kernels cite the forward (Alg. 1), the backward kernels (flash_bwd*.cu) Algorithm 2
# (the decode kernel also cites Flash-Decoding's steps, as flashviz/decode.py does)
TAGGED = {p: "Alg. 2" if p.name.startswith("flash_bwd") else ("Alg. 1", "Flash-Decoding") if p.name == "flash_decode.cu"
          else "Alg. 1" for p in KERNELS} | {ROOT / "kernels" / "fv_attn.cuh": "Alg. 1",
                                             ROOT / "flashviz" / "tiled.py": "Alg. 1",
                                             ROOT / "flashviz" / "backward.py": "Alg. 2",
                                             ROOT / "flashviz" / "decode.py": ("Alg. 1", "Flash-Decoding")}
MAIN_FORWARD = ["load_Q", "load_KV", "compute_S", "update_ml", "accumulate_O", "write_O"]
LAST_LINE = {"Alg. 1": 17, "Alg. 2": 20, "FA1 Alg. 1": 16, "Flash-Decoding": 3}     # the algorithms' lengths


# --- the vocabulary itself -------------------------------------------------------------------------

def test_event_kinds_are_the_traced_steps_unchanged():
    assert EVENT_KINDS == ("init", "load_Q", "load_KV", "compute_S", "update_ml", "accumulate_O", "write_O",
                           "compute_D", "load_Qi", "recompute_P", "accumulate_dV", "compute_dS", "accumulate_dK",
                           "update_dQ", "write_dKdV", "write_partial", "merge")
    assert trace.EVENT_KINDS is steps.EVENT_KINDS
    assert EVENT_KINDS == tuple(s.name for s in STEPS if s.traced)


def test_each_step_is_named_once_and_cites_real_lines():
    assert len(NAMES) == len(set(NAMES)) == len(STEPS) and list(BY_NAME) == list(NAMES)
    for s in STEPS:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s.name) and s.title and s.formula
        assert s.lines and set(s.lines) <= set(LAST_LINE), s.name
        for paper, lines in s.lines.items():
            assert lines and all(1 <= n <= LAST_LINE[paper] for n in lines), (s.name, paper, lines)
            assert parse_cite(s.cite(paper) + ": x") == (paper, lines)          # the citation reads back
        assert s.forward or s.backward or s.decode
        if s.traced:
            assert s.parent is None
        else:                                       # a code-only sub-step belongs to a traced step
            assert step(s.parent).traced and set(s.lines) <= set(step(s.parent).lines), s.name
    with pytest.raises(TypeError):
        STEPS[0].lines["Alg. 1"] = (99,)            # frozen, lines included


def test_the_papers_lines():
    """FlashAttention-2 (Dao 2023) Algorithm 1 and 2, and FA1 (Dao et al. 2022) Algorithm 1 where its order differs."""
    alg1 = {n: step(n).lines.get("Alg. 1") for n in ("init", "load_Q", "load_KV", "compute_S", "update_ml",
                                                     "accumulate_O", "write_O")}
    assert alg1 == {"init": (5,), "load_Q": (4,), "load_KV": (7,), "compute_S": (8,), "update_ml": (9,),
                    "accumulate_O": (10,), "write_O": (12, 13, 14, 15)}
    alg2 = {s.name: s.lines["Alg. 2"] for s in STEPS if s.backward}
    assert alg2 == {"load_KV": (6,), "compute_D": (3, 4), "init_dKdV": (7,), "load_Qi": (9,),
                    "recompute_P": (10, 11), "accumulate_dV": (12,), "compute_dS": (13, 14),
                    "accumulate_dK": (16,), "update_dQ": (15,), "write_dKdV": (18,)}
    assert step("init").lines["FA1 Alg. 1"] == (2,) and step("load_Q").lines["FA1 Alg. 1"] == (8,)
    assert step("write_O").cite() == "Alg. 1 lines 12-15" and step("compute_S").cite() == "Alg. 1 line 8"
    assert step("convert_P").parent == "accumulate_O" and not step("convert_P").in_numpy
    assert step("mask_S").parent == "compute_S" and step("mask_S").in_numpy


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(KeyError, match="no step 'S'; the steps are init, load_Q, load_KV, load_K, load_V, compute_S"):
        step("S")
    with pytest.raises(KeyError, match="cites no line of 'Alg. 2'"):
        step("compute_S").cite("Alg. 2")


# --- the trace and the replays use the names ---------------------------------------------------------

def _runs():
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((40, 8)) for _ in range(3))
    for order in ("fa2", "fa1"):
        for causal in (False, True):
            yield fv.flash_forward(Q, K, V, Br=16, Bc=16, causal=causal, order=order, record=True).trace
    r = fv.flash_forward(Q, K, V, Br=16, Bc=16, causal=True)
    yield flash_backward(Q, K, V, r.O, rng.standard_normal((40, 8)), r.lse, Br=16, Bc=16, causal=True,
                         record=True).trace
    yield fv.decode_attention(Q.reshape(2, 20, 8)[:, :2], K.reshape(2, 20, 8)[:1], V.reshape(2, 20, 8)[:1], Bc=4,
                              num_splits=3, record=True).trace


def test_every_emitted_event_kind_is_a_traced_step():
    forward, backward, decode = set(), set(), set()
    for tr in _runs():
        {"fa2_bwd": backward, "decode": decode}.get(tr.order, forward).update(e.kind for e in tr.events)
    assert forward == {s.name for s in STEPS if s.traced and s.forward}
    assert backward == {s.name for s in STEPS if s.traced and s.backward}
    # the split-KV decode: FA2's steps inside each split (FA1's init excluded), then its own
    assert decode == {s.name for s in STEPS if s.traced and (s.decode or s.forward)} - {"init"}
    assert forward | backward | decode == set(EVENT_KINDS)


def test_every_emit_in_the_code_sits_in_a_block_of_its_own_name():
    """In the tagged paths (tiled._forward_fa2 and its helpers, backward._backward_fa2), each
    ``rec.emit("kind", …)`` is inside a block whose tag is that kind."""
    for path, fn in ((ROOT / "flashviz" / "tiled.py", "_forward_fa2"), (ROOT / "flashviz" / "backward.py", "_backward_fa2")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        a = next(k for k, ln in enumerate(lines) if ln.startswith(f"def {fn}("))
        b = next(k for k in range(a + 1, len(lines)) if lines[k].startswith("def "))
        blocks = tag_blocks(text, None, path.name)
        emits = [(k + 1, m[1]) for k in range(a, b) for m in [re.search(r'rec\.emit\("(\w+)"', lines[k])] if m]
        assert len(emits) >= 5, (path, emits)
        for line, kind in emits:
            owner = [s.step for s in blocks if s.first <= line <= s.last]
            assert owner == [kind], (path.name, line, kind, owner)


def test_the_replays_describe_the_steps_by_their_names():
    from flashviz.replay import STEP_TEXT, STEP_TEXT_BROKEN, STEP_TEXT_FA1
    from flashviz.views import backward_view

    forward = {s.name for s in STEPS if s.traced and s.forward}
    assert set(STEP_TEXT) == set(STEP_TEXT_FA1) == forward
    assert set(STEP_TEXT_BROKEN) <= forward
    assert set(backward_view.STEP_TEXT) == {s.name for s in STEPS if s.traced and s.backward}


# --- the tags in the code -----------------------------------------------------------------------------

def tag_problems(text: str, paper) -> list[str]:
    """What is wrong with the tags of one file: an unknown name, no citation, another algorithm
    than ``paper`` (one name or a tuple of the names the file may cite), or lines the vocabulary
    does not give that step."""
    papers = (paper,) if isinstance(paper, str) else tuple(paper)
    out = []
    for t in find_tags(text):
        where = f"line {t.index + 1} [{t.name}]"
        if t.name not in BY_NAME:
            out.append(f"{where}: unknown step")
        elif not t.paper:
            out.append(f"{where}: cites no algorithm line")
        elif t.paper not in papers:
            out.append(f"{where}: cites {t.paper}, expected {' or '.join(papers)}")
        elif not set(t.lines) <= set(step(t.name).lines.get(t.paper, ())):
            out.append(f"{where}: cites {t.paper} {t.lines}, the step is {step(t.name).lines.get(t.paper)}")
    return out


def test_the_tag_check_can_fail():
    bad = ("  // [compute_S] Alg. 1 line 9: wrong line\n  // [nope] Alg. 1 line 8: x\n"
           "  # [update_ml] no citation\n  // [write_O] Alg. 2 line 13: other algorithm\n"
           "  // [write_O] Alg. 1 lines 12-15: right\n  // [64w, 64w+64) is not a tag\n")
    problems = tag_problems(bad, "Alg. 1")
    assert [p.split(":")[0] for p in problems] == ["line 1 [compute_S]", "line 2 [nope]", "line 3 [update_ml]",
                                                   "line 4 [write_O]"], problems
    assert "(9,), the step is (8,)" in problems[0]


@pytest.mark.parametrize("path", list(TAGGED), ids=lambda p: p.name)
def test_every_tag_names_a_step_and_cites_its_lines(path):
    text = path.read_text(encoding="utf-8")
    tags = find_tags(text)
    assert len(tags) >= 6, path.name
    assert tag_problems(text, TAGGED[path]) == []
    mark = "#" if path.suffix == ".py" else "//"
    assert {t.mark for t in tags} == {mark}
    assert "// Alg. 1 line" not in text and "# Alg. 1 line" not in text        # the old comments are tags now


@pytest.mark.parametrize("name", FORWARD_KERNELS)
def test_each_forward_kernel_tags_the_forward_steps_in_algorithm_order(name):
    tags = find_tags((ROOT / "kernels" / name).read_text(encoding="utf-8"))
    first = {}
    for t in tags:
        first.setdefault(t.name, t.index)
    assert set(MAIN_FORWARD) <= set(first), (name, sorted(first))
    assert sorted(MAIN_FORWARD, key=first.get) == MAIN_FORWARD
    assert first["load_Q"] < first["init"] < first["compute_S"]                 # lines 4, 5 before the loop
    if name != "flash_fwd.cu":                                                  # fp16 / bf16 P on the tensor cores
        assert first["update_ml"] < first["convert_P"] and "mask_S" in first
        assert [t.name for t in tags].count("load_KV") >= 3                     # prologue, K_j wait, V_j wait


def test_the_numpy_fa2_path_tags_every_forward_step_it_has():
    text = (ROOT / "flashviz" / "tiled.py").read_text(encoding="utf-8")
    names = {t.name for t in find_tags(text)}
    assert names == {s.name for s in STEPS if s.forward and s.in_numpy}


# --- cutting between tags (chapter 7's code pairs) ----------------------------------------------------

CUDA = """\
__global__ void k(int n)
{
    // [load_Q] Alg. 1 line 4: load
    int a = 0;

    // [init] Alg. 1 line 5: init
    float m = 0.f;
    for (int j = 0; j < n; ++j) {
        // [compute_S] Alg. 1 line 8: S
#pragma unroll
        for (int x = 0; x < 4; ++x) a += x;
        if (a) {
            a = 1;
        }


    }
    // [write_O] Alg. 1 lines 12-15: out
    m = a;
#if defined(X)
    m = 2;
#endif
}
"""

PY = """\
def f(x):
    # [update_ml] Alg. 1 line 9: two comment
    # lines of explanation
    y = x
# a comment at column 0 ends the block
    return y


def g(x):
    # [accumulate_O] Alg. 1 line 10: to the end
    if x:
        # an inner comment stays
        x = 1
    return x
"""


def _cut(text, name):
    return [(s.first, s.last, s.text) for s in tag_blocks(text, name, "t")]


def test_a_block_runs_to_the_next_tag():
    assert _cut(CUDA, "load_Q") == [(3, 4, "// [load_Q] Alg. 1 line 4: load\nint a = 0;")]   # blank line dropped
    (first, last, text), = _cut(CUDA, "init")
    assert (first, last) == (6, 8) and text.endswith("for (int j = 0; j < n; ++j) {")


def test_a_block_ends_with_the_block_around_it():
    (first, last, text), = _cut(CUDA, "compute_S")
    assert (first, last) == (9, 14)                                 # the closing } at the tag's indent is in
    assert text.splitlines() == ["// [compute_S] Alg. 1 line 8: S", "#pragma unroll",
                                 "for (int x = 0; x < 4; ++x) a += x;", "if (a) {", "    a = 1;", "}"]
    (first, last, text), = _cut(CUDA, "write_O")
    assert (first, last, text) == (18, 19, "// [write_O] Alg. 1 lines 12-15: out\nm = a;")   # #if ends it


def test_python_blocks_and_comments():
    (first, last, text), = _cut(PY, "update_ml")
    assert (first, last) == (2, 4) and text.splitlines()[1] == "# lines of explanation"
    (first, last, text), = _cut(PY, "accumulate_O")
    assert (first, last) == (10, 14) and "# an inner comment stays" in text and text.endswith("return x")
    assert [s.step for s in tag_blocks(PY, None, "t")] == ["update_ml", "accumulate_O"]


def test_a_missing_tag_is_named_with_its_file():
    with pytest.raises(LookupError, match=r"tag \[mask_S\] not found in some/file.cu"):
        tag_blocks(CUDA, "mask_S", "some/file.cu")
    with pytest.raises(LookupError, match=r"tag \[load_Q\] not found in x.py"):
        tag_blocks(PY, "load_Q", "x.py")
