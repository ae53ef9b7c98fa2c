"""The chapter picker (Voilà app mode) opens every chapter, closes the previous one, and the
present command finds or writes its notebook."""

import matplotlib
import matplotlib.pyplot as plt

from flashviz.present import APP_SOURCE, app_notebook
from flashviz.widgets.app import APP_FIGURE, CAPTIONS, CHAPTERS, PRESENTER_FIGURE, ChapterApp, available_chapters

matplotlib.use("Agg")


def test_every_available_chapter_opens_and_a_revisit_finds_it_as_left():
    plt.close("all")
    app = ChapterApp()
    try:
        labels = available_chapters()
        assert labels[0].startswith("0") and set(labels) <= set(CHAPTERS)
        figures = 0
        for label in labels:
            app.chapter.value = label
            assert app.status.value == "", app.status.value
            assert app.current and all(w.n_frames > 0 for w in app.current if hasattr(w, "n_frames"))
            assert app.caption.value == f"<i>{CAPTIONS[label]}</i>"
            figures += sum(hasattr(w, "fig") for w in app.current)
            assert len(plt.get_fignums()) == figures          # one figure per widget built, none twice
        app.chapter.value = labels[0]
        first = app.current[0]
        first.show_frame(5)
        app.chapter.value = labels[3]
        app.chapter.value = labels[0]
        assert app.current[0] is first and first.frame.value == 5 and len(plt.get_fignums()) == figures
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_app_layout_fits_a_window():
    """The figure at the app's size, beside its controls, in a box the page's CSS scales; the
    page's header is one row; every chapter has a one-line caption."""
    import ipywidgets as W

    app = ChapterApp()
    try:
        w = app.current[0]
        assert (w.fig.get_figwidth(), w.fig.get_figheight(), w.fig.dpi) == (*APP_FIGURE["figsize"], APP_FIGURE["dpi"])
        assert "flashviz-fit" in w.widget._dom_classes and "flashviz-side" in w.widget._dom_classes
        (row,) = w.widget.children
        controls, canvas = row.children
        assert w.transport in controls.children and w.export_row in controls.children and canvas not in controls.children
        assert "object-fit: contain" in app.title.value and "100vh" in app.title.value
        assert app.header.children == (app.title, app.chapter, app.busy) and app.busy.value == ""
        for label in available_chapters():
            assert CAPTIONS[label] and "\n" not in CAPTIONS[label] and len(CAPTIONS[label]) <= 110, label
        gpu = app.body.children[1]
        assert isinstance(gpu, W.Accordion) and gpu.selected_index is None      # the GPU panel folded
        assert gpu.titles == (app.current[1].TITLE,) and "Panel" not in gpu.titles[0]   # a header, not a class name
    finally:
        app.close()


def test_presenter_mode_draws_larger():
    app = ChapterApp(presenter=True)
    try:
        w = app.current[0]
        assert w.fig.dpi == PRESENTER_FIGURE["dpi"] > APP_FIGURE["dpi"] and "font-size: 20px" in app.title.value
        assert w.export_row.layout.display == "none" and w.speed.layout.display == "none"
    finally:
        app.close()


def test_presenter_mode_opens_every_chapter():
    """The presenter's larger figure sizes go only to widgets that take them (the tensor-core
    panel has no figure): every chapter still opens."""
    plt.close("all")
    app = ChapterApp(presenter=True)
    try:
        assert "7 · The GPU kernel" in available_chapters()
        for label in available_chapters():
            app.chapter.value = label
            assert app.status.value == "", (label, app.status.value)
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_present_finds_the_repo_notebook_or_writes_one(tmp_path):
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    assert app_notebook(repo) == repo / "notebooks" / "app.ipynb"
    made = app_notebook(tmp_path)
    assert made.exists() and "ChapterApp" in made.read_text() and "ChapterApp" in APP_SOURCE


def test_present_has_its_own_port_beside_make_lab():
    """make lab and make present run side by side: different default ports in the Makefile."""
    import re
    from pathlib import Path
    mk = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    lab = re.search(r"^PORT\s*\?=\s*(\d+)", mk, re.M).group(1)
    present = re.search(r"^PRESENT_PORT\s*\?=\s*(\d+)", mk, re.M).group(1)
    assert lab != present
    assert "--port=$(PRESENT_PORT)" in mk


def test_present_on_a_taken_port_fails_with_one_line(capsys):
    """A port already in use: one line on stderr and exit code 2 — never a URL that does not work."""
    import socket

    from flashviz.present import main
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        code = main(["--port", str(port), "--no-browser"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"port {port} on 127.0.0.1 is already in use" in lines[0] and "--port" in lines[0]


def test_present_passes_presenter_and_prefetch_to_the_app_kernel(monkeypatch, tmp_path):
    """present becomes Voilà (os.execve) with FLASHVIZ_PRESENTER and FLASHVIZ_PREFETCH in its
    environment; the app notebook's cell reads them (the kernel inherits the server's environment)."""
    import os
    import socket
    from pathlib import Path

    from flashviz import present

    calls = []
    monkeypatch.setattr(os, "execve", lambda exe, cmd, env: calls.append((cmd, env)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for argv, want in (([], ("0", "1")), (["--presenter", "--no-prefetch"], ("1", "0"))):
        present.main(["--port", str(port), "--no-browser", "--root", str(tmp_path), *argv])
        env = calls[-1][1]
        assert (env["FLASHVIZ_PRESENTER"], env["FLASHVIZ_PREFETCH"]) == want
    assert 'os.environ.get("FLASHVIZ_PREFETCH") != "0"' in present.APP_SOURCE
    app_md = (Path(__file__).resolve().parents[2] / "notebooks" / "app.md").read_text()
    assert 'prefetch=os.environ.get("FLASHVIZ_PREFETCH") != "0"' in app_md


def test_present_rejects_an_impossible_port(capsys):
    from flashviz.present import main
    assert main(["--port", "70000", "--no-browser"]) == 2
    assert "between 1 and 65535" in capsys.readouterr().err


def test_a_chapter_that_fails_says_so_and_is_tried_again(monkeypatch):
    from flashviz.widgets import app as app_module

    label = "2 · Online softmax"
    good = app_module.CHAPTERS[label]
    monkeypatch.setitem(app_module.CHAPTERS, label, [("flashviz.widgets.online_softmax", "OnlineSoftmaxExplorer",
                                                      {"N": -1})])
    plt.close("all")
    app = ChapterApp()
    try:
        app.chapter.value = label
        assert "could not start" in app.status.value and "ValueError" in app.status.value
        assert app.current == []
        app.chapter.value = available_chapters()[0]               # the picker keeps working
        assert app.status.value == "" and app.current
        monkeypatch.setitem(app_module.CHAPTERS, label, good)
        app.chapter.value = label                                  # not kept: built again, now fine
        assert app.status.value == "" and app.current[0].n_frames > 0
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_closing_the_app_closes_every_widget_it_made():
    """Every comm the app opened (its chapters' widgets, the boxes it rearranged them into, the
    folds) is closed by close(); re-running the app's cell closes the old app."""

    plt.close("all")
    from ipywidgets.widgets.widget import _instances  # ipywidgets 8: every live widget (comm) by id

    before = set(_instances)
    app = ChapterApp(key="test-close")
    try:
        for label in available_chapters()[:3]:
            app.chapter.value = label
    finally:
        app.close()
    assert set(_instances) - before == set()
    first = ChapterApp(key="test-rerun")
    second = ChapterApp(key="test-rerun")                     # the same cell run again
    try:
        assert first.widget.comm is None and first.current == []
    finally:
        second.close()
    assert set(_instances) - before == set() and plt.get_fignums() == []


class _Loop:
    """A stand-in for the kernel's IOLoop: keeps the calls ChapterApp schedules, runs them on demand."""

    def __init__(self):
        self.pending = []

    def call_later(self, delay, fn):
        handle = (delay, fn)
        self.pending.append(handle)
        return handle

    def remove_timeout(self, handle):
        self.pending.remove(handle)

    def run(self):
        delay, fn = self.pending.pop(0)
        fn()
        return delay


def test_the_next_chapter_is_made_in_idle_time_without_changing_the_page():
    """In a kernel, PREFETCH_DELAY_S after a chapter opens, the chapter after it (picker order,
    wrapping) is made once; the page shown does not change; a visit then finds it made (no new
    figure); a new pick before the timer fires replaces the timer; close() cancels it."""
    from flashviz.widgets import app as app_module

    plt.close("all")
    loop = _Loop()
    labels = available_chapters()
    app = ChapterApp(labels[2], loop=loop)
    try:
        assert app.built == [labels[2]] and [d for d, _ in loop.pending] == [app_module.PREFETCH_DELAY_S]
        shown, body, caption = app.current, app.body.children, app.caption.value
        figures = len(plt.get_fignums())
        loop.run()
        assert app.built == labels[2:4] and loop.pending == []
        assert app.current is shown and app.body.children == body and app.caption.value == caption
        assert app.status.value == "" and len(plt.get_fignums()) > figures
        figures = len(plt.get_fignums())
        made = app._chapters[labels[3]][0]
        app.chapter.value = labels[3]                          # the visit finds it made
        assert app.current is made and len(plt.get_fignums()) == figures
        assert app.current[0].n_frames > 0 and app.caption.value == f"<i>{CAPTIONS[labels[3]]}</i>"
        assert len(loop.pending) == 1
        app.chapter.value = labels[-1]                         # a new pick replaces the timer
        assert len(loop.pending) == 1
        loop.run()                                             # after the last comes the first
        assert app.built == [labels[0], *labels[2:4], labels[-1]] and loop.pending == []
        app.chapter.value = labels[5]
        loop.run()
        assert labels[6] in app.built
        app.chapter.value = labels[6]
        assert app.current is app._chapters[labels[6]][0]
    finally:
        app.close()
    assert loop.pending == [] and plt.get_fignums() == []

    quiet = ChapterApp(loop=_Loop(), prefetch=False)                # prefetch off: nothing scheduled
    assert quiet._loop is None and quiet._timer is None
    quiet.close()
    plain = ChapterApp()                                            # outside a kernel: no loop, nothing made ahead
    assert plain._loop is None and plain._timer is None and plain.built == [labels[0]]
    plain.close()
    assert plt.get_fignums() == []


def test_a_next_chapter_that_fails_in_idle_time_is_not_kept_and_its_visit_shows_the_error(monkeypatch):
    from flashviz.widgets import app as app_module

    label = "2 · Online softmax"
    monkeypatch.setitem(app_module.CHAPTERS, label, [("flashviz.widgets.online_softmax", "OnlineSoftmaxExplorer",
                                                      {"N": -1})])
    plt.close("all")
    labels = available_chapters()
    loop = _Loop()
    app = ChapterApp(labels[labels.index(label) - 1], loop=loop)
    try:
        loop.run()
        assert label not in app.built and app.status.value == ""      # nothing said until it is visited
        app.chapter.value = label
        assert "could not start" in app.status.value and "ValueError" in app.status.value
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_in_a_kernel_the_idle_build_waits_for_a_page_to_load_the_widgets(monkeypatch):
    """Voilà runs the app's cell before its page connects: no chapter is made ahead until a front
    end has opened ipywidgets' control comm (asked for the widgets), and PREFETCH_DELAY_S after
    that, so no widget is made while the page connects (it would reach the page half made:
    app.page_connected)."""
    import ipywidgets as W

    from flashviz.widgets import app as app_module

    plt.close("all")
    loop = _Loop()
    monkeypatch.setattr(app_module, "_kernel_loop", lambda: loop)      # "in a kernel"
    monkeypatch.setattr(W.Widget, "_control_comm", None)               # no page yet
    labels = available_chapters()
    app = ChapterApp(labels[2], loop=loop)
    try:
        assert not app_module.page_connected()
        for _ in range(3):                                             # no page: waits, however long
            loop.run()
            assert app.built == [labels[2]] and len(loop.pending) == 1
        monkeypatch.setattr(W.Widget, "_control_comm", object())       # the page opened it
        assert app_module.page_connected()
        loop.run()                                                     # it just connected: one more wait
        assert app.built == [labels[2]] and len(loop.pending) == 1
        loop.run()
        assert app.built == labels[2:4] and loop.pending == []
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_prefetch_must_be_a_bool():
    import pytest

    with pytest.raises(TypeError, match="prefetch must be True or False"):
        ChapterApp(prefetch="yes")


def test_the_idle_build_waits_while_the_shown_chapter_plays_or_is_stepped():
    """A class watching the shown chapter is never stalled by the build ahead: while it plays, or
    when it moved since the timer started, the timer starts again; once it stays still for
    PREFETCH_DELAY_S the next chapter is made."""
    plt.close("all")
    loop = _Loop()
    labels = available_chapters()
    app = ChapterApp(labels[2], loop=loop)            # Online softmax: an animated widget
    try:
        w = app.current[0]
        w.frame.value = 3                              # stepped before the timer fired
        loop.run()
        assert app.built == [labels[2]] and len(loop.pending) == 1
        w.play.playing = True
        for _ in range(3):                             # playing: waits, however long
            loop.run()
            assert app.built == [labels[2]] and len(loop.pending) == 1
        w.play.playing = False
        loop.run()                                     # it just stopped: one more quiet wait
        assert app.built == [labels[2]]
        loop.run()
        assert app.built == labels[2:4] and loop.pending == []
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_an_idle_build_whose_layout_fails_closes_what_it_made(monkeypatch):
    """A failure after the widgets are made (laying them out) is caught like one while making
    them: nothing kept, every widget and box it made closed, the visit shows the error."""
    from ipywidgets.widgets.widget import _instances

    plt.close("all")
    labels = available_chapters()
    loop = _Loop()
    app = ChapterApp(labels[0], loop=loop, key="test-fit-fails")
    before = set(_instances)
    real_fit = ChapterApp._fit

    def fit(self, w):
        raise RuntimeError("layout broke")

    monkeypatch.setattr(ChapterApp, "_fit", fit)
    try:
        loop.run()
        assert app.built == [labels[0]] and labels[1] in app._skip
        assert set(_instances) - before == set()                      # the build's widgets are all closed
        app.chapter.value = labels[1]
        assert "could not start" in app.status.value and "layout broke" in app.status.value
        assert app.body.children == ()
    finally:
        monkeypatch.setattr(ChapterApp, "_fit", real_fit)
        app.close()
    assert plt.get_fignums() == []


def test_a_chapter_made_on_its_visit_says_so_while_it_is_made(monkeypatch):
    """A pick of a chapter not made yet: the line beside the picker says a chapter is being made
    and the page dims the last one for as long as the build takes (the widget updates leave the
    kernel at once, so the page shows them during the build); both are gone once it is shown.
    A revisit (nothing to make) says nothing."""
    import html

    from flashviz.widgets import app as app_module

    labels = available_chapters()
    app = ChapterApp(labels[0])
    seen = []
    real_build = ChapterApp._build

    def build(self, label):
        seen.append((label, self.busy.value, "flashviz-app-busy" in self.widget._dom_classes))
        return real_build(self, label)

    monkeypatch.setattr(ChapterApp, "_build", build)
    try:
        app.chapter.value = labels[2]
        assert seen == [(labels[2], app_module.BUSY_HTML.format(label=html.escape(labels[2])), True)]
        assert app.busy.value == "" and "flashviz-app-busy" not in app.widget._dom_classes
        app.chapter.value = labels[0]                     # made before: no build, nothing said
        assert len(seen) == 1 and app.busy.value == ""
        assert ".flashviz-app-busy .flashviz-app-body" in app_module.APP_CSS
    finally:
        app.close()
    assert plt.get_fignums() == []


def test_present_shuts_down_the_kernels_of_closed_pages(monkeypatch, tmp_path, capsys):
    """present hands Voilà jupyter_server's culler: a closed page's kernel goes after --cull-idle
    seconds idle (default CULL_IDLE_S), an open page's never (cull_connected False); 0 turns it
    off; a negative value is refused in one line. (The browser test test_present_kernels checks
    that Voilà really does it.)"""
    import os
    import socket

    from flashviz import present

    calls = []
    monkeypatch.setattr(os, "execve", lambda exe, cmd, env: calls.append(cmd))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = ["--port", str(port), "--no-browser", "--root", str(tmp_path)]
    present.main(base)
    assert f"--MappingKernelManager.cull_idle_timeout={present.CULL_IDLE_S}" in calls[-1]
    assert "--MappingKernelManager.cull_connected=False" in calls[-1]
    assert "--MappingKernelManager.cull_interval=60" in calls[-1]
    present.main([*base, "--cull-idle", "4"])
    assert {"--MappingKernelManager.cull_idle_timeout=4", "--MappingKernelManager.cull_interval=2"} <= set(calls[-1])
    present.main([*base, "--cull-idle", "0"])
    assert not [a for a in calls[-1] if "cull" in a]
    assert present.main([*base, "--cull-idle", "-5"]) == 2 and len(calls) == 3
    assert "--cull-idle must be 0 (never) or a number of seconds, got -5" in capsys.readouterr().err
