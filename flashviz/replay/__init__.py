"""The replay layer: for each chapter, the state a picture of frame k needs, as plain data.

A replay reads a recorded run (a Trace of ``flash_forward`` / ``flash_backward`` with
``record=True``) or the closed forms of ``flashviz.iomodel``, and answers "what does frame k
show?" with a dataclass of numbers, arrays and texts. It imports the algorithm layer only
(flashviz.online, tiled, backward, masking, trace, iomodel, steps) and never matplotlib: the views
(flashviz.views) draw these states, the widgets (flashviz.widgets) pick the frame.

One module per chapter (module → replay class → the state of one frame):

* ``tiles``      — chapters 0 and 3, TileExplorer: ``Replay`` → ``FrameState``
* ``online``     — chapter 2, OnlineSoftmaxExplorer: ``OnlineRun`` → ``OnlineFrame``
* ``blocksize``  — chapter 4, BlockSizeExplorer: ``BlockSizeSweep`` → ``BlockSizeState``
* ``causal``     — chapter 5, CausalExplorer: ``CausalReplay`` → ``CausalState``
* ``loop_order`` — chapter 5, LoopOrderExplorer: ``LoopOrderReplay`` (two ``TileSteps``) →
  ``LoopOrderState`` (two ``RunFrame``)
* ``backward``   — chapter 6, BackwardExplorer: ``BackwardReplay`` → ``BackwardState``
* ``fa3_roles``  — chapter 8, the FlashAttention-3 block's schematic: ``roles_schedule`` → ``RolesSchedule``
  (no widget; ``views.fa3_roles.plot_fa3_roles`` draws it)
* ``decode``     — chapter 9, DecodeExplorer: ``DecodeReplay`` (a ``decode_attention(..., record=True)``
  run and its dense reference) → ``DecodeState`` (with the model of which SM runs which block)
* ``grid``       — shared: ``tile_kinds``, the grid of tile kinds (full / partial / skipped)

``flashviz.replay`` itself re-exports the tile explorer's names (``Replay``, ``FrameState``,
``sub``, the step texts), as the module of that name did before the layer became a package.
"""

from .tiles import STEP_TEXT, STEP_TEXT_BROKEN, STEP_TEXT_FA1, FrameState, Replay, sub

__all__ = ["STEP_TEXT", "STEP_TEXT_BROKEN", "STEP_TEXT_FA1", "FrameState", "Replay", "sub"]
