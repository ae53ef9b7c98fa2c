"""Input checks: one clear line per mistake.

Every public entry point funnels its arguments through these helpers so that bad
input raises a one-line ``TypeError``/``ValueError`` that says what was expected,
instead of a NaN, a silent wrong answer or a deep NumPy traceback. Three groups:

* the algorithm's inputs (``check_qkv``, ``check_block``, ``check_blocks``, ``check_scale``,
  ``check_order``, ...): reference, online, tiled, backward, iomodel, roofline, data;
* plain values and files (``check_int``, ``check_choice``, ``check_real``, ``check_output_path``,
  ``check_output_dir``, ``os_error_line``, ...), used by every layer that takes them — the GPU
  runner (``trace_kernel``), the records (``Timeline.save``), the exports, the widgets, the CLI;
* the caps of the IO model's block-size sweep (``sweep_problem``), used by the block-size widget
  and ``flashviz tables``.

NumPy only, nothing of flashviz: every layer may import it. The widgets' own checks (figure size,
dpi, text scale, registry keys, exported frames and fps) are in ``flashviz.widgets.checks``.
"""

from __future__ import annotations

import numbers

import numpy as np

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def as_float_array(x, name: str, want: str) -> np.ndarray:
    """Return ``x`` as a float16/32/64 ndarray; integer arrays are promoted to float64.

    ``want`` describes the expected array for the message, e.g. "of shape (..., Nq)". Accepts
    arrays (any strides; views are fine) and array-likes of numbers. Raises a one-line TypeError
    for None, strings, GPU arrays, ragged or non-numeric array-likes (object arrays included),
    booleans and complex numbers. Checks neither shape nor values.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a float array {want}, got {type(x).__name__}")
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__cuda_array_interface__") or type(x).__module__.startswith(("cupy", "torch")):
            raise TypeError(f"{name} must be a NumPy array (CPU); convert it with .get() / .cpu().numpy() first")
        try:
            x = np.asarray(x)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be a float array {want}: {shown(str(exc))}") from None
    if x.dtype.kind == "b":
        raise TypeError(f"{name} must hold numbers, got a boolean array")
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)
    if x.dtype.type not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype float16, float32 or float64, got {x.dtype}")
    return x


def check_lse_values(lse: np.ndarray, name: str, empty: str = "a row that sees no key") -> np.ndarray:
    """Refuse NaN and +inf in a row log-sum-exp array (float); −inf is legal: it marks ``empty``
    (a row that saw no key, or a split that saw none of a row's keys). One-line ValueError."""
    if np.isnan(lse).any() or np.isposinf(lse).any():
        raise ValueError(f"{name} contains NaN or +inf; it must be finite (-inf marks {empty})")
    return lse


def as_matrix_stack(x, name: str) -> np.ndarray:
    """Return ``x`` as a float ndarray of shape (..., N, d).

    Accepts float16/32/64 arrays (any strides; views are fine) and array-likes of
    numbers (``as_float_array``; integers become float64). Raises TypeError for non-numeric
    input and ValueError for wrong ndim, an axis of length 0 (N, d, or a batch, head or page
    axis: the message names it) or non-finite values.
    """
    x = as_float_array(x, name, "of shape (..., N, d)")
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape (..., N, d) with ndim >= 2, got shape {x.shape}")
    if 0 in x.shape:                             # N = 0, d = 0, or an empty batch / head / page axis
        axis = x.shape.index(0)
        raise ValueError(f"{name} must have N >= 1, d >= 1 and no empty axis, got shape {x.shape} "
                         f"(axis {axis} has length 0)")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf; attention inputs must be finite")
    return x


def check_qkv(Q, K, V):
    """Validate Q (..., Nq, d), K (..., Nk, d), V (..., Nk, dv) and return them as arrays."""
    Q = as_matrix_stack(Q, "Q")
    K = as_matrix_stack(K, "K")
    V = as_matrix_stack(V, "V")
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"Q and K must share the head dimension d, got Q {Q.shape} and K {K.shape}")
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(f"K and V must have the same number of keys Nk, got K {K.shape} and V {V.shape}")
    if not (Q.shape[:-2] == K.shape[:-2] == V.shape[:-2]):
        raise ValueError(
            f"Q, K, V must share their leading (batch, head) axes, got {Q.shape}, {K.shape}, {V.shape}"
        )
    return Q, K, V


def result_dtype(*arrays) -> np.dtype:
    """The dtype outputs are returned in: the widest input float type."""
    return np.result_type(*[a.dtype for a in arrays])


def check_block(value, name: str) -> int:
    """A block size: a Python/NumPy integer >= 1 (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {shown(value)}")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value}")
    return int(value)


def check_blocks(blocks) -> tuple[int, ...]:
    """The block sizes a block-size sweep tries for Br and for Bc (``iomodel.block_size_sweep``,
    the block-size widget): a non-empty sequence of distinct integers >= 1, returned as a tuple
    of Python ints in the given order. TypeError for something that is not a sequence or holds a
    non-integer; ValueError for an empty one, a size < 1 or a repeated size (one line each)."""
    try:
        out = tuple(blocks)
    except TypeError:
        raise TypeError(f"blocks must be a sequence of integers >= 1, got {shown(blocks)}") from None
    if not out:
        raise ValueError("blocks is empty: give at least one block size, e.g. (16, 32, 64, 128, 256)")
    out = tuple(check_block(v, "each block size") for v in out)
    if len(set(out)) != len(out):
        raise ValueError(f"blocks must not repeat a size, got {out}")
    return out


def check_size(value, name: str) -> int:
    """A size such as N or d: an integer >= 1."""
    return check_block(value, name)


#: Most splits a split-KV decode may be asked for (``decode_attention``, ``iomodel.decode_io``):
#: 4,096, 32 times FlashAttention's automatic cap of 128 (``decode.MAX_SPLITS``, the decode
#: widget's). Splits beyond the key blocks are empty but still written and merged, so the run is
#: linear in num_splits: 10**6 splits of 10 keys took 43 s.
MAX_NUM_SPLITS = 4096
#: Largest page of a paged KV cache, in tokens (``decode_attention``'s page_size, ``iomodel.decode_io``):
#: 65,536. Real caches use pages of 16 to 256 tokens (vLLM, FlashAttention's page_block_size);
#: without a block_table the cache is cut into such pages and the last one zero-padded, so a
#: page of 10**12 tokens ran out of memory.
MAX_PAGE_SIZE = 65536


def check_num_splits(value) -> int:
    """A split count: an integer from 1 to MAX_NUM_SPLITS (4,096). One-line TypeError for a
    non-integer (bool refused), ValueError below 1 or above the cap."""
    n = check_block(value, "num_splits")
    if n > MAX_NUM_SPLITS:
        raise ValueError(f"num_splits must be at most {MAX_NUM_SPLITS:,} (each split is written and merged, "
                         f"even an empty one), got {_count(n)}")
    return n


def check_page_size(value) -> int:
    """A KV-cache page size in tokens: an integer from 1 to MAX_PAGE_SIZE (65,536). One-line
    TypeError for a non-integer (bool refused), ValueError below 1 or above the cap."""
    n = check_block(value, "page_size")
    if n > MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be at most {MAX_PAGE_SIZE:,} tokens (real caches use pages of 16 to "
                         f"256), got {_count(n)}")
    return n


def check_scale(scale, d: int) -> float:
    """``scale=None`` means 1/sqrt(d); otherwise a finite real number."""
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {shown(scale)}")
    try:
        value = float(scale)
    except OverflowError:
        raise ValueError(f"scale must be a finite float, got an integer with {len(str(scale))} digits") from None
    if not np.isfinite(value):
        raise ValueError(f"scale must be finite, got {scale}")
    return value


def safe_limit(acc_dtype) -> float:
    """The largest magnitude an accumulator of ``acc_dtype`` may be asked to hold: 1/4 of the type's
    largest finite value (3.4e38 for float32, 1.8e308 for float64), a margin for the sums and
    differences built on it. Used by ``check_score_range``, ``check_value_range`` and
    ``check_grad_range``."""
    return float(np.finfo(acc_dtype).max) / 4


def max_abs(x: np.ndarray) -> float:
    """max |x| over a non-empty finite array, as a Python float (never overflows)."""
    return float(np.max(np.abs(x)))


def max_row_norm(x: np.ndarray) -> float:
    """The largest Euclidean norm of a row (last axis) of a non-empty finite array, as a Python float.

    Computed scaled, s·max‖x/s‖ with s = max |x|, so that squaring neither overflows (1e160² in
    float64) nor underflows (1e-160²); 0.0 for an all-zero array."""
    s = max_abs(x)
    if s == 0:
        return 0.0
    y = np.asarray(x, dtype=np.float64) / s
    return s * float(np.sqrt(np.max(np.sum(np.square(y), axis=-1))))


def check_score_range(Q: np.ndarray, K: np.ndarray, scale: float, acc_dtype) -> None:
    """Refuse inputs whose scores scale·QKᵀ could overflow the accumulator type.

    Bound (Cauchy–Schwarz): |scale·q·k| <= |scale|·max‖q‖·max‖k‖ (norms computed scaled, so the
    bound itself does not overflow: ``max_row_norm``). Over ``safe_limit(acc_dtype)`` (1/4 of the
    type's largest finite value), scores (or their differences m_old − m_new) could become ±inf
    and the softmax NaN or silently wrong, so this raises a one-line ValueError instead.
    """
    q, k = max_row_norm(Q), max_row_norm(K)
    bound = 0.0 if scale == 0 or q == 0 or k == 0 else abs(scale) * q * k
    limit = safe_limit(acc_dtype)
    if not np.isfinite(bound) or bound > limit:
        raise ValueError(f"scores scale·QKᵀ can reach about {bound:.3g}, beyond what {np.dtype(acc_dtype).name} "
                         f"holds safely ({limit:.3g}): scale Q, K or scale down")


def check_value_range(V: np.ndarray, Nk: int, acc_dtype, *, name: str = "V", count: str = "Nk",
                      unit: str = "keys") -> None:
    """Refuse values V that could overflow the unnormalised output accumulator of the tiled forward.

    The online softmax keeps O_i = Σ_j exp(S_ij − m_i)·V_j unnormalised until the end; every weight
    is <= 1, so |O_i| <= Nk·max|V| (Nk: keys per row; the split-KV merge obeys the same bound).
    Over ``safe_limit(acc_dtype)`` (1/4 of the type's largest finite value) O_i could become inf and
    the output inf or NaN although the exact answer is finite, so this raises a one-line
    ValueError instead. Used by ``flash_forward`` and ``decode_attention``, and by
    ``decode.merge_partials`` with name="O_parts", count="S", unit="splits" (the merge is the same
    weighted sum, over S splits of weight <= 1): those three words only change the message.
    """
    bound = Nk * max_abs(V)
    limit = safe_limit(acc_dtype)
    if not np.isfinite(bound) or bound > limit:
        raise ValueError(f"the output accumulator can reach {count}·max|{name}| = {bound:.3g} ({count} = {Nk:,} "
                         f"{unit}), beyond what {np.dtype(acc_dtype).name} holds safely ({limit:.3g}): "
                         f"scale {name} down")


def check_grad_range(Q: np.ndarray, K: np.ndarray, V: np.ndarray, dO: np.ndarray, scale: float, acc_dtype,
                     O: np.ndarray | None = None) -> None:
    """Refuse inputs whose backward pass could overflow the accumulator type.

    With P = softmax(scale·QKᵀ) (entries <= 1, rows summing to 1) and B = dv·max|dO|·max|V|
    (max|O| too when ``O`` is given; |O| <= max|V| for the exact O), every quantity of the
    backward is bounded: |dP|, |D| <= B for dP = dO Vᵀ and D = rowsum(dO ∘ O); |dS| <= 2B for
    dS = P ∘ (dP − D); |dQ| <= |scale|·2B·max|K|; |dK| <= |scale|·Nq·2B·max|Q|; |dV| <= Nq·max|dO|.
    When one of them exceeds ``safe_limit(acc_dtype)`` (1/4 of the type's largest finite value)
    the gradients could become inf or NaN, so this raises a one-line ValueError naming it. Used by
    ``attention_backward`` and ``flash_backward`` (whose lse must be the forward's, so that P is
    the softmax).
    """
    vmax = max_abs(V) if O is None else max(max_abs(V), max_abs(O))
    g = max_abs(dO)
    Nq = Q.shape[-2]
    B = 0.0 if g == 0 or vmax == 0 else V.shape[-1] * g * vmax
    s = abs(scale)
    bounds = [("dP = dO·Vᵀ and D = rowsum(dO∘O)", "dv·max|dO|·max|V|", B),
              ("dQ = scale·dS·K", "|scale|·2·dv·max|dO|·max|V|·max|K|", 0.0 if B == 0 else s * 2 * B * max_abs(K)),
              ("dK = scale·dSᵀ·Q", "|scale|·Nq·2·dv·max|dO|·max|V|·max|Q|",
               0.0 if B == 0 else s * Nq * 2 * B * max_abs(Q)),
              ("dV = Pᵀ·dO", "Nq·max|dO|", Nq * g)]
    limit = safe_limit(acc_dtype)
    for what, formula, bound in bounds:
        if not np.isfinite(bound) or bound > limit:
            raise ValueError(f"{what} can reach {formula} = {bound:.3g}, beyond what {np.dtype(acc_dtype).name} "
                             f"holds safely ({limit:.3g}): scale dO, V, Q or K down")


def check_flag(value, name: str) -> bool:
    """True/False (NumPy bools too); one-line TypeError otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def check_itemsize(itemsize) -> int:
    """Bytes per element: 1, 2, 4 or 8; one-line ValueError otherwise."""
    if isinstance(itemsize, bool) or not isinstance(itemsize, numbers.Integral) or itemsize not in (1, 2, 4, 8):
        raise ValueError(f"itemsize must be 1, 2, 4 or 8 bytes, got {shown(itemsize)}")
    return int(itemsize)


def check_order(order) -> str:
    """'fa2' or 'fa1'; one-line TypeError for a non-string (an array, a list), ValueError for
    another string."""
    want = "order must be 'fa2' (query blocks outer) or 'fa1' (key blocks outer)"
    if not isinstance(order, str):
        raise TypeError(f"{want}, a string, got {shown(order)}")
    if order not in ("fa1", "fa2"):
        raise ValueError(f"{want}, got {shown(order)}")
    return order


# --- plain values and files: any layer (the runner's trace_kernel, Timeline.save, the exports,
# the widgets, the command line) -------------------------------------------------------------------

def shown(value) -> str:
    """``repr(value)`` for an error message: on one line (every run of whitespace, newlines
    included, becomes one space: a NumPy array's repr spans lines) and cut to 60 characters
    ("..." at the end when cut), so that a huge or multi-line argument still makes a one-line
    error. Every message of this module that quotes a value given uses it."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(value, name: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer (Python or NumPy; bool refused) in [lo, hi]; one-line TypeError/ValueError
    that names the argument, the value given and the range expected."""
    if lo is not None and hi is not None:
        want = f"an integer between {lo:,} and {hi:,}"
    elif lo is not None:
        want = f"an integer >= {lo:,}"
    else:
        want = "an integer"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {want}, got {shown(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be {want}, got {value:,}" if abs(value) < 10**30 else
                         f"{name} must be {want}, got an integer with {len(str(abs(value)))} digits")
    return int(value)


def check_choice(value, name: str, choices):
    """One of ``choices`` (integers: Python or NumPy ints, bool refused; strings: exact);
    one-line TypeError for the wrong kind, ValueError naming the choices otherwise."""
    listed = ", ".join(map(str, choices))
    if all(isinstance(c, str) for c in choices):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be one of {listed} (a string), got {shown(value)}")
        if value not in choices:
            raise ValueError(f"{name} must be one of {listed}, got {shown(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be one of {listed} (an integer), got {shown(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {listed}, got {shown(value)}")
    return int(value)


def check_member(value, name: str, allowed, kernel: str = "GPU kernel") -> int:
    """``value`` as an int from ``allowed`` (a kernel's supported sizes); TypeError for a
    non-integer, ValueError naming ``kernel`` and listing the supported values otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, one of {', '.join(map(str, allowed))}; got {shown(value)}")
    if int(value) not in allowed:
        raise ValueError(f"{name}={value} is not supported by the {kernel}; "
                         f"supported: {', '.join(map(str, allowed))}")
    return int(value)


def check_real(value, name: str, lo: float, hi: float, *, unit: str = "") -> float:
    """A finite real number (bool refused) with lo < value <= hi when lo is 0, else lo <= value <= hi."""
    unit = f" {unit}" if unit else ""
    want = f"a number above 0 and at most {hi:g}{unit}" if lo == 0 else f"a number from {lo:g} to {hi:g}{unit}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {want}, got {shown(value)}")
    try:
        x = float(value)
    except OverflowError:
        x = float("inf")
    if not np.isfinite(x) or x > hi or (x <= 0 if lo == 0 else x < lo):
        raise ValueError(f"{name} must be {want}, got {shown(value)}")
    return x


def check_callable(value, name: str, what: str = "a function"):
    """None or a callable; one-line TypeError otherwise."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be {what} or None, got {shown(value)}")
    return value


def check_output_path(path, suffixes, name: str = "path"):
    """A file we can write: str or os.PathLike (``~`` expanded) ending in one of ``suffixes``, in an
    existing, writable folder, and not itself a folder. Returns it as a pathlib.Path.

    TypeError for a non-path, ValueError for a wrong suffix or a NUL character, FileNotFoundError /
    NotADirectoryError / IsADirectoryError / PermissionError (OSError, one line each) when it cannot
    be written, and the file system's own OSError (a name too long, ...) as one line
    "path '…' cannot be written: <reason>" (``os_error_line``). All before anything is drawn."""
    import os
    from pathlib import Path

    ends = " or ".join(suffixes)
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file name (str or pathlib.Path) ending in {ends}, got {shown(path)}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a file name ending in {ends}, got {shown(path)}")
    if "\0" in text:
        raise ValueError(f"{name} must be a file name without NUL characters ('\\x00'), got {shown(text)}")
    p = Path(text).expanduser()
    if p.suffix.lower() not in suffixes:
        raise ValueError(f"{name} must end in {ends}, got {str(p)!r}")
    try:
        _check_writable_file(p, ends, name)
    except OSError as exc:
        if exc.errno is None:                    # ours, already one line
            raise
        raise os_error_line(exc, p, name) from None   # the file system's own: a name too long, a loop
    return p


def _check_writable_file(p, ends: str, name: str) -> None:
    """The file-system half of ``check_output_path``: raises its one-line OSErrors (errno None);
    an OSError of the file system itself (ENAMETOOLONG from is_dir, ...) propagates."""
    import os

    parent = p.parent
    if not parent.exists():
        raise FileNotFoundError(f"{name} {str(p)!r} cannot be written: its folder {str(parent)!r} does not exist "
                                f"(create it first, or save elsewhere)")
    if not parent.is_dir():
        raise NotADirectoryError(f"{name} {str(p)!r} cannot be written: {str(parent)!r} is a file, not a folder")
    if p.is_dir():
        raise IsADirectoryError(f"{name} {str(p)!r} is a folder; give a file name inside it ending in {ends}")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise PermissionError(f"{name} {str(p)!r} cannot be written: no permission to write "
                              f"{'it' if p.exists() else f'in {str(parent)!r}'}")


def check_output_dir(path, name: str = "out"):
    """A folder we can write into or create: str or os.PathLike (``~`` expanded) that is a
    folder, or does not exist yet below a writable folder. Returns it as a pathlib.Path.
    TypeError for a non-path, ValueError for a NUL character, NotADirectoryError / PermissionError
    (one line each) when it cannot be written, the file system's own OSError (a name too long, ...)
    as one line "out '…' cannot be written: <reason>" (``os_error_line``)."""
    import os
    from pathlib import Path

    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip():
        raise TypeError(f"{name} must be a folder name (str or pathlib.Path), got {shown(path)}")
    if "\0" in os.fspath(path):
        raise ValueError(f"{name} must be a folder name without NUL characters ('\\x00'), got {shown(path)}")
    p = Path(os.fspath(path)).expanduser()
    try:
        _check_writable_dir(p, name)
    except OSError as exc:
        if exc.errno is None:                    # ours, already one line
            raise
        raise os_error_line(exc, p, name) from None   # the file system's own: a name too long, a loop
    return p


def _check_writable_dir(p, name: str) -> None:
    """The file-system half of ``check_output_dir``, as ``_check_writable_file`` is of
    ``check_output_path``."""
    import os

    if p.exists() and not p.is_dir():
        raise NotADirectoryError(f"{name} {str(p)!r} is a file; give a folder (it is created if missing)")
    top = p
    while not top.exists():                      # the folder that exists, under which p is created
        top = top.parent
    if not top.is_dir():
        raise NotADirectoryError(f"{name} {str(p)!r} cannot be created: {str(top)!r} is a file, not a folder")
    if not os.access(top, os.W_OK | os.X_OK):
        raise PermissionError(f"{name} {str(p)!r} cannot be written: no permission to write in {str(top)!r}")


def os_error_line(exc: OSError, path, name: str = "path") -> OSError:
    """The same kind of OSError with one line that names the file: for a write that failed anyway
    (a full disk, a file system that refuses the name) after ``check_output_path`` passed."""
    lines = str(exc).strip().splitlines()
    reason = exc.strerror or (lines[0] if lines else type(exc).__name__)
    msg = f"{name} {str(path)!r} cannot be written: {reason}"
    try:
        return type(exc)(msg)
    except Exception:
        return OSError(msg)


# --- the IO model's block-size sweep (``iomodel.block_size_sweep``): how big a sweep the block-size
# widget and ``flashviz tables`` may ask for; the error says the cap and why, in one line -------------

#: Most query blocks the IO model may visit for one block-size sweep (its closed forms loop over
#: the Tr = ⌈N/Br⌉ query blocks of every Br × Bc; the block-size widget also sweeps every N of its
#: traffic-vs-N curve): 500,000 visits take about a second in the model and three in the widget.
#: Tiny blocks go far beyond (Br = 1 at N = 65,536 is 65,536 visits per configuration).
MAX_SWEEP_STEPS = 500_000
#: Largest SRAM budget in bytes: 1 TiB. Real on-chip SRAM is a few hundred KiB a block (232,448 B on
#: an H100/H200); far beyond 1 TiB the model's byte counts no longer fit a float.
MAX_SRAM_BYTES = 2 ** 40



def _count(n: int) -> str:
    """An integer for a message: 1,234,567 — or 'about 10^400' when it is too long to read."""
    return f"{n:,}" if abs(n) < 10**15 else f"about 10^{len(str(abs(n))) - 1}"


def sweep_steps(N: int, blocks) -> int:
    """Query blocks the IO model visits for a block-size sweep over ``blocks`` × ``blocks`` at N:
    len(blocks) · Σ_Br ⌈N/Br⌉ (its closed forms loop over the Tr query blocks of each configuration)."""
    blocks = tuple(blocks)
    return len(blocks) * sum(-(-N // Br) for Br in blocks)


def sweep_problem(N: int, blocks, *, curve_N=(), what: str = "N", blocks_given: bool = True) -> str | None:
    """Why a block-size sweep at N over ``blocks`` (plus one sweep per sequence length of
    ``curve_N``, as the block-size widget draws) would take too long: more than MAX_SWEEP_STEPS
    query-block visits. None when it is fine. blocks_given: the caller chose the blocks (the
    message then suggests dropping the smallest)."""
    blocks = tuple(blocks)
    fixed = sum(sweep_steps(n, blocks) for n in curve_N)
    steps = fixed + sweep_steps(N, blocks)
    if steps <= MAX_SWEEP_STEPS:
        return None
    head = (f"block sizes {blocks} at {what} = {_count(N)} make the IO model visit {_count(steps)} query blocks"
            f"{' (with its traffic-vs-N curve)' if curve_N else ''}, more than {MAX_SWEEP_STEPS:,} (a few seconds)")
    if fixed + sweep_steps(1, blocks) > MAX_SWEEP_STEPS:
        return f"{head}: drop the smallest block sizes"
    lo, hi = 1, N                                  # the largest N that fits, by bisection (steps grow with N)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fixed + sweep_steps(mid, blocks) <= MAX_SWEEP_STEPS else (lo, mid - 1)
    return f"{head}: pick {what} <= {lo:,}{' or drop the smallest block sizes' if blocks_given else ''}"
