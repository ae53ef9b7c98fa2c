"""The contract between a view and what drives it (the widgets, the exports), as code.

A view draws one chapter's figure; a widget (``flashviz.widgets.base.FrameWidget``) owns the
controls and asks the view for frames; the exports (``views.export``, ``views.compositor``)
render frames of a view to files. They meet in three protocols, checked with ``isinstance``
(``typing.runtime_checkable``: the members must exist, their signatures are not checked):

* ``FrameView`` — every view: ``fig``, ``n_frames``, ``draw_frame(k)``. Enough to export.
* ``BlittedFrameView`` — a view that renders itself fast on a live canvas: ``blitter`` (None
  until ``enable_blitting()``), ``render(k)`` (draw_frame, then blit). The widget calls
  ``render`` when the view has it, else ``draw_frame`` and a full redraw.
* ``LayeredFrameView`` — a view whose moving artists the exports can draw in layers over a
  cached background: ``animated_artists()`` (one list, or (slow, fast)). Without it an export
  draws each frame in full.

``views.blit.BlittedView`` gives a view ``render`` and ``enable_blitting`` from its
``animated_artists``. Every chapter's view is a FrameView and a BlittedFrameView; all but the
backward one (which blits by areas of the figure) are LayeredFrameViews.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["FrameView", "BlittedFrameView", "LayeredFrameView"]


@runtime_checkable
class FrameView(Protocol):
    """A figure with numbered frames: what the exports take."""

    #: the matplotlib Figure the view draws on
    fig: Any

    @property
    def n_frames(self) -> int:
        """Number of frames (>= 1)."""

    def draw_frame(self, k: int) -> Any:
        """Update every artist to frame k (0 <= k < n_frames) without rendering; returns the
        frame's state (the replay layer's dataclass for that chapter)."""


@runtime_checkable
class BlittedFrameView(FrameView, Protocol):
    """A FrameView that renders itself by blitting on a live canvas: what the widgets prefer."""

    #: the view's blitter (views.blit), or None before enable_blitting()
    blitter: Any

    def enable_blitting(self) -> None:
        """Render later frames by blitting (called once the figure has its canvas)."""

    def render(self, k: int) -> Any:
        """draw_frame(k), then render it (blitting when enabled); returns the frame's state."""


@runtime_checkable
class LayeredFrameView(FrameView, Protocol):
    """A FrameView whose moving artists are known: the exports draw them over a cached background."""

    def animated_artists(self) -> Any:
        """The artists that change between frames: one list (all fast), or (slow, fast) lists."""
