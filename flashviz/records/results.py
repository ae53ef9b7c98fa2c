"""Committed GPU benchmark results (benchmarks/results/*.json, package ``flashviz.results``)."""

from __future__ import annotations

import json
import re

from ..mma_limits import IMPL_NAMES
from .files import package_dir

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


KINDS = {"teaching": "gpu-", "mma": "mma-", "dram": "dram-", "bwd": "bwd-", "decode": "decode-", "storep": "storep-"}


def _files(kind: str, *, device_folders: bool = False) -> list:
    """The records of ``kind`` in benchmarks/results/ (and, with ``device_folders``, in its
    sub-folders of one device each, e.g. h100/: records kept out of the chapters, which read the
    top folder only, so that a chapter never mixes devices)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    prefix = KINDS[kind]
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return []
    folders = [folder, *(sorted(d for d in folder.iterdir() if d.is_dir()) if device_folders else [])]
    return [f for d in folders for f in d.iterdir()
            if f.name.startswith(prefix) and f.name.endswith(".json") and f.is_file()]


def _newest_key(f):
    m = _DATE.search(f.name)
    return (m.group(1) if m else "", f.name)


def _read(f) -> dict:
    """The record in file f, with "source_file": its path under benchmarks/results/ (a device
    folder's name first, "h100/decode-….json", for a record kept in one)."""
    data = json.loads(f.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        top = package_dir("flashviz.results")
        data.setdefault("source_file", f.name if f.parent == top else f"{f.parent.name}/{f.name}")
    return data


def latest_results_each_device(kind: str = "decode") -> list[dict]:
    """The newest committed record of one kind (``latest_results``'s kinds) for each device its
    files name (``<prefix><device>-<YYYY-MM-DD>.json``, e.g. decode-h100-80gb-hbm3-2026-12-05.json),
    in benchmarks/results/ or a device's folder there (h100/), newest first (date, then name), each
    with "source_file" added; [] when there is none. For the docs, which list every device (the
    chapters read ``latest_results``: the top folder only). ValueError for an unknown kind;
    json.JSONDecodeError for a corrupt file."""
    files = _files(kind, device_folders=True)
    name = re.compile(rf"^{re.escape(KINDS[kind])}(.+)-(\d{{4}}-\d{{2}}-\d{{2}})\.json$")
    newest = {}
    for f in files:
        m = name.match(f.name)
        if m and (m.group(1) not in newest or _newest_key(f) > _newest_key(newest[m.group(1)])):
            newest[m.group(1)] = f
    return [_read(f) for f in sorted(newest.values(), key=_newest_key, reverse=True)]


def latest_results(kind: str = "teaching") -> dict | None:
    """The newest committed GPU results JSON of one kind under ``flashviz.results``
    (benchmarks/results/), or None.

    kind: "teaching" (gpu-*.json: the fp32 teaching kernel vs naive CuPy), "mma"
    (mma-*.json: the tensor-core kernels' correctness grid, benchmark against SDPA, block
    sweep, device ceilings), "dram" (dram-*.json: Nsight Compute DRAM bytes vs the IO
    model), "bwd" (bwd-*.json: the backward benchmark, ``gpu/tensorcore/bench_bwd.py``),
    "decode" (decode-*.json: ``gpu/decode_bench.py``) or "storep" (storep-*.json: recompute versus
    store, ``gpu/teaching/store_bench.py``).
    Newest = latest YYYY-MM-DD in the file name (ties broken by name). Returns the
    parsed dict with an added key "source_file" (the file name); None when there is no such
    file or the folder cannot be found. Raises ValueError for an unknown kind and
    json.JSONDecodeError if the newest file is corrupt.
    """
    files = _files(kind)
    return _read(max(files, key=_newest_key)) if files else None


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def cuda_version(v) -> str:
    """CUDA's integer version (13020) as text ('13.2'); anything else as str(v)."""
    return f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) else str(v)


def recorded_label(res: dict) -> str:
    """'NVIDIA H200, 2026-11-29 (CuPy 14.2.0, CUDA 13.2, torch 2.11.0)' from a results dict."""
    env = res.get("env", {})
    return (f"{env.get('device', 'unknown GPU')}, {env.get('date', 'unknown date')} "
            f"(CuPy {env.get('cupy', '?')}, CUDA {cuda_version(env.get('cuda_runtime', '?'))}"
            f"{', torch ' + str(env['torch']) if env.get('torch') else ''}; file {res.get('source_file', '?')})")


def recorded_rows(res: dict | None, *, Br=None, Bc=None, d=None) -> list[dict]:
    """Timing rows of a teaching results dict (gpu-*.json: its "timing" rows, then its "sweep"
    rows), all or those matching Br/Bc/d when given. Each row keeps the file's keys: call_ms
    (public call, the headline), kernel_ms (kernel-only), host_us, call_tflops /
    kernel_tflops and, where naive CuPy ran, naive_call_ms, naive_kernel_ms,
    ratio_naive_over_call and ratio_naive_over_kernel (see ``flashviz.gpu.teaching.bench.benchmark``)."""
    if not res:
        return []
    rows = [r for r in list(res.get("timing", [])) + list(res.get("sweep", [])) if "kernel_ms" in r]
    pick = [r for r in rows if (Br is None or r.get("Br") == Br) and (Bc is None or r.get("Bc") == Bc)
            and (d is None or r.get("d") == d)]
    return pick


def teaching_figures(r: dict) -> dict:
    """The figures of one teaching-kernel row by method, read from the row or, for rows that
    lack them, computed from its raw times: call_ms, kernel_ms, call_tflops, kernel_tflops
    (flops over each time) and, when naive CuPy was timed, naive_call_ms, naive_kernel_ms,
    naive_over_call (naive_call_ms / call_ms: public call against public call) and
    naive_over_kernel (naive_kernel_ms / kernel_ms: kernel-only against kernel-only).
    Keys whose inputs are missing are left out."""
    out = {k: r[k] for k in ("call_ms", "kernel_ms", "host_us", "naive_call_ms", "naive_kernel_ms",
                             "naive_host_us") if k in r}
    for m in ("call", "kernel"):
        if f"{m}_tflops" in r:
            out[f"{m}_tflops"] = r[f"{m}_tflops"]
        elif f"{m}_ms" in r and "flops" in r:
            out[f"{m}_tflops"] = r["flops"] / r[f"{m}_ms"] / 1e9
        if f"naive_{m}_ms" in r and f"{m}_ms" in r:
            out[f"naive_over_{m}"] = r[f"naive_{m}_ms"] / r[f"{m}_ms"]
    return out


def teaching_methods() -> list[str]:
    """The two lines under a teaching-kernel table that name the method of every column."""
    return [f"'call' = {METHOD_NAMES['call']}, the headline; 'kernel' = {METHOD_NAMES['kernel']}",
            "naive = naive CuPy (fp32), timed the same way; naive/ours = naive's time / the kernel's, "
            "same method on both sides (above 1: the kernel is faster)"]


def recorded_summary(res: dict | None = None, *, Br=None, Bc=None) -> str:
    """A plain-text table of the recorded teaching-kernel vs naive CuPy timings, labelled with
    device and date and with the method of every column (public call, the headline, and
    kernel-only beside it; TFLOP/s by public call; naive / kernel by each method); only the
    rows with these Br, Bc when given."""
    res = latest_results() if res is None else res
    if not res:
        return "No recorded GPU results are available (benchmarks/results/ is empty)."

    def num(v, w, p, suffix=""):
        return f"{v:{w - len(suffix)}.{p}f}{suffix}" if v is not None else f"{'—':>{w}}"

    lines = [f"Recorded on {recorded_label(res)}:", *teaching_methods(),
             f"{'N':>6} {'d':>4} {'B·H':>6} {'Br×Bc':>8} {'causal':>6} │ {'ms':>8} {'ms':>8} {'TFLOP/s':>7} │ "
             f"{'naive ms':>9} {'naive ms':>9} │ {'naive/ours':>10} {'naive/ours':>10}",
             f"{'':>34} │ {'call':>8} {'kernel':>8} {'call':>7} │ {'call':>9} {'kernel':>9} │ "
             f"{'call':>10} {'kernel':>10}"]
    for r in res.get("timing", []):
        if "kernel_ms" not in r or (Br is not None and r.get("Br") != Br) or (Bc is not None and r.get("Bc") != Bc):
            continue
        f = teaching_figures(r)
        lines.append(f"{r['N']:>6} {r['d']:>4} {r['B'] * r['H']:>6} {str(r['Br']) + '×' + str(r['Bc']):>8} "
                     f"{'yes' if r.get('causal') else 'no':>6} │ {num(f.get('call_ms'), 8, 3)} "
                     f"{num(f.get('kernel_ms'), 8, 3)} {num(f.get('call_tflops'), 7, 1)} │ "
                     f"{num(f.get('naive_call_ms'), 9, 2)} {num(f.get('naive_kernel_ms'), 9, 2)} │ "
                     f"{num(f.get('naive_over_call'), 10, 2, 'x')} {num(f.get('naive_over_kernel'), 10, 2, 'x')}")
    pm = res.get("peak_memory", {})
    if "kernel_peak_bytes" in pm and "naive_peak_bytes" in pm:
        lines.append(f"Peak extra GPU memory at N = {pm['N']:,}, one head: kernel {_fmt_bytes(pm['kernel_peak_bytes'])}, "
                     f"naive {_fmt_bytes(pm['naive_peak_bytes'])} "
                     f"({100 * pm['kernel_peak_bytes'] / pm['naive_peak_bytes']:.2f}% of naive)")
    return "\n".join(lines)


IMPLS = ((IMPL_NAMES["fa3"], "flashviz fa3 (tensor cores, sm_90a; the default on Hopper)"),
         (IMPL_NAMES["wgmma"], "flashviz wgmma (tensor cores, sm_90a)"),
         (IMPL_NAMES["mma.sync"], "flashviz mma.sync (sm_80+)"),
         ("sdpa_flash", "SDPA flash (FlashAttention-2)"), ("sdpa_cudnn", "SDPA cuDNN"),
         ("sdpa_efficient", "SDPA memory-efficient"), ("teaching", "teaching kernel (fp32)"),
         ("naive", "naive CuPy (fp32)"))


def compulsory_bytes(row: dict, itemsize: int = 2) -> int:
    """The fewest HBM bytes one forward call of a benchmark row must move: read Q, K, V and
    write O once (itemsize bytes each) plus lse (4 bytes a row)."""
    B, H, N, d = row["B"], row["H"], row["N"], row["d"]
    return B * H * N * (4 * d * itemsize + 4)


#: from which sequence length each kernel's benchmark summary counts (the README's table, chapter 7's
#: spans, the app's chapter-7 caption): fa3 runs from 2048 keys at d = 64 causal
SUMMARY_FROM_N = {"wgmma": 1024, "fa3": 2048}

METHOD_NAMES = {"call": "public call (CUDA events, median)",
                "kernel": "kernel-only (profiler kernel time, median)"}


def mma_table(res: dict | None, *, d=None, causal=None) -> list[dict]:
    """Benchmark rows of an "mma" results dict, one per (N, d, causal), with derived figures.

    Every time and rate names its method: for each implementation in IMPLS that ran,
    <impl>_call_ms (public call), <impl>_kernel_ms (kernel-only), <impl>_host_us (host time
    per call), <impl>_call_tflops and <impl>_kernel_tflops (FLOPs over each time), and
    <impl>_peak_bytes / _Br / _Bc where recorded. For the tensor-core kernels (fa3,
    wgmma, mmasync) also <impl>_<call|kernel>_vs_sdpa_flash and _vs_sdpa_cudnn (their time / ours,
    same method on both sides: above 1 is faster than them), <impl>_host_vs_sdpa_flash
    (their host µs / ours) and, kernel-only, <impl>_matmul_share (TFLOP/s over the device's
    measured fp16 matmul ceiling) and <impl>_copy_share (compulsory bytes / time over the
    measured copy bandwidth). Filtered by d / causal when given; sorted by (d, causal, N)."""
    if not res:
        return []
    ceil = res.get("ceilings", {})
    mm = ceil.get("matmul_fp16_TFLOPs") if res.get("bench") and res["bench"][0].get("dtype") != "bfloat16" \
        else ceil.get("matmul_bf16_TFLOPs")
    bw = ceil.get("copy_GBps")
    out = []
    for r in res.get("bench", []):
        if (d is not None and r["d"] != d) or (causal is not None and bool(r["causal"]) != bool(causal)):
            continue
        row = {k: r[k] for k in ("N", "d", "B", "H", "causal", "dtype", "flops") if k in r}
        for key, _ in IMPLS:
            for suffix in ("_call_ms", "_kernel_ms", "_host_us", "_peak_bytes", "_Br", "_Bc", "_kernel_name",
                           "_error"):
                if key + suffix in r:
                    row[key + suffix] = r[key + suffix]
            for m in ("call", "kernel"):
                if f"{key}_{m}_ms" in r and "flops" in r:
                    row[f"{key}_{m}_tflops"] = r["flops"] / r[f"{key}_{m}_ms"] / 1e9
        for key in IMPL_NAMES.values():
            for m in ("call", "kernel"):
                if f"{key}_{m}_ms" not in r:
                    continue
                for other in ("sdpa_flash", "sdpa_cudnn"):
                    if f"{other}_{m}_ms" in r:
                        row[f"{key}_{m}_vs_{other}"] = r[f"{other}_{m}_ms"] / r[f"{key}_{m}_ms"]
            if f"{key}_host_us" in r and "sdpa_flash_host_us" in r:
                row[f"{key}_host_vs_sdpa_flash"] = r["sdpa_flash_host_us"] / r[f"{key}_host_us"]
            if f"{key}_kernel_ms" in r:
                if mm and f"{key}_kernel_tflops" in row:
                    row[key + "_matmul_share"] = row[f"{key}_kernel_tflops"] / mm
                if bw:
                    row[key + "_copy_share"] = compulsory_bytes(r) / r[f"{key}_kernel_ms"] / 1e6 / bw
        out.append(row)
    return sorted(out, key=lambda x: (x["d"], x["causal"], x["N"]))


def ratio_span(rows: list[dict], key: str) -> tuple[float, float] | None:
    """(min, max) of one derived figure over rows that have it, or None."""
    vals = [r[key] for r in rows if key in r]
    return (min(vals), max(vals)) if vals else None


def mma_sweep(res: dict | None, *, variant: str = "wgmma", d: int = 64, causal: bool = False) -> list[dict]:
    """The block-size sweep rows of an "mma" results dict for one variant, d and causal flag,
    ordered by (Br, Bc): Br, Bc, call_ms, kernel_ms, host_us, kernel_tflops,
    model_hbm_bytes, regs, smem_bytes — plus ``ms`` and ``tflops``, which are the
    kernel-only figures (kernel_ms, kernel_tflops): a sweep compares one kernel's block
    sizes, so it is read kernel-only."""
    if not res:
        return []
    rows = [dict(r) for r in res.get("sweep", []) if r.get("variant") == variant and r.get("d") == d
            and bool(r.get("causal")) == bool(causal) and "kernel_ms" in r]
    for r in rows:
        r["ms"], r["tflops"] = r["kernel_ms"], r["kernel_tflops"]
    return sorted(rows, key=lambda r: (r["Br"], r["Bc"]))


def check_summary(res: dict | None) -> dict:
    """{(variant, dtype): {"cases", "passed", "worst_rel_err", "tol", "nan"}} from the
    correctness grid of an "mma" results dict."""
    out: dict = {}
    for r in (res or {}).get("check", []):
        k = (r["variant"], r["dtype"])
        s = out.setdefault(k, {"cases": 0, "passed": 0, "worst_rel_err": 0.0, "tol": None, "nan": False})
        s["tol"] = s["tol"] if s["tol"] is not None else r.get("tol")
        s["cases"] += 1
        s["passed"] += bool(r.get("pass"))
        s["worst_rel_err"] = max(s["worst_rel_err"], r.get("rel_err", float("inf")))
        s["nan"] = s["nan"] or bool(r.get("nan"))
    return out


def mma_summary(res: dict | None) -> str:
    """A plain-text table of a tensor-core results dict: per (d, causal, N) our wgmma kernel's
    TFLOP/s and its ratio to SDPA flash (FlashAttention-2) and SDPA cuDNN by both methods —
    public call (the headline) and kernel-only — and host µs per call beside SDPA flash's;
    labelled with the device and date; plus the correctness grid's counts."""
    if not res:
        return "No recorded tensor-core results (benchmarks/results/mma-*.json) in this installation."
    bench = res.get("bench") or [{}]
    host = (res.get("methods") or {}).get("host_us", "host time per call")
    lines = [f"Recorded on {recorded_label(res)}",
             f"ours = the wgmma kernel (flash_forward_mma); {bench[0].get('dtype', 'fp16')}, B·N = "
             f"{bench[0].get('B', 0) * bench[0].get('N', 0):,} tokens, H·d = "
             f"{bench[0].get('H', 0) * bench[0].get('d', 0):,} (H = 2048/d)",
             "ratios = their time / ours (above 1: ours is faster); 'call' = public call, CUDA events, median; "
             "'kernel' = kernel-only, profiler kernel time, median",
             f"host µs: {host}",
             f"{'d':>4} {'causal':>6} {'N':>6} │ {'TFLOP/s':>7} │ {'vs FA2':>6} {'vs cuDNN':>8} │ {'vs FA2':>6} "
             f"{'vs cuDNN':>8} │ {'host µs':>7} {'FA2':>5}",
             f"{'':>19}│ {'call':>7} │ {'(public call)':>15} │ {'(kernel-only)':>15} │ {'per call':>13}"]
    for r in mma_table(res):
        def f(key, w=7, p=1):
            return f"{r[key]:{w}.{p}f}" if key in r else f"{'—':>{w}}"

        def x(key, w=6):
            return f"{r[key]:{w - 1}.2f}x" if key in r else f"{'—':>{w}}"
        lines.append(f"{r['d']:>4} {'yes' if r['causal'] else 'no':>6} {r['N']:>6} │ {f('wgmma_call_tflops')} │ "
                     f"{x('wgmma_call_vs_sdpa_flash')} {x('wgmma_call_vs_sdpa_cudnn', 8)} │ "
                     f"{x('wgmma_kernel_vs_sdpa_flash')} {x('wgmma_kernel_vs_sdpa_cudnn', 8)} │ "
                     f"{f('wgmma_host_us', 7, 0)} {f('sdpa_flash_host_us', 5, 0)}")
    for (variant, dtype), c in sorted(check_summary(res).items()):
        tol = f"{c['tol']:g}" if c["tol"] is not None else "—"
        lines.append(f"correctness {variant} {dtype}: {c['passed']}/{c['cases']} within {tol}, "
                     f"worst relative error {c['worst_rel_err']:.1e}{', NaN seen' if c['nan'] else ''}")
    return "\n".join(lines)


#: NVIDIA H200 SXM's HBM3e bandwidth from its data sheet (4.8 TB/s), used only when no record of
#: a measured copy bandwidth is installed; the measured one (4.25-4.28 TB/s) is lower.
H200_DATASHEET_BPS = 4.8e12


def hbm_bandwidth() -> tuple[float, str, str]:
    """(bytes per second, short label, where it comes from) of the HBM bandwidth the meters use.

    In order: ``copy_GBps`` of the newest decode record (``benchmarks/results/decode-*.json``, when
    ``records.results`` knows that kind), then the ``ceilings.copy_GBps`` of the newest tensor-core
    record (mma-*.json: a device-to-device copy timed in the same run, read + write bytes over
    time), else ``H200_DATASHEET_BPS``. The label names the device and date of a record."""
    for kind, get in (("decode", lambda r: r.get("copy_GBps")),
                      ("mma", lambda r: (r.get("ceilings") or {}).get("copy_GBps"))):
        try:
            res = latest_results(kind)
        except ValueError:          # a kind this installation's records do not know
            continue
        gbps = get(res) if res else None
        if gbps:
            env = res.get("env", {})
            dev = str(env.get("device", "GPU")).replace("NVIDIA ", "")
            return (float(gbps) * 1e9, f"{float(gbps) / 1e3:.2f} TB/s",
                    f"{dev} copy bandwidth, measured {env.get('date', '?')} ({res.get('source_file', kind)})")
    return H200_DATASHEET_BPS, "4.8 TB/s", "H200 data sheet (no measured record installed)"
