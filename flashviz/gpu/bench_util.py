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
