"""Run a notebook headless with nbclient, isolated from the user's Jupyter/matplotlib dirs."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]


def run_notebook(path, tmp_path, monkeypatch, extra_code: str | None = None, timeout: int = 600):
    """Execute ``path`` top to bottom (plus ``extra_code`` as a last cell, in the same kernel).

    Returns the executed notebook and all its text output joined (streams and the exercise
    checks' lines, ``output_text``). Raises nbclient's
    CellExecutionError (with the cell and traceback) when a cell fails.
    """
    for var in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR",
                "IPYTHONDIR"):
        d = tmp_path / var.lower()
        d.mkdir(exist_ok=True)
        monkeypatch.setenv(var, str(d))
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    if extra_code:
        nb.cells.append(nbformat.v4.new_code_cell(extra_code))
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    texts = "".join(output_text(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    return nb, texts


def output_text(output) -> str:
    """An output's text as the notebook tests read it: a stream's text, and the line of an
    exercise check (``flashviz.exercises.show`` displays it as HTML in a kernel: its text/plain,
    one line) — in the order the cells showed them."""
    if "text" in output:
        return output["text"]
    data = output.get("data", {})
    if "flashviz-check" in data.get("text/html", ""):
        return data.get("text/plain", "") + "\n"
    return ""


def widget_views(nb):
    """Outputs of the notebook that display a widget."""
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]


def flat(text: str) -> str:
    """``text`` with every run of whitespace (spaces, newlines) as one space: the chapters wrap
    their long printed lines at 100 columns (``flashviz.printing.wrap``), so a sentence a test
    looks for may continue on the next line."""
    return " ".join(text.split())
