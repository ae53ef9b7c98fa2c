"""Widgets: ipywidgets + ipympl controls that compose the algorithm, the views and the GPU runner."""

from .explorer import TileExplorer

__all__ = ["TileExplorer"]
