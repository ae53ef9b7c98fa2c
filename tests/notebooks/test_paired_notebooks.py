"""Every lesson is a pair (issue 11): ``notebooks/NN_name.ipynb``, committed without outputs, and
``notebooks/NN_name.md``, the same notebook as MyST Markdown text (jupytext). The pairing is
declared once, in ``notebooks/jupytext.toml``; an edit to either file is carried to the other by
``jupytext --sync notebooks/NN_name.md``. These tests check that every pair agrees cell for cell,
with jupytext's own reader and comparison, and that each check can fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

jupytext = pytest.importorskip("jupytext")
from jupytext.compare import NotebookDifference, compare_notebooks  # noqa: E402
from jupytext.config import find_jupytext_configuration_file, load_jupytext_configuration_file  # noqa: E402
from jupytext.paired_paths import paired_paths  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
TEXT_FORMAT = "md:myst"


def pairing_formats(folder: Path) -> str:
    """The ``formats`` of the jupytext configuration that applies to ``folder`` ('' if none)."""
    path = find_jupytext_configuration_file(str(folder))
    if path is None:
        return ""
    formats = load_jupytext_configuration_file(path).formats or ""
    if isinstance(formats, list):                       # jupytext keeps a list of pairing groups
        assert len(formats) <= 1, f"{path}: one pairing for the whole folder, got {formats}"
        formats = formats[0] if formats else ""
    return formats


def text_twin(ipynb: Path) -> Path:
    """The text file jupytext pairs with ``ipynb``, found as jupytext finds it (its configuration)."""
    formats = pairing_formats(ipynb.parent)
    twins = [Path(p) for p, fmt in paired_paths(str(ipynb), "ipynb", formats) if fmt.get("extension") == ".md"]
    assert len(twins) == 1, f"{ipynb.name}: jupytext pairs it with {twins} (formats {formats!r})"
    return twins[0]


def first_difference(a: tuple, b: tuple) -> str:
    """Where two (type, source, metadata) cells first differ, in a few words."""
    if a[0] != b[0]:
        return f"its type: {a[0]} vs {b[0]}"
    if a[1] != b[1]:
        la, lb = a[1].splitlines(), b[1].splitlines()
        n = next((k for k, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
        x, y = (la[n:] or [""])[0], (lb[n:] or [""])[0]
        col = next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        start = max(0, col - 30)
        return f"line {n + 1}, column {col + 1}: {x[start:col + 30]!r} vs {y[start:col + 30]!r}"
    return f"its metadata: {a[2]} vs {b[2]}"


def pair_problems(ipynb: Path) -> list[str]:
    """What is wrong with the pair of ``ipynb`` (an empty list when the pair agrees)."""
    md = text_twin(ipynb)
    if not md.exists():
        return [f"{ipynb.name} has no paired {md.name}: run `jupytext --sync {ipynb.parent.name}/{ipynb.name}`"]
    problems = []
    nb = jupytext.read(ipynb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            problems.append(f"{ipynb.name}: cell {i} has outputs or an execution count (commit it cleared)")
    text = jupytext.read(md)
    fmt = text.metadata.get("jupytext", {}).get("text_representation", {}).get("format_name")
    if fmt != "myst":
        problems.append(f"{md.name}: its header says format {fmt!r}, not MyST (format_name: myst)")
    sync = f"`jupytext --sync {ipynb.parent.name}/{md.name}` (the newer file wins)"
    # jupytext's comparison, strict: no difference is "expected" between a MyST file and its notebook.
    try:
        compare_notebooks(text, nb, fmt=TEXT_FORMAT, allow_expected_differences=False,
                          raise_on_first_difference=False)
    except NotebookDifference as diff:
        problems.append(f"{md.name} and {ipynb.name} differ: {diff}. Run {sync}")
    # And our own: the same cells, in order, of the same types, with the same sources and metadata.
    ours = [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]
    theirs = [(c.cell_type, c.source, dict(c.metadata)) for c in text.cells]
    if len(ours) != len(theirs):
        problems.append(f"{ipynb.name} has {len(ours)} cells, {md.name} {len(theirs)}. Run {sync}")
    for i, (a, b) in enumerate(zip(ours, theirs), start=1):      # counted from 1, as jupytext counts
        if a != b:
            problems.append(f"cell {i} differs, first at {first_difference(a, b)}: "
                            f"{ipynb.name} vs {md.name}. Run {sync}")
            break
    if nb.metadata.get("kernelspec") != text.metadata.get("kernelspec"):
        problems.append(f"{ipynb.name} and {md.name} name different kernels")
    return problems


def test_the_notebooks_folder_pairs_every_notebook_with_myst_markdown():
    formats = pairing_formats(NOTEBOOK_DIR)
    assert {f.strip() for f in formats.split(",")} == {"ipynb", TEXT_FORMAT}, formats
    assert (NOTEBOOK_DIR / "00_start_here.ipynb") in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_and_its_text_file_agree(path):
    assert pair_problems(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_pairing_lives_in_the_folder_not_in_the_notebook(path):
    """No ``jupytext`` metadata in the .ipynb: a copy of it elsewhere (lessons/, made by
    `make lab`) is a plain notebook and does not grow a .md twin when JupyterLab saves it."""
    assert "jupytext" not in json.loads(path.read_text(encoding="utf-8"))["metadata"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cell_ids_are_present_and_unique(path):
    """nbformat 4.5 ids: jupytext keeps them when it updates the .ipynb from the .md."""
    nb = nbformat.read(path, as_version=4)
    ids = [c.get("id") for c in nb.cells]
    assert None not in ids and len(set(ids)) == len(ids), path.name


def test_every_text_file_has_its_notebook():
    """A .md without its .ipynb would be a lesson that nothing runs or tests."""
    twins = {text_twin(p) for p in NOTEBOOKS}
    orphans = [p.name for p in NOTEBOOK_DIR.glob("*.md") if p not in twins]
    assert orphans == [], f"no .ipynb for {orphans}: run `jupytext --sync notebooks/<name>.md` to make it"


def test_no_generator_scripts_remain():
    assert not list((ROOT / "scripts").glob("build_*.py"))


# ---- the checks can fail: a deliberately broken copy of a pair in tmp_path ------------------

@pytest.fixture
def pair(tmp_path):
    """A copy of chapter 1's pair and the folder's jupytext.toml."""
    for name in ("jupytext.toml", "01_memory_wall.ipynb", "01_memory_wall.md"):
        shutil.copy2(NOTEBOOK_DIR / name, tmp_path / name)
    ipynb, md = tmp_path / "01_memory_wall.ipynb", tmp_path / "01_memory_wall.md"
    assert pair_problems(ipynb) == []
    return ipynb, md


def test_an_edited_text_file_is_caught(pair):
    ipynb, md = pair
    md.write_text(md.read_text(encoding="utf-8").replace("whole argument.", "whole argument!"), encoding="utf-8")
    problems = pair_problems(ipynb)
    assert problems and any("differ" in p for p in problems), problems


def test_an_edited_notebook_is_caught(pair):
    ipynb, _ = pair
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].source = nb.cells[1].source.replace("import time", "import time, os")
    nbformat.write(nb, ipynb)
    assert any("cell 2 differs, first at line 2" in p for p in pair_problems(ipynb)), pair_problems(ipynb)


def test_merged_or_split_cells_are_caught(pair):
    """Same text, other cell boundaries: a markdown cell split in two by MyST's `+++`."""
    ipynb, md = pair
    text = md.read_text(encoding="utf-8")
    assert "\nBelow the *ridge point*" in text                 # inside chapter 1's first cell
    md.write_text(text.replace("\nBelow the *ridge point*", "\n+++\n\nBelow the *ridge point*", 1), encoding="utf-8")
    assert any("cells" in p for p in pair_problems(ipynb)), pair_problems(ipynb)


def test_a_changed_cell_type_is_caught(pair):
    ipynb, _ = pair
    nb = nbformat.read(ipynb, as_version=4)
    last = nb.cells[-1]
    nb.cells[-1] = nbformat.v4.new_raw_cell(last.source)
    nb.cells[-1].id = last.id
    nbformat.write(nb, ipynb)
    assert pair_problems(ipynb)


def test_outputs_in_the_notebook_are_caught(pair):
    ipynb, _ = pair
    nb = nbformat.read(ipynb, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    code.execution_count = 1
    nbformat.write(nb, ipynb)
    assert any("outputs" in p for p in pair_problems(ipynb))


def test_a_missing_text_file_is_caught(pair):
    ipynb, md = pair
    md.unlink()
    assert any("no paired" in p for p in pair_problems(ipynb))


def test_sync_from_the_text_file_keeps_cell_ids(pair, tmp_path):
    """The editing workflow of the README: change the .md, `jupytext --sync` it. The .ipynb gets
    the change, every cell keeps its id, and the pair agrees again."""
    import os
    import subprocess
    import sys

    ipynb, md = pair
    before = nbformat.read(ipynb, as_version=4)
    md.write_text(md.read_text(encoding="utf-8").replace("whole argument.", "whole argument!")
                  .replace("import time\n", "import time  # edited\n"), encoding="utf-8")
    later = ipynb.stat().st_mtime + 2                   # the .md is the newer file: its inputs win
    os.utime(md, (later, later))
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", str(md)], check=True, capture_output=True)
    after = nbformat.read(ipynb, as_version=4)
    assert [c.id for c in after.cells] == [c.id for c in before.cells]
    assert "whole argument!" in after.cells[0].source and "# edited" in after.cells[1].source
    assert [c.source for c in after.cells[2:]] == [c.source for c in before.cells[2:]]
    assert pair_problems(ipynb) == []
