"""A student's working copy of the lessons, outside the tracked files.

JupyterLab autosaves outputs and answers into the notebook it has open, and exports (PNG,
GIF) land beside it. Opened from ``notebooks/``, a lesson would change tracked files and the
class's next ``git pull`` would conflict. So ``make lab`` opens the lessons from ``lessons/``
(git-ignored): ``prepare`` copies every chapter that is not there yet and never overwrites
one that is (it holds the student's work); ``reset=True`` replaces the copies with the
current chapters (the student's versions are moved to ``lessons/.previous/``).

Only the chapters (``NN_name.ipynb``) are copied: ``app.ipynb``, the notebook ``flashviz present``
serves, is not a lesson. Each copy opens clean: its kernel metadata is the one the kernel of this
Python will report (JupyterLab rewrites ``kernelspec`` and ``language_info`` when the kernel
connects, and a copy that differed showed the unsaved-changes dot as soon as it opened), and it is
signed as trusted in this user's Jupyter signature store (else the server warns that every lesson
is not trusted). The chapters' committed files are not touched.

The notebooks (``*.ipynb``) are copied, not their twins. Their MyST Markdown twins (``notebooks/*.md``) and
the ``jupytext.toml`` that pairs them are for editing the lessons, not for students: without
them the working copy holds plain notebooks, and JupyterLab (with jupytext's contents manager
or without) neither opens a lesson twice nor writes a ``.md`` beside a notebook it saves.

``make lab`` then serves the working copy (``--lab``; the arguments after ``--`` go to ``jupyter
lab``): the first chapter opens alone, not every tab left open last time (``lab_args``).

    python -m flashviz.lessons [--to lessons] [--from notebooks] [--reset] [--lab [-- JUPYTER_ARGS]]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

#: a chapter's file name: two digits, an underscore, a name (``03_tiling.ipynb``)
CHAPTER = re.compile(r"^\d\d_[A-Za-z0-9_]+\.ipynb$")

#: the chapter ``make lab`` opens
FIRST = "00_start_here.ipynb"
#: JupyterLab's workspaces folder in the working copy (hidden, as .previous/ is)
WORKSPACES = ".workspaces"
#: JupyterLab's application settings folder in the working copy: its overrides.json holds SETTINGS
APP_SETTINGS = ".settings"
#: the defaults ``make lab`` gives JupyterLab's settings (a user's own choice still wins): no toast
#: asking whether to fetch Jupyter news (it sat over the first chapter's text at 1366×768) and no
#: check for a newer JupyterLab; the frontend asks either way, whatever the server's news URL
SETTINGS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}

README = ("Your working copy of the flashviz lessons (made by `make lab`; git ignores this folder).\n"
          "Answer, run and export here freely. `make lessons-reset` replaces these notebooks with the\n"
          "current chapters; your versions are then kept in .previous/.\n")


def kernel_metadata() -> dict:
    """The notebook metadata the kernel of this Python reports on connecting (ipykernel's
    kernelspec and language_info), or {} where ipykernel is not installed."""
    try:
        from ipykernel.ipkernel import IPythonKernel
        from ipykernel.kernelspec import get_kernel_dict
    except ImportError:
        return {}
    spec = get_kernel_dict()
    return {"kernelspec": {"display_name": spec["display_name"], "language": spec["language"], "name": "python3"},
            "language_info": json.loads(json.dumps(IPythonKernel.language_info))}


def _copy_lesson(nb: Path, target: Path, metadata: dict) -> None:
    """Write the chapter ``nb`` to ``target`` with ``metadata`` merged in, signed as trusted."""
    import nbformat
    from nbformat.sign import NotebookNotary

    book = nbformat.read(nb, as_version=4)
    book.metadata.update(metadata)
    NotebookNotary().sign(book)
    nbformat.write(book, target)
    shutil.copystat(nb, target)


def prepare(dest, source, *, reset: bool = False) -> list[Path]:
    """Copy the chapters (``source/NN_name.ipynb``: not ``app.ipynb``, not the ``.md`` twins) into
    ``dest``, each with this kernel's metadata and signed as trusted; returns the notebooks copied.

    A chapter already in ``dest`` is kept as it is, unless ``reset``: then it is moved to
    ``dest/.previous/<timestamp>/`` first, unless it is byte for byte the fresh copy (nothing of
    the student's to keep: it stays, and no backup is made). Raises FileNotFoundError when ``source`` holds
    no chapter, OSError when ``dest`` cannot be written (a file in the way, no permission),
    ValueError when a chapter is not a notebook nbformat can read."""
    source, dest = Path(source), Path(dest)
    chapters = sorted(p for p in source.glob("*.ipynb") if CHAPTER.match(p.name))
    if not chapters:
        raise FileNotFoundError(f"no lesson notebooks (NN_name.ipynb) in {source}")
    if dest.exists() and not dest.is_dir():
        raise OSError(f"{dest} exists and is not a folder: move it away or choose another with --to")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "README.txt").write_text(README)
    copied = []
    metadata = kernel_metadata()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for nb in chapters:
        target = dest / nb.name
        if target.exists() and not reset:
            continue
        fresh = target.with_name(f".{nb.name}.new")
        try:
            _copy_lesson(nb, fresh, metadata)
        except (ValueError, json.JSONDecodeError) as exc:     # nbformat's read errors are ValueErrors
            fresh.unlink(missing_ok=True)
            raise ValueError(f"{nb} is not a notebook nbformat can read: {exc}") from None
        if target.exists():
            if filecmp.cmp(fresh, target, shallow=False):     # unchanged: nothing of the student's to keep
                fresh.unlink()
                continue
            keep = dest / ".previous" / stamp
            keep.mkdir(parents=True, exist_ok=True)
            shutil.move(str(target), keep / nb.name)
        fresh.replace(target)
        copied.append(target)
    return copied


def lab_args(lessons, notebook: str = FIRST) -> list[str]:
    """The arguments ``make lab`` gives ``jupyter lab`` (beside host and port; ``--allow-root`` when
    run as root, which JupyterLab refuses without it):
    serve the working copy ``lessons``, open its ``notebook``, and keep JupyterLab's workspace
    (the layout: which tabs are open) in ``lessons/.workspaces/``, which ``--lab`` empties before
    each start. In JupyterLab's shared default (``~/.jupyter/lab/workspaces``) every chapter left
    open last time reopened, each starting a kernel; the user's other workspaces stay untouched.
    JupyterLab's application settings come from ``lessons/.settings/`` (``write_settings``): that folder
    replaces the default one (``<sys.prefix>/share/jupyter/lab/settings``, empty in this project's
    environment), so an ``overrides.d/`` or ``page_config.json`` an installation put there is not read
    under ``make lab``."""
    lessons = Path(lessons).resolve()
    return [f"--ServerApp.root_dir={lessons}", f"--LabApp.default_url=/lab/tree/{notebook}",
            f"--LabApp.workspaces_dir={lessons / WORKSPACES}", f"--LabApp.app_settings_dir={lessons / APP_SETTINGS}",
            *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []), str(lessons / notebook)]


def write_settings(lessons) -> Path:
    """Write SETTINGS as JupyterLab's ``overrides.json`` in ``lessons/.settings/`` (the application
    settings folder ``lab_args`` names) and return its path; OSError if it cannot be written."""
    folder = Path(lessons) / APP_SETTINGS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "overrides.json"
    path.write_text(json.dumps(SETTINGS, indent=1) + "\n")
    return path


def clear_workspaces(lessons) -> None:
    """Remove the JupyterLab workspaces saved in ``lessons/.workspaces/`` (its
    ``*.jupyterlab-workspace`` files; nothing else): the next start opens the first chapter alone."""
    folder = Path(lessons) / WORKSPACES
    if folder.is_dir():
        for f in folder.glob("*.jupyterlab-workspace"):
            f.unlink()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    jupyter = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m flashviz.lessons",
                                description="Make (or refresh) the working copy of the lessons that make lab opens.",
                                epilog="With --lab, the arguments after -- go to jupyter lab.")
    p.add_argument("--to", default="lessons", help="the working copy (default: lessons, git-ignored)")
    p.add_argument("--from", dest="source", default="notebooks", help="the chapters (default: notebooks)")
    p.add_argument("--reset", action="store_true", help="replace the copies with the current chapters")
    p.add_argument("--lab", action="store_true",
                   help=f"then serve the working copy in JupyterLab, opening {FIRST} alone (the layout of "
                        f"the last session, kept in {WORKSPACES}/ there, is cleared)")
    args = p.parse_args(argv)
    if jupyter and not args.lab:
        p.error("arguments after -- go to jupyter lab: only with --lab")
    try:
        copied = prepare(args.to, args.source, reset=args.reset)
    except (OSError, ValueError) as exc:
        print(f"flashviz lessons: {exc}", file=sys.stderr)
        return 2
    if copied:
        print(f"flashviz lessons: {len(copied)} chapter(s) copied into {args.to}/ (your working copy)")
    elif args.reset:
        print(f"flashviz lessons: every chapter in {args.to}/ is already the current one (nothing to keep)")
    if args.lab:
        clear_workspaces(args.to)
        try:
            write_settings(args.to)
        except OSError as exc:
            print(f"flashviz lessons: {exc}", file=sys.stderr)
            return 2
        cmd = [sys.executable, "-m", "jupyterlab", *lab_args(args.to), *jupyter]   # this Python's own
        sys.stdout.flush()
        os.execv(sys.executable, cmd)       # JupyterLab takes this process over (Ctrl-C stops it)
    return 0


if __name__ == "__main__":
    sys.exit(main())
