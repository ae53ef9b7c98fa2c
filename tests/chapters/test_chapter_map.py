"""The chapter map of docs/architecture.md ("Where each chapter lives") against the app and the
tree (a structure check, not a check of prose): one row per app chapter, in the app's order; the
widgets named are the ones the app builds for it; every path named exists; every lesson exists
and every widget's module imports the view named."""

from __future__ import annotations

import re
from pathlib import Path

from flashviz.widgets.app import CHAPTERS

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["chapter", "algorithm", "replay", "view", "widget", "exercises", "lesson", "tests"]


def _rows() -> list[dict]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Where each chapter lives", 1)[1].split("\n#", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    return [dict(zip(COLUMNS, (c.strip() for c in ln.strip().strip("|").split("|")))) for ln in lines[1:]]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _path(name: str) -> Path:
    return ROOT / name if name.split("/")[0] in ("notebooks", "kernels", "tests") else ROOT / "flashviz" / name


def test_one_row_per_app_chapter_in_order_with_its_widgets():
    rows = _rows()
    assert [r["chapter"] for r in rows] == list(CHAPTERS)
    for r in rows:
        assert _names(r["widget"]) == [cls for _, cls, _ in CHAPTERS[r["chapter"]]], r["chapter"]


def test_every_path_in_the_map_exists():
    for r in _rows():
        for col in ("algorithm", "replay", "view", "exercises", "lesson", "tests"):
            for name in _names(r[col]):
                assert _path(name).is_file(), f"{r['chapter']}: {col} {name} does not exist"
        assert _names(r["lesson"]) and _names(r["tests"]), r["chapter"]


def _imports_from(src: str, view: str) -> bool:
    """Whether widget source ``src`` imports from flashviz/``view`` (views/x.py): directly
    (``from ..views.x import``) or through the package (``from ..views import Name`` where x.py
    defines Name)."""
    stem = Path(view).stem
    if re.search(rf"from \.\.views\.{stem} import", src):
        return True
    defined = (ROOT / "flashviz" / view).read_text()
    for names in re.findall(r"from \.\.views import ([^\n]+)", src):
        if any(n.split()[0] == stem for n in names.split(",")):       # the module itself
            return True
        if any(re.search(rf"^(class|def) {n.strip()}\b|^{n.strip()} =", defined, re.M) for n in names.split(",")):
            return True
    return False


def test_each_widget_draws_with_the_view_named():
    for r in _rows():
        views = [n for n in _names(r["view"]) if n.startswith("views/")]
        modules = [m for m, _, _ in CHAPTERS[r["chapter"]]]
        src = "".join((ROOT / (m.replace(".", "/") + ".py")).read_text() for m in modules)
        assert any(_imports_from(src, v) for v in views), f"{r['chapter']}: {modules} import none of {views}"
