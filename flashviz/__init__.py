"""flashviz: see why FlashAttention is fast, and check it.

Layers (imports go one way, down): algorithm (reference, online, tiled, backward, decode, trace) →
iomodel → views (matplotlib) → widgets (ipywidgets + ipympl); the GPU runner
(flashviz.gpu, CuPy) sits beside views and knows nothing of widgets; flashviz.records reads what
it recorded without a GPU.
"""

from . import iomodel
from .backward import BackwardResult, attention_backward, flash_backward
from .decode import DecodeResult, decode_attention
from .iomodel import IOCount
from .online import online_softmax, online_softmax_steps
from .reference import attention
from .tiled import FlashResult, flash_forward
from .trace import Trace, TraceEvent

__version__ = "0.1.0"

__all__ = ["attention", "attention_backward", "flash_backward", "BackwardResult", "online_softmax",
           "online_softmax_steps", "flash_forward", "FlashResult", "decode_attention", "DecodeResult", "IOCount",
           "Trace", "TraceEvent", "iomodel",
           "data", "gpu", "TileExplorer", "GPUPanel", "check_environment", "__version__"]


def __getattr__(name):
    # Widgets and data load lazily: the algorithm stays importable without matplotlib/ipywidgets.
    if name == "TileExplorer":
        from .widgets.explorer import TileExplorer
        return TileExplorer
    if name == "GPUPanel":
        from .widgets.gpu_panel import GPUPanel
        return GPUPanel
    if name in _WIDGETS:
        import importlib
        return getattr(importlib.import_module(_WIDGETS[name]), name)
    if name == "check_environment":
        from .envcheck import check_environment
        return check_environment
    if name in _LAZY_MODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'flashviz' has no attribute {name!r}")


_LAZY_MODULES = ("data", "gpu", "views", "widgets", "replay", "cli", "exercises")
_WIDGETS = {
    "OnlineSoftmaxExplorer": "flashviz.widgets.online_softmax",
    "BlockSizeExplorer": "flashviz.widgets.blocksize",
    "CausalExplorer": "flashviz.widgets.causal",
    "LoopOrderExplorer": "flashviz.widgets.loop_order",
    "BackwardExplorer": "flashviz.widgets.backward",
    "BackwardGPUPanel": "flashviz.widgets.backward_gpu_panel",
    "ChapterApp": "flashviz.widgets.app",
    "TensorCorePanel": "flashviz.widgets.mma_panel",
    "RecordedFigures": "flashviz.widgets.recorded_figures",
    "Fa3Figures": "flashviz.widgets.fa3_figures",
    "TimelineExplorer": "flashviz.widgets.timeline",
    "DecodeExplorer": "flashviz.widgets.decode",
}


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_LAZY_MODULES) | set(_WIDGETS))
