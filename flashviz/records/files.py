"""Where the package's data files live: the committed records (``benchmarks/results/``, package
``flashviz.results``) and the kernel sources (``kernels/``, package ``flashviz.kernels``).

pyproject.toml maps the packages ``flashviz.kernels`` -> ``kernels/`` and ``flashviz.results`` ->
``benchmarks/results/``, so an installed (or editable) flashviz finds them with
``importlib.resources``. A plain source checkout on ``PYTHONPATH`` has no such packages; then the
folders next to the ``flashviz`` package directory are used. Standard library only: no CuPy, no
GPU.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]
_FALLBACK = {"flashviz.kernels": _REPO_ROOT / "kernels", "flashviz.results": _REPO_ROOT / "benchmarks" / "results"}


def package_dir(package: str):
    """A Traversable for ``package`` ("flashviz.kernels" or "flashviz.results").

    Uses importlib.resources when the package is importable (installed or editable),
    else the repository folder next to the flashviz package. Raises FileNotFoundError if
    neither exists.
    """
    try:
        return importlib.resources.files(package)
    except ModuleNotFoundError:
        path = _FALLBACK[package]
        if not path.is_dir():
            raise FileNotFoundError(f"{package} is not installed and {path} does not exist") from None
        return path


def kernel_source(name: str = "flash_fwd.cu") -> str:
    """The text of ``kernels/<name>`` (e.g. "flash_fwd_mma.cu"), from the installed package
    ``flashviz.kernels`` or, in a source checkout, the repository's ``kernels/`` folder.
    Needs no CuPy. Raises FileNotFoundError if there is no such kernel file."""
    path = package_dir("flashviz.kernels").joinpath(name)
    if not path.is_file():
        raise FileNotFoundError(f"no kernel file {name!r} in {package_dir('flashviz.kernels')}")
    return path.read_text(encoding="utf-8")
