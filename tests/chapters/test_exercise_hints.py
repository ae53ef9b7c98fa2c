"""Issue 10, item 7: a wrong answer gets a hint at the idea, never the expected value.

Every check is fed wrong answers (numeric ones at 2x, 0.5x and 1 % off the truth) and must say
"✗ Not yet: …" in one line with no number in it that reads as the expected value in any common
formatting (plain, with thousands separators, %g, MiB or MB with 2 decimals); the right answer
must say "✓ Right: …". The truths are computed here, by hand (or from iomodel's closed forms).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from flashviz import exercises as ex
from flashviz import iomodel
from flashviz.exercises.backward import check_dS, check_extra_flops, check_recompute_P, check_stored_bytes
from flashviz.exercises.blocksize import check_largest_fitting_tile, check_traffic_prediction
from flashviz.exercises.gpu import check_compulsory_bytes, check_fastest_blocks, check_intensity
from flashviz.exercises.memory import check_matmul_intensity, check_softmax_intensity, check_standard_bytes
from flashviz.exercises.online import PREDICT_X, check_alpha, check_l, check_rescale
from flashviz.exercises.tiling import check_causal_mask, check_fa1_extra_bytes, check_run_bytes, check_tile_count

NUMBER = re.compile(r"(?<![A-Za-z\d.,])\d(?:[\d,]*\d)?(?:\.\d+)?(?:[eE][+-]?\d+)?")  # not "float32"


def _sig_digits(token: str) -> int:
    mantissa = re.split("[eE]", token)[0].replace(",", "").replace(".", "").lstrip("0")
    return len(mantissa)


def leaks(message: str, truth: float) -> list[str]:
    """Numbers in ``message`` that read as ``truth`` at their own precision: as is, in MiB, MB, GB."""
    found = []
    for tok in NUMBER.findall(message):
        if _sig_digits(tok) < 2:                       # "2x", "float32"'s "3" are no read-off
            continue
        plain = tok.replace(",", "")
        value = float(plain)
        decimals = len(plain.split(".")[1].split("e")[0].split("E")[0]) if "." in plain else 0
        for scale in (1, 2**20, 1e6, 1e9):
            t = truth / scale
            if "e" in plain.lower():
                same = math.isclose(value, float(f"{t:.{_sig_digits(tok) - 1}e}"), rel_tol=1e-9)
            else:
                same = math.isclose(value, round(t, decimals), rel_tol=1e-12, abs_tol=1e-12) and abs(t) >= 10 ** -decimals
            if same:
                found.append(tok)
    return found


def assert_wrong(result, truth: float | None = None):
    msg = result.message
    assert msg.startswith("✗ Not yet: "), msg
    assert not result.ok and "\n" not in msg, msg
    assert "expected" not in msg and "flashviz computes" not in msg and "right value" not in msg, msg
    if truth is not None:
        assert not leaks(msg, truth), f"{msg!r} gives away {truth} as {leaks(msg, truth)}"


def assert_right(result):
    assert result.ok and result.message.startswith("✓ Right: "), result.message


def test_leak_detector_sees_common_formats():
    for text in ("1048576", "1,048,576 B", "1.00 MiB", "1.04858e+06", "1.05 MB"):
        assert leaks(text, 1048576), text
    assert not leaks("2,097,152 B, too high, but within 2x", 1048576)


# (check, right answer, extra args, truth of the number compared)
def _numeric_cases():
    N, d = 1024, 64
    cases = [
        ("softmax_intensity", check_softmax_intensity, (), 5 / (6 * 4)),
        ("matmul_intensity", check_matmul_intensity, (N, d), 2 * N * N * d / ((2 * N * d + N * N) * 4)),
        ("standard_bytes", check_standard_bytes, (4096, 64), (4 * 4096 * 64 + 4 * 4096**2) * 2),
    ]
    x, m0 = PREDICT_X, max(PREDICT_X[:2])
    l0 = np.exp(x[:2] - m0).sum()
    m1 = max(m0, max(x[2:4]))
    alpha = math.exp(m0 - m1)
    cases += [("alpha", check_alpha, (), alpha), ("l", check_l, (), alpha * l0 + np.exp(x[2:4] - m1).sum())]
    # chapter 4: FA2 order, Q read once, K and V Tr times, O written once, lse (float32) once
    N4, d4, Br, Bc, b = 2048, 64, 32, 128, 2
    fa2 = iomodel.flash_forward_io(N4, N4, d4, Br=Br, Bc=Bc, itemsize=b).hbm_bytes
    cases.append(("traffic", lambda a: check_traffic_prediction(a, N=N4, d=d4, Br=Br, Bc=Bc, itemsize=b), (), fa2))
    run = iomodel.flash_forward_io(512, 512, 64, Br=128, Bc=128, itemsize=4).hbm_bytes
    cases.append(("run_bytes", lambda a: check_run_bytes(a, N=512, d=64, Br=128, Bc=128), (), run))
    one, two = (iomodel.flash_forward_io(512, 512, 64, Br=64, Bc=32, order=o).hbm_bytes for o in ("fa1", "fa2"))
    cases.append(("fa1_extra", lambda a: check_fa1_extra_bytes(a, N=512, d=64, Br=64, Bc=32), (), one - two))
    cases.append(("tiles", lambda a: check_tile_count(a, Nq=200, Nk=200, Br=32, Bc=64), (), 7 * 4))
    cases.append(("causal_tiles", lambda a: check_tile_count(a, Nq=256, Nk=256, Br=64, Bc=64, causal=True), (),
                  4 + 3 + 2 + 1))
    cases.append(("extra_flops", lambda a: check_extra_flops(a, N=4096, d=64), (), 2 * 4096 * 4096 * 64))
    cases.append(("compulsory", lambda a: check_compulsory_bytes(a, N=4096, d=64, BH=128, itemsize=2), (),
                  4 * 128 * 4096 * 64 * 2 + 4 * 128 * 4096))
    return cases


CASES = _numeric_cases()


@pytest.mark.parametrize("name, check, args, truth", CASES, ids=[c[0] for c in CASES])
def test_numeric_check_hints_without_the_value(capsys, name, check, args, truth):
    assert_right(check(truth, *args))
    for factor in (2.0, 0.5, 1.05, 0.95, 3.0, 1.01, 0.99):
        wrong = truth * factor
        if name.endswith("tiles"):                    # whole tiles, and never the truth itself
            wrong = round(wrong) if round(wrong) != truth else truth + (1 if factor > 1 else -1)
        r = check(wrong, *args)
        if r.ok and factor in (1.01, 0.99):           # within a check's 2 % tolerance: right, and may say so
            assert_right(r)
            continue
        assert_wrong(r, truth)
        if factor in (2.0, 0.5, 3.0):
            assert ("too high" if wrong > truth else "too low") in r.message, r.message
    capsys.readouterr()


def test_direction_says_which_way_and_how_far_only():
    assert ex.direction(2.0, 1.0) == "too high by 2x or more"
    assert ex.direction(1.5, 1.0) == "too high, but within 2x"
    assert ex.direction(0.99, 1.0) == "close, but slightly too low"
    assert "1.5" not in ex.direction(1.5, 1.0)


def test_intensity_hints_without_the_value(capsys):
    from flashviz.records.results import latest_results

    res = latest_results("mma")
    if not res or not res.get("ceilings"):
        pytest.skip("no recorded results")
    N, d, BH = 4096, 64, 128
    truth = 4 * BH * N * N * d / (4 * BH * N * d * 2 + 4 * BH * N)
    ridge = res["ceilings"]["matmul_fp16_TFLOPs"] * 1e12 / (res["ceilings"]["copy_GBps"] * 1e9)
    bound = "compute" if truth > ridge else "memory"
    assert_right(check_intensity(truth, bound, res=res))
    for factor in (2.0, 0.5, 1.05, 0.95, 3.0):
        assert_wrong(check_intensity(truth * factor, bound, res=res), truth)
    assert_wrong(check_intensity(truth, "memory" if bound == "compute" else "compute", res=res))
    capsys.readouterr()


def test_stored_bytes_hints_without_the_values(capsys):
    N, b = 4096, 2
    P, lse = N * N * b, N * 4
    assert_right(check_stored_bytes((P, lse), N=N, itemsize=b))
    for a, c in ((2 * P, lse), (P / 2, lse), (P, 2 * lse), (P * 1.01, lse * 0.5), (N * N, N)):
        r = check_stored_bytes((a, c), N=N, itemsize=b)
        assert_wrong(r)
        if a != P:
            assert not leaks(r.message, P), r.message
        if c != lse:
            assert not leaks(r.message, lse), r.message
    capsys.readouterr()


def test_largest_fitting_tile_names_no_tile(capsys):
    from flashviz.views.blocksize_view import sram_budget_bytes

    N, d, b = 8192, 128, 2
    M = sram_budget_bytes("A100")[1]
    rows = iomodel.block_size_sweep(N, d, itemsize=b, sram_budget=M)
    # by hand: the least traffic among the tiles that fit, ties to the largest tile
    fits = [r for r in rows if r["sram_bytes"] <= M]
    best = min(fits, key=lambda r: (r["hbm_bytes"], -r["Br"] * r["Bc"]))
    assert_right(check_largest_fitting_tile((best["Br"], best["Bc"]), N=N, d=d, sram_budget="A100", itemsize=b))
    for r in rows:
        if (r["Br"], r["Bc"]) == (best["Br"], best["Bc"]):
            continue
        out = check_largest_fitting_tile((r["Br"], r["Bc"]), N=N, d=d, sram_budget="A100", itemsize=b)
        assert_wrong(out, best["hbm_bytes"])
        assert f"{best['Br']}×{best['Bc']}" not in out.message, out.message
    capsys.readouterr()


def test_fastest_blocks_names_no_block(capsys):
    from flashviz.records.results import latest_results, mma_sweep

    res = latest_results("mma")
    rows = mma_sweep(res, variant="wgmma", d=64, causal=False) if res else []
    if len(rows) < 2:
        pytest.skip("no recorded sweep")
    best = min(rows, key=lambda r: r["kernel_ms"])
    assert_right(check_fastest_blocks((best["Br"], best["Bc"]), res=res))
    for r in rows:
        if r["kernel_ms"] > best["kernel_ms"] * 1.04:
            out = check_fastest_blocks((r["Br"], r["Bc"]), res=res)
            assert_wrong(out)
            assert f"{best['Br']}×{best['Bc']}" not in out.message, out.message
    capsys.readouterr()


def test_function_checks_use_the_shared_style(capsys):
    def update(m, l, xb):
        m_new = max(m, float(np.max(xb)))
        return m_new, math.exp(m - m_new) * l + float(np.exp(xb - m_new).sum())

    assert_right(check_rescale(update))
    assert_wrong(check_rescale(lambda m, l, xb: (max(m, float(np.max(xb))), l + float(np.exp(xb).sum()))))
    assert_wrong(check_rescale(lambda m, l, xb: (float(np.max(xb)), 1.0)))
    assert_right(check_causal_mask(lambda r, c, Nq, Nk: c <= r + Nk - Nq))
    assert_wrong(check_causal_mask(lambda r, c, Nq, Nk: c <= r))
    assert_right(check_recompute_P(lambda S, lse: np.exp(S - lse[:, None])))
    assert_wrong(check_recompute_P(lambda S, lse: np.exp(S)))
    assert_right(check_dS(lambda P, dP, D: P * (dP - D[:, None])))
    assert_wrong(check_dS(lambda P, dP, D: dP - D[:, None]))
    capsys.readouterr()


def test_printed_checks_show_once():
    r = check_tile_count(3, Nq=200, Nk=200, Br=32, Bc=64)
    assert isinstance(r, ex.Printed) and r._ipython_display_() is None
