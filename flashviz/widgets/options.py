"""The choices the lesson widgets offer, and the one-line checks of their arguments."""

from __future__ import annotations

import ipywidgets as W
import numpy as np

from .. import data as fvdata
from ..checks import check_choice, shown
from .base import REAL_D, REAL_MAX_N, check_int

BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (8, 16, 32, 64, 128)
DTYPES = {"float32 (4 B)": np.float32, "float16 (2 B)": np.float16, "float64 (8 B)": np.float64}
#: Most tiles (Tr · Tc) a tiling widget animates. The recorded run has a few steps per tile and
#: the replay keeps a state per step, so time and memory grow with Tr · Tc: 4,096 tiles (N = 2,048
#: with 32 × 32 blocks) record and draw in about two seconds with 16,512 steps; more is no longer
#: an animation anyone can watch. The constructor refuses more, a slider keeps the previous run.
MAX_TILES = 4096


def match_option(value, options: dict, name: str) -> str:
    """A dropdown label from its full text, its first word ('float16', 'A100') or a NumPy dtype."""
    if value is None or isinstance(value, bool):         # np.dtype(None) would quietly be float64
        raise ValueError(f"{name} must be one of {tuple(options)} (or their first word), got {shown(value)}")
    if isinstance(value, str) and value in options:
        return value
    try:
        if not isinstance(value, str):
            value = np.dtype(value).name
    except (TypeError, ValueError, AttributeError):      # not a dtype: say what is expected below
        pass
    for label in options:
        head = label.split()[0].rstrip(":")
        if isinstance(value, str) and value.lower() in (head.lower(), *head.lower().split("/")):
            return label
    raise ValueError(f"{name} must be one of {tuple(options)} (or their first word), got {shown(value)}")


def tile_problem(Nq: int, Nk: int, Br: int, Bc: int) -> str | None:
    """Why a configuration cannot be animated (more than MAX_TILES tiles), or None."""
    tiles = (-(-Nq // Br)) * (-(-Nk // Bc))
    if tiles <= MAX_TILES:
        return None
    sizes = f"N = {Nq}" if Nq == Nk else f"Nq = {Nq}, Nk = {Nk}"
    return (f"{sizes} with Br = {Br}, Bc = {Bc} makes {tiles:,} tiles — too many to animate "
            f"(limit {MAX_TILES:,}). Pick larger blocks or a smaller N.")


def check_blocks(Br, Bc) -> tuple[int, int]:
    """Br, Bc: powers of two from BLOCKS; one-line TypeError/ValueError otherwise."""
    return check_choice(Br, "Br", BLOCKS), check_choice(Bc, "Bc", BLOCKS)


def check_tiled_inputs(source, N, d, Br, Bc, *, max_N: int):
    """Validate a widget's input source, N (<= max_N; <= 512 for "real"), d (one of HEAD_DIMS;
    32 for "real"), Br, Bc and the tile count. Returns (N, d, Br, Bc); raises a one-line
    TypeError/ValueError that says what was expected."""
    check_choice(source, "source", fvdata.SOURCES)
    N = check_int(N, "N", 1, min(max_N, REAL_MAX_N) if source == "real" else max_N)
    d = check_choice(d, "d", HEAD_DIMS)
    if source == "real" and d != REAL_D:
        raise ValueError(f"real inputs (all-MiniLM-L6-v2) have d = {REAL_D}, got d = {d}")
    Br, Bc = check_blocks(Br, Bc)
    problem = tile_problem(N, N, Br, Bc)
    if problem:
        raise ValueError(problem.replace(" — too many to animate", ", more than an animation can show"))
    return N, d, Br, Bc


def tile_controls(d: int, Br: int, Bc: int, causal: bool, source: str):
    """The (d, Br, Bc, causal) controls every tiling widget shares: a head-dimension dropdown
    (disabled for "real" inputs, whose d is fixed), Br and Bc sliders over BLOCKS (updating on
    release) and a causal checkbox. Values are taken as given (check them first)."""
    d_w = W.Dropdown(options=list(HEAD_DIMS), value=d, description="d", disabled=(source == "real"),
                     style={"description_width": "20px"}, layout=W.Layout(width="110px"))
    Br_w = W.SelectionSlider(options=list(BLOCKS), value=Br, description="Br", continuous_update=False,
                             layout=W.Layout(width="230px"))
    Bc_w = W.SelectionSlider(options=list(BLOCKS), value=Bc, description="Bc", continuous_update=False,
                             layout=W.Layout(width="230px"))
    causal_w = W.Checkbox(value=causal, description="causal", indent=False, layout=W.Layout(width="80px"))
    return d_w, Br_w, Bc_w, causal_w
