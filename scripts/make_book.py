"""Build the lessons as a static book (``make book``): build/book/html/index.html.

Copies book/ (the Sphinx configuration and the front page) and the chapters, notebooks/NN_name.ipynb
(committed without outputs; the same cells as their MyST twins NN_name.md, whose links between
chapters name the .ipynb files), into build/book/src, and runs Sphinx with
myst-nb there: every chapter is executed top to bottom in a fresh kernel, with FLASHVIZ_BOOK=1 so
that each widget shows an animation made by its own export instead of live controls
(flashviz/widgets/book.py). Nothing is written into notebooks/: the copies are executed, and the
outputs go into the pages only. A cell error fails the build (exit status 1).

    .venv/bin/python scripts/make_book.py [--out build/book] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = "[0-9][0-9]_*.ipynb"


def chapters(notebooks: Path = ROOT / "notebooks") -> list[Path]:
    """The chapters' notebooks, in order (app.ipynb, the Voilà app, is no chapter)."""
    return sorted(notebooks.glob(CHAPTERS))


def stage(src: Path) -> list[Path]:
    """Lay out the Sphinx source folder ``src`` afresh: book/ and copies of the chapters."""
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(ROOT / "book", src)
    copied = []
    for nb in chapters():
        shutil.copy2(nb, src / nb.name)
        copied.append(src / nb.name)
    return copied


def build(out: Path = ROOT / "build" / "book", jobs: int | None = None, quiet: bool = False) -> Path:
    """Build the book into ``out``/html; returns the path of its index.html. Raises
    subprocess.CalledProcessError when Sphinx fails (a cell error included)."""
    out = Path(out).resolve()
    src, html, doctrees = out / "src", out / "html", out / "doctrees"
    stage(src)
    if html.exists():
        shutil.rmtree(html)          # no page left over from a chapter that is gone
    env = dict(os.environ, FLASHVIZ_BOOK="1")
    env.pop("FLASHVIZ_CANVAS", None)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-d", str(doctrees), str(src), str(html)]
    if jobs and jobs > 1:
        cmd[3:3] = ["-j", str(jobs)]
    if quiet:
        cmd.append("-q")
    subprocess.run(cmd, env=env, check=True, cwd=src)
    return html / "index.html"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "book", help="output folder (default build/book)")
    ap.add_argument("--jobs", "-j", type=int, default=min(2, os.cpu_count() or 1),
                    help="chapters executed at once (default: 2, or 1 on one core)")
    ap.add_argument("--quiet", "-q", action="store_true", help="only warnings and errors")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        index = build(args.out, args.jobs, args.quiet)
    except subprocess.CalledProcessError as exc:
        print(f"book: the build failed (sphinx exit status {exc.returncode}; a cell error fails it)", file=sys.stderr)
        return 1
    print(f"book: {len(chapters())} chapters in {time.perf_counter() - t0:.0f} s; open {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
