"""The tensor-core kernels: CPU-side limits, sources, recorded results and figures everywhere;
the kernels themselves where a GPU is (tests marked ``gpu`` skip cleanly without one).

Independent references: hand-counted shared-memory bytes, the committed JSON read directly,
and float64 dense attention (flashviz.reference.attention on the CPU) for the kernels. Tests
marked ``recorded_data`` check the committed records (ratios and rates recomputed from their raw
times, by method: public call, kernel-only): they are data checks, not speed tests.
"""

import json
import math
import re

import numpy as np
import pytest

from flashviz import mma_limits as ml
from flashviz.records import results as R
from flashviz.records.files import package_dir

RESULTS = package_dir("flashviz.results")


def _json(prefix):
    files = sorted(f for f in RESULTS.iterdir() if f.name.startswith(prefix) and f.name.endswith(".json"))
    return json.loads(files[-1].read_text())


# ---------------------------------------------------------------- limits (CPU)

@pytest.mark.parametrize("Br, Bc, d, variant, expected", [
    (128, 128, 128, "wgmma", 1024 + 2 * (128 * 128 + 4 * 128 * 128)),   # Q + 2 K + 2 V stages, fp16
    (64, 32, 64, "wgmma", 1024 + 2 * 64 * 64 + 4 * 2 * 32 * 64),
    (128, 64, 64, "mma.sync", 2 * 128 * 64 + 4 * 2 * 64 * 64),
    (128, 128, 128, "mma.sync", 163_840)])
def test_mma_smem_bytes(Br, Bc, d, variant, expected):
    assert ml.mma_smem_bytes(Br, Bc, d, variant) == expected


def test_check_mma_launch_names_bytes_asked_and_available():
    with pytest.raises(ValueError) as exc:
        ml.check_mma_launch(128, 128, 128, "wgmma", device_limit=101_376)
    msg = str(exc.value)
    assert "needs 164,864 bytes of shared memory" in msg and "limit is 101,376 per block" in msg
    assert ml.check_mma_launch(128, 64, 64, "wgmma") == 1024 + 2 * (128 * 64 + 4 * 64 * 64)


@pytest.mark.parametrize("args, err, text", [
    ((96, 64, 64), ValueError, "Br=96 is not supported"), ((64, 256, 64), ValueError, "Bc=256"),
    ((64, 64, 96), ValueError, "d=96"), ((64.0, 64, 64), TypeError, "Br must be an integer")])
def test_bad_sizes(args, err, text):
    with pytest.raises(err, match=text):
        ml.check_mma_sizes(*args)


def test_variants_and_blocks():
    with pytest.raises(ValueError, match="variant must be one of"):
        ml.mma_smem_bytes(64, 64, 64, "tensor")
    assert ml.mma_blocks(64) == [(Br, Bc) for Br in ml.MMA_BR for Bc in ml.MMA_BC]
    small = ml.mma_blocks(128, "wgmma", device_limit=101_376)
    assert (128, 128) not in small and (64, 32) in small
    assert all(ml.mma_smem_bytes(Br, Bc, 128) <= 101_376 for Br, Bc in small)
    for (variant, d, causal), (Br, Bc) in ml.DEFAULT_BLOCKS.items():
        assert ml.default_blocks(d, causal, variant) == (Br, Bc)
        brs, bcs = ml.BLOCK_CHOICES[variant]
        assert Br in brs and Bc in bcs
    # fa3: its own blocks, threads (a producer warpgroup + Br/64 consumers) and shared memory
    assert ml.mma_blocks(128, "fa3") == [(128, 64), (128, 128), (128, 176), (192, 64), (192, 128), (192, 176)]
    assert ml.mma_threads(128, "fa3") == 384 and ml.mma_threads(192, "fa3") == 512
    # Q_i + 2 stages of K_j and V_j + 10 mbarriers (d = 128); 3 stages, 14 barriers (d = 64)
    assert ml.mma_smem_bytes(128, 128, 128, "fa3") == 1024 + 2 * (128 * 128 + 4 * 128 * 128) + 8 * 10
    assert ml.mma_smem_bytes(192, 64, 64, "fa3") == 1024 + 2 * (192 * 64 + 6 * 64 * 64) + 8 * 14
    with pytest.raises(ValueError, match=r"Br=64 is not supported by the fa3 kernel; supported: 128, 192"):
        ml.check_mma_sizes(64, 64, 64, "fa3")


def test_one_mapping_from_variant_to_record_key():
    """The argument says "mma.sync", benchmark records say "mmasync" (mmasync_call_ms):
    flashviz.mma_limits.impl_name is the one place that maps one to the other."""
    assert ml.impl_name("wgmma") == "wgmma" and ml.impl_name("mma.sync") == "mmasync"
    assert ml.impl_name("fa3") == "fa3"
    assert set(ml.IMPL_NAMES) == set(ml.ALL_VARIANTS) == set(ml.KERNEL_FILES) == set(ml.BLOCK_CHOICES)
    with pytest.raises(ValueError, match="variant must be one of wgmma, mma.sync, fa3; got 'mmasync'"):
        ml.impl_name("mmasync")                # a record's name is not a variant
    with pytest.raises(TypeError, match="variant must be one of"):
        ml.impl_name(None)
    assert [key for key, _ in R.IMPLS[:3]] == ["fa3", "wgmma", "mmasync"]


@pytest.mark.recorded_data
def test_recorded_data_keys_use_the_implementation_names():
    """The committed record names variants as the argument does ("mma.sync": its "variants",
    sweep and check rows) and keys bench rows by implementation name ("mmasync_call_ms")."""
    res = _json("mma-")
    assert set(res["variants"]) <= set(ml.ALL_VARIANTS)
    for v in res["variants"]:
        assert all(f"{ml.impl_name(v)}_call_ms" in r for r in res["bench"]), v
        assert any(r["variant"] == v for r in res["sweep"]) and any(r["variant"] == v for r in res["check"])


@pytest.mark.recorded_data
def test_default_blocks_are_the_recorded_best_or_close():
    """A check of the committed record, not a speed test: the defaults come from the H200 sweep,
    and each is within 10% of the fastest recorded block by kernel-only time (the sweep's
    method; mma_sweep's "ms" is the same figure)."""
    res = _json("mma-")
    for (variant, d, causal), (Br, Bc) in ml.DEFAULT_BLOCKS.items():
        if variant not in res["variants"]:      # a kernel newer than the record (fa3 before its first run)
            continue
        rows = R.mma_sweep(res, variant=variant, d=d, causal=causal)
        assert rows and all(r["ms"] == r["kernel_ms"] for r in rows)
        best = min(r["ms"] for r in rows)
        mine = next(r["ms"] for r in rows if (r["Br"], r["Bc"]) == (Br, Bc))
        assert mine <= 1.10 * best, (variant, d, causal, mine, best)


# ---------------------------------------------------------------- kernel sources (CPU)

def _instantiated(path) -> set:
    """The (DT, Br, Bc, d) a kernel file instantiates under FLASHVIZ_PTX_CHECK, read from the
    C preprocessor's expansion of its macros (independent of how the file writes them)."""
    import shutil
    import subprocess
    cpp = shutil.which("cpp")
    if cpp is None:
        pytest.skip("no C preprocessor (cpp) on this machine")
    from flashviz.gpu.common import source
    text = "#define FLASHVIZ_PTX_CHECK\n" + source(path.name)          # its headers' macros pasted in
    out = subprocess.run([cpp, "-P", "-x", "c++", "-"], input=text, capture_output=True, text=True, check=True).stdout
    found = re.findall(r"flash_fwd_(?:mma|mma_sm80|fa3)<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(true|false)\s*>", out)
    assert {c for *_, c in found} == {"true", "false"}
    return {tuple(int(x) for x in f[:4]) for f in found}


@pytest.mark.parametrize("name", ["flash_fwd_mma.cu", "flash_fwd_mma_sm80.cu", "flash_fwd_fa3.cu"])
def test_kernel_sources_are_header_free_and_instantiate_every_offered_size(name):
    from flashviz.gpu import kernel_source
    from flashviz.gpu.common import source
    src = kernel_source(name)
    # NVRTC from the pip wheels has no CUDA headers: only kernels/ headers, which source() pastes in
    headers = {f'"{h.name}"' for h in package_dir("flashviz.kernels").iterdir() if h.name.endswith(".cuh")}
    assert set(re.findall(r'^\s*#\s*include\s*(\S+)', src, re.M)) <= headers
    assert not re.search(r"^\s*#\s*include", source(name), re.M)
    brs, bcs = ml.BLOCK_CHOICES["fa3" if "fa3" in name else "wgmma"]
    offered = {(dt, br, bc, d) for dt in (0, 1) for br in brs for bc in bcs for d in ml.MMA_D}
    assert _instantiated(package_dir("flashviz.kernels").joinpath(name)) == offered


def test_scale_is_checked_on_the_cpu():
    from flashviz.gpu.tensorcore.kernel import _check_scale
    assert _check_scale(None, 64) == pytest.approx(0.125)
    assert _check_scale(0.5, 64) == 0.5
    for bad in (0, -1.0, float("nan"), float("inf"), 1e-40, 1e39):
        with pytest.raises(ValueError, match="scale must be > 0"):
            _check_scale(bad, 64)
    with pytest.raises(TypeError, match="scale must be a real number"):
        _check_scale("0.1", 64)


# ---------------------------------------------------------------- recorded results (CPU)

@pytest.mark.recorded_data
def test_latest_results_kinds():
    assert R.latest_results("mma")["source_file"].startswith("mma-")
    assert R.latest_results("dram")["source_file"].startswith("dram-")
    assert R.latest_results()["source_file"].startswith("gpu-")
    with pytest.raises(ValueError, match="kind must be one of"):
        R.latest_results("nope")


@pytest.mark.recorded_data
def test_recorded_data_mma_table_ratios_match_the_json():
    """mma_table's derived figures, recomputed here from the raw times in the JSON (FLOPs counted
    by hand), method by method: public call against public call, kernel-only against kernel-only."""
    raw = _json("mma-")
    assert {"call_ms", "kernel_ms", "host_us"} <= set(raw["methods"])
    rows = R.mma_table(R.latest_results("mma"))
    assert len(rows) == len(raw["bench"]) == len({(r["N"], r["d"], r["causal"]) for r in raw["bench"]})
    mm = raw["ceilings"]["matmul_fp16_TFLOPs"]
    for row in rows:
        r = next(x for x in raw["bench"] if (x["N"], x["d"], x["causal"]) == (row["N"], row["d"], row["causal"]))
        flops = 4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / (2 if r["causal"] else 1)
        assert r["flops"] == flops
        for m in ("call", "kernel"):
            assert row[f"wgmma_{m}_tflops"] == pytest.approx(flops / r[f"wgmma_{m}_ms"] / 1e9)
            assert row[f"wgmma_{m}_vs_sdpa_flash"] == pytest.approx(r[f"sdpa_flash_{m}_ms"] / r[f"wgmma_{m}_ms"])
            assert row[f"wgmma_{m}_vs_sdpa_cudnn"] == pytest.approx(r[f"sdpa_cudnn_{m}_ms"] / r[f"wgmma_{m}_ms"])
            assert row[f"mmasync_{m}_vs_sdpa_flash"] == pytest.approx(r[f"sdpa_flash_{m}_ms"] / r[f"mmasync_{m}_ms"])
        assert row["wgmma_host_vs_sdpa_flash"] == pytest.approx(r["sdpa_flash_host_us"] / r["wgmma_host_us"])
        assert row["wgmma_matmul_share"] == pytest.approx(flops / r["wgmma_kernel_ms"] / 1e9 / mm)
    assert [r["N"] for r in R.mma_table(R.latest_results("mma"), d=64, causal=True)] == \
        [512, 1024, 2048, 4096, 8192, 16384]


@pytest.mark.recorded_data
def test_recorded_data_kernel_beats_flash_attention_2_from_2k_by_both_methods():
    """A check of the committed record, not a speed test: the issue's target, >= 1.0x SDPA-flash
    for N >= 2k, read from the file by both methods — public call against public call (the
    headline) and kernel-only against kernel-only — with the ratios recomputed from the raw
    times (their time / ours)."""
    raw = _json("mma-")
    long = [r for r in raw["bench"] if r["N"] >= 2048]
    assert long and all(k in r for r in long for k in ("wgmma_call_ms", "wgmma_kernel_ms", "sdpa_flash_call_ms",
                                                        "sdpa_flash_kernel_ms"))
    for m in ("call", "kernel"):
        worst = min(long, key=lambda r: r[f"sdpa_flash_{m}_ms"] / r[f"wgmma_{m}_ms"])
        assert worst[f"sdpa_flash_{m}_ms"] / worst[f"wgmma_{m}_ms"] >= 1.0, (m, worst["N"], worst["d"], worst["causal"])
    rows = [r for r in R.mma_table(R.latest_results("mma")) if r["N"] >= 2048]
    assert len(rows) == len(long)
    for m in ("call", "kernel"):                                      # the derived figure says the same
        lo, _ = R.ratio_span(rows, f"wgmma_{m}_vs_sdpa_flash")
        assert lo == pytest.approx(min(r[f"sdpa_flash_{m}_ms"] / r[f"wgmma_{m}_ms"] for r in long))


def test_compulsory_bytes_by_hand():
    row = {"B": 4, "H": 32, "N": 4096, "d": 64}
    assert R.compulsory_bytes(row) == 4 * 32 * 4096 * (4 * 64 * 2) + 4 * 32 * 4096 * 4


@pytest.mark.recorded_data
def test_check_summary_counts():
    raw = _json("mma-")
    s = R.check_summary(R.latest_results("mma"))
    assert sum(v["cases"] for v in s.values()) == len(raw["check"])
    for (variant, dtype), v in s.items():
        cases = [r for r in raw["check"] if r["variant"] == variant and r["dtype"] == dtype]
        assert v["passed"] == sum(r["pass"] for r in cases)
        assert v["worst_rel_err"] == max(r["rel_err"] for r in cases)
        assert v["worst_rel_err"] <= (2e-3 if dtype == "float16" else 1e-2)


@pytest.mark.recorded_data
def test_mma_sweep_rows():
    rows = R.mma_sweep(R.latest_results("mma"), variant="wgmma", d=128, causal=True)
    assert [(r["Br"], r["Bc"]) for r in rows] == ml.mma_blocks(128)
    for r in rows:                                                    # "ms" / "tflops" are the kernel-only figures
        assert (r["ms"], r["tflops"]) == (r["kernel_ms"], r["kernel_tflops"])
        assert r["tflops"] == pytest.approx(4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / 2 / r["kernel_ms"] / 1e9)
    assert R.mma_sweep(None) == []


# ---------------------------------------------------------------- figures (CPU)

@pytest.mark.recorded_data
def test_bench_figures():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flashviz.views import bench_plot as bp
    res, dram = R.latest_results("mma"), R.latest_results("dram")
    fig = bp.plot_mma_benchmark(res)
    title = fig._suptitle.get_text()
    assert len(fig.axes) == 4 and "H200" in title and "TFLOP/s by public call (CUDA events, median)" in title
    ax = fig.axes[0]
    assert ax.get_ylabel() == "TFLOP/s (public call)"
    sel = sorted((r for r in res["bench"] if r["d"] == 64 and not r["causal"]), key=lambda r: r["N"])
    top = "fa3" if any("fa3_call_ms" in r for r in res["bench"]) else "wgmma"    # the default on Hopper, bold
    for impl in ("fa3", "wgmma"):
        lines = [line for line in ax.lines if line.get_label().startswith(f"flashviz {impl} ")]
        assert len(lines) == (1 if any(f"{impl}_call_ms" in r for r in sel) else 0)   # no kernel-only line by default
        if lines:
            assert list(lines[0].get_ydata()) == pytest.approx([r["flops"] / r[f"{impl}_call_ms"] / 1e9 for r in sel])
            assert lines[0].get_linewidth() == (1.8 if impl == top else 1.2)
    plt.close(fig)
    fig = bp.plot_mma_benchmark(res, headline_impl="wgmma")            # chapter 7: its own kernel in bold
    (w,) = [line for line in fig.axes[0].lines if line.get_label().startswith("flashviz wgmma ")]
    assert w.get_linewidth() == 1.8
    assert all(line.get_linewidth() != 1.8 for line in fig.axes[0].lines if line is not w)
    plt.close(fig)
    with pytest.raises(ValueError, match="headline_impl must be None, 'fa3' or 'wgmma'"):
        bp.plot_mma_benchmark(res, headline_impl="mmasync")
    fig = bp.plot_mma_benchmark(res, kernel_only=True)                 # kernel-only beside it: dotted, hollow, labelled
    (k,) = [line for line in fig.axes[0].lines if "kernel-only" in line.get_label()]
    assert k.get_linestyle() == ":" and k.get_markerfacecolor() == "white" and top in k.get_label()
    assert list(k.get_ydata()) == pytest.approx([r["flops"] / r[f"{top}_kernel_ms"] / 1e9 for r in sel])
    fig2 = bp.plot_block_sweep(res, d=64)
    bars = [p.get_height() for p in fig2.axes[0].patches]
    assert len(bars) == 2 * len(ml.mma_blocks(64))
    sweep = sorted((r for r in res["sweep"] if r["variant"] == "wgmma" and r["d"] == 64 and not r["causal"]),
                   key=lambda r: (r["Br"], r["Bc"]))
    assert bars[:len(sweep)] == pytest.approx([r["kernel_ms"] for r in sweep])    # kernel-only, no mask first
    assert "kernel-only" in fig2.axes[0].get_ylabel() and "kernel-only" in fig2.axes[0].get_title()
    fig3 = bp.plot_dram(dram)
    assert len(fig3.axes[0].patches) == 2 * len([r for r in dram["rows"] if "dram_bytes" in r])
    for f in (fig, fig2, fig3):
        plt.close(f)
    with pytest.raises(ValueError, match="expected a recorded results dict"):
        bp.plot_mma_benchmark({"nothing": 1})
    with pytest.raises(ValueError, match="no recorded sweep rows"):
        bp.plot_block_sweep(res, d=64, variant="nope")


@pytest.mark.recorded_data
def test_dram_measurement_departs_from_the_model_as_explained():
    """Measured DRAM bytes of the fp16 kernel are ≈ the compulsory bytes (L2 serves K/V re-reads),
    far below the model; naive CuPy moves more than the model's S/P traffic."""
    dram = _json("dram-")
    for r in dram["rows"]:
        if r["impl"] == "mma":
            comp = R.compulsory_bytes(r)
            assert 0.8 * comp <= r["dram_bytes"] <= 1.2 * comp
            assert r["dram_bytes"] < r["model_hbm_bytes"] / 10
        if r["impl"] == "naive":
            assert r["dram_bytes"] > r["model_hbm_bytes"]


# ---------------------------------------------------------------- the kernels (GPU)

def _variants():
    from flashviz.gpu.tensorcore.kernel import device_variant
    v = device_variant()
    return ["wgmma", "mma.sync", "fa3"] if v == "wgmma" else [v]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Nq, Nk", [(1, 1), (70, 70), (200, 200), (77, 300), (300, 77)])
def test_kernel_matches_float64_reference(dtype, d, causal, Nq, Nk):
    """Fresh unit-normal inputs, output poisoned with NaN, every variant and its default blocks,
    against float64 dense attention on the same rounded inputs (tolerances of the issue)."""
    from flashviz.gpu.tensorcore.bench import check_case
    for variant in _variants():
        Br, Bc = ml.default_blocks(d, causal, variant)
        r = check_case(variant, dtype, d, causal, Nq, Nk, Br, Bc, seed=Nq * 7 + Nk + d)
        assert r["pass"], r
        assert not r["nan"]


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_public_api_against_numpy_reference(causal):
    import cupy as cp

    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    from flashviz.reference import attention
    rng = np.random.default_rng(5)
    Q, K, V = (rng.standard_normal((2, 3, n, 64)) for n in (150, 260, 260))
    Q16, K16, V16 = (x.astype(np.float16) for x in (Q, K, V))
    O, lse = flash_forward_mma(Q16, K16, V16, causal=causal)
    O = cp.asnumpy(O).astype(np.float64)
    ref = np.stack([np.stack([attention(Q16[b, h].astype(np.float64), K16[b, h].astype(np.float64),
                                        V16[b, h].astype(np.float64), causal=causal) for h in range(3)])
                    for b in range(2)])
    assert np.linalg.norm(O - ref) / np.linalg.norm(ref) <= 2e-3
    s = Q16[0, 0].astype(np.float64) @ K16[0, 0].astype(np.float64).T / math.sqrt(64)
    if causal:
        s = np.where(np.arange(260)[None, :] <= np.arange(150)[:, None] + 260 - 150, s, -np.inf)
    want = np.log(np.exp(s - s.max(1, keepdims=True)).sum(1)) + s.max(1)
    assert np.abs(cp.asnumpy(lse)[0, 0] - want).max() <= 1e-2


@pytest.mark.gpu
def test_torch_strided_bshd_input_gives_the_same_result():
    torch = pytest.importorskip("torch")
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 333, 4, 3, 128, device="cuda", dtype=torch.bfloat16, generator=g)  # B, N, H, (q,k,v), d
    q, k, v = (x[:, :, :, i].transpose(1, 2) for i in range(3))                           # BHSD views
    assert not q.is_contiguous()
    O1, L1 = flash_forward_mma(q, k, v, causal=True)
    O2, L2 = flash_forward_mma(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(O1, O2) and torch.equal(L1, L2)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert ((O1.double() - ref).norm() / ref.norm()).item() <= 1e-2


@pytest.mark.gpu
def test_bad_inputs_are_one_line_errors():
    torch = pytest.importorskip("torch")
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        flash_forward_mma(q.float(), q.float(), q.float())
    with pytest.raises(TypeError, match="CPU torch tensor"):
        flash_forward_mma(q.cpu(), q.cpu(), q.cpu())
    with pytest.raises(ValueError, match="d=96"):
        x = torch.randn(1, 2, 64, 96, device="cuda", dtype=torch.float16)
        flash_forward_mma(x, x, x)
    with pytest.raises(ValueError, match="unit stride along d"):
        flash_forward_mma(q.transpose(2, 3), q, q)
    with pytest.raises(ValueError, match="16-byte aligned"):
        big = torch.randn(1, 2, 64, 72, device="cuda", dtype=torch.float16)[..., 1:65]
        flash_forward_mma(big, q, q)
    with pytest.raises(ValueError, match="Bc=256"):
        flash_forward_mma(q, q, q, Bc=256)
    with pytest.raises(TypeError, match="share one dtype"):
        flash_forward_mma(q, q.bfloat16(), q)
    with pytest.raises(ValueError, match="scale must be > 0"):
        flash_forward_mma(q, q, q, scale=float("nan"))
    with pytest.raises(ValueError, match="between 1 and 65,535"):
        big = torch.randn(70_000, 1, 8, 64, device="cuda", dtype=torch.float16)
        flash_forward_mma(big, big, big)


@pytest.mark.gpu
def test_layouts_streams_scale_nan_and_ranks():
    """Odd strides of size-1 axes, expanded (stride-0) K/V, NumPy mixed with torch, a side
    stream, a non-default scale, NaN propagation and the output rank — each against float64."""
    torch = pytest.importorskip("torch")
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(2, 4, 100, 64, device="cuda", dtype=torch.float16, generator=g)
    k1 = torch.randn(2, 1, 90, 64, device="cuda", dtype=torch.float16, generator=g)
    v1 = torch.randn(2, 1, 90, 64, device="cuda", dtype=torch.float16, generator=g)
    k, v = k1.expand(2, 4, 90, 64), v1.expand(2, 4, 90, 64)          # stride 0 along H (GQA-style)

    def ref(q, k, v, scale, causal=False):
        return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                scale=scale, is_causal=False)

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()

    O, L = flash_forward_mma(q, k, v, scale=0.05)
    assert rel(O, ref(q, k, v, 0.05)) <= 2e-3
    s = torch.stack([q[0, h].double() @ k[0, h].double().T * 0.05 for h in range(4)])
    assert (L[0].double() - torch.logsumexp(s, -1)).abs().max().item() <= 1e-2
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):                                     # Q written and read on a side stream
        q2 = q * 1.0
        O2, _ = flash_forward_mma(q2, k, v, scale=0.05)
    side.synchronize()
    assert torch.equal(O2, O)
    On, _ = flash_forward_mma(q.cpu().numpy(), k, v, scale=0.05)      # NumPy Q, torch K and V
    assert rel(torch.as_tensor(On.get(), device="cuda"), ref(q, k, v, 0.05)) <= 2e-3
    O3, L3 = flash_forward_mma(q[0, 0], k[0, 0], v[0, 0])             # (N, d) in -> (N, d), (N,) out
    assert O3.shape == (100, 64) and L3.shape == (100,)
    qn = q.clone()
    qn[1, 2, 7, 5] = float("nan")
    On, Ln = flash_forward_mma(qn, k, v)
    assert torch.isnan(On[1, 2, 7]).all() and torch.isnan(Ln[1, 2, 7])
    assert not torch.isnan(On[1, 2, 8]).any() and not torch.isnan(On[0]).any()


@pytest.mark.gpu
def test_the_check_catches_a_single_wrong_row():
    """check_case's per-row bound: one row of O zeroed must fail even when the norm over all
    of O would still pass (the row_rel_err field)."""
    import cupy as cp

    from flashviz.gpu.tensorcore import bench as mma_bench
    real = mma_bench.launch_mma

    def broken(mk, q, k, v, o, lse_ptr, scale, stream=None):
        real(mk, q, k, v, o, lse_ptr, scale, stream)
        cp.cuda.Device().synchronize()
        O = o.keep
        O[0, 0, -5] = 0          # a late row: it averages many keys, so its norm is small
    mma_bench.launch_mma = broken
    try:
        r = mma_bench.check_case("wgmma" if _variants()[0] == "wgmma" else "mma.sync", "bfloat16", 128, True,
                                 2048, 2048, 128, 64)
    finally:
        mma_bench.launch_mma = real
    # one row in 12,288: the norm over all of O barely notices, the per-row bound does
    assert r["row_rel_err"] > r["row_tol"] and not r["pass"]
    assert r["row_rel_err"] > 50 * r["rel_err"]
