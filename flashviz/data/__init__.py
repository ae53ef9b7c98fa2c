"""Attention inputs: real (captured from a pretrained model), random, adversarial."""

from __future__ import annotations

from .real import available_real_heads, load_real_qkv
from .synthetic import adversarial_qkv, random_qkv

SOURCES = ("real", "random", "adversarial")

__all__ = ["load_real_qkv", "available_real_heads", "random_qkv", "adversarial_qkv", "get_qkv", "SOURCES"]


def get_qkv(source: str, N: int, d: int, *, seed: int = 0):
    """Q, K, V (N, d) float64 from a named source, plus a one-line description.

    source: "real" (all-MiniLM-L6-v2 on a public-domain text; d must be 32, N <= 512),
    "random" (seeded unit normal) or "adversarial" (scores in the hundreds).
    Returns (Q, K, V, description). Raises ValueError for an unknown source or a size the
    source cannot give.
    """
    if source == "random":
        Q, K, V = random_qkv(N, d, seed=seed)
        return Q, K, V, f"random normal (seed {seed})"
    if source == "adversarial":
        Q, K, V = adversarial_qkv(N, d, seed=seed)
        return Q, K, V, "adversarial: scores 300–800, the row max rises every block"
    if source == "real":
        Q, K, V, prov = load_real_qkv(N=N)
        if Q.shape[1] != d:
            raise ValueError(f"real inputs have head dimension d={Q.shape[1]}, got d={d}")
        return Q, K, V, f"{prov.get('model', 'real model').split(' via ')[0]}, layer {prov['layer']} head {prov['head']}"
    raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
