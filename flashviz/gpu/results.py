"""Committed GPU benchmark results (benchmarks/results/*.json, package ``flashviz.results``)."""

from __future__ import annotations

import json
import re

from ._files import package_dir

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


def latest_results() -> dict | None:
    """The newest GPU benchmark JSON (gpu-*.json) under ``flashviz.results`` (benchmarks/results/), or None.

    Newest = latest YYYY-MM-DD in the file name (ties broken by name). Returns the parsed
    dict with an added key "source_file" (the file name); None when there is no JSON file
    or the folder cannot be found. Raises json.JSONDecodeError if the newest file is corrupt.
    """
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return None
    files = [f for f in folder.iterdir() if f.name.startswith("gpu-") and f.name.endswith(".json") and f.is_file()]
    if not files:
        return None

    def key(f):
        m = _DATE.search(f.name)
        return (m.group(1) if m else "", f.name)

    newest = max(files, key=key)
    data = json.loads(newest.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data.setdefault("source_file", newest.name)
    return data
