"""The export's caches are exact (issue 10, item 5): a frame built incrementally (slow layer kept
while its content is unchanged, texts pasted from the text cache) equals the same frame drawn from
scratch, and an export refuses a path it cannot write before it renders anything."""

import os

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

import flashviz as fv
from flashviz.views import compositor, gif
from flashviz.views.export import AnimationExport, output_path, save_animation, save_frame_png


def _make(key):
    return fv.TileExplorer(N=96, Br=16, Bc=16, causal=True, canvas="png", key=key)


def _full_redraw(view, k):
    """Frame k as the widget draws it from nothing: its Blitter with no cached background."""
    view.blitter.static_bg = None
    view.render(k)
    return np.asarray(view.fig.canvas.buffer_rgba()).copy()


def test_incremental_frames_equal_full_redraws():
    a, b = _make("cache-incremental"), _make("cache-reference")
    try:
        comp = compositor.Compositor(a._view)
        ks = list(range(a.n_frames)) + [a.n_frames // 2, 3, 3, a.n_frames - 1, 0]   # in order, then jumps
        for i, k in enumerate(ks):
            got = comp.frame(k)
            if i % 4 == 0 or i >= a.n_frames:
                ref = _full_redraw(b._view, k)
                assert got.shape == ref.shape
                bad = np.any(got != ref, axis=2)
                assert not bad.any(), f"frame {k}: {int(bad.sum())} pixels differ from a full redraw"
        # the caches were used, so the equality above says something
        hits = sum(h for h, _ in comp.texts.tally.values())
        assert hits > len(ks), comp.texts.tally
        assert comp.slow_draws < len(comp.slow) * len(ks) // 2, comp.slow_draws
    finally:
        a.close()
        b.close()


def test_incremental_frame_matches_save_png(tmp_path):
    """An independent reference: savefig draws every artist by zorder, not by blitting layers."""
    a, b = _make("cache-png-a"), _make("cache-png-b")
    try:
        comp = compositor.Compositor(a._view)
        for k in range(a.n_frames):
            got = comp.frame(k)
        k = a.n_frames - 1
        png = np.asarray(Image.open(b.save_png(tmp_path / "last.png", k)).convert("RGB")).astype(int)
        diff = np.abs(got[..., :3].astype(int) - png).max(axis=2)
        assert (diff > 64).mean() < 0.005       # the same bound as the GIF test (layer order at edges)
    finally:
        a.close()
        b.close()


class _ToyView:
    """A view with overlapping slow artists (two images in one axes, the second half transparent),
    a third image elsewhere, and fast texts over them; ``draw_frame(k)`` changes some of them."""

    n_frames = 12

    def __init__(self):
        from flashviz.views.blit import Blitter

        self.fig = Figure(figsize=(4, 3), dpi=72)
        FigureCanvasAgg(self.fig)
        ax1, ax2 = self.fig.add_subplot(1, 2, 1), self.fig.add_subplot(1, 2, 2)
        self.a = ax1.imshow(np.zeros((8, 8)), vmin=0, vmax=12)
        self.b = ax1.imshow(np.zeros((4, 4)), vmin=0, vmax=12, alpha=0.5, extent=(0, 4, 4, 0))
        self.c = ax2.imshow(np.zeros((6, 6)), vmin=0, vmax=12)
        self.t1 = ax1.text(2, 4, "", color="w", fontsize=12)
        self.t2 = self.fig.text(0.02, 0.95, "", fontsize=10)
        self.blitter = Blitter(self.fig, *self.animated_artists())

    def animated_artists(self):
        return [self.a, self.b, self.c], [self.t1, self.t2]

    def draw_frame(self, k):
        self.a.set_data(np.full((8, 8), k // 4))          # changes every 4th frame
        self.b.set_data(np.full((4, 4), (k * 5) % 3))     # overlaps a: both re-drawn together
        self.c.set_data(np.eye(6) * (k // 3))
        self.t1.set_text("same")                          # over an image that changes
        self.t2.set_text(f"step {k % 5}")

    def render(self, k):
        self.draw_frame(k)
        self.blitter.update(object())


def test_overlapping_slow_artists_equal_full_redraws():
    toy, ref = _ToyView(), _ToyView()
    comp = compositor.Compositor(toy)
    for k in list(range(toy.n_frames)) + [3, 3, 11, 0]:
        got = comp.frame(k)
        ref.blitter.static_bg = None
        ref.render(k)
        assert np.array_equal(got, np.asarray(ref.fig.canvas.buffer_rgba())), k
    assert comp.groups == [[0, 1], [2]]
    assert comp.slow_draws < 3 * (toy.n_frames + 4)


def test_overlap_groups():
    r = [(slice(0, 10), slice(0, 10)), (slice(20, 30), slice(0, 10)), (slice(5, 25), slice(5, 8)),
         (slice(40, 50), slice(40, 50))]
    assert compositor.overlap_groups(r) == [[0, 1, 2], [3]]
    assert compositor.overlap_groups(r[:2]) == [[0], [1]]
    assert compositor.overlap_groups([]) == []


def _scene():
    """A figure with a text over a rectangle that moves under it; returns (fig, canvas, text, rect)."""
    fig = Figure(figsize=(4, 2), dpi=80)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4)
    rect = Rectangle((0, 1), 1, 2, color="tab:orange", animated=True)
    ax.add_patch(rect)
    text = ax.text(2, 2, "", fontsize=11, animated=True)
    canvas.draw()
    return fig, canvas, text, rect


# (string, x of the rectangle, colour, multi-line alignment, rotation)
_STEPS = [("first", 0, "k", "left", 0), ("first", 0, "k", "left", 0), ("first", 2.5, "k", "left", 0),
          ("first", 2.5, "k", "left", 0), ("second\nline", 2.5, "k", "left", 0),
          ("second\nline", 2.5, "k", "right", 0), ("second\nline", 2.5, "k", "right", 0),
          ("first", 2.5, "tab:blue", "left", 0), ("first", 2.5, "tab:blue", "left", 30),
          ("first", 0, "k", "left", 0), ("$e^{-46}$ x", 0, "k", "left", 0), ("$e^{-46}$ x", 0, "k", "left", 0)]


def _play(cached: bool, margin=None):
    fig, canvas, text, rect = _scene()
    bg = canvas.copy_from_bbox(fig.bbox)
    cache = compositor.TextCache(fig, canvas)
    if margin is not None:
        cache.margin[id(text)] = margin
        cache.MAX_MARGIN = margin
    frames = []
    for s, x, colour, align, rot in _STEPS:
        text.set_text(s)
        text.set_color(colour)
        text.set_multialignment(align)           # no public getter: the key must still see it
        text.set_rotation(rot)
        rect.set_x(x)
        canvas.restore_region(bg)
        fig.draw_artist(rect)
        if cached:
            cache.draw(text)
        else:
            fig.draw_artist(text)
        frames.append(np.asarray(canvas.buffer_rgba()).copy())
    return frames, cache, text


def test_text_cache_equals_plain_draws():
    plain, _, _ = _play(False)
    cached, cache, text = _play(True)
    for i, (x, y) in enumerate(zip(plain, cached)):
        assert np.array_equal(x, y), f"step {i}: {_STEPS[i]}"
    assert cache.tally[id(text)][0] >= 3 and id(text) not in cache.off


def test_text_cache_refuses_a_footprint_smaller_than_the_ink():
    plain, _, _ = _play(False)
    cached, cache, text = _play(True, margin=-4)     # a core inside the glyphs
    assert all(np.array_equal(x, y) for x, y in zip(plain, cached))
    assert id(text) in cache.off and cache.tally[id(text)][0] == 0


def test_text_cache_gives_up_on_a_counter():
    fig, canvas, text, rect = _scene()
    cache = compositor.TextCache(fig, canvas)
    for i in range(cache.GIVE_UP + 4):
        text.set_text(f"step {i}")
        cache.draw(text)
    assert id(text) in cache.off and len(cache.entries) < cache.GIVE_UP


def test_slow_content_comparison():
    a = np.array([[1.0, np.nan], [0.0, 2.0]])
    kept = compositor.kept(["img", a, (0.0, 1.0)])
    assert compositor.same(kept, ["img", a.copy(), (0.0, 1.0)])          # NaN equals NaN
    b = a.copy()
    b[1, 0] = -0.0
    assert not compositor.same(kept, ["img", b, (0.0, 1.0)])             # any bit that changed counts
    a[0, 0] = 5.0                                                     # the kept copy is not a view
    assert not compositor.same(kept, ["img", a, (0.0, 1.0)])
    assert not compositor.same(kept, ["img", a.astype(np.float32), (0.0, 1.0)])
    assert not compositor.same(None, ["img"]) and not compositor.same(kept, None)


# --- paths that cannot be written: one line, before any rendering -------------------------------

@pytest.fixture
def counted():
    w = _make("cache-bad-path")
    drawn = []
    view = w._view
    original = view.draw_frame
    view.draw_frame = lambda k: (drawn.append(k), original(k))[1]
    yield w, drawn
    w.close()


@pytest.mark.parametrize("name, exc, words", [
    ("no-such-dir/run.gif", FileNotFoundError, "does not exist"),
    ("a-dir.gif", IsADirectoryError, "is a folder"),
    ("run.jpg", ValueError, "must end in .gif or .mp4"),
    ("a-file.txt/run.gif", NotADirectoryError, "is a file, not a folder"),
    ("run", ValueError, "must end in .gif or .mp4"),
])
@pytest.mark.parametrize("call", ["save_animation", "AnimationExport"])
def test_unwritable_export_paths_fail_before_rendering(tmp_path, counted, name, exc, words, call):
    w, drawn = counted
    (tmp_path / "a-dir.gif").mkdir()
    (tmp_path / "a-file.txt").write_text("x")
    path = tmp_path / name
    fn = save_animation if call == "save_animation" else AnimationExport
    with pytest.raises(exc) as info:
        fn(w._view, path, frames=range(0, w.n_frames, 2), parallel=True)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and words in msg, msg
    assert drawn == []                                # nothing rendered, no worker started
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.parametrize("name, exc, words", [("x.gif", ValueError, "must end in .png"),
                                              ("nope/x.png", FileNotFoundError, "does not exist"),
                                              ("a-dir.png", IsADirectoryError, "give a file name inside it")])
def test_unwritable_png_paths_fail_before_drawing(tmp_path, counted, name, exc, words):
    w, drawn = counted
    (tmp_path / "a-dir.png").mkdir()
    with pytest.raises(exc, match=words):
        save_frame_png(w._view, 3, tmp_path / name)
    assert drawn == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_directory_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="no permission"):
            output_path(ro / "x.gif", (".gif",))
    finally:
        ro.chmod(0o700)


def test_output_path_accepts_a_writable_file(tmp_path):
    assert output_path(str(tmp_path / "Run.GIF"), (".gif", ".mp4")) == tmp_path / "Run.GIF"
    with pytest.raises(TypeError, match="file name"):
        output_path(3, (".gif",))


# --- the GIF written frame by frame is the GIF Pillow writes ------------------------------------

def test_streamed_gif_decodes_like_pillows(tmp_path):
    """Frames cropped to their changes in the workers, written with our header and delays, decode
    to the same pictures and durations as Pillow's own animated-GIF writer."""
    rng = np.random.default_rng(0)
    pal = list(rng.integers(0, 256, 768))
    base = rng.integers(0, 256, (40, 64), dtype=np.uint8)
    frames = [base.copy() for _ in range(6)]
    frames[1][5:9, 10:30] = 7
    frames[2] = frames[1].copy()                    # unchanged: merged into frame 1's delay
    frames[3][0, 0] = 1                             # one pixel (a corner)
    frames[4][39, 63] = 200
    frames[5] = rng.integers(0, 256, (40, 64), dtype=np.uint8)

    ours = tmp_path / "ours.gif"
    blocks, prev = [], None
    for f in frames:
        box = gif.changed_box(prev, f)
        blocks.append(None if box is None else gif.image_block(f, box))
        prev = f
    with open(ours, "wb") as fh:
        fh.write(gif.header((64, 40), pal))
        pending, shown = None, 0
        for b in blocks:
            if b is None:
                shown += 125
                continue
            if pending is not None:
                fh.write(gif.delay(shown) + pending)
            pending, shown = b, 125
        fh.write(gif.delay(shown) + pending + b";")

    theirs = tmp_path / "theirs.gif"
    ims = []
    for f in frames:
        im = Image.frombytes("P", (64, 40), f.tobytes())
        im.putpalette(pal)
        ims.append(im)
    ims[0].save(theirs, save_all=True, append_images=ims[1:], duration=125, loop=0, optimize=False)

    a, b = Image.open(ours), Image.open(theirs)
    assert a.n_frames == b.n_frames == 5 and a.info["loop"] == b.info["loop"] == 0
    for i in range(a.n_frames):
        a.seek(i)
        b.seek(i)
        assert a.info["duration"] == b.info["duration"], i
        assert np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB"))), i


def test_changed_box():
    a = np.zeros((5, 7), np.uint8)
    b = a.copy()
    assert gif.changed_box(None, a) == (0, 0, 7, 5)
    assert gif.changed_box(a, b) is None
    b[1, 2] = b[3, 5] = 9
    assert gif.changed_box(a, b) == (2, 1, 6, 4)
