"""Chapter 9 (decode) runs top to bottom headless; its widget is then driven in the same kernel, its
exercise stubs report "✗ Not yet" without raising, the right answers (worked out here, by hand, and
checked against decode_attention / decode_io / the dense reference) say ✓ and each named mistake ✗,
and its printed numbers equal values computed here. The ceilings it quotes are read from the
committed tensor-core record (``recorded_data``)."""

import json
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbutil import flat, run_notebook, widget_views

from flashviz import iomodel
from flashviz.decode import decode_attention, merge_partials
from flashviz.reference import attention
from flashviz.widgets.decode import decode_inputs

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "09_decode.ipynb"
RESULTS = ROOT / "benchmarks" / "results"
recorded_data = pytest.mark.recorded_data


def _newest(pattern):
    files = sorted(RESULTS.glob(pattern), key=lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f.name)[0], f.name))
    return files[-1].name, json.loads(files[-1].read_text())


MMA_FILE, MMA = _newest("mma-*.json")
SMS = MMA["env"]["sm_count"]

# --- the exercises' right answers, by hand ------------------------------------------------------------
KV_BYTES = 2 * 1 * 8 * 20000 * 128 * 2                    # K and V, B·H_kv·Nk·d, 2 bytes each


def splits_by_hand(n, Tc, sms):
    """The rule as the chapter states it, by brute force: of the split counts one wave holds (n·s <= sms),
    the fewest whose longest split (⌈Tc/s⌉ key blocks) is the shortest."""
    if n >= 0.8 * sms or Tc <= 4:
        return 1
    fits = [s for s in range(1, min(128, Tc) + 1) if n * s <= sms]
    return min(fits, key=lambda s: (math.ceil(Tc / s), s))


SPLITS = splits_by_hand(12, 40, SMS)


def intensity_by_hand(G, Nq, Nk, d, H, b=2):
    """One decode step, one split: per KV head, K and V read once, Q (G·Nq rows) read, O and lse written."""
    H_kv = H // G
    flops = 2 * H * Nq * Nk * 2 * d
    bytes_ = H_kv * 2 * Nk * d * b + H * Nq * d * b + H * Nq * (d + 1) * b
    return flops / bytes_


INTENSITY = intensity_by_hand(6, 1, 8192, 128, 48)
GAIN = intensity_by_hand(16, 1, 8192, 128, 64) / intensity_by_hand(1, 1, 8192, 128, 64)

# exercise 5's two lse values, from the same run the notebook makes, and their merge by hand
_Q, _K, _V, _ = decode_inputs(1, 1, 1, 1, 512, 64, source="rising", seed=5, dtype=np.float64)
_r5 = decode_attention(_Q[0], _K[0], _V[0], num_splits=2, Bc=64)
LSE_A, LSE_B = (float(p.lse[0, 0]) for p in _r5.partials)
_S = (_Q[0, 0] @ _K[0, 0].T) / 8.0                       # scale 1/sqrt(64)
MERGED = float(np.log(np.exp(_S - _S.max()).sum()) + _S.max())

DRIVE = f"""
import numpy as np
assert type(w.fig.canvas).__name__ == "Canvas"                 # a real ipympl canvas
before = np.asarray(w.fig.canvas.buffer_rgba()).copy()
w.play.value = 3                                               # what Play does on each tick
assert w.state.k == 3 and w.frame.value == 3
assert (before != np.asarray(w.fig.canvas.buffer_rgba())).any(), "the canvas did not change"
assert w.ok and "✓" in w.status.value
w.Nk.value = 1024
assert w.result.trace.Nk == 1024 and w.ok and w.frame.value == 0
w.no_splits.value = True
assert w.result.num_splits == 1 and w.replay.n_blocks == 8
w.no_splits.value = False
w.no_rescale.value = True
assert "WRONG" in w.status.value and w.errors["no rescale"] > 1e-2
w.tiny_pages.value = True
assert w.result.io.reads["block_table"] > 0 and w.result.trace.page_size == 1 and w.ok
w.show_frame(w.n_frames - 1)
print("DRIVEN-OK", w.n_frames)
# the exercises, answered right (worked out in the test, by hand)
assert check_kv_bytes({KV_BYTES}, B=1, H_kv=8, Nk=20000, d=128, itemsize=2)
assert check_split_count({SPLITS}, n_blocks=12, Tc=40, num_sms=SMS)
assert check_decode_intensity({INTENSITY!r}, G=6, H=48, Nk=8192, d=128, itemsize=2)
assert check_gqa_gain({GAIN!r}, G=16, H=64, Nk=8192, d=128)
assert check_gqa_gain(16, G=16, H=64, Nk=8192, d=128)           # the round answer is within 1 %
assert check_merged_lse({MERGED!r}, lse_a, lse_b)
print("EXERCISES-OK")
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        yield run_notebook(NOTEBOOK, tmp_path_factory.mktemp("nb09"), mp, DRIVE)
    finally:
        mp.undo()


def test_decode_notebook_runs_and_is_driven(executed):
    nb, texts = executed
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    from flashviz.records.timeline_stats import recorded_decode_runs
    timelines = 1 if recorded_decode_runs() else 0               # section 7's figure, when recorded
    assert len(widget_views(nb)) == 2 + timelines, "the roofline, the explorer (and the decode timelines)"
    assert "DRIVEN-OK" in texts and "EXERCISES-OK" in texts
    stubs = [line for line in texts.splitlines() if line.startswith("✗ Not yet")]
    runs = recorded_decode_runs()
    speedup = 1 if 1 in runs and len(runs) > 1 else 0               # exercise 6, when the timelines are installed
    assert len(stubs) == 5 + speedup and all("placeholder" in s for s in stubs), stubs
    if not speedup:
        assert "(exercise 6 needs the recorded decode timelines, which this installation does not have yet" in texts
    assert texts.count("✓ Right") == 6
    # the answers are printed nowhere before the checks
    before = texts.split("EXERCISES-OK")[0].split("lse of split 0")[0]
    answers = (f"{KV_BYTES:,}", str(KV_BYTES), f"{KV_BYTES / 2**20:.1f} MiB", f"{MERGED:.6f}", f"{MERGED:.3f}",
               f"{INTENSITY:.2f}", f"{GAIN:.2f}", f"{SPLITS} splits")
    for answer in answers:
        assert answer not in before, answer


def _md():
    return " ".join(" ".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                             if c.cell_type == "markdown").split())


def test_section_1_intensities_equal_the_closed_forms(executed):
    _, texts = executed
    d, Nk, b = 128, 4096, 2
    dec = 2 * Nk * 2 * d / ((2 * Nk * d + d + d + 1) * b)               # one head: K, V, Q read; O, lse written
    assert f"{dec:.1f}" == "1.0" and "decode, Nq = 1" in texts
    line = next(x for x in texts.splitlines() if x.startswith("decode, Nq = 1"))
    assert f"{2 * Nk * 2 * d:,}" in line and f"{(2 * Nk * d + 2 * d + 1) * b:,}" in line
    fwd = iomodel.flash_forward_io(Nk, Nk, d, Br=128, Bc=128, itemsize=b)
    Tr = Nk // 128                                                        # K, V re-read per query block, by hand
    assert fwd.hbm_bytes == (Nk * d + 2 * Tr * Nk * d + Nk * d + Nk) * b
    assert f"forward does {fwd.intensity / (4 * Nk * d / ((2 * Nk * d + 2 * d + 1) * b)):.0f}x more" in texts


@recorded_data
def test_recorded_data_the_ceilings_are_the_records(executed):
    _, texts = executed
    c, env = MMA["ceilings"], MMA["env"]
    assert (f"ceilings: {MMA_FILE} ({env['device']}, {env['date']}): copy {c['copy_GBps']:,.0f} GB/s, fp16 matmul "
            f"{c['matmul_fp16_TFLOPs']:,.0f} TFLOP/s") in flat(texts)
    ridge = c["matmul_fp16_TFLOPs"] * 1e12 / (c["copy_GBps"] * 1e9)
    assert f"ridge point (matmul ÷ copy): {ridge:,.0f} FLOP/byte; {SMS} SMs" in texts
    # least time of a Llama-3-8B-like layer at Nk = 4096: its bytes over the copy bandwidth
    io = iomodel.decode_io(1, 4096, 128, H=32, H_kv=8, num_splits=1, Bc=64, itemsize=2)
    assert f"{1e6 * io.hbm_bytes / (c['copy_GBps'] * 1e9):>8.1f} µs" in texts
    # section 3: the largest intensity of its table (G = 8, Nq = 8) against the ridge point, as printed
    most = max(intensity_by_hand(G, nq, 4096, 128, 32) for G, nq in [(8, 1), (8, 8)])
    peak = c["matmul_fp16_TFLOPs"] * 1e12
    assert most < ridge and (f"the largest intensity here is {most / ridge:.2f} of the ridge point ({ridge:.0f} "
                             f"FLOP/byte): its roof is {most * c['copy_GBps'] * 1e9 / peak:.0%} of the matmul "
                             "ceiling") in flat(texts)


def test_section_2_splits_and_the_merge(executed):
    _, texts = executed
    for B in (1, 2, 4, 8, 16, 32, 64):
        n = B * 8
        s = splits_by_hand(n, 64, SMS)
        line = next(x for x in texts.splitlines() if re.match(rf"\s*{B} +{n} │", x))
        assert line.split("│")[2].split() == [str(max(1, SMS // n)), str(s), str(n * s), str(math.ceil(64 / s)),
                                              "of", "64"], line
    # the merge: independent of flashviz's merge, the dense float64 reference; rescale=False is wrong
    Q, K, V, _ = decode_inputs(1, 8, 2, 1, 2048, 64, source="rising", dtype=np.float64)
    Q, K, V = Q[0], K[0], V[0]
    ref = attention(Q, np.repeat(K, 4, axis=0), np.repeat(V, 4, axis=0))
    r = decode_attention(Q, K, V, num_splits=4, Bc=64)
    lse_p, O_p = np.stack([p.lse for p in r.partials]), np.stack([p.O for p in r.partials])
    # the merge written out here: weights exp(lse_s − lse) over the splits
    lse = np.log(np.exp(lse_p - lse_p.max(0)).sum(0)) + lse_p.max(0)
    by_hand = (np.exp(lse_p - lse)[..., None] * O_p).sum(0)
    assert np.abs(by_hand - ref).max() < 1e-12
    O, _ = merge_partials(lse_p, O_p)
    bad, _ = merge_partials(lse_p, O_p, rescale=False)
    assert np.abs(O - ref).max() < 1e-12 and np.abs(bad - ref).max() > 0.05
    assert f"merged WITHOUT the rescale: max |error| = {np.abs(bad - ref).max():.3f}" in texts
    err = float(texts.split("merged O against dense attention (float64): max |error| = ")[1].split(";")[0])
    assert err < 1e-12
    # rising inputs: every later split's lse is larger (the prose says the max rises)
    assert (np.diff(lse_p[:, :, 0], axis=0) > 0).all()


def test_sections_3_and_4_tables(executed):
    _, texts = executed
    base = intensity_by_hand(1, 1, 4096, 128, 32)
    for G, nq in [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4), (8, 8)]:
        x = intensity_by_hand(G, nq, 4096, 128, 32)
        assert re.search(rf"^\s*{G}\s+{32 // G}\s+{nq} │ .* {x:.2f}\s+{x / base:.2f} │", texts, re.M), (G, nq)
    assert "paged = contiguous: max |difference| = 0.0e+00" in texts
    # page sizes: block-table entries per key block of 64 keys, by hand; a small share of the bytes
    n, Bc = 4000, 64
    for ps in (1, 4, 16, 64, 256):
        entries = sum((min((j + 1) * Bc, n) - 1) // ps - (j * Bc) // ps + 1 for j in range(math.ceil(n / Bc)))
        line = next(x for x in texts.splitlines() if re.match(rf"\s*{ps} │", x))
        assert f"{entries * 4 * 8:,}" == line.split("│")[1].split()[0], line
        share = float(line.split("│")[1].split()[1].rstrip("%"))
        assert share < 1.0
        unused = (math.ceil(n / ps) * ps - n) * 8 * 2 * 128 * 2
        assert line.rstrip().endswith(f"{unused:,} B"), line
    assert "The block table is a small share of the bytes at every page size here" in _md()


def test_section_7_shows_what_this_installation_recorded(executed):
    """Section 7 reports the decode timelines and the decode record as they are installed (not as they
    were when the chapter was written): each recorded run's blocks, kernel-only time and busy share of
    SM-time, each record row's line; and says so in one line when there is none."""
    from flashviz.records.decode_records import decode_lines
    from flashviz.records.results import latest_results
    from flashviz.records.timeline_stats import recorded_decode_runs, sm_time_share
    _, texts = executed
    runs = recorded_decode_runs()
    if runs:
        for S, t in runs.items():
            assert (f"S = {S:>3}: {len(t.blocks):>4} blocks, {t.kernel_ms * 1e3:8.1f} µs kernel-only, "
                    f"SMs busy {100 * sm_time_share(t):3.0f} % of the SM-time") in texts
    else:
        assert "No decode timeline is recorded in this installation yet" in texts
    rec = latest_results("decode")
    if rec:
        for line in decode_lines(rec):      # printed as the shape | the tail, then one implementation a line
            shape, rest = line.split(": ", 1)
            impls, tail = rest.rsplit(" | ", 1)
            assert f"  {shape} | {tail}\n" in texts, line
            assert all(f"      {impl}\n" in texts for impl in impls.split("; ")), line
    else:
        assert "No decode benchmark is recorded in this installation yet" in texts


def test_exercise_mistakes_are_named(capsys):
    """Each named mistake answers ✗ with its hint (values by hand, the truths above)."""
    from test_exercise_hints import assert_right, assert_wrong

    from flashviz.exercises.decode import (check_decode_intensity, check_gqa_gain, check_kv_bytes, check_merged_lse,
                                           check_split_count)

    def named(result, truth, words):
        assert_wrong(result, None if words == "not MiB" else truth)    # in MiB it is the learner's own number
        assert words in result.message, (words, result.message)

    q = dict(B=1, H_kv=8, Nk=20000, d=128, itemsize=2)
    named(check_kv_bytes(KV_BYTES * 4, **dict(q, itemsize=4), H=8), KV_BYTES * 2, "not 8-byte")   # 8-byte elements
    assert_right(check_kv_bytes(KV_BYTES, **q))
    for answer, words in [(KV_BYTES // 2, "count V too"), (KV_BYTES * 2, "not 4-byte"),
                          (KV_BYTES * 4, "per KV head"),
                          (KV_BYTES // 2 // 2, "count V too, and give bytes"), (KV_BYTES / 2**20, "not MiB")]:
        named(check_kv_bytes(answer, **q), KV_BYTES, words)
    for n in (8, 12):                            # Tc = 40: one wave holds 16 (n = 8) or 11 (n = 12) splits
        truth = splits_by_hand(n, 40, SMS)
        longest = math.ceil(40 / (SMS // n))
        assert truth == math.ceil(40 / longest) < SMS // n        # 14 or 10: fewer than a wave holds
        assert_right(check_split_count(truth, n_blocks=n, Tc=40, num_sms=SMS))
        for answer, words in [(1, "most SMs idle"), (SMS // n, "fewer give the same longest split"),
                              (math.ceil(SMS / n), "second wave"), (longest, "number of splits"), (SMS, "multiply")]:
            if not (words == "second wave" and answer == SMS // n):
                named(check_split_count(answer, n_blocks=n, Tc=40, num_sms=SMS), truth, words)
    assert_right(check_decode_intensity(INTENSITY, G=6, H=48, Nk=8192, d=128, itemsize=2))
    for answer, words in [(INTENSITY / 2, "2 FLOPs"), (INTENSITY * 2, "not elements"), (INTENSITY / 6, "share one read"),
                          (1 / INTENSITY, "bytes per FLOP")]:
        named(check_decode_intensity(answer, G=6, H=48, Nk=8192, d=128, itemsize=2), INTENSITY, words)
    assert_right(check_gqa_gain(GAIN, G=16, H=64, Nk=8192, d=128))
    for answer, words in [(1, "read once per group"), (256, "FLOPs stay the same"), (4, "H_kv"), (64, "that is H"),
                          (1 / 16, "raises the intensity")]:
        named(check_gqa_gain(answer, G=16, H=64, Nk=8192, d=128), GAIN, words)
    assert LSE_A < LSE_B                                      # the second split raises the max: the rescale matters
    assert_right(check_merged_lse(MERGED, LSE_A, LSE_B))
    no_rescale = LSE_B + math.log(2)                          # alpha forced to 1: l = 1 + 1 at the max LSE_B
    for answer, words in [(LSE_B, "the max alone"), (LSE_A + LSE_B, "add the exponentials"),
                          ((LSE_A + LSE_B) / 2, "not the average"), (math.exp(LSE_A) + math.exp(LSE_B), "take its log"),
                          (no_rescale, "without the rescale")]:
        named(check_merged_lse(answer, LSE_A, LSE_B), MERGED, words)
    capsys.readouterr()
