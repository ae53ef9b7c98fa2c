"""What a benchmark record says about the code it ran: the commit and the hashes of the code timed.

Shared by the benchmarks that write records (the decode benchmark, ``decode_bench``; the backward
benchmark, ``tensorcore/bench_bwd``):

* ``git_commit(root)`` — the checkout's short commit, ``+uncommitted`` when tracked files differ
  from it, or None where there is no git or no checkout;
* ``stamp_commit(env)`` — ``env["commit"]`` from $FLASHVIZ_COMMIT (what ``common.environment``
  already read) or else from git, and ``env["commit_from"]`` saying which ("FLASHVIZ_COMMIT",
  "git" or None);
* ``code_hashes(files, kernels=())`` — ``kernel_sources`` ({kernels/ file: sha256 of the text NVRTC
  compiles, ``common.source_sha256``} for every kernel file some loaded cubin came from, and for
  each file in ``kernels`` whether or not it compiled), ``cubins`` (``nvrtc.loaded_cubins``: the
  binaries this process loaded) and ``files_sha256`` ({path: sha256 of the file's bytes} of the
  Python files that make the calls; None for a file that cannot be read).

Hashes are the first 16 hex digits of a sha256 (``records.files.short_sha256``), the form
``records.provenance`` compares with the tree. Nothing here imports CuPy or torch.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def repo_root() -> Path:
    """The folder holding the flashviz package (a source checkout's root)."""
    import flashviz
    return Path(flashviz.__file__).resolve().parent.parent


def git_commit(root) -> str | None:
    """The checkout's short commit (+uncommitted when tracked files differ), or None without git."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if sha.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha.stdout.strip() + ("+uncommitted" if dirty else "")
    except Exception:
        return None


def stamp_commit(env: dict, root=None) -> dict:
    """Fill env["commit"] (kept when $FLASHVIZ_COMMIT set it, else ``git_commit``) and
    env["commit_from"]; in place, returns env."""
    if env.get("commit"):
        env["commit_from"] = "FLASHVIZ_COMMIT"
    else:
        env["commit"] = git_commit(repo_root() if root is None else root)
        env["commit_from"] = "git" if env["commit"] else None
    return env


def code_hashes(files, kernels=()) -> dict:
    """{"kernel_sources", "cubins", "files_sha256"} for a record's env (see the module text).
    files: paths relative to the checkout root; kernels: kernels/ file names always listed."""
    from ..records.files import package_dir, short_sha256
    from .common import source_sha256
    from .nvrtc import loaded_cubins
    cubins = loaded_cubins()
    used = {c["source_sha256"] for c in cubins}
    sources = {}
    for f in sorted(p.name for p in package_dir("flashviz.kernels").iterdir() if p.name.endswith(".cu")):
        h = source_sha256(f)
        if h in used or f in kernels:
            sources[f] = h
    base = repo_root()
    hashed = {}
    for f in files:
        try:
            hashed[f] = short_sha256((base / f).read_bytes())
        except OSError:
            hashed[f] = None
    return {"kernel_sources": sources, "cubins": cubins, "files_sha256": hashed}


__all__ = ["git_commit", "stamp_commit", "code_hashes", "repo_root"]
