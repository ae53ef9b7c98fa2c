"""flashviz.records.fa3_records without a GPU: the kernel's choices read from its source agree with the
launch limits, a block's shared memory splits into parts that sum to the limits' formula, the
probe records load in the order they were recorded, and every build the chapter compares exists
in the run it is read from. Bad input: one-line errors."""

from __future__ import annotations

import pytest

from flashviz.mma_limits import FA3_BC, FA3_BR, MMA_D, fa3_stages, mma_smem_bytes, mma_threads
from flashviz.records import fa3_records as fr

recorded_data = pytest.mark.recorded_data


def test_kernel_choices_agree_with_the_limits():
    ch = fr.kernel_choices()
    k, a, b = ch["stages"]
    for d in MMA_D:
        assert (a if d == k else b) == fa3_stages(d)
    # the steps' "pingpong" is the default build "fa3": the kernel's default FEAT must be its FEAT
    assert ch["feat"] == next(s.feat for s in fr.STEPS if s.template == "fa3") == 1


@pytest.mark.parametrize("Br", FA3_BR)
def test_registers_fit_the_register_file_and_favour_the_consumers(Br):
    producer, consumer = fr.fa3_registers(Br)
    assert consumer > producer
    assert 128 * producer + (Br // 64) * 128 * consumer <= fr.REGISTER_FILE
    assert producer % 8 == 0 and consumer % 8 == 0            # setmaxnreg takes multiples of 8


def test_kernel_choices_name_what_is_missing():
    with pytest.raises(LookupError, match="no struct Config"):
        fr.kernel_choices("int x;")
    text = "struct Config {\n REG_PRODUCER = NWG == 2 ? 24 : 32;\n STAGES = D == 128 ? 2 : 3;\n};"
    with pytest.raises(LookupError, match="REG_CONSUMER"):
        fr.kernel_choices(text)
    text = text.replace("};", "REG_CONSUMER = NWG == 2 ? 240 : 160;\n};")
    with pytest.raises(LookupError, match="FEAT"):
        fr.kernel_choices(text)
    ch = fr.kernel_choices(text.replace("};", "#else\n static constexpr int FEAT = 1;\n#endif\n};"))
    assert ch == {"reg_producer": (2, 24, 32), "reg_consumer": (2, 240, 160), "stages": (128, 2, 3), "feat": 1}


@pytest.mark.parametrize("Br,Bc,d", [(Br, Bc, d) for Br in FA3_BR for Bc in FA3_BC for d in MMA_D])
def test_the_shared_memory_parts_sum_to_the_limits(Br, Bc, d):
    c = fr.fa3_config(d, Br=Br, Bc=Bc)
    assert c.q_bytes == 2 * Br * d and c.ring_bytes == 2 * c.stages * Bc * d
    assert c.barrier_bytes == 8 * (2 + 4 * c.stages) and c.align_bytes == 1024
    assert c.q_bytes + 2 * c.ring_bytes + c.barrier_bytes + c.align_bytes == c.smem_bytes == mma_smem_bytes(Br, Bc, d, "fa3")
    assert c.threads == mma_threads(Br, "fa3") == (c.consumers + 1) * 128


def test_bad_input_is_refused_in_one_line():
    for call, err in ((lambda: fr.fa3_config(96), ValueError), (lambda: fr.fa3_config(64, Br=64), ValueError),
                      (lambda: fr.fa3_registers(64), ValueError), (lambda: fr.fa3_registers("128"), TypeError),
                      (lambda: fr.latest_probe(5), TypeError), (lambda: fr.describe_build(None), TypeError),
                      (lambda: fr.steps_table({}), ValueError), (lambda: fr.summarize([]), ValueError),
                      (lambda: fr.comparison("nope"), KeyError),
                      (lambda: fr.kernel_excerpt("no such text anywhere", "x"), LookupError)):
        with pytest.raises(err) as e:
            call()
        assert "\n" not in str(e.value)
    assert fr.latest_probe("no-such-run") is None
    assert fr.fa3_bench_table(None) == []


def test_describe_build():
    assert fr.describe_build("") == "the default build"
    assert fr.describe_build("128x176_f3") == "Br×Bc = 128×176; FA3_FEAT 3: ping-pong + intra-warpgroup overlap"
    assert fr.describe_build("192x128_persistent").endswith("one block per SM (persistent grid)")
    assert fr.describe_build("odd_thing") == "odd; thing"


def test_summarize_counts_against_the_noise():
    s = fr.summarize([1.0, 1.2, 0.9, 1.04, 1 / 1.06])
    assert (s["n"], s["faster"], s["slower"], s["within"]) == (5, 1, 2, 2)
    assert s["median"] == 1.0 and s["lo"] == 0.9 and s["hi"] == 1.2


def test_compare_builds_reads_one_run_at_a_time():
    rec = {"times": [{"N": 8, "d": 64, "causal": False, "fa3_kernel_ms": 2.0, "fa3_x_kernel_ms": 1.0},
                     {"N": 8, "d": 128, "causal": True, "fa3_kernel_ms": 3.0, "fa3_y_kernel_ms": 4.0},
                     {"N": 16, "d": 64, "causal": False, "fa3_kernel_ms": 2.0}]}
    cmp = fr.Comparison("t", "test", {"r": ({64: "fa3_x", 128: "fa3_y"}, "fa3"), "missing": ("fa3_x", "fa3")})
    got = fr.compare_builds(cmp, 64, {"r": rec})
    assert [(g["run"], g["N"], g["speedup"]) for g in got] == [("r", 8, 2.0)]
    assert fr.compare_builds(cmp, 128, {"r": rec})[0]["speedup"] == 0.75


@recorded_data
def test_recorded_data_probe_runs_load_in_recorded_order():
    recs = fr.probe_records()
    assert list(recs)[-1] == "steps" and {"v1", "v5", "steps"} <= set(recs)
    times = [r["env"]["time_utc"] for r in recs.values()]
    assert times == sorted(times)
    assert all(r["source_file"].startswith(f"probe-fa3-{run}-") for run, r in recs.items())


@recorded_data
def test_recorded_data_every_compared_build_is_in_its_run():
    recs = fr.probe_records()
    for cmp in fr.COMPARISONS:
        for run, (cand, base) in cmp.runs.items():
            for d in MMA_D:
                names = [x.get(d) if isinstance(x, dict) else x for x in (cand, base)]
                if None in names:
                    continue
                rows = [r for r in recs[run]["times"] if r["d"] == d]
                assert any(all(f"{n}_kernel_ms" in r for n in names) for r in rows), (cmp.key, run, d, names)
            assert fr.compare_builds(cmp, 128) or fr.compare_builds(cmp, 64)


@recorded_data
def test_recorded_data_steps_table_has_every_step_at_each_d_and_mask():
    rows = fr.steps_table(fr.latest_probe("steps"))
    assert {(r["d"], r["causal"]) for r in rows} == {(d, c) for d in MMA_D for c in (False, True)}
    for d in MMA_D:
        sel = [r for r in rows if r["d"] == d and not r["causal"]]
        assert [r["step"] for r in sel] == [s.key for s in fr.STEPS]
        assert all(r["kernel_tflops"] == r["flops"] / r["kernel_ms"] / 1e9 for r in sel)
    with pytest.raises(LookupError, match="no row d=64, causal=False, N=1"):
        fr.build_rows(fr.latest_probe("steps"), d=64, causal=False, N=1)


@recorded_data
def test_recorded_data_the_steps_fa2_blocks_are_the_benchmarks():
    """The FA2 step's Br×Bc in the steps table (the runner's wgmma default) is the block the full
    benchmark recorded for wgmma at the same d, mask and N."""
    from flashviz.gpu import latest_results

    bench = {(r["d"], r["causal"], r["N"]): r for r in latest_results("mma")["bench"]}
    for r in fr.steps_table(fr.latest_probe("steps")):
        b = bench[(r["d"], r["causal"], r["N"])]
        if r["step"] == "wgmma":
            assert (r["Br"], r["Bc"]) == (b["wgmma_Br"], b["wgmma_Bc"])
        else:
            assert (r["Br"], r["Bc"]) == (b["fa3_Br"], b["fa3_Bc"])
