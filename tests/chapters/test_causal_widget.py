"""CausalExplorer and its view: tile kinds, the bottom-right aligned mask, FLOPs and bytes saved."""


import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from widget_contract import assert_close_frees_every_comm, assert_recreating_leaks_no_figure

import flashviz as fv
from flashviz.exercises.tiling import check_causal_mask, check_tile_count, tile_count
from flashviz.iomodel import flash_forward_io
from flashviz.masking import n_key_blocks_visible
from flashviz.views.causal_view import CausalFigure, tile_kinds, visible_pairs
from flashviz.widgets.causal import CausalExplorer

matplotlib.use("Agg")


@pytest.fixture
def explorer():
    w = CausalExplorer(Nq=96, Nk=160, Br=32, Bc=32, key="test-causal")
    yield w
    w.close()


def brute_force_kinds(Nq, Nk, Br, Bc):
    """Classify each tile by enumerating the mask entry by entry (query r sees key c iff c <= r + Nk - Nq)."""
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    out = np.empty((Tr, Tc), dtype=object)
    for i in range(Tr):
        for j in range(Tc):
            seen = [c <= r + Nk - Nq for r in range(i * Br, min((i + 1) * Br, Nq))
                    for c in range(j * Bc, min((j + 1) * Bc, Nk))]
            out[i, j] = "full" if all(seen) else "skipped" if not any(seen) else "partial"
    return out


@pytest.mark.parametrize("Nq,Nk,Br,Bc", [(64, 64, 16, 16), (40, 24, 4, 8), (24, 40, 8, 4), (33, 70, 8, 16),
                                         (70, 33, 16, 8), (1, 50, 4, 4), (50, 1, 4, 4), (17, 17, 32, 1)])
def test_tile_kinds_equal_brute_force(Nq, Nk, Br, Bc):
    kinds = tile_kinds(Nq, Nk, Br, Bc)
    assert (kinds == brute_force_kinds(Nq, Nk, Br, Bc)).all()
    assert visible_pairs(Nq, Nk) == sum(c <= r + Nk - Nq for r in range(Nq) for c in range(Nk))
    assert int((kinds != "skipped").sum()) == tile_count(Nq, Nk, Br, Bc, causal=True)


def test_every_frame_walks_the_query_blocks(explorer):
    w = explorer
    assert w.n_frames == 3
    model = flash_forward_io(96, 160, 32, Br=32, Bc=32, causal=True)
    last_flops = 0
    for k in range(w.n_frames):
        s = w.show_frame(k)
        assert s.k == s.i == k and (s.r0, s.r1) == (32 * k, 32 * k + 32)
        assert s.visited == n_key_blocks_visible(s.r1, 160, 32, 96, True)
        assert s.visited + s.n_skipped == 5 and s.n_full + s.n_partial == s.visited
        assert s.flops_so_far > last_flops
        last_flops = s.flops_so_far
        assert f"query block {k + 1}/3" in w._view.step.get_text()
    assert (s.flops_so_far, s.bytes_so_far) == (model.flops, model.hbm_bytes)


def test_counts_shown_equal_the_io_model(explorer):
    w = explorer
    for Nq, Nk, Br, Bc in [(96, 160, 32, 32), (160, 96, 16, 32), (77, 77, 8, 16)]:
        w.Nq.value, w.Nk.value, w.Br.value, w.Bc.value = Nq, Nk, Br, Bc
        c = w.counts
        for mask, causal in (("causal", True), ("non-causal", False)):
            m = flash_forward_io(Nq, Nk, 32, Br=Br, Bc=Bc, causal=causal)
            assert c["flops"][mask] == m.flops and c["hbm_bytes"][mask] == m.hbm_bytes
        assert c["tiles"]["causal"] == tile_count(Nq, Nk, Br, Bc, causal=True)
        assert w.result.io == flash_forward_io(Nq, Nk, 32, Br=Br, Bc=Bc, causal=True)
        assert c["kinds"] == {kd: int((brute_force_kinds(Nq, Nk, Br, Bc) == kd).sum())
                              for kd in ("full", "partial", "skipped")}
        assert "✓" in w.status.value and "= flash_forward_io" in w.status.value
        table = w._view.fig.texts + [t for ax in w.fig.axes for t in ax.texts]
        rows = [ln.split() for t in table for ln in t.get_text().splitlines() if ln.startswith("tiles computed")]
        assert [r[2:4] for r in rows] == [[str(c["tiles"]["non-causal"]), str(c["tiles"]["causal"])]], rows


def test_rows_that_see_no_key(explorer):
    w = explorer
    w.Nq.value, w.Nk.value = 200, 64                     # the first 136 rows see no key
    assert "rows 0–135: O = 0, lse = −inf ✓" in w.status.value
    assert np.all(w.result.O[:136] == 0) and np.isneginf(w.result.lse[:136]).all()
    texts = [t.get_text() for t in w.fig.axes[0].texts]
    assert any("rows 0–135 see no key" in t for t in texts)
    s = w.show_frame(0)
    assert s.visited == 0 and "sees no key" in s.text
    assert not w._view.box.get_visible()


def test_play_and_controls(explorer):
    w = explorer
    w.play.value = 2
    assert w.state.k == 2
    w.prev_button.click()
    assert w.state.k == 1
    w.Nq.value = 50
    assert w.result.O.shape == (50, 32) and w.frame.value == 0
    w.Nk.value = 300
    assert w.result.trace.Nk == 300
    w.Br.value = 8
    assert w.n_frames == 7
    w.Bc.value = 128
    assert w.result.trace.Tc == 3
    w.d.value = 64
    assert w.result.O.shape == (50, 64) and w.counts["flops"]["non-causal"] == 4 * 50 * 300 * 64


def test_extremes():
    w = CausalExplorer(Nq=1, Nk=2048, Br=1, Bc=256, key="causal-extremes")
    try:
        s = w.show_frame(0)
        assert w.n_frames == 1 and s.visited == 8 and s.n_skipped == 0
        w.Nq.value, w.Nk.value = 2048, 1
        w.Br.value = 256
        s = w.show_frame(w.n_frames - 1)
        assert s.visited == 1 and w.counts["tiles"]["causal"] == 1
        assert "rows 0–2046" in w.status.value and "✓" in w.status.value
        w.Nq.value = w.Nk.value = 2048
        w.Br.value = w.Bc.value = 32                           # 64 × 64 = 4096 tiles: the limit
        assert w.n_frames == 64
        for k in range(0, 64, 9):
            w.show_frame(k)
        before = w.result
        w.Bc.value = 16                                        # 8192 tiles: refused, with the reason
        assert "too many to animate" in w.status.value and w.result is before
    finally:
        w.close()


def test_no_figure_leak_and_close_is_idempotent():
    assert_recreating_leaks_no_figure(lambda: CausalExplorer(Nq=32, Nk=48))


def test_close_closes_every_comm():
    assert_close_frees_every_comm(lambda: CausalExplorer(Nq=32, Nk=48, key="causal-comms"), at_least=15)


def test_export_png_and_gif(tmp_path, explorer):
    from PIL import Image

    w = explorer
    w.show_frame(1)
    png = w.save_png(tmp_path / "f.png")
    assert Image.open(png).size == (int(w.fig.bbox.width), int(w.fig.bbox.height))
    assert w.state.k == 1
    gif = w.save_gif(tmp_path / "run.gif")
    im = Image.open(gif)
    assert im.n_frames == 3
    im.seek(0)
    first = np.asarray(im.convert("RGB")).copy()
    im.seek(2)
    assert (np.asarray(im.convert("RGB")) != first).any()


def test_png_canvas_draws_frames():
    w = CausalExplorer(Nq=64, Nk=96, canvas="png", key="causal-png")
    try:
        first = w._canvas_widget.value
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        w.show_frame(1)
        assert w._canvas_widget.value != first
    finally:
        w.close()


def test_figure_refuses_a_non_causal_trace():
    Q, K, V = fv.data.random_qkv(32, 8)
    fig = plt.figure()
    try:
        for kw in (dict(causal=False), dict(causal=True, order="fa1")):
            with pytest.raises(ValueError, match="causal FA2"):
                CausalFigure(fig, fv.flash_forward(Q, K, V, Br=8, Bc=8, record=True, **kw).trace)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("kw,exc", [
    (dict(Nq=0), ValueError), (dict(Nk=2049), ValueError), (dict(Nq=2.5), TypeError), (dict(Br=3), ValueError),
    (dict(Bc=None), TypeError), (dict(d=128), ValueError), (dict(canvas="svg"), ValueError),
    (dict(Nq=2048, Nk=2048, Br=16, Bc=16), ValueError), (dict(seed="x"), TypeError),
])
def test_bad_arguments_one_line_errors(kw, exc):
    plt.close("all")
    with pytest.raises(exc) as info:
        CausalExplorer(**kw)
    assert "\n" not in str(info.value)
    assert plt.get_fignums() == []


# --- exercises -----------------------------------------------------------------------------------

def test_check_tile_count(capsys):
    assert check_tile_count(64, 256, 256, 32, 32).ok
    assert check_tile_count(36, 256, 256, 32, 32, causal=True).ok
    assert check_tile_count(np.int64(12), 100, 70, 32, 32).ok           # ⌈100/32⌉ · ⌈70/32⌉ = 4 · 3
    r = check_tile_count(64, 256, 256, 32, 32, causal=True)
    assert not r.ok and "hint" in r.message
    for bad in (None, ..., "64", float("nan"), True):
        r = check_tile_count(bad, 256, 256, 32, 32)
        assert not r.ok and r.message.startswith("✗ Not yet")
    assert "invalid" in check_tile_count(1, 256, 0, 32, 32).message
    out = capsys.readouterr().out
    assert out.count("✓ Right") == 3 and out.count("✗ Not yet") == 7


def test_check_causal_mask():
    assert check_causal_mask(lambda r, c, Nq, Nk: c <= r + Nk - Nq).ok
    assert check_causal_mask(lambda r, c, Nq, Nk: np.bool_(c - r <= Nk - Nq)).ok
    top_left = check_causal_mask(lambda r, c, Nq, Nk: c <= r)          # right only when Nq = Nk
    assert not top_left.ok and "Nq=3, Nk=5" in top_left.message
    assert not check_causal_mask(lambda r, c, Nq, Nk: True).ok
    raising = check_causal_mask(lambda r, c, Nq, Nk: 1 / 0)
    assert not raising.ok and "ZeroDivisionError" in raising.message
    assert "return True or False" in check_causal_mask(lambda r, c, Nq, Nk: None).message
    assert not check_causal_mask(lambda r: True).ok                     # wrong signature: reported
    assert not check_causal_mask("c <= r").ok
