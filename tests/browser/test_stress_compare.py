"""The stress harness's frame comparison (tests/browser/stress.py) on made-up images, without a
browser: a whole frame matches itself, and a half-and-half mix of two frames is caught, also when
the two differ mostly in a few rows (the case that once slipped through its self-check)."""

from __future__ import annotations

import io

import numpy as np

from .servers import MAX_DIFF_SHARE
from .stress import Frames, compare, self_check


def _frames(tmp_path, images) -> tuple[Frames, list[str]]:
    from PIL import Image

    (tmp_path / "frames").mkdir()
    names = []
    for k, img in enumerate(images):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        (tmp_path / "frames" / f"f{k}.png").write_bytes(buf.getvalue())
        names.append(f"f{k}")
    return Frames(tmp_path, ["w"]), names


def _pair():
    """Two 200×200 frames that differ in 10 dense rows at the top and 90 sparse rows below: a cut
    at the middle differing row would leave only 50 differing pixels (< MAX_DIFF_SHARE) below."""
    A = np.full((200, 200, 4), 255, np.uint8)
    B = A.copy()
    B[:10, :, :3] = 0                       # 2000 differing pixels in rows 0-9
    B[100:190, 0, :3] = 0                   # 90 more, one per row in rows 100-189
    return A, B


def test_a_whole_frame_matches_itself_exactly(tmp_path):
    A, B = _pair()
    frames, (a, b) = _frames(tmp_path, [A, B])
    best, best_h, margin = compare(A.copy(), frames, [a, b])
    assert (best, best_h) == (0.0, a) and margin > MAX_DIFF_SHARE


def test_a_half_and_half_mix_is_caught_even_when_the_rows_differ_unevenly(tmp_path):
    A, B = _pair()
    frames, names = _frames(tmp_path, [A, B])
    assert self_check(frames, "w", names) is True
    # the mix the check makes differs from both frames in more than 2 x MAX_DIFF_SHARE
    mixed = A.copy()
    mixed[5:] = B[5:]
    best, _, _ = compare(mixed, frames, names)
    assert best > 2 * MAX_DIFF_SHARE
