"""Views: matplotlib drawing functions (state → artists). No widgets in here."""

from .figure import ExplorerFigure
from .style import SRAM_BUDGETS

__all__ = ["ExplorerFigure", "SRAM_BUDGETS"]
