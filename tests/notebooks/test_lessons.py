"""Working through a lesson leaves the repository clean (issue 10): the lessons open from a
git-ignored working copy, and what a student does there (run every cell, export) is not a
change git sees."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from flashviz.lessons import APP_SETTINGS, FIRST, SETTINGS, WORKSPACES, lab_args, main, prepare

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _own_signature_store(tmp_path, monkeypatch):
    """Each test signs into a signature store of its own, not the user's."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))


def _write(path: Path, text: str) -> None:
    import nbformat
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)]), path)


def _text(path: Path) -> str:
    import nbformat
    return nbformat.read(path, as_version=4).cells[0].source


def test_prepare_copies_new_chapters_and_keeps_the_students(tmp_path):
    src = tmp_path / "notebooks"
    src.mkdir()
    _write(src / "01_a.ipynb", "A1")
    _write(src / "02_b.ipynb", "B1")
    dest = tmp_path / "lessons"
    assert [p.name for p in prepare(dest, src)] == ["01_a.ipynb", "02_b.ipynb"]
    _write(dest / "01_a.ipynb", "my answers")
    _write(src / "03_c.ipynb", "C1")
    assert [p.name for p in prepare(dest, src)] == ["03_c.ipynb"]          # only the new chapter
    assert _text(dest / "01_a.ipynb") == "my answers"
    _write(src / "01_a.ipynb", "A2")
    prepare(dest, src, reset=True)
    assert _text(dest / "01_a.ipynb") == "A2"
    kept = list((dest / ".previous").glob("*/01_a.ipynb"))
    assert len(kept) == 1 and _text(kept[0]) == "my answers"


def test_a_reset_keeps_no_backup_of_an_unchanged_copy(tmp_path):
    """`make lessons-reset` twice in a row: the second finds every copy as fresh as the chapters,
    so it copies nothing and makes no new folder in .previous/."""
    src = tmp_path / "notebooks"
    src.mkdir()
    _write(src / "01_a.ipynb", "A1")
    _write(src / "02_b.ipynb", "B1")
    dest = tmp_path / "lessons"
    prepare(dest, src)
    assert prepare(dest, src, reset=True) == [] and not (dest / ".previous").exists()
    _write(dest / "02_b.ipynb", "my answers")
    assert [p.name for p in prepare(dest, src, reset=True)] == ["02_b.ipynb"]
    kept = list((dest / ".previous").glob("*/*.ipynb"))
    assert [p.name for p in kept] == ["02_b.ipynb"] and _text(kept[0]) == "my answers"
    assert _text(dest / "02_b.ipynb") == "B1" and not list(dest.glob(".*.new"))


def test_only_chapters_are_copied_and_each_opens_clean_and_trusted(tmp_path, capsys):
    """app.ipynb (the notebook `flashviz present` serves) is no lesson; every copy carries the
    kernelspec and language_info this Python's kernel reports (JupyterLab rewrites them when the
    kernel connects: a copy that differs opens with the unsaved-changes dot) and is trusted in the
    signature store (the server warned "Notebook ... is not trusted" for every lesson)."""
    import nbformat
    from ipykernel.ipkernel import IPythonKernel
    from nbformat.sign import NotebookNotary

    src = ROOT / "notebooks"
    dest = tmp_path / "lessons"
    assert main(["--from", str(src), "--to", str(dest)]) == 0
    chapters = sorted(p.name for p in src.glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in dest.glob("*.ipynb")) == chapters and "app.ipynb" not in chapters
    assert f"{len(chapters)} chapter(s) copied" in capsys.readouterr().out
    notary = NotebookNotary()
    for name in chapters:
        copy, original = nbformat.read(dest / name, as_version=4), nbformat.read(src / name, as_version=4)
        assert copy.metadata.language_info == IPythonKernel.language_info
        assert copy.metadata.kernelspec.name == "python3" and "ipykernel" in copy.metadata.kernelspec.display_name
        assert notary.check_signature(copy), name
        assert [c.source for c in copy.cells] == [c.source for c in original.cells]


def test_the_working_copy_holds_the_notebooks_not_their_text_twins(tmp_path):
    """notebooks/ pairs every .ipynb with a MyST .md (jupytext.toml); lessons/ gets the .ipynb
    only, unpaired, so a student's JupyterLab shows each lesson once and writes no .md."""
    import json

    src = ROOT / "notebooks"
    assert list(src.glob("*.md")) and (src / "jupytext.toml").exists()     # the pairs are there...
    dest = tmp_path / "lessons"
    copied = prepare(dest, src)
    assert sorted(p.name for p in copied) == sorted(p.name for p in src.glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in dest.iterdir()) == sorted([p.name for p in copied] + ["README.txt"])
    for nb in copied:                                                       # ...and not paired there
        assert "jupytext" not in json.loads(nb.read_text(encoding="utf-8"))["metadata"], nb.name


def test_bad_places_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--from", str(tmp_path / "empty"), "--to", str(tmp_path / "x")]) == 2
    assert "no lesson notebooks" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    assert main(["--from", str(ROOT / "notebooks"), "--to", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a folder" in err and len(err.splitlines()) == 1


def test_the_makefile_opens_the_working_copy():
    """make lab serves the working copy through flashviz.lessons --lab, so JupyterLab's arguments
    live in one place (lab_args), the one tests/browser/test_lab_layout.py starts the lab from."""
    mk = (ROOT / "Makefile").read_text()
    lab = mk.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "flashviz.lessons --to $(LESSONS) --from notebooks --lab --" in lab
    assert "jupyter lab" not in lab and "root_dir" not in lab, "JupyterLab's arguments belong in lab_args"
    assert "/lessons/" in (ROOT / ".gitignore").read_text().splitlines()


def test_lab_serves_the_working_copy_with_its_own_workspaces(tmp_path, monkeypatch):
    """--lab: the working copy is made, the layout of the last session (lessons/.workspaces/) is
    cleared, then this Python's JupyterLab takes the process over with lab_args and the
    arguments after --."""
    lessons = tmp_path / "lessons"
    (lessons / WORKSPACES).mkdir(parents=True)
    (lessons / WORKSPACES / "default-37a8.jupyterlab-workspace").write_text("{}")
    (lessons / WORKSPACES / "notes.txt").write_text("not a workspace")
    ran = []
    monkeypatch.setattr("os.execv", lambda exe, cmd: ran.append(cmd))
    assert main(["--from", str(ROOT / "notebooks"), "--to", str(lessons), "--lab", "--", "--port=8890"]) == 0
    assert sorted(p.name for p in (lessons / WORKSPACES).iterdir()) == ["notes.txt"]
    [cmd] = ran
    assert cmd[1:3] == ["-m", "jupyterlab"] and cmd[-1] == "--port=8890"
    args = lab_args(lessons)
    assert cmd[3:-1] == args
    assert f"--ServerApp.root_dir={lessons.resolve()}" in args
    assert f"--LabApp.workspaces_dir={(lessons / WORKSPACES).resolve()}" in args
    # JupyterLab's application settings: the working copy's, with the news and update checks off
    assert f"--LabApp.app_settings_dir={(lessons / APP_SETTINGS).resolve()}" in args
    assert json.loads((lessons / APP_SETTINGS / "overrides.json").read_text()) == SETTINGS
    assert f"--LabApp.default_url=/lab/tree/{FIRST}" in args and args[-1] == str(lessons.resolve() / FIRST)
    assert (lessons / FIRST).exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_student_session_leaves_git_status_clean(tmp_path):
    """Clone, make the working copy as `make lab` does, run a whole chapter there as Jupyter
    does (outputs saved into the notebook), export a frame and a GIF from the widget: git
    status of the clone shows nothing."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for f in ("flashviz/lessons.py", "Makefile", ".gitignore"):      # the working tree's versions (uncommitted edits too)
        shutil.copy2(ROOT / f, clone / f)
    subprocess.run(["git", "-C", str(clone), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "wip",
                    "--allow-empty"], check=True)
    assert main(["--from", str(clone / "notebooks"), "--to", str(clone / "lessons")]) == 0
    import nbformat
    from nbclient import NotebookClient
    nb_path = clone / "lessons" / "02_online_softmax.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import flashviz as fv\nw = fv.OnlineSoftmaxExplorer(N=16, block=8, source='random', key='student')\n"
        "w.save_png('my-frame.png'); w.save_gif('my-run.gif', frames=range(3)); w.close()"))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(nb_path.parent)}}).execute()
    nbformat.write(nb, nb_path)                                  # what autosave does
    assert (clone / "lessons" / "my-run.gif").exists() and (clone / "lessons" / "my-frame.png").exists()
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True,
                            check=True).stdout
    assert status == "", status
