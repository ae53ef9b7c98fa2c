"""Export a view for slides: one frame as PNG, or the whole run as GIF (MP4 with ffmpeg).

Works with any view object that has ``fig``, ``n_frames`` and ``draw_frame(k)``. Uses
matplotlib's animation writers (PillowWriter for GIF, FFMpegWriter for MP4).
"""

from __future__ import annotations

import numbers
from contextlib import contextmanager
from pathlib import Path

from matplotlib import animation


def _frames(n_frames: int, frames):
    if frames is None:
        return list(range(n_frames))
    out = list(frames)
    for k in out:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k < n_frames:
            raise ValueError(f"frames must be integers in 0..{n_frames - 1}, got {k!r}")
    if not out:
        raise ValueError("frames is empty: give at least one frame index")
    return out


@contextmanager
def _all_drawn(fig):
    """While saving, draw the blitted (animated) artists too: matplotlib skips figure-level ones."""
    animated = [a for a in fig.findobj() if a.get_animated()]
    for a in animated:
        a.set_animated(False)
    try:
        yield
    finally:
        for a in animated:
            a.set_animated(True)


def save_frame_png(view, k: int, path, *, dpi=None) -> Path:
    """Draw frame k of ``view`` and save it as a PNG file at ``path`` (returned as a Path).

    Raises ValueError for a frame index outside 0..n_frames-1 or a path not ending in .png.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png, got {str(path)!r}")
    (k,) = _frames(view.n_frames, [k])
    view.draw_frame(k)
    with _all_drawn(view.fig):
        view.fig.savefig(path, dpi=dpi or view.fig.dpi)
    return path


def save_animation(view, path, *, frames=None, fps: float = 8, dpi=None, progress=None) -> Path:
    """Render ``frames`` (default: all) of ``view`` to ``path``: .gif (Pillow) or .mp4 (ffmpeg).

    fps: frames per second. progress: optional callable(i, n) called after each frame (e.g. a
    tqdm update). Returns the Path written. Raises ValueError for an unsupported suffix, bad
    frames, or .mp4 when ffmpeg is not installed.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".gif":
        writer = animation.PillowWriter(fps=fps)
    elif suffix == ".mp4":
        if not animation.FFMpegWriter.isAvailable():
            raise ValueError("writing .mp4 needs ffmpeg on the PATH; save a .gif instead")
        writer = animation.FFMpegWriter(fps=fps)
    else:
        raise ValueError(f"path must end in .gif or .mp4, got {str(path)!r}")
    ks = _frames(view.n_frames, frames)
    with _all_drawn(view.fig), writer.saving(view.fig, str(path), dpi or view.fig.dpi):
        for n, k in enumerate(ks):
            view.draw_frame(k)
            writer.grab_frame()
            if progress is not None:
                progress(n + 1, len(ks))
    return path
