import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_collection_modifyitems(config, items):
    """GPU tests skip cleanly on machines without CuPy or a CUDA device."""
    try:
        from flashviz.gpu import gpu_status
        ok, reason = gpu_status()
    except ImportError as exc:  # the GPU runner itself failed to import
        ok, reason = False, str(exc)
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in items:
        # the marker, not item.keywords: keywords hold the parent nodes' names too, and every
        # test under tests/gpu/ (its CPU-side tests included) would match the folder "gpu"
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def widget_backend():
    """matplotlib on ipympl's backend for the test (figures get ipympl's web canvas), then back."""
    import matplotlib
    old = matplotlib.get_backend()
    matplotlib.use("module://ipympl.backend_nbagg")
    yield
    matplotlib.use(old)


@pytest.fixture
def figures():
    """A list to append the matplotlib figures a test makes; each is closed after the test."""
    import matplotlib.pyplot as plt
    made = []
    yield made
    for f in made:
        plt.close(f)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def naive_attention_loops(Q, K, V, causal=False, scale=None):
    """A literal, row-by-row float64 attention (independent of flashviz.attention)."""
    import math

    Q, K, V = (np.asarray(x, dtype=np.float64) for x in (Q, K, V))
    Nq, d = Q.shape
    Nk = K.shape[0]
    scale = 1 / math.sqrt(d) if scale is None else scale
    O = np.zeros((Nq, V.shape[1]))
    lse = np.full(Nq, -np.inf)
    for r in range(Nq):
        cols = [c for c in range(Nk) if not causal or c <= r + Nk - Nq]
        if not cols:
            continue
        s = np.array([scale * float(Q[r] @ K[c]) for c in cols])
        mx = s.max()
        w = np.exp(s - mx)
        O[r] = (w[:, None] * V[cols]).sum(0) / w.sum()
        lse[r] = mx + math.log(w.sum())
    return O, lse
