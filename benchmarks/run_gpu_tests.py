"""On a GPU machine: run the `gpu`-marked tests and write a JSON record (device, versions, date,
outcome of every test) to benchmarks/results/tests-<device>-<date>.json (or $OUT).

Usage: FLASHVIZ_COMMIT=<sha> python benchmarks/run_gpu_tests.py   (needs CuPy and a CUDA device; pytest)

Without a usable GPU it says why and exits 2, writing nothing (a run that skipped every test is not a
record). The record names every cubin the tests loaded (``cubins``, ``flashviz.gpu.nvrtc.loaded_cubins``),
so ``flashviz.records.provenance`` can tell a changed source that compiles to the same binary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Collect:
    """Every test's outcome; each also appended at once to ``progress`` (JSON lines), so a run stopped
    by a time limit still says how far it got (a partial run is never the record)."""

    def __init__(self, progress: Path | None = None):
        self.results = []
        self.progress = progress
        if progress is not None:
            progress.write_text("")                      # this run's outcomes only

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.results.append({"test": report.nodeid, "outcome": report.outcome,
                                 "seconds": round(report.duration, 3),
                                 "message": str(report.longrepr)[-500:] if report.failed else ""})
            if self.progress is not None:
                with self.progress.open("a") as f:
                    f.write(json.dumps(self.results[-1]) + "\n")


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    import flashviz.gpu as gpu

    ok, reason = gpu.gpu_status()
    if not ok:
        print(f"no GPU to test on ({reason}); nothing written", file=sys.stderr)
        return 2
    env = gpu.environment()
    dest = Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results")
    col = Collect(dest / "tests-progress.jsonl" if os.environ.get("OUT") else None)
    files = [str(ROOT / "tests" / "gpu")]   # every test file with gpu-marked tests is in tests/gpu/
    code = pytest.main(["-q", "-m", "gpu", "-p", "no:cacheprovider", *files], plugins=[col])
    counts = {k: sum(r["outcome"] == k for r in col.results) for k in ("passed", "failed", "skipped")}
    from flashviz.gpu.nvrtc import loaded_cubins
    from flashviz.records.files import source_sha256

    # the code tested: the commit (passed by the caller: a device copy has no .git) and every kernel
    # file the suite may compile (each with the headers it includes)
    out = {"env": env, "source_commit": os.environ.get("FLASHVIZ_COMMIT"),
           "kernel_sources": {p.name: source_sha256(p.name) for p in sorted((ROOT / "kernels").glob("*.cu"))},
           "cubins": loaded_cubins(),
           "pytest_exit_code": int(code),
           "counts": counts, "tests": col.results}
    dev = str(env.get("device", "nogpu")).lower().replace("nvidia", "").strip().replace(" ", "-")
    path = dest / f"tests-{dev}-{env.get('date', 'unknown')}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped -> {path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
