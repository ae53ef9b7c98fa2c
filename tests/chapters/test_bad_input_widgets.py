"""Bad input to the widgets and panels (issue 10): every argument, every method a student calls,
file paths that cannot be written, sizes capped for time, figure sizes, and block lists the
recorded GPU sweep does not cover. Each gives ONE line that names what was expected — never a
NumPy or matplotlib error from inside the drawing code, a deep traceback or a hang.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import pytest

import flashviz as fv
from flashviz import checks, iomodel
from flashviz.views import export
from flashviz.widgets import checks as widget_checks

# small, fast configurations of every frame widget
SMALL = {
    "TileExplorer": dict(N=32, Br=16, Bc=16, source="random"),
    "OnlineSoftmaxExplorer": dict(N=16, block=8, source="random"),
    "LoopOrderExplorer": dict(N=32, Br=16, Bc=16, source="random"),
    "CausalExplorer": dict(Nq=32, Nk=48, Br=16, Bc=16),
    "BlockSizeExplorer": dict(N=256, d=32, recorded=None),
    "BackwardExplorer": dict(N=16, Br=8, Bc=8, source="random"),
    "DecodeExplorer": dict(Nk=512, H_kv=2, d=16),
}
WIDGETS = sorted(SMALL)


def one_line(info) -> str:
    msg = str(info.value)
    assert msg.strip() and "\n" not in msg, repr(msg)
    return msg


def refused(call, exc, *words):
    """call() raises exc with one line holding every word; leaves no figure open."""
    plt.close("all")
    with pytest.raises(exc) as info:
        call()
    msg = one_line(info)
    for w in words:
        assert w in msg, (w, msg)
    assert plt.get_fignums() == [], "a refused constructor left a figure open"
    return msg


def make(cls, **kw):
    return getattr(fv, cls)(**{**SMALL[cls], "canvas": "png", "key": ("bad-input", cls), **kw})


# ------------------------------------------------------------------------------ every argument

INT = [("8", TypeError), (8.0, TypeError), (float("nan"), TypeError), (True, TypeError), (None, TypeError),
       ([8], TypeError), (-4, ValueError), (0, ValueError), (10**12, ValueError)]

ARGS = {   # widget: {argument: words of the message}
    "TileExplorer": {"N": "N must be an integer between 1 and", "d": "d must be one of 8, 16, 32, 64, 128",
                     "Br": "Br must be one of 1, 2, 4", "Bc": "Bc must be one of 1, 2, 4"},
    "OnlineSoftmaxExplorer": {"N": "N must be an integer between 1 and 512",
                              "block": "block must be an integer between 1 and 512"},
    "LoopOrderExplorer": {"N": "N must be an integer between 1 and 512", "d": "d must be one of",
                          "Br": "Br must be one of", "Bc": "Bc must be one of"},
    "CausalExplorer": {"Nq": "Nq must be an integer between 1 and 2,048", "Nk": "Nk must be an integer between 1",
                       "d": "d must be one of 16, 32, 64", "Br": "Br must be one of", "Bc": "Bc must be one of"},
    "BlockSizeExplorer": {"N": "N must be an integer between 1 and 65,536", "d": "d must be one of 16, 32, 64, 128"},
    "BackwardExplorer": {"N": "N must be an integer between 1 and 512", "d": "d must be one of",
                         "Br": "Br must be one of", "Bc": "Bc must be one of"},
    "DecodeExplorer": {"Nk": "Nk must be an integer between 1 and 16,384", "B": "B must be an integer between 1 and 16",
                       "group": "group must be an integer between 1 and 16",
                       "page_size": "page_size must be an integer between 1 and 256",
                       "Nq": "Nq must be an integer between 1 and 8",
                       "H_kv": "H_kv must be an integer between 1 and 16",
                       "d": "d must be one of 16, 32, 64, 128", "Bc": "Bc must be one of 16, 32, 64, 128"},
}


@pytest.mark.parametrize("cls,arg,words", [(c, a, w) for c, args in ARGS.items() for a, w in args.items()])
@pytest.mark.parametrize("value,exc", INT, ids=[repr(v) for v, _ in INT])
def test_integer_arguments(cls, arg, words, value, exc):
    refused(lambda: make(cls, **{arg: value}), exc, words)


@pytest.mark.parametrize("cls,kw,exc,words", [
    ("TileExplorer", dict(seed=-1), ValueError, "seed must be an integer >= 0"),
    ("TileExplorer", dict(seed="a"), TypeError, "seed must be an integer >= 0"),
    ("TileExplorer", dict(causal=1), TypeError, "causal must be True or False"),
    ("TileExplorer", dict(rescale="no"), TypeError, "rescale must be True or False"),
    ("TileExplorer", dict(source="imagenet"), ValueError, "source must be one of real, random, adversarial"),
    ("TileExplorer", dict(source=3), TypeError, "source must be one of real, random, adversarial"),
    ("TileExplorer", dict(dtype="int8"), ValueError, "dtype must be one of"),
    ("TileExplorer", dict(dtype=None), ValueError, "dtype must be one of"),     # np.dtype(None) is float64
    ("TileExplorer", dict(sram_budget="TPU"), ValueError, "sram_budget must be one of"),
    ("TileExplorer", dict(canvas="svg"), ValueError, "canvas must be 'auto', 'ipympl' or 'png'"),
    ("TileExplorer", dict(canvas=["png"]), ValueError, "canvas must be"),
    ("TileExplorer", dict(N=600, source="real"), ValueError, "N must be an integer between 1 and 512"),
    ("TileExplorer", dict(d=64, source="real"), ValueError, "real inputs (all-MiniLM-L6-v2) have d = 32"),
    ("OnlineSoftmaxExplorer", dict(row=16), ValueError, "row must be an integer between 0 and 15"),
    ("OnlineSoftmaxExplorer", dict(row=1.0), TypeError, "row must be an integer"),
    ("OnlineSoftmaxExplorer", dict(source="sine"), ValueError, "source must be one of real, random, rising"),
    ("OnlineSoftmaxExplorer", dict(break_it=None), TypeError, "break_it must be one of none, no rescale"),
    ("OnlineSoftmaxExplorer", dict(dtype="float16"), ValueError, "dtype must be one of ('float32', 'float64')"),
    ("OnlineSoftmaxExplorer", dict(dtype=None), ValueError, "dtype must be one of"),
    ("OnlineSoftmaxExplorer", dict(seed=-1), ValueError, "seed must be an integer >= 0"),
    ("LoopOrderExplorer", dict(causal="yes"), TypeError, "causal must be True or False"),
    ("LoopOrderExplorer", dict(seed=2.5), TypeError, "seed must be an integer >= 0"),
    ("CausalExplorer", dict(d=128), ValueError, "d must be one of 16, 32, 64"),
    ("CausalExplorer", dict(seed=None), TypeError, "seed must be an integer >= 0"),
    ("BackwardExplorer", dict(dtype="bfloat16"), ValueError, "dtype must be one of"),
    ("BackwardExplorer", dict(seed=-1), ValueError, "seed must be an integer >= 0"),
    ("BackwardExplorer", dict(causal=0), TypeError, "causal must be True or False"),
    ("DecodeExplorer", dict(num_splits="many"), ValueError,
     "num_splits must be 'auto' or an integer between 1 and 128"),
    ("DecodeExplorer", dict(num_splits=1.5), TypeError, "num_splits must be an integer between 1 and 128"),
    ("DecodeExplorer", dict(num_splits=129), ValueError, "num_splits must be an integer between 1 and 128"),
    ("DecodeExplorer", dict(no_splits=1), TypeError, "no_splits must be True or False"),
    ("DecodeExplorer", dict(no_rescale="yes"), TypeError, "no_rescale must be True or False"),
    ("DecodeExplorer", dict(tiny_pages=None), TypeError, "tiny_pages must be True or False"),
    ("DecodeExplorer", dict(causal=0), TypeError, "causal must be True or False"),
    ("DecodeExplorer", dict(source="real"), ValueError, "source must be one of rising, random"),
    ("DecodeExplorer", dict(dtype="bfloat16"), ValueError, "dtype must be one of"),
    ("DecodeExplorer", dict(seed=-1), ValueError, "seed must be an integer >= 0"),
    ("DecodeExplorer", dict(Nk=16384, B=8), ValueError, "more than a run can record"),
    ("BlockSizeExplorer", dict(dtype="int8"), ValueError, "dtype must be one of"),
    ("BlockSizeExplorer", dict(sram_budget="TPU"), ValueError, "unknown SRAM budget 'TPU'"),
    ("BlockSizeExplorer", dict(sram_budget=0), ValueError, "SRAM budget must be >= 1 byte"),
    ("BlockSizeExplorer", dict(sram_budget=2.5), TypeError, "preset name or a number of bytes"),
    ("BlockSizeExplorer", dict(sram_budget=10**400), ValueError, "sram_budget (bytes) must be an integer between 1 and 1,099,"),
    ("BlockSizeExplorer", dict(order="fa3"), ValueError, "order must be 'fa2'"),
    ("BlockSizeExplorer", dict(order=["fa2"]), TypeError, "order must be 'fa2'"),
    ("BlockSizeExplorer", dict(causal=None), TypeError, "causal must be True or False"),
    ("BlockSizeExplorer", dict(recorded="yesterday"), ValueError, "recorded must be 'latest', a results dict or None"),
    ("BlockSizeExplorer", dict(blocks=16), TypeError, "blocks must be a sequence of integers >= 1"),
    ("BlockSizeExplorer", dict(blocks=()), ValueError, "blocks is empty"),
    ("BlockSizeExplorer", dict(blocks=(16, 16)), ValueError, "blocks must not repeat a size"),
    ("BlockSizeExplorer", dict(blocks=(16, 0)), ValueError, "each block size must be an integer >= 1"),
    ("BlockSizeExplorer", dict(blocks=(16.0,)), TypeError, "each block size must be an integer >= 1"),
    ("BlockSizeExplorer", dict(blocks=(True, 2)), TypeError, "each block size must be an integer >= 1"),
    ("BlockSizeExplorer", dict(blocks=tuple(2 ** k for k in range(8))), ValueError, "at most 7"),
])
def test_other_arguments(cls, kw, exc, words):
    refused(lambda: make(cls, **kw), exc, words)


def test_numpy_integers_are_fine_and_bools_are_not():
    w = make("TileExplorer", N=np.int64(32), Br=np.int32(16), Bc=np.int16(16), d=np.int64(32), seed=np.uint8(3),
             figsize=(np.float32(9), np.int64(6)), dpi=np.int64(80))
    try:
        assert w.result.trace.Br == 16 and isinstance(w.N.value, int)
        assert w.show_frame(np.int64(1)).k == 1
    finally:
        w.close()
    refused(lambda: make("TileExplorer", Br=np.bool_(True)), TypeError, "Br must be one of")
    refused(lambda: make("CausalExplorer", Nq=True), TypeError, "Nq must be an integer")


@pytest.mark.parametrize("cls", WIDGETS)
def test_unknown_and_unhashable_arguments(cls):
    refused(lambda: make(cls, key=[1, 2]), TypeError, "key must be hashable")
    refused(lambda: make(cls, bogus=1), TypeError, "bogus")


# ------------------------------------------------------------------------------ figure sizes

FIGSIZES = [("big", "figsize must be (width, height) in inches"), (5, "two numbers from 1 to 50"),
            ((1, 2, 3), "two numbers"), ((-1, 5), "two numbers from 1 to 50"), ((0, 5), "from 1 to 50"),
            ((1000, 1000), "from 1 to 50"), ((float("nan"), 5), "figsize"), ((float("inf"), 5), "figsize"),
            (("a", "b"), "figsize"), ((True, 5), "figsize"), ((5,), "figsize"), (None, "figsize"),
            ({"w": 1}, "figsize")]
DPIS = [("90", "dpi must be a number from 20 to 600"), (0, "from 20 to 600"), (-5, "from 20 to 600"),
        (float("nan"), "dpi"), (float("inf"), "dpi"), (10**6, "from 20 to 600"), (True, "dpi"), (None, "dpi"),
        (5, "from 20 to 600")]


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("figsize,words", FIGSIZES, ids=[repr(f) for f, _ in FIGSIZES])
def test_bad_figsize(cls, figsize, words):
    refused(lambda: make(cls, figsize=figsize), ValueError, words)


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("dpi,words", DPIS, ids=[repr(d) for d, _ in DPIS])
def test_bad_dpi(cls, dpi, words):
    refused(lambda: make(cls, dpi=dpi), ValueError, words)


@pytest.mark.parametrize("cls", WIDGETS)
def test_figures_too_many_pixels_are_capped(cls):
    msg = refused(lambda: make(cls, figsize=(11, 6.8), dpi=600), ValueError, "million pixels", "lower figsize or dpi")
    assert f"{widget_checks.MAX_FIG_PIXELS / 1e6:g} million" in msg


@pytest.mark.parametrize("kw,words", [
    (dict(figsize="big"), "figsize must be (width, height) in inches"), (dict(figsize=(0, 3)), "from 1 to 50"),
    (dict(figsize=(float("inf"), 3)), "figsize"), (dict(figsize=(1000, 1000)), "from 1 to 50"),
    (dict(figsize=(5,)), "figsize"), (dict(dpi=0), "dpi must be a number from 20 to 600"),
    (dict(dpi=True), "dpi"), (dict(dpi=float("inf")), "dpi"), (dict(dpi=float("nan")), "dpi"),
    (dict(figsize=(40, 5), dpi=100), "million pixels"), (dict(key={}), "key must be hashable"),
])
@pytest.mark.parametrize("module,name", [("recorded_figures", "RecordedFigures"), ("fa3_figures", "Fa3Figures")])
def test_recorded_figures_bad_arguments(kw, words, module, name):
    """The image chapters' widgets (FigureTabs: chapter 7's and chapter 8's) check alike."""
    import importlib

    cls = getattr(importlib.import_module(f"flashviz.widgets.{module}"), name)
    exc = TypeError if "key" in kw else ValueError
    refused(lambda: cls(**kw), exc, words)


# ------------------------------------------------------------------------------ methods: frames, paths, exports

@pytest.fixture(scope="module")
def widgets():
    made = {cls: make(cls) for cls in WIDGETS}
    yield made
    for w in made.values():
        w.close()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("paths")
    (root / "afile").write_text("x")
    (root / "folder.png").mkdir()
    (root / "folder.gif").mkdir()
    return root


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("k,exc", [("1", TypeError), (1.0, TypeError), (True, TypeError), (None, TypeError),
                                   (-1, IndexError), (10**6, IndexError)])
def test_show_frame_bad_index(widgets, cls, k, exc):
    w = widgets[cls]
    with pytest.raises(exc) as info:
        w.show_frame(k)
    assert "frame" in one_line(info) and str(w.n_frames - 1) in str(info.value)


PNG_PATHS = [  # (path relative to the tree or a non-path, exception, words)
    ("nope/x.png", FileNotFoundError, "does not exist"),
    ("afile/x.png", NotADirectoryError, "is a file, not a folder"),
    ("folder.png", IsADirectoryError, "is a folder"),
    ("x.jpg", ValueError, "path must end in .png"),
    ("x", ValueError, "path must end in .png"),
    ("", ValueError, "path must be a file name ending in .png"),
    (5, TypeError, "path must be a file name (str or pathlib.Path) ending in .png"),
    (None, TypeError, "path must be a file name"),
    (b"x.png", TypeError, "path must be a file name"),
]


def _path(tree, p):
    return str(tree / p) if isinstance(p, str) and p else p


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("p,exc,words", PNG_PATHS, ids=[repr(p) for p, _, _ in PNG_PATHS])
def test_save_png_paths_that_cannot_be_written(widgets, tree, cls, p, exc, words):
    with pytest.raises(exc) as info:
        widgets[cls].save_png(_path(tree, p))
    assert words in one_line(info)


GIF_PATHS = [
    ("nope/x.gif", FileNotFoundError, "does not exist"), ("afile/x.gif", NotADirectoryError, "not a folder"),
    ("folder.gif", IsADirectoryError, "is a folder"), ("x.png", ValueError, "path must end in .gif or .mp4"),
    (3.5, TypeError, "ending in .gif or .mp4"),
]


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("p,exc,words", GIF_PATHS, ids=[repr(p) for p, _, _ in GIF_PATHS])
def test_save_gif_paths_that_cannot_be_written(widgets, tree, cls, p, exc, words):
    with pytest.raises(exc) as info:
        widgets[cls].save_gif(_path(tree, p), frames=[0])
    assert words in one_line(info)


def test_read_only_folder_is_a_permission_error(widgets, tree, monkeypatch):
    # (as root a chmod would not stop the write; the check asks os.access, so ask it to say no)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    w = widgets["TileExplorer"]
    for call in (lambda: w.save_png(tree / "ro.png"), lambda: w.save_gif(tree / "ro.gif", frames=[0])):
        with pytest.raises(PermissionError) as info:
            call()
        assert "no permission to write" in one_line(info)
    assert not list(tree.glob("ro.*"))


def test_a_write_that_fails_anyway_is_one_line(widgets, tree, monkeypatch):
    from flashviz.views import export

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "save_frame_png", full_disk)
    monkeypatch.setattr(export, "save_animation", full_disk)
    w = widgets["CausalExplorer"]
    for call in (lambda: w.save_png(tree / "full.png"), lambda: w.save_gif(tree / "full.gif", frames=[0])):
        with pytest.raises(OSError) as info:
            call()
        msg = one_line(info)
        assert "cannot be written: No space left on device" in msg and "full." in msg


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("kw,exc,words", [
    (dict(k="0"), TypeError, "k must be a frame index from 0 to"), (dict(k=10**6), ValueError, "k must be a frame"),
    (dict(k=-1), ValueError, "k must be a frame index"), (dict(k=0.0), TypeError, "k must be a frame index"),
])
def test_save_png_bad_frame(widgets, tree, cls, kw, exc, words):
    with pytest.raises(exc) as info:
        widgets[cls].save_png(tree / "k.png", **kw)
    assert words in one_line(info)
    assert not (tree / "k.png").exists()


@pytest.mark.parametrize("cls", WIDGETS)
@pytest.mark.parametrize("kw,exc,words", [
    (dict(fps=0), ValueError, "fps must be a number above 0 and at most 100"),
    (dict(fps=-3), ValueError, "fps must be a number above 0"), (dict(fps="8"), TypeError, "fps must be a number"),
    (dict(fps=float("nan")), ValueError, "fps"), (dict(fps=float("inf")), ValueError, "fps"),
    (dict(fps=True), TypeError, "fps"), (dict(fps=1000), ValueError, "at most 100"),
    (dict(frames="01"), TypeError, "frames must be a list or range of frame indices"),
    (dict(frames=3), TypeError, "frames must be a list or range"),
    (dict(frames=[]), ValueError, "frames is empty"),
    (dict(frames=[10**6]), ValueError, "frames must hold frame indices (integers from 0 to"),
    (dict(frames=[0.0]), TypeError, "frames must hold frame indices"),
    (dict(frames=[None]), TypeError, "frames must hold frame indices"),
    (dict(progress=3), TypeError, "progress must be a function progress(i, n) or None"),
])
def test_save_gif_bad_options(widgets, tree, cls, kw, exc, words):
    kw = {"frames": [0], **kw}
    with pytest.raises(exc) as info:
        widgets[cls].save_gif(tree / "opt.gif", **kw)
    assert words in one_line(info)
    assert not (tree / "opt.gif").exists()


@pytest.mark.parametrize("name,words", [("nope/x", "its folder 'nope' does not exist"),
                                        ("afile/x", "'afile' is a file, not a folder"),
                                        ("folder", "'folder.gif' is a folder")])
def test_export_buttons_say_why_a_file_cannot_be_written(widgets, tree, monkeypatch, name, words):
    monkeypatch.chdir(tree)
    w = widgets["CausalExplorer"]
    w.export_name.value = name
    try:
        for button in (w.gif_button, w.png_button):
            if button is w.png_button and name == "folder":
                continue                                      # folder-step1.png is a fine PNG name
            button.click()
            assert w.wait_export(60)
            status = w.export_status.value
            assert "export failed: " in status and words in status and "\n" not in status, status
    finally:
        w.export_name.value = w.export_stem


def test_exports_of_too_many_frames_are_capped(widgets, tree, monkeypatch):
    monkeypatch.setattr(export, "MAX_EXPORT_FRAMES", 4)
    w = widgets["TileExplorer"]
    n = w.n_frames
    step = -(-n // 4)
    with pytest.raises(ValueError) as info:
        w.save_gif(tree / "long.gif")
    msg = one_line(info)
    assert f"{n:,} frames is more than one export may hold (4" in msg and f"range(0, {n}, {step})" in msg
    assert w.save_gif(tree / "long.gif", frames=range(0, n, step)).exists()      # the suggestion works


def test_the_gif_button_keeps_one_step_in_n_beyond_the_cap(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(export, "MAX_EXPORT_FRAMES", 5)
    monkeypatch.chdir(tmp_path)
    w = make("CausalExplorer", Nq=128, Nk=128, key="gif-cap")
    try:
        n = w.n_frames
        assert n > 5
        w.gif_button.click()
        assert w.wait_export(60)
        assert "saved" in w.export_status.value, w.export_status.value
        assert Image.open(tmp_path / "flashviz-causal.gif").n_frames == len(range(0, n, -(-n // 5)))
    finally:
        w.close()


@pytest.mark.parametrize("cls", WIDGETS)
def test_a_closed_widget_says_so(cls, tmp_path):
    w = make(cls, key=("closed", cls))
    w.close()
    for call in (lambda: w.show_frame(0), lambda: w.save_png(tmp_path / "c.png"),
                 lambda: w.save_gif(tmp_path / "c.gif", frames=[0])):
        with pytest.raises(ValueError) as info:
            call()
        assert f"this {cls} is closed" in one_line(info)
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------ sizes capped for time

def test_tile_count_is_capped_with_a_message():
    from flashviz.widgets.options import MAX_TILES

    msg = refused(lambda: make("TileExplorer", N=2048, Br=8, Bc=8), ValueError, "tiles", f"limit {MAX_TILES:,}")
    assert "65,536 tiles" in msg
    refused(lambda: make("CausalExplorer", Nq=2048, Nk=2048, Br=16, Bc=16), ValueError, f"limit {MAX_TILES:,}")


def test_block_size_sweep_cost_is_capped_with_a_message():
    small = (1, 2, 4, 8, 16, 32, 64)
    msg = refused(lambda: make("BlockSizeExplorer", N=4096, blocks=small), ValueError,
                  f"more than {checks.MAX_SWEEP_STEPS:,}", "drop the smallest block sizes")
    assert "query blocks" in msg
    msg = refused(lambda: make("BlockSizeExplorer", N=65536, blocks=(2, 4, 8, 16, 32, 64, 128)), ValueError,
                  "pick N <= ")
    # the slider offers only the N the sweep computes in reasonable time
    w = make("BlockSizeExplorer", N=1024, blocks=(2, 4, 8, 16, 32, 64, 128), key="sweep-cap")
    try:
        assert max(w.N.options) < 65536 and 1024 in w.N.options
    finally:
        w.close()


@pytest.mark.parametrize("name", ["MIN_FIG_INCHES", "MAX_FIG_PIXELS", "MAX_DPI", "MAX_FPS", "MAX_EXPORT_FRAMES",
                                  "MAX_TEXT_SCALE", "MAX_SWEEP_STEPS", "MAX_SRAM_BYTES"])
def test_caps_are_documented_constants(name):
    import inspect

    module = next(m for m in (widget_checks, export, checks) if hasattr(m, name))
    src = inspect.getsource(module)
    line = next(i for i, ln in enumerate(src.splitlines()) if ln.startswith(name) or f", {name}" in ln.split("=")[0])
    assert src.splitlines()[line - 1].startswith("#:"), f"{name} has no #: doc comment"


# ------------------------------------------------------------------------------ recorded GPU data: uncovered blocks

def _fake_recording(N=4096, d=64, sizes=(16, 32, 64, 128), itemsize=4, B=4, H=32):
    """A results dict like gpu-*.json whose sweep measured Br, Bc in ``sizes`` at N, d (fp32)."""
    rows = []
    for Br in sizes:
        for Bc in sizes:
            io = iomodel.flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize)
            rows.append({"N": N, "d": d, "causal": False, "Br": Br, "Bc": Bc, "B": B, "H": H,
                         "kernel_ms": 1.0 + Br / 1000 + Bc / 10000, "model_hbm_bytes": io.scaled(B * H).hbm_bytes})
    return {"env": {"device": "Test GPU", "date": "2026-01-01"}, "sweep": rows}


def test_blocks_the_recorded_sweep_misses_are_named():
    rec = _fake_recording()
    msg = refused(lambda: make("BlockSizeExplorer", N=4096, d=64, blocks=(8, 256), recorded=rec), ValueError,
                  "recorded GPU sweep", "recorded Br, Bc: 16, 32, 64, 128", "recorded=None")
    assert "(8, 256)" in msg


def test_partly_covered_blocks_say_which_are_missing():
    w = make("BlockSizeExplorer", N=4096, d=64, blocks=(8, 16, 32), recorded=_fake_recording(), key="partly")
    try:
        s = w.status.value
        assert "measured GPU times shown (4 configurations" in s and "16, 32, 64, 128 only, none at 8" in s
    finally:
        w.close()


def test_sliding_onto_an_uncovered_recording_keeps_the_previous_run():
    w = make("BlockSizeExplorer", N=2048, d=64, blocks=(8, 256), recorded=_fake_recording(), key="slide")
    try:
        before = w._view
        w.N.value = 4096                          # the recorded configuration, none of these blocks
        assert w._view is before and "recorded Br, Bc: 16, 32, 64, 128" in w.status.value
        assert "Showing the previous run" in w.status.value
    finally:
        w.close()


@pytest.mark.recorded_data
def test_installed_recording_uncovered_blocks():
    refused(lambda: make("BlockSizeExplorer", N=4096, d=64, blocks=(1,), recorded="latest"), ValueError,
            "recorded Br, Bc: 16, 32, 64, 128")


# ------------------------------------------------------------------------------ panels

@pytest.fixture
def no_gpu(monkeypatch):
    from flashviz import gpu

    monkeypatch.setattr(gpu, "gpu_status", lambda: (False, "no GPU in this test"))


@pytest.mark.parametrize("kw,exc,words", [
    (dict(N=1000), ValueError, "N must be one of 1024, 2048, 4096, 8192, 16384"),
    (dict(N=4096.0), TypeError, "N must be one of 1024"), (dict(N=True), TypeError, "N must be one of"),
    (dict(Br=8), ValueError, "Br=8 is not supported by the GPU kernel; supported: 16, 32, 64, 128"),
    (dict(Bc=10**12), ValueError, "supported: 16, 32, 64, 128"), (dict(Br="64"), TypeError, "Br must be an integer"),
    (dict(d=48), ValueError, "supported: 32, 64, 128"), (dict(d=None), TypeError, "d must be an integer"),
    (dict(causal=1), TypeError, "causal must be True or False"),
    (dict(explorer=5), TypeError, "explorer must be a TileExplorer"),
    (dict(explorer="tiles"), TypeError, "explorer must be a TileExplorer"),
    (dict(key=[1]), TypeError, "key must be hashable"),
])
def test_gpu_panel_bad_arguments(no_gpu, kw, exc, words):
    explorer = kw.pop("explorer", None)
    with pytest.raises(exc) as info:
        fv.GPUPanel(explorer, **kw)
    assert words in one_line(info)


@pytest.mark.parametrize("kw,exc,words", [
    (dict(N=1000), ValueError, "N must be one of 512, 1024"), (dict(d=32), ValueError, "d must be one of 64, 128"),
    (dict(Br=32), ValueError, "Br must be one of 64, 128"), (dict(Bc=256), ValueError, "Bc must be one of 32, 64, 128"),
    (dict(Br=64.0), TypeError, "Br must be one of"), (dict(dtype="float32"), ValueError, "float16, bfloat16"),
    (dict(causal="no"), TypeError, "causal must be True or False"), (dict(key={}), TypeError, "key must be hashable"),
])
def test_tensor_core_panel_bad_arguments(no_gpu, kw, exc, words):
    with pytest.raises(exc) as info:
        fv.TensorCorePanel(**kw)
    assert words in one_line(info)


def test_tensor_core_panel_takes_a_numpy_dtype(no_gpu):
    p = fv.TensorCorePanel(dtype=np.float16, key="np-dtype")
    try:
        assert p.dtype.value == "float16"
    finally:
        p.close()


@pytest.mark.recorded_data
def test_gpu_panel_names_the_recorded_blocks_when_these_are_not(no_gpu):
    w = make("TileExplorer", Br=8, Bc=8, key="gpu-panel-explorer")
    p = fv.GPUPanel(w, key="gpu-panel-uncovered")
    try:
        v = p.recorded_html.value
        assert "no recording with Br×Bc = 8×8 at d = 32; recorded: " in v and "16×16" in v
    finally:
        p.close()
        w.close()


@pytest.mark.recorded_data
def test_tensor_core_panel_names_the_recorded_blocks_when_these_are_not(no_gpu, monkeypatch):
    from flashviz.records.results import latest_results
    from flashviz.widgets import mma_panel

    res = dict(latest_results("mma"))
    res["sweep"] = [r for r in res["sweep"] if (r["Br"], r["Bc"]) != (128, 128)]
    monkeypatch.setattr(mma_panel, "latest_results", lambda kind=None: res)
    p = fv.TensorCorePanel(Br=128, Bc=128, key="mma-uncovered")
    try:
        v = p.recorded_html.value
        assert "no recording at the selected 128×128 (recorded: 64×32, 64×64" in v
    finally:
        p.close()


@pytest.mark.parametrize("name, arg", [("OnlineSoftmaxExplorer", "source"), ("OnlineSoftmaxExplorer", "dtype"),
                                       ("BackwardExplorer", "seed"), ("BlockSizeExplorer", "order"),
                                       ("BlockSizeExplorer", "recorded"), ("TileExplorer", "canvas"),
                                       ("DecodeExplorer", "num_splits")])
def test_an_array_where_a_word_or_number_belongs_is_one_line(name, arg):
    """A 2-D array given for a string or integer argument: the message names the argument and
    quotes the array on one line (flashviz's message, not NumPy's "truth value is ambiguous")."""
    kw = {"canvas": "png", arg: np.ones((3, 3))}
    with pytest.raises((TypeError, ValueError)) as err:
        getattr(fv, name)(**kw).close()
    msg = str(err.value)
    assert msg.startswith(arg + " must be") and "\n" not in msg and "array([[1., 1., 1.], [1., 1., 1.]" in msg
