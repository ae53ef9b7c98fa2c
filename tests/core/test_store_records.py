"""records.store_records on records written by hand (the benchmark's row keys): rows in N order and
the crossover of recompute and store by its definition."""

from __future__ import annotations

from flashviz.records.store_records import crossover, store_rows


def _rec(times):
    return {"bench": [{"N": N, "P_bytes": 8 * N * N * 4, "recompute_kernel_ms": r, "stored_kernel_ms": s,
                       "naive_kernel_ms": 2 * s, "stored_peak_bytes": 100, "recompute_peak_bytes": 10}
                      for N, (r, s) in times.items()]}


def test_rows_come_in_n_order_with_each_backward_s_figures():
    rows = store_rows(_rec({2048: (3.0, 2.0), 512: (0.5, 0.2)}))
    assert [r["N"] for r in rows] == [512, 2048]
    assert rows[1]["stored"]["kernel_ms"] == 2.0 and rows[1]["naive"]["kernel_ms"] == 4.0
    assert rows[0]["recompute"]["peak_bytes"] == 10 and rows[0]["naive"]["peak_bytes"] is None
    assert store_rows(None) == []


def test_the_crossover_is_where_recomputing_stays_at_least_as_fast():
    assert crossover(_rec({512: (0.5, 0.2), 1024: (1.0, 1.1), 2048: (3.0, 3.5)})) == 1024
    assert crossover(_rec({512: (0.5, 0.6), 1024: (1.2, 1.1), 2048: (3.0, 3.5)})) == 2048   # not before 1024
    assert crossover(_rec({512: (0.5, 0.2), 1024: (1.2, 1.1)})) is None
    assert crossover({"bench": [{"N": 512, "recompute_kernel_ms": 0.1}]}) is None
    untimed = _rec({512: (0.5, 0.6), 1024: (1.0, 1.1)})
    untimed["bench"].append({"N": 2048, "recompute_kernel_ms": 3.0})           # stored not timed at the largest N
    assert crossover(untimed) is None
