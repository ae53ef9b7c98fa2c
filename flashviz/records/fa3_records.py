"""The FlashAttention-3 kernel (kernels/flash_fwd_fa3.cu) read without a GPU: its fixed
choices, and the probe records that timed it step by step (chapter 8).

**The kernel's choices.** ``fa3_config(d, causal)`` gathers one block's parameters: Br, Bc
(``limits.default_blocks``), the consumer warpgroups (Br/64), the threads
(``limits.mma_threads``), the slots of the K and V rings (``limits.fa3_stages``), the
registers a thread gets after ``setmaxnreg`` and the shared memory, split into Q_i, the two
rings, the mbarriers and the alignment slack (summing to ``limits.mma_smem_bytes``). The
register counts are read from the kernel's own ``Config`` (``kernel_choices``), not copied.

**The probe records** (benchmarks/results/probe-fa3-<run>-<device>-<date>.json, package
``flashviz.results``; written by benchmarks/probe_fa3.py). One record is one process on one
GPU: ``times`` rows of (N, d, causal, B, H, flops) with, for every implementation timed in
that row, ``<impl>_kernel_ms`` (kernel-only: CUDA-graph replay of 10 public calls, median of
7 replays) and ``<impl>_call_ms`` (public call: CUDA events around 30 back-to-back calls,
median). Implementations: ``sdpa_cudnn``, ``sdpa_flash``, ``wgmma`` (the FlashAttention-2
kernel of chapter 7), ``fa3`` (the default build) and builds ``fa3_<tag>``: the tag names
the blocks (``192x128``) and what differs from the default (``f0``..``f3``: ``FA3_FEAT``;
``s3``: ``FA3_STAGES`` 3; ``persistent``: one block per SM; ``always``:
``FA3_RESCALE_ALWAYS``, run v5 only). Runs: ``v1``..``v5`` (earlier versions of the kernel)
and ``steps`` (the final code, every step in one run).

Two builds compare only inside one run (``compare_builds``); across runs, only each run's
ratios to SDPA-cuDNN of that same run compare. ``RUN_NOISE``: what counts as noise.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass

from ..mma_limits import check_mma_sizes, default_blocks, fa3_stages, mma_smem_bytes, mma_threads
from .files import kernel_source, package_dir

#: ±5 %: differences between two runs of the same code on the H200 that are noise (the
#: implementations that did not change between the probe runs vary by about this much:
#: ``unchanged_spread``)
RUN_NOISE = 0.05
REGISTER_FILE = 65_536      #: 32-bit registers of one Hopper SM, shared by the threads on it
KERNEL_FILE = "flash_fwd_fa3.cu"
_NAME = re.compile(r"^probe-fa3-(?P<run>[A-Za-z0-9]+)-(?P<device>.+)-(?P<date>\d{4}-\d{2}-\d{2})\.json$")


# --- the kernel's fixed choices ----------------------------------------------------------------

def _ternary(text: str, name: str) -> tuple[str, int, int, int]:
    """``name = LHS == K ? A : B;`` in the kernel text → (LHS, K, A, B); LookupError if absent."""
    m = re.search(rf"\b{name}\s*=\s*(\w+)\s*==\s*(\d+)\s*\?\s*(\d+)\s*:\s*(\d+)\s*;", text)
    if not m:
        raise LookupError(f"{KERNEL_FILE}: no '{name} = X == k ? a : b;' in struct Config (the kernel changed?)")
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


def kernel_choices(text: str | None = None) -> dict:
    """The choices of ``Config`` in kernels/flash_fwd_fa3.cu (or in ``text``), parsed from
    its source: {"reg_producer": (k, a, b), "reg_consumer": (k, a, b), "stages": (k, a, b),
    "feat": int} where (k, a, b) means "a when the consumer warpgroups (NWG) or d equal k,
    else b" and feat is the default ``FA3_FEAT``. Raises LookupError when a line is missing."""
    text = kernel_source(KERNEL_FILE) if text is None else text
    start = text.find("struct Config")
    if start < 0:
        raise LookupError(f"{KERNEL_FILE}: no struct Config")
    body = text[start:text.find("\n};", start)]
    out = {}
    for key, name in (("reg_producer", "REG_PRODUCER"), ("reg_consumer", "REG_CONSUMER"), ("stages", "STAGES")):
        _, k, a, b = _ternary(body, name)
        out[key] = (k, a, b)
    feat = re.search(r"#else[^#]*?\bFEAT\s*=\s*(\d+)\s*;", body, re.S)
    if not feat:
        raise LookupError(f"{KERNEL_FILE}: no default 'FEAT = n;' in struct Config")
    out["feat"] = int(feat.group(1))
    return out


def fa3_registers(Br: int) -> tuple[int, int]:
    """(producer, consumer) registers per thread after ``setmaxnreg`` for a block of Br query
    rows (Br/64 consumer warpgroups), as the kernel's Config sets them. Br in {128, 192};
    ValueError / TypeError otherwise."""
    Br, _, _ = check_mma_sizes(Br, 128, 64, "fa3")
    ch, nwg = kernel_choices(), Br // 64
    return tuple(a if nwg == k else b for k, a, b in (ch["reg_producer"], ch["reg_consumer"]))


@dataclass(frozen=True)
class FA3Config:
    """One thread block of the fa3 kernel. Sizes in elements (Br, Bc, d), bytes (``*_bytes``,
    fp16/bf16: 2 bytes an element) and 32-bit registers per thread (``reg_*``)."""

    d: int
    causal: bool
    Br: int
    Bc: int
    stages: int            #: slots in each of the K and V rings
    consumers: int         #: consumer warpgroups, Br/64 (64 query rows each)
    threads: int           #: (consumers + 1) · 128: the producer warpgroup too
    reg_producer: int
    reg_consumer: int
    q_bytes: int           #: Q_i: Br·d·2
    ring_bytes: int        #: one ring (K or V): stages·Bc·d·2
    barrier_bytes: int     #: mbarriers, 8 bytes each: full/empty for Q_i and for every slot of each ring
    align_bytes: int       #: slack to align the tiles to 1024 bytes
    smem_bytes: int        #: the sum: limits.mma_smem_bytes(Br, Bc, d, "fa3")
    feat: int              #: the default FA3_FEAT (bit 0 ping-pong, bit 1 intra-warpgroup overlap)


def fa3_config(d: int, causal: bool = False, Br: int | None = None, Bc: int | None = None) -> FA3Config:
    """The block the runner launches for head dimension d (and mask), or the given Br, Bc.
    Raises ValueError / TypeError for unsupported sizes (``limits.check_mma_sizes``) and
    LookupError if the kernel's Config cannot be read."""
    dBr, dBc = default_blocks(d, causal, "fa3")
    Br, Bc, d = check_mma_sizes(dBr if Br is None else Br, dBc if Bc is None else Bc, d, "fa3")
    st = fa3_stages(d)
    producer, consumer = fa3_registers(Br)
    barriers = 8 * (2 + 4 * st)
    cfg = FA3Config(d=d, causal=bool(causal), Br=Br, Bc=Bc, stages=st, consumers=Br // 64,
                    threads=mma_threads(Br, "fa3"), reg_producer=producer, reg_consumer=consumer,
                    q_bytes=2 * Br * d, ring_bytes=2 * st * Bc * d, barrier_bytes=barriers, align_bytes=1024,
                    smem_bytes=mma_smem_bytes(Br, Bc, d, "fa3"), feat=kernel_choices()["feat"])
    parts = cfg.q_bytes + 2 * cfg.ring_bytes + cfg.barrier_bytes + cfg.align_bytes
    if parts != cfg.smem_bytes:     # the limits' formula and this split must agree
        raise AssertionError(f"fa3 shared memory: parts {parts:,} != limits {cfg.smem_bytes:,}")
    return cfg


def kernel_excerpt(first: str, stop: str) -> tuple[int, str]:
    """Lines of kernels/flash_fwd_fa3.cu from the first line containing ``first`` up to (not
    including) the next line containing ``stop``: (1-based first line number, text,
    dedented). LookupError naming the missing text."""
    lines = kernel_source(KERNEL_FILE).splitlines()
    a = next((k for k, ln in enumerate(lines) if first in ln), None)
    if a is None:
        raise LookupError(f"{KERNEL_FILE}: no line contains {first!r}")
    b = next((k for k in range(a + 1, len(lines)) if stop in lines[k]), None)
    if b is None:
        raise LookupError(f"{KERNEL_FILE}: no line after {a + 1} contains {stop!r}")
    cut = lines[a:b]
    while cut and not cut[-1].strip():
        cut.pop()
    pad = min(len(ln) - len(ln.lstrip()) for ln in cut if ln.strip() and not ln.startswith("#"))
    return a + 1, "\n".join(ln if ln.startswith("#") else ln[pad:] for ln in cut)


# --- the probe records -------------------------------------------------------------------------

def probe_records() -> dict[str, dict]:
    """Every committed fa3 probe record, {run: record} in the order they were recorded
    (``env.time_utc``); for one run name recorded more than once, the newest file. Each record
    gains "source_file" and "run". {} when there are none."""
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return {}
    found = {}
    for f in folder.iterdir():
        m = _NAME.match(f.name)
        if m and f.is_file():
            rec = json.loads(f.read_text(encoding="utf-8"))
            rec["source_file"], rec["run"] = f.name, m["run"]
            old = found.get(m["run"])
            if old is None or (m["date"], f.name) > (old[0], old[1]["source_file"]):
                found[m["run"]] = (m["date"], rec)
    recs = [r for _, r in found.values()]
    return {r["run"]: r for r in sorted(recs, key=lambda r: r.get("env", {}).get("time_utc", ""))}


def latest_probe(run: str = "steps") -> dict | None:
    """One probe record by run name ("steps", "v1".."v5"), or None. TypeError for a non-str."""
    if not isinstance(run, str):
        raise TypeError(f"run must be a run name such as 'steps' or 'v5'; got {run!r}")
    return probe_records().get(run)


def probe_label(rec: dict) -> str:
    """'NVIDIA H200, 2026-12-01 18:41 UTC, commit 53db3aa (file …)' for a probe record."""
    env = rec.get("env", {})
    t = env.get("time_utc", env.get("date", "?"))
    return (f"{env.get('device', 'unknown GPU')}, {t[:16].replace('T', ' ')} UTC, commit "
            f"{str(env.get('commit', '?'))[:7]} (file {rec.get('source_file', '?')})")


def build_blocks(d: int) -> str:
    """The default fa3 blocks of d as a build tag prefix: "192x128" (d = 64), "128x128" (d = 128)."""
    Br, Bc = default_blocks(d, False, "fa3")
    return f"{Br}x{Bc}"


@dataclass(frozen=True)
class Step:
    """One step from the FlashAttention-2 kernel to FlashAttention-3: ``impl(d)`` is its key in
    a probe row (``{blk}``: the default blocks of d, ``build_blocks``); ``feat`` its FA3_FEAT
    (None: not the fa3 kernel)."""

    key: str
    label: str
    feat: int | None
    template: str

    def impl(self, d: int) -> str:
        return self.template.format(blk=build_blocks(d))


#: the steps, in the order they are added; the probe "steps" times all of them in one run. Its
#: default build "fa3" is FA3_FEAT 1 (ping-pong), the kernel's default then and now.
STEPS = (Step("wgmma", "FA2 kernel (wgmma, chapter 7)", None, "wgmma"),
         Step("producer", "+ TMA, producer warpgroup", 0, "fa3_{blk}_f0"),
         Step("pingpong", "+ ping-pong (the default)", 1, "fa3"),
         Step("intra", "+ intra-warpgroup overlap", 3, "fa3_{blk}_f3"))


def _tflops(row: dict, impl: str, method: str) -> float:
    return row["flops"] / row[f"{impl}_{method}_ms"] / 1e9


def _row_figures(row: dict, impl: str) -> dict:
    out = {"impl": impl}
    for m in ("kernel", "call"):
        out[f"{m}_ms"] = row[f"{impl}_{m}_ms"]
        out[f"{m}_tflops"] = _tflops(row, impl, m)
        out[f"{m}_vs_sdpa_cudnn"] = row[f"sdpa_cudnn_{m}_ms"] / row[f"{impl}_{m}_ms"]
    return out


def steps_table(rec: dict) -> list[dict]:
    """The steps of ``STEPS`` in every row of a probe record that timed all of them, in the
    order (d, causal, step): N, d, causal, B, H, step, label, impl, Br, Bc, kernel_ms, call_ms,
    kernel_tflops, call_tflops (FLOPs over each time), kernel_vs_sdpa_cudnn, call_vs_sdpa_cudnn
    (cuDNN's time ÷ this one, same method: above 1 is faster than cuDNN), and cuDNN's and
    SDPA-flash's kernel_ms / kernel_tflops of the same row (``sdpa_cudnn_kernel_ms`` …).
    ValueError when ``rec`` is not a probe record."""
    if not isinstance(rec, dict) or "times" not in rec:
        raise ValueError("expected a probe record (flashviz.records.fa3_records.latest_probe)")
    out = []
    for row in sorted(rec["times"], key=lambda r: (r["d"], r["causal"], r["N"])):
        impls = [s.impl(row["d"]) for s in STEPS]
        if not all(f"{i}_kernel_ms" in row and f"{i}_call_ms" in row for i in impls):
            continue
        for s, impl in zip(STEPS, impls):
            r = {k: row[k] for k in ("N", "d", "causal", "B", "H", "flops")}
            r.update(step=s.key, label=s.label, **_row_figures(row, impl))
            r["Br"], r["Bc"] = default_blocks(row["d"], row["causal"], "fa3" if s.feat is not None else "wgmma")
            for other in ("sdpa_cudnn", "sdpa_flash"):
                r[f"{other}_kernel_ms"] = row[f"{other}_kernel_ms"]
                r[f"{other}_kernel_tflops"] = _tflops(row, other, "kernel")
            out.append(r)
    return out


def build_rows(rec: dict, *, d: int, causal: bool, N: int) -> list[dict]:
    """Every fa3 implementation timed in one row of a probe record (the default ``fa3`` first,
    then the builds in record order): impl, tag ("" for the default), kernel_ms, call_ms,
    kernel_tflops, call_tflops, kernel_vs_sdpa_cudnn, call_vs_sdpa_cudnn. LookupError when the
    record has no such row."""
    row = next((r for r in rec.get("times", []) if (r["d"], bool(r["causal"]), r["N"]) == (d, bool(causal), N)), None)
    if row is None:
        raise LookupError(f"no row d={d}, causal={causal}, N={N} in {rec.get('source_file', 'the record')}")
    impls = [k[:-len("_kernel_ms")] for k in row if k.endswith("_kernel_ms") and k.startswith("fa3")]
    return [{"tag": i[4:], **_row_figures(row, i)} for i in impls if f"{i}_call_ms" in row]


_TAG_PARTS = {"f0": "FA3_FEAT 0: TMA + producer warpgroup, no ping-pong",
              "f1": "FA3_FEAT 1: + ping-pong", "f2": "FA3_FEAT 2: intra-warpgroup overlap, no ping-pong",
              "f3": "FA3_FEAT 3: ping-pong + intra-warpgroup overlap", "s2": "2 ring slots", "s3": "3 ring slots",
              "persistent": "one block per SM (persistent grid)", "always": "always rescale O (FA3_RESCALE_ALWAYS)"}


def describe_build(tag: str) -> str:
    """A build tag of a probe record in words: "" → "the default build"; "128x176_f3" →
    "Br×Bc = 128×176; FA3_FEAT 3: ping-pong + intra-warpgroup overlap". Unknown parts are kept
    as they are; TypeError for a non-str."""
    if not isinstance(tag, str):
        raise TypeError(f"tag must be a str such as '128x128_f0'; got {tag!r}")
    if tag in ("", "fa3"):
        return "the default build"
    words = []
    for part in tag.split("_"):
        m = re.fullmatch(r"(\d+)x(\d+)", part)
        words.append(f"Br×Bc = {m[1]}×{m[2]}" if m else _TAG_PARTS.get(part, part))
    return "; ".join(words)


# --- comparisons inside one run ---------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """Two builds timed in the same run: ``runs[run] = (candidate, baseline)``, each an impl
    name or {d: impl name}; ``what`` says what the candidate adds."""

    key: str
    what: str
    runs: dict


def _per_d(x, d):
    return x.get(d) if isinstance(x, dict) else x


#: What the probe runs compared (benchmarks/probe_fa3.py's builds at each run's commit; v3's
#: kernel was persistent in every build, v5's had the skipped O rescale in every build but
#: ``*_always``). Blocks: the default of each d, 192x128 (d = 64) and 128x128 (d = 128).
COMPARISONS = (
    Comparison("pingpong", "ping-pong (FA3_FEAT 1 against 0)", {
        "v2": ({64: "fa3_192x128_f1", 128: "fa3_128x128_f1_s2"}, {64: "fa3_192x128_f0", 128: "fa3_128x128_f0_s2"}),
        "v3": ({64: "fa3_192x128_f1", 128: "fa3_128x128_f1"}, {64: "fa3_192x128_f0", 128: "fa3_128x128_f0"}),
        "v4": ({64: "fa3_192x128_f1", 128: "fa3_128x128_f1"}, {64: "fa3_192x128_f0", 128: "fa3_128x128_f0"}),
        "v5": ("fa3", {64: "fa3_192x128_f0", 128: "fa3_128x128_f0"}),
        "steps": ("fa3", {64: "fa3_192x128_f0", 128: "fa3_128x128_f0"})}),
    Comparison("intra", "intra-warpgroup overlap on top of ping-pong (FA3_FEAT 3 against 1)", {
        "v2": ({64: "fa3_192x128_f3", 128: "fa3_128x128_f3_s2"}, {64: "fa3_192x128_f1", 128: "fa3_128x128_f1_s2"}),
        "v3": ({64: "fa3_192x128_f3", 128: "fa3_128x128_f3"}, {64: "fa3_192x128_f1", 128: "fa3_128x128_f1"}),
        "v4": ({64: "fa3_192x128_f3", 128: "fa3_128x128_f3"}, {64: "fa3_192x128_f1", 128: "fa3_128x128_f1"}),
        "v5": ({64: "fa3_192x128_f3", 128: "fa3_128x128_f3"}, "fa3"),
        "steps": ({64: "fa3_192x128_f3", 128: "fa3_128x128_f3"}, "fa3")}),
    Comparison("persistent", "one block per SM (persistent grid) against one block per tile", {
        "v4": ({64: "fa3_192x128_f3_persistent", 128: "fa3_128x128_f3_persistent"},
               {64: "fa3_192x128_f3", 128: "fa3_128x128_f3"}),
        "v5": ({64: "fa3_192x128_persistent", 128: "fa3_128x128_persistent"}, "fa3"),
        "steps": ({64: "fa3_192x128_persistent", 128: "fa3_128x128_persistent"}, "fa3")}),
    Comparison("skip_rescale", "skipping the O rescale when alpha = 1 in the whole warp (against always rescaling)", {
        "v5": ("fa3", {64: "fa3_192x128_always", 128: "fa3_128x128_always"})}),
    Comparison("stages3", "a third slot in the K and V rings at d = 128 (FA3_STAGES 3 against 2)", {
        "v2": ({128: "fa3_128x128_f1_s3"}, {128: "fa3_128x128_f1_s2"}),
        "v3": ({128: "fa3_128x128_f1_s3"}, {128: "fa3_128x128_f1"}),
        "v4": ({128: "fa3_128x128_f1_s3"}, {128: "fa3_128x128_f1"}),
        "v5": ({128: "fa3_128x128_s3"}, "fa3"),
        "steps": ({128: "fa3_128x128_s3"}, "fa3")}),
    Comparison("bc176_intra", "Bc = 176 with both overlaps at d = 128 (128x176, FA3_FEAT 3, against the default)", {
        "v5": ({128: "fa3_128x176_f3"}, "fa3"),
        "steps": ({128: "fa3_128x176_f3"}, "fa3")}),
)


def comparison(key: str) -> Comparison:
    """The entry of COMPARISONS named ``key``; KeyError listing the keys."""
    for c in COMPARISONS:
        if c.key == key:
            return c
    raise KeyError(f"no comparison {key!r}; there are {', '.join(c.key for c in COMPARISONS)}")


def compare_builds(cmp: Comparison, d: int, records: dict | None = None) -> list[dict]:
    """For every run of ``cmp`` and every row of that run at head dimension d that timed both
    builds: run, N, causal, candidate, baseline (impl names), candidate_ms, baseline_ms
    (kernel-only) and ``speedup`` = baseline_ms / candidate_ms (above 1: the candidate was
    faster, in that run). ``records``: {run: record}, default ``probe_records()``."""
    records = probe_records() if records is None else records
    out = []
    for run, (cand, base) in cmp.runs.items():
        cand, base = _per_d(cand, d), _per_d(base, d)
        if cand is None or base is None or run not in records:
            continue
        for row in sorted(records[run]["times"], key=lambda r: (r["causal"], r["N"])):
            if row["d"] != d or f"{cand}_kernel_ms" not in row or f"{base}_kernel_ms" not in row:
                continue
            out.append({"run": run, "N": row["N"], "causal": bool(row["causal"]), "candidate": cand, "baseline": base,
                        "candidate_ms": row[f"{cand}_kernel_ms"], "baseline_ms": row[f"{base}_kernel_ms"],
                        "speedup": row[f"{base}_kernel_ms"] / row[f"{cand}_kernel_ms"]})
    return out


def summarize(speedups, noise: float = RUN_NOISE) -> dict:
    """n, median, lo, hi of a list of speed-ups, and how many were faster than 1 + noise,
    slower than 1 / (1 + noise), or within. ValueError for an empty list."""
    x = [float(s) for s in speedups]
    if not x:
        raise ValueError("no speed-ups to summarise")
    faster = sum(s > 1 + noise for s in x)
    slower = sum(s < 1 / (1 + noise) for s in x)
    return {"n": len(x), "median": statistics.median(x), "lo": min(x), "hi": max(x),
            "faster": faster, "slower": slower, "within": len(x) - faster - slower}


def unchanged_spread(records: dict | None = None, impls=("sdpa_cudnn", "sdpa_flash", "wgmma")) -> list[float]:
    """Run-to-run spread of the implementations that did not change between the probe runs:
    for every (impl, d, causal, N) timed in at least two runs, max/min − 1 of its kernel-only
    time over the runs. ``records``: default ``probe_records()``."""
    records = probe_records() if records is None else records
    times: dict = {}
    for rec in records.values():
        for r in rec["times"]:
            for impl in impls:
                if f"{impl}_kernel_ms" in r:
                    times.setdefault((impl, r["d"], bool(r["causal"]), r["N"]), []).append(r[f"{impl}_kernel_ms"])
    return [max(t) / min(t) - 1 for t in times.values() if len(t) > 1]


# --- the full benchmark (mma-*.json) ----------------------------------------------------------

BENCH_IMPLS = ("fa3", "wgmma", "sdpa_flash", "sdpa_cudnn")


def fa3_bench_table(res: dict | None) -> list[dict]:
    """The benchmark rows of an "mma" results dict (``results.mma_table``) with, for each of
    BENCH_IMPLS, <impl>_call_ms (public call), <impl>_kernel_ms (kernel-only, the profiler),
    <impl>_host_us (host time per call), <impl>_call_tflops and <impl>_kernel_tflops, and for
    fa3, wgmma and sdpa_flash <impl>_<call|kernel>_vs_sdpa_cudnn (cuDNN's time ÷ theirs, same
    method). Rows without fa3 times are left out; sorted by (d, causal, N)."""
    from .results import mma_table

    raw = {(r["N"], r["d"], bool(r["causal"])): r for r in (res or {}).get("bench", [])}
    out = []
    for row in mma_table(res):
        r = raw[(row["N"], row["d"], bool(row["causal"]))]
        if "fa3_kernel_ms" not in r or "fa3_call_ms" not in r:
            continue
        row = dict(row)
        for impl in BENCH_IMPLS:
            for m in ("call", "kernel"):
                row[f"{impl}_{m}_ms"] = r[f"{impl}_{m}_ms"]
                row[f"{impl}_{m}_tflops"] = _tflops(r, impl, m)
                if impl != "sdpa_cudnn":
                    row[f"{impl}_{m}_vs_sdpa_cudnn"] = r[f"sdpa_cudnn_{m}_ms"] / r[f"{impl}_{m}_ms"]
            row[f"{impl}_host_us"] = r[f"{impl}_host_us"]
        out.append(row)
    return out
