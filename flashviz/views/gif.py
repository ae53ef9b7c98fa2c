"""GIF89a pieces, written frame by frame: one global palette, each frame cropped to its changes.

``palette_from`` makes one 256-colour palette (median cut) for all frames; ``indices`` maps a
frame's RGBA pixels to it without dithering; ``changed_box`` finds the pixels that changed since
the frame before; ``image_block`` LZW-encodes that box (Pillow); ``header`` and ``delay`` are the
file header (with the looping extension) and a frame's display time. Format: GIF89a
specification (CompuServe 1990), sections 17–23.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["palette_from", "rgb", "indices", "changed_box", "image_block", "header", "delay"]


def palette_from(rgb_frames):
    """One 256-colour palette (a P image) for all frames: median cut over the given ones."""
    from PIL import Image

    stack = np.concatenate(rgb_frames, axis=0)
    return Image.fromarray(stack).quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)


def rgb(rgba):
    """A Pillow RGB image of the RGBA pixels ``rgba`` (H, W, 4) uint8 (Pillow drops the alpha
    channel: a strided NumPy copy of rgba[..., :3] took ~5 ms a frame, this ~1 ms)."""
    from PIL import Image

    rgba = np.ascontiguousarray(rgba)
    return Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB")


def indices(rgba, palette) -> np.ndarray:
    """Palette indices (H, W) uint8 of the RGBA pixels ``rgba`` (H, W, 4): each pixel's nearest
    colour of the P image ``palette`` (Pillow's mapping), no dithering."""
    from PIL import Image

    return np.asarray(rgb(rgba).quantize(palette=palette, dither=Image.Dither.NONE))


def changed_box(prev, cur):
    """The smallest box (x0, y0, x1, y1), in pixels, holding every pixel where the index images
    ``prev`` and ``cur`` (H, W) differ; the whole image when prev is None; None when equal."""
    if prev is None:
        return 0, 0, cur.shape[1], cur.shape[0]
    diff = prev != cur
    rows = np.flatnonzero(diff.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(diff[rows[0]:rows[-1] + 1].any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def image_block(indices, box) -> bytes:
    """The GIF image block (image descriptor, LZW data, terminator; no local colour table, so the
    file's global one) of the ``box`` (x0, y0, x1, y1) of the index image ``indices`` (H, W)
    uint8, placed at the box's corner: what Pillow writes for a frame cropped to its changes."""
    from PIL import GifImagePlugin, Image

    x0, y0, x1, y1 = box
    crop = np.ascontiguousarray(indices[y0:y1, x0:x1])
    im = Image.frombytes("P", (x1 - x0, y1 - y0), crop.tobytes())
    return b"".join(GifImagePlugin.getdata(im, offset=(x0, y0)))


def header(size, palette, loop: int = 0) -> bytes:
    """GIF89a header: logical screen ``size`` (w, h) pixels, a 256-entry global colour table from
    ``palette`` (a flat list of at most 768 RGB values, padded with black), and the NETSCAPE2.0
    extension that plays the animation ``loop`` times (0: forever)."""
    w, h = size
    table = bytes(palette[:768]) + bytes(768 - min(len(palette), 768))
    return (b"GIF89a" + struct.pack("<HHBBB", w, h, 0x80 | 7, 0, 0) + table
            + b"!\xff\x0bNETSCAPE2.0\x03\x01" + struct.pack("<H", loop) + b"\x00")


def delay(milliseconds: float) -> bytes:
    """A graphic control extension: show the next image for ``milliseconds`` (stored, as Pillow
    does, in whole centiseconds rounded down, at most 655.35 s)."""
    return b"!\xf9\x04\x00" + struct.pack("<H", min(max(int(milliseconds / 10), 0), 0xFFFF)) + b"\x00\x00"
