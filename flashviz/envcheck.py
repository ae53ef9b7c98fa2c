"""check_environment(): what this front end and Python have, whether flashviz will render
here, and what to do about each problem (JupyterLab, VS Code, Colab, Voilà)."""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys

# Tested ranges, the same as pyproject.toml's (and environment.yml's).
TESTED = {
    "ipywidgets": ((8, 1), (9, 0)),
    "ipympl": ((0, 10), (0, 11)),
    "jupyterlab": ((4, 1), (5, 0)),
    "jupyterlab_widgets": ((3, 0), (4, 0)),
    "matplotlib": ((3, 7), (4, 0)),
    "numpy": ((1, 24), (3, 0)),
    "voila": ((0, 5), (0, 6)),
}


def _version(dist: str):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _tuple(v: str):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def detect_frontend() -> str:
    """'colab', 'vscode', 'voila', 'jupyter' (a kernel) or 'python' (no kernel)."""
    if "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG"):
        return "colab"
    if os.environ.get("VSCODE_PID") or os.environ.get("VSCODE_CWD"):
        return "vscode"
    if os.environ.get("VOILA_KERNEL_ID") or os.environ.get("VOILA_PREHEAT") or "voila" in os.environ.get(
            "SERVER_SOFTWARE", ""):
        return "voila"
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None and hasattr(ip, "kernel"):
            return "jupyter"
    except Exception:
        pass
    return "python"


ADVICE = {
    "colab": ("Colab renders ipympl only with its custom widget manager: run "
              "`from google.colab import output; output.enable_custom_widget_manager()` first, "
              "or use static frames: `fv.TileExplorer(..., canvas=\"png\")` (or set FLASHVIZ_CANVAS=png)."),
    "vscode": ("VS Code renders ipywidgets and ipympl through its Jupyter extension (keep it updated); "
               "if the figure stays blank, use `canvas=\"png\"` (or FLASHVIZ_CANVAS=png)."),
    "voila": "Voilà renders ipympl; serve the chapters with `flashviz present` (binds to 127.0.0.1).",
    "jupyter": "JupyterLab 4 / Notebook 7 render ipywidgets and ipympl without a build step.",
    "python": "Not in a notebook: widgets draw on matplotlib's Agg canvas (tests, scripts, exports).",
}


def check_environment(*, verbose: bool = True) -> dict:
    """Report versions, the front end, GPU usability and what to do about each problem.

    Returns a dict: {"frontend": str, "packages": {name: version or None}, "problems": [str],
    "advice": [str], "gpu": (ok, reason)}; prints it as text when ``verbose``. Never raises.
    """
    from .gpu import gpu_status

    packages = {name: _version(name) for name in TESTED}
    packages["cupy"] = next((v for v in (_version(n) for n in ("cupy", "cupy-cuda12x", "cupy-cuda13x")) if v), None)
    problems, advice = [], []
    for name, (lo, hi) in TESTED.items():
        v = packages[name]
        if v is None:
            if name in ("ipywidgets", "ipympl", "matplotlib", "numpy"):
                problems.append(f"{name} is not installed")
                advice.append(f"pip install '{name}>={'.'.join(map(str, lo))},<{'.'.join(map(str, hi))}'")
            continue
        if not (lo <= _tuple(v) < hi):
            problems.append(f"{name} {v} is outside the tested range [{'.'.join(map(str, lo))}, "
                            f"{'.'.join(map(str, hi))})")
            advice.append(f"if widgets misbehave: pip install '{name}>={'.'.join(map(str, lo))},"
                          f"<{'.'.join(map(str, hi))}'")
    frontend = detect_frontend()
    advice.append(ADVICE[frontend])
    gpu = gpu_status()
    if not gpu[0]:
        advice.append(f"GPU panel: {gpu[1]}. The explainer works without a GPU and shows recorded results.")
    report = {"frontend": frontend, "packages": packages, "problems": problems, "advice": advice, "gpu": gpu,
              "python": sys.version.split()[0]}
    if verbose:
        print(f"flashviz environment — Python {report['python']}, front end: {frontend}")
        for name, v in packages.items():
            print(f"  {name:<20} {v or '—'}")
        print(f"  GPU usable: {'yes' if gpu[0] else 'no'} — {gpu[1]}")
        for p in problems:
            print(f"  problem: {p}")
        for a in advice:
            print(f"  → {a}")
    return report
