"""The recompute-versus-store benchmark's counting, naming and error measure
(gpu.teaching.store_bench), on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from flashviz.gpu.teaching import store_bench as sb


def test_kept_bytes_are_o_lse_and_p_when_stored():
    N, d, h = 4096, 64, 8
    assert sb.kept_bytes(N, "recompute") == h * (N * d * 4 + N * 4)
    for impl in ("stored", "naive"):
        assert sb.kept_bytes(N, impl) - sb.kept_bytes(N, "recompute") == h * N * N * 4
    with pytest.raises(ValueError, match="impl must be one of"):
        sb.kept_bytes(N, "both")


def test_the_record_is_named_partial_unless_it_is_the_full_run():
    env = {"device": "NVIDIA H200", "date": "2026-12-05"}
    assert sb.record_name(env, True) == "storep-h200-2026-12-05.json"
    assert sb.record_name(env, False) == "partial-storep-h200-2026-12-05.json"


def test_the_relative_error_is_over_the_reference_s_largest_value():
    ref = (np.array([1.0, -4.0]), np.array([2.0, 0.5]))
    assert sb.max_rel_err((np.array([1.0, -3.0]), np.array([2.0, 0.5])), ref) == pytest.approx(0.25)
    assert sb.max_rel_err(ref, ref) == 0.0
