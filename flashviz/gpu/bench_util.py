"""Small pieces every GPU benchmark runner shares (``tensorcore/bench_bwd``, ``decode_bench``):
the one-line text a failed cell records, giving torch's cached memory back after a failure, and
the command lines' comma-separated integer options. No CuPy or torch import at module level."""

from __future__ import annotations


def error_text(exc: BaseException) -> str:
    """What a record keeps of a failure: "TypeName: message", the message cut at 300 characters."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def free_torch_cache() -> None:
    """Synchronise and give torch's cached blocks back (after a failure: an out-of-memory error
    leaves them held); never raises (a broken context shows in the next cell's error)."""
    try:
        import torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception:
        pass


def positive_ints(text: str, what: str, ap) -> tuple[int, ...]:
    """A command-line option of comma-separated integers >= 1 ("1024,4096"); anything else ends the
    program through ``ap.error`` (argparse's one-line usage error) naming ``what``."""
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        ap.error(f"{what}: comma-separated integers, got {text!r}")
    if not vals or min(vals) < 1:
        ap.error(f"{what}: at least one positive integer, got {text!r}")
    return vals


class RunRecord:
    """A benchmark run's record, written as the run goes: ``data`` (the record's dict) to ``path``
    as JSON and the printed lines to ``path`` with ``.log`` after every ``save()``, so a run cut
    short keeps what it measured.

    t0: the run's start (``time.time()``); deadline_s: seconds after which ``late`` says no new part
    may start; log: where ``say`` prints; hashes: a function returning the code hashes for
    ``data["env"]`` (its failure is recorded as ``env.code_hashes_error``); finish: a function of
    ``data`` run before each write (derived figures)."""

    def __init__(self, path, data: dict, *, t0: float, deadline_s: float, log, hashes, finish=None):
        self.path, self.data, self.t0, self.deadline_s = path, data, t0, deadline_s
        self._log, self._hashes, self._finish = log, hashes, finish
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        """Print ``line`` and keep it for the .log file."""
        self.lines.append(line)
        self._log(line)

    def save(self) -> None:
        """Write the record (code hashes, derived figures, wall_s in seconds) and the .log."""
        import json
        import time
        try:
            self.data["env"].update(self._hashes())
        except Exception as exc:
            self.data["env"]["code_hashes_error"] = error_text(exc)
        if self._finish is not None:
            self._finish(self.data)
        self.data["wall_s"] = time.time() - self.t0
        self.path.write_text(json.dumps(self.data, indent=1, default=float) + "\n")
        self.path.with_suffix(".log").write_text("\n".join(self.lines) + "\n")

    def late(self, what: str) -> bool:
        """True (and the record says "cut_short") once the deadline has passed: ``what`` is not run."""
        import time
        if time.time() - self.t0 > self.deadline_s:
            self.data["cut_short"] = f"deadline of {self.deadline_s:.0f} s reached before {what}"
            self.say(f"deadline reached: {what} not run")
            return True
        return False
