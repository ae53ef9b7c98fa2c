"""Compile a kernel template with NVRTC for an exact GPU target (e.g. sm_90a) through CuPy.

CuPy's RawModule always compiles for the plain compute capability (``-arch=sm_90``), but
Hopper's warpgroup MMA (``wgmma``) exists only on the arch-specific target ``sm_90a``.
This module calls the same NVRTC that CuPy ships (``cupy_backends.cuda.libs.nvrtc``) with
the target we ask for, writes the cubin to a per-user cache folder keyed by a hash of
(source, name, options, NVRTC version), and loads it with ``cupy.RawModule(path=...)``,
so everything after loading (launch, ``max_dynamic_shared_size_bytes``, ``num_regs``) is
plain CuPy.

Every cubin a process loads is remembered (``loaded_cubins``), so a benchmark record can name
the exact binaries it timed by their sha256, whatever else the cache folder holds.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ..records.files import short_sha256

#: cubin path -> what compile_cubin loaded from it in this process (see ``loaded_cubins``)
_LOADED: dict = {}
#: the environment variable whose options (split on whitespace) every compile adds
OPTIONS_ENV = "FLASHVIZ_NVRTC_OPTIONS"


def env_options() -> tuple[str, ...]:
    """The NVRTC options $FLASHVIZ_NVRTC_OPTIONS adds to every ``compile_cubin`` (e.g. ("-lineinfo",),
    so compute-sanitizer names source lines), split on whitespace; () when it is unset or blank.
    ``common.environment`` stamps them into a record's env (``nvrtc_options``) when there are any."""
    return tuple(os.environ.get(OPTIONS_ENV, "").split())


def cache_dir() -> Path:
    """Where compiled cubins are kept: $FLASHVIZ_CACHE or ~/.cache/flashviz/cubin."""
    root = os.environ.get("FLASHVIZ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "flashviz")
    return Path(root) / "cubin"


def compile_cubin(source: str, name_expression: str, arch: str, options=()) -> tuple[object, str, bool]:
    """Compile ``name_expression`` (e.g. "flash_fwd_mma<0,128,128,64,false>") from ``source``
    for ``arch`` (e.g. "sm_90a") and load it. Options in $FLASHVIZ_NVRTC_OPTIONS (split on
    whitespace, e.g. "-lineinfo") are added to ``options``.

    Returns (cupy RawKernel, lowered name, cache_hit). Raises RuntimeError with NVRTC's log
    on a compile error, and whatever CuPy raises when the module cannot be loaded (e.g. a
    cubin for another GPU).
    """
    import cupy as cp
    from cupy_backends.cuda.libs import nvrtc

    # FLASHVIZ_NVRTC_OPTIONS (e.g. "-lineinfo", so compute-sanitizer names source lines) joins the options
    # and so the cache key: a build with it never replaces one without
    extra = env_options()
    opts = tuple(options) + extra + (f"--gpu-architecture={arch}", "-std=c++17", "--use_fast_math")
    ver = nvrtc.getVersion()
    key = hashlib.sha256("\0".join((source, name_expression, *opts, repr(ver))).encode()).hexdigest()[:32]
    folder = cache_dir()
    cubin_path = folder / f"{key}.cubin"
    name_path = folder / f"{key}.name"
    hit = cubin_path.is_file() and name_path.is_file()
    if not hit:
        prog = nvrtc.createProgram(source, "flashviz_kernel.cu", [], [])
        try:
            nvrtc.addNameExpression(prog, name_expression)
            try:
                nvrtc.compileProgram(prog, list(opts))
            except nvrtc.NVRTCError as exc:
                log = nvrtc.getProgramLog(prog)
                raise RuntimeError(f"NVRTC could not compile {name_expression} for {arch}: {exc}\n{log}") from None
            lowered = nvrtc.getLoweredName(prog, name_expression)
            cubin = nvrtc.getCUBIN(prog)
        finally:
            nvrtc.destroyProgram(prog)
        folder.mkdir(parents=True, exist_ok=True)
        # write-then-rename so a concurrent process never loads half a file
        for path, data in ((cubin_path, cubin), (name_path, lowered.encode())):
            fd, tmp = tempfile.mkstemp(dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)            # a shared $FLASHVIZ_CACHE stays readable to others
            os.replace(tmp, path)
    lowered = name_path.read_text()
    try:
        module = cp.RawModule(path=str(cubin_path))
        fn = module.get_function(lowered)
        _LOADED[str(cubin_path)] = {"name": lowered, "expression": name_expression, "arch": arch,
                                    "options": list(options), "source": source}
        return fn, lowered, hit
    except Exception:
        if not hit:
            raise
        # a damaged cache entry (a crash mid-write on another system, a disk error): compile again
        for path in (cubin_path, name_path):
            path.unlink(missing_ok=True)
        return compile_cubin(source, name_expression, arch, options)


def loaded_cubins() -> list[dict]:
    """Every cubin this process loaded through ``compile_cubin`` (compiled or found in the cache),
    in load order: dicts with "name" (the lowered kernel name), "expression" (the name expression
    asked for, e.g. "flash_bwd_mma<0,64,64,false>"), "arch", "options" (the caller's extra NVRTC
    options), "file" (the cache file's stem), "sha256" (of the cubin's bytes) and "source_sha256"
    (of the source text compiled: ``common.source_sha256`` of its kernel file), both the first 16
    hex digits. What a benchmark record names as the binaries it timed; the cubins are read and
    hashed here, at call time, never on a kernel's launch path. A cubin file removed since it was
    loaded gets "sha256": None."""
    out = []
    for path, info in _LOADED.items():
        p = Path(path)
        try:
            digest = short_sha256(p.read_bytes())
        except OSError:
            digest = None
        out.append({"name": info["name"], "expression": info["expression"], "arch": info["arch"],
                    "options": info["options"], "file": p.stem, "sha256": digest,
                    "source_sha256": short_sha256(info["source"].encode())})
    return out
