"""Checks every lesson widget must pass, shared by the widget test files."""

import gc

import matplotlib.pyplot as plt


def assert_recreating_leaks_no_figure(make):
    """25 widgets made on one line replace each other: one figure stays open, then none after
    close() (called twice: it is idempotent). Returns the closed widget."""
    plt.close("all")
    base = len(plt.get_fignums())
    for _ in range(25):
        w = make()                      # same line each time: each replaces the last
    gc.collect()
    assert len(plt.get_fignums()) == base + 1
    w.close()
    w.close()
    assert len(plt.get_fignums()) == base
    return w


def assert_close_frees_every_comm(make, at_least: int = 15):
    """A widget opens many comms (every control, layout and style); close() closes all of them."""
    from ipywidgets.widgets.widget import _instances  # ipywidgets 8: every live widget (comm) by id

    before = set(_instances)
    w = make()
    assert len(set(_instances) - before) > at_least
    w.close()
    left = set(_instances) - before
    assert left == set(), sorted(f"{type(_instances[k]).__name__}" for k in left if k in _instances)
