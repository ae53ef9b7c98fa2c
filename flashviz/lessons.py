"""A student's working copy of the lessons, outside the tracked files.

JupyterLab autosaves outputs and answers into the notebook it has open, and exports (PNG,
GIF) land beside it. Opened from ``notebooks/``, a lesson would change tracked files and the
class's next ``git pull`` would conflict. So ``make lab`` opens the lessons from ``lessons/``
(git-ignored): ``prepare`` copies every chapter that is not there yet and never overwrites
one that is (it holds the student's work); ``reset=True`` replaces the copies with the
current chapters (the student's versions are moved to ``lessons/.previous/``).

Only the notebooks (``*.ipynb``) are copied. Their MyST Markdown twins (``notebooks/*.md``) and
the ``jupytext.toml`` that pairs them are for editing the lessons, not for students: without
them the working copy holds plain notebooks, and JupyterLab (with jupytext's contents manager
or without) neither opens a lesson twice nor writes a ``.md`` beside a notebook it saves.

    python -m flashviz.lessons [--to lessons] [--from notebooks] [--reset]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

README = ("Your working copy of the flashviz lessons (made by `make lab`; git ignores this folder).\n"
          "Answer, run and export here freely. `make lessons-reset` replaces these notebooks with the\n"
          "current chapters; your versions are then kept in .previous/.\n")


def prepare(dest, source, *, reset: bool = False) -> list[Path]:
    """Copy the chapters (``source/*.ipynb``, not their ``.md`` twins) into ``dest``; returns the
    notebooks copied.

    A chapter already in ``dest`` is kept as it is, unless ``reset``: then it is moved to
    ``dest/.previous/<timestamp>/`` first. Raises FileNotFoundError when ``source`` holds
    no notebook, OSError when ``dest`` cannot be written (a file in the way, no permission)."""
    source, dest = Path(source), Path(dest)
    chapters = sorted(source.glob("*.ipynb"))
    if not chapters:
        raise FileNotFoundError(f"no lesson notebooks (*.ipynb) in {source}")
    if dest.exists() and not dest.is_dir():
        raise OSError(f"{dest} exists and is not a folder: move it away or choose another with --to")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "README.txt").write_text(README)
    copied = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for nb in chapters:
        target = dest / nb.name
        if target.exists():
            if not reset:
                continue
            keep = dest / ".previous" / stamp
            keep.mkdir(parents=True, exist_ok=True)
            shutil.move(str(target), keep / nb.name)
        shutil.copy2(nb, target)
        copied.append(target)
    return copied


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashviz.lessons",
                                description="Make (or refresh) the working copy of the lessons that make lab opens.")
    p.add_argument("--to", default="lessons", help="the working copy (default: lessons, git-ignored)")
    p.add_argument("--from", dest="source", default="notebooks", help="the chapters (default: notebooks)")
    p.add_argument("--reset", action="store_true", help="replace the copies with the current chapters")
    args = p.parse_args(argv)
    try:
        copied = prepare(args.to, args.source, reset=args.reset)
    except (OSError, FileNotFoundError) as exc:
        print(f"flashviz lessons: {exc}", file=sys.stderr)
        return 2
    if copied:
        print(f"flashviz lessons: {len(copied)} chapter(s) copied into {args.to}/ (your working copy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
