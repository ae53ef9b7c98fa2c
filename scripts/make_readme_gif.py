"""The README's animated picture: the tile explorer stepping through a causal forward pass on
the shipped real inputs, written by flashviz's own export (``FrameWidget.save_gif``).

Usage: ``.venv/bin/python scripts/make_readme_gif.py [OUT]`` (default docs/images/tile_explorer.gif;
``make readme-gif``). Small on purpose (N = 64, 16×16 tiles, every other step, 72 dpi): the
README shows it on a repository page, so it stays well under 1.5 MB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images" / "tile_explorer.gif"
#: the explorer's settings for the picture: real inputs, causal, four query and four key blocks
SETTINGS = {"N": 64, "d": 32, "Br": 16, "Bc": 16, "causal": True, "source": "real", "dpi": 72}
EVERY = 2          #: keep every other step
FPS = 5
MAX_BYTES = 1_500_000


def main(out: Path = OUT) -> Path:
    from flashviz import TileExplorer

    out.parent.mkdir(parents=True, exist_ok=True)
    w = TileExplorer(**SETTINGS, canvas="png", key=("readme-gif",))
    try:
        frames = list(range(0, w.n_frames, EVERY))
        if frames[-1] != w.n_frames - 1:
            frames.append(w.n_frames - 1)          # end on the finished output
        path = w.save_gif(out, frames=frames, fps=FPS)
    finally:
        w.close()
    size = path.stat().st_size
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {len(frames)} frames, "
          f"{size / 1e6:.2f} MB")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size:,} bytes, more than {MAX_BYTES:,}: make the picture smaller")
    return path


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
