"""The backward benchmark's record (bwd-<device>-<date>.json, benchmarks/bench_bwd.py): a data
check of the newest committed one (skipped while there is none), the check itself on a made-up
record, and the CPU side of the benchmark (its plan, file names and arithmetic).

The data check reads the record's raw keys and recomputes every figure from them (FLOPs from
B, H, N, d; TFLOP/s from FLOPs and times; correctness passes from errors and magnitudes),
independently of ``flashviz.gpu.tensorcore.bench_bwd``. It checks the record, never the speed of
anything.
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_bwd.py"

#: what issue 23 asks of the record
REQUIRED_IMPLS = ("bwd_mma", "bwd_teaching", "sdpa_flash_bwd", "sdpa_cudnn_bwd")
TEACHING = ("bwd_teaching", "bwd_teaching_det")
FULL_N, FULL_D = (1024, 2048, 4096, 8192, 16384), (64, 128)
TOKENS, MODEL_DIM = 16384, 2048
TIMES = {"call_ms": ("tflops", "flops_bwd", "error"), "kernel_ms": ("kernel_tflops", "flops_bwd", "kernel_error"),
         "fwdbwd_call_ms": ("fwdbwd_tflops", "flops_fwdbwd", "fwdbwd_error")}
HEX16 = re.compile(r"^[0-9a-f]{16}$")
NAME = re.compile(r"^bwd-([a-z0-9-]+)-(\d{4}-\d{2}-\d{2})\.json$")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def bwd_record_problems(rec: dict, name: str | None = None) -> list[str]:
    """Everything wrong with a backward record, one line each (empty: the record is whole and
    consistent). name: its file name, checked against its env."""
    p: list[str] = []
    for k in ("env", "impls", "bench", "correctness", "deterministic", "peak_bytes", "methods", "method", "tol_rel"):
        if k not in rec:
            p.append(f"no {k!r}")
    if p:
        return p
    env, impls, tol = rec["env"], rec["impls"], rec["tol_rel"]
    for k in ("device", "date", "commit", "torch", "cupy", "kernel_sources", "cubins"):
        if not env.get(k):
            p.append(f"env has no {k!r}")
    if name is not None:
        m = NAME.match(name)
        if not m or m.group(2) != env.get("date"):
            p.append(f"file name {name!r} does not name the run's date {env.get('date')!r}")
    sources = env.get("kernel_sources") or {}
    if "bwd_mma" in impls and "flash_bwd_mma.cu" not in sources:
        p.append("env.kernel_sources does not name kernels/flash_bwd_mma.cu")
    p += [f"kernel source {f}: hash {h!r} is not 16 hex digits" for f, h in sources.items() if not HEX16.match(str(h))]
    for c in env.get("cubins") or []:
        if not HEX16.match(str(c.get("sha256"))) or c.get("source_sha256") not in sources.values() or not c.get("name"):
            p.append(f"cubin {c.get('name')!r}: sha256 {c.get('sha256')!r} / source {c.get('source_sha256')!r} "
                     f"not a hash of env.kernel_sources")
    for k in ("call_ms", "kernel_ms", "fwdbwd_call_ms"):
        if not isinstance(rec["methods"].get(k), str):
            p.append(f"methods has no {k!r}")
    if rec.get("full"):
        if rec.get("cut_short"):
            p.append(f"a full record cut short: {rec['cut_short']}")
        missing = [i for i in REQUIRED_IMPLS if i not in impls]
        if missing:
            p.append(f"a full record without {missing}")
        shapes = {(r.get("N"), r.get("d"), r.get("causal")) for r in rec["bench"]}
        want = {(N, d, c) for N in FULL_N for d in FULL_D for c in (False, True)}
        if shapes != want:
            p.append(f"a full record's rows miss {sorted(want - shapes)} / add {sorted(shapes - want)}")
    tmax = rec.get("teaching_max_n", 0)
    for r in rec["bench"]:
        where = f"N={r.get('N')} d={r.get('d')} causal={r.get('causal')}"
        if any(k not in r for k in ("B", "H", "N", "d", "causal", "dtype", "flops_bwd", "flops_fwdbwd")):
            p.append(f"{where}: shape or FLOP keys missing")
            continue
        B, H, N, d, c = r["B"], r["H"], r["N"], r["d"], r["causal"]
        if B * N != TOKENS or H * d != MODEL_DIM:
            p.append(f"{where}: B·N = {B * N}, H·d = {H * d} (want {TOKENS}, {MODEL_DIM})")
        fwd = 4.0 * B * H * N * N * d / (2 if c else 1)
        if not math.isclose(r["flops_bwd"], 2.5 * fwd, rel_tol=1e-12):
            p.append(f"{where}: flops_bwd {r['flops_bwd']} is not 2.5 x the forward's {fwd}")
        if not math.isclose(r["flops_fwdbwd"], 3.5 * fwd, rel_tol=1e-12):
            p.append(f"{where}: flops_fwdbwd {r['flops_fwdbwd']} is not 3.5 x the forward's {fwd}")
        for impl in impls:
            if r.get(f"{impl}_skipped"):
                if impl not in TEACHING or N <= tmax:
                    p.append(f"{where}: {impl} skipped ({r[f'{impl}_skipped']}) where it should run")
                continue
            for t, (tf, fl, err) in TIMES.items():
                if t == "fwdbwd_call_ms" and impl in rec.get("no_fwdbwd", []):
                    continue                          # an implementation the run times alone
                ms = r.get(f"{impl}_{t}")
                if not (_num(ms) and ms > 0):
                    why = r.get(f"{impl}_{err}") or r.get(f"{impl}_error") or "no value and no error"
                    p.append(f"{where}: {impl}_{t} missing: {why}")
                elif not math.isclose(r.get(f"{impl}_{tf}", -1), r[fl] / ms / 1e9, rel_tol=1e-9):
                    p.append(f"{where}: {impl}_{tf} = {r.get(f'{impl}_{tf}')} is not {fl} / {impl}_{t} "
                             f"= {r[fl] / ms / 1e9}")
    checked = {(e.get("N"), e.get("d"), e.get("causal"), e.get("impl")): e for e in rec["correctness"]}
    for r in rec["bench"]:
        for impl in impls:
            if r.get(f"{impl}_skipped"):
                continue
            e = checked.get((r.get("N"), r.get("d"), r.get("causal"), impl))
            where = f"correctness {impl} N={r.get('N')} d={r.get('d')} causal={r.get('causal')}"
            if e is None:
                p.append(f"{where}: no entry")
                continue
            if "error" in e:
                p.append(f"{where}: {e['error']}")
                continue
            vals = [e.get(f"{g}_{k}") for g in ("dQ", "dK", "dV") for k in ("max_abs_err", "ref_max_abs")]
            if not all(_num(v) and v >= 0 for v in vals) or not isinstance(e.get("nonfinite"), bool):
                p.append(f"{where}: errors or magnitudes missing")
                continue
            ok = not e["nonfinite"] and all(e[f"{g}_max_abs_err"] <= tol * e[f"{g}_ref_max_abs"] for g in ("dQ", "dK", "dV"))
            if e.get("pass") is not ok:
                p.append(f"{where}: pass is {e.get('pass')} but the errors say {ok}")
            if not ok:
                p.append(f"{where}: above tolerance ({tol} x the reference): "
                         + ", ".join(f"{g} {e[f'{g}_max_abs_err']:.3g} / {e[f'{g}_ref_max_abs']:.3g}" for g in ("dQ", "dK", "dV"))
                         + (", non-finite gradients" if e["nonfinite"] else ""))
    det = [e for e in rec["deterministic"] if e.get("deterministic")]
    if "bwd_teaching_det" in impls and rec.get("full") and not det:
        p.append("no check of the deterministic dQ")
    for e in det:
        flags = [e.get(f"{g}_bitwise_equal") for g in ("dQ", "dK", "dV")]
        if "error" in e or not all(f is True for f in flags) or e.get("bitwise_equal") is not True:
            p.append(f"deterministic {e.get('impl')} d={e.get('d')} causal={e.get('causal')}: not the same bits "
                     f"over {e.get('runs')} runs ({e.get('error') or flags})")
    if rec.get("full") and not rec["peak_bytes"]:
        p.append("no peak memory rows")
    for r in rec["peak_bytes"]:
        where = f"peak_bytes N={r.get('N')}"
        if r.get("tensor_bytes") != r.get("B", 0) * r.get("H", 0) * r.get("N", 0) * r.get("d", 0) * 2:
            p.append(f"{where}: tensor_bytes is not B·H·N·d·2")
        ours, math_ = r.get("bwd_mma_peak_bytes"), r.get("sdpa_math_bwd_peak_bytes")
        if "bwd_mma" in impls and not _num(ours):
            p.append(f"{where}: no bwd_mma_peak_bytes ({r.get('bwd_mma_peak_error', 'no error')})")
        elif _num(ours) and ours > 8 * r["tensor_bytes"]:
            p.append(f"{where}: bwd_mma's backward held {ours} bytes, more than 8 x one input "
                     f"({r['tensor_bytes']}): not O(N)")
        if _num(ours) and _num(math_) and not math_ > ours:
            p.append(f"{where}: SDPA-math's backward ({math_}) does not hold more than ours ({ours})")
    return p


def _newest_record():
    """(record, file name) of the newest bwd-<device>-<date>.json (partial-… never), or (None, None)."""
    from flashviz.records.files import package_dir
    try:
        folder = package_dir("flashviz.results")
    except FileNotFoundError:
        return None, None
    files = [f for f in folder.iterdir() if NAME.match(f.name)]
    if not files:
        return None, None
    newest = max(files, key=lambda f: (NAME.match(f.name).group(2), f.name))
    return json.loads(newest.read_text(encoding="utf-8")), newest.name


@pytest.mark.recorded_data
def test_recorded_data_bwd_record_is_whole_and_consistent():
    """The newest backward record: every implementation has all three times (or was declared
    skipped where the record says it skips), TFLOP/s = FLOPs / time, FLOPs by the convention,
    every gradient within tolerance of float64 and finite, the deterministic dQ the same bits
    every run, our backward's memory O(N), and the code it timed named by hashes."""
    rec, name = _newest_record()
    if rec is None:
        pytest.skip("no bwd-<device>-<date>.json recorded yet (benchmarks/bench_bwd.py on a GPU)")
    assert bwd_record_problems(rec, name) == []


# ------------------------------------------------------------------- the check, on a made-up record

def _made_up_record() -> dict:
    """A full, consistent record built with the benchmark's own row arithmetic and made-up times."""
    from flashviz.gpu.tensorcore import bench_bwd as bb
    rows, checks = [], []
    for N, d, c in bb.bench_shapes():
        r = bb.base_row(N, d, c)
        for i, impl in enumerate(bb.ALL_IMPLS):
            why = bb.skip_reason(impl, N, bb.TEACHING_MAX_N)
            if why:
                r[f"{impl}_skipped"] = why
                continue
            r.update({f"{impl}_call_ms": 1.0 + i, f"{impl}_kernel_ms": 0.9 + i, f"{impl}_fwdbwd_call_ms": 1.5 + i})
            e = {"N": N, "d": d, "B": r["B"], "H": r["H"], "causal": c, "impl": impl, "nonfinite": False,
                 "tol_rel": bb.TOL_REL, "ref_heads": 1}
            e.update({f"{g}_max_abs_err": 1e-4 for g in ("dQ", "dK", "dV")})
            e.update({f"{g}_ref_max_abs": 0.5 for g in ("dQ", "dK", "dV")})
            e["pass"] = bb.correctness_pass(e)
            checks.append(e)
        rows.append(bb.derive(r, bb.ALL_IMPLS))
    h = "0123456789abcdef"
    det = [{"impl": "bwd_teaching_det", "N": 1024, "d": 64, "B": 16, "H": 32, "causal": False, "runs": 5,
            "deterministic": True, "dQ_bitwise_equal": True, "dK_bitwise_equal": True, "dV_bitwise_equal": True,
            "bitwise_equal": True},
           {"impl": "bwd_mma", "N": 1024, "d": 64, "B": 16, "H": 32, "causal": False, "runs": 5,
            "deterministic": False, "dQ_bitwise_equal": False, "dK_bitwise_equal": True, "dV_bitwise_equal": True,
            "bitwise_equal": False}]
    peak = [{"N": N, "d": 64, "B": 16384 // N, "H": 32, "causal": False, "dtype": "float16",
             "tensor_bytes": 16384 * 2048 * 2, "bwd_mma_peak_bytes": 5 * 16384 * 2048 * 2 + (1 << 20),
             "sdpa_math_bwd_peak_bytes": 16384 * 32 * N * 4 * 3} for N in (1024, 4096)]
    return {"kind": "flashviz backward benchmark", "full": True, "impls": list(bb.ALL_IMPLS),
            "teaching_max_n": bb.TEACHING_MAX_N, "tol_rel": bb.TOL_REL, "methods": dict(bb.METHODS),
            "method": bb.METHOD, "cut_short": None,
            "env": {"device": "NVIDIA H200", "date": "2026-12-05", "commit": "abc1234", "torch": "2.11.0",
                    "cupy": "14.2.0", "kernel_sources": {"flash_bwd_mma.cu": h, "flash_bwd.cu": h[::-1]},
                    "cubins": [{"name": "_Z13flash_bwd_mma", "sha256": h, "source_sha256": h}]},
            "bench": rows, "correctness": checks, "deterministic": det, "peak_bytes": peak}


def test_the_bwd_data_check_passes_a_consistent_record():
    rec = _made_up_record()
    assert bwd_record_problems(rec, "bwd-h200-2026-12-05.json") == []
    # a cell that failed, with its error recorded, is a hole the check names with the error
    rec["bench"][0].pop("sdpa_cudnn_bwd_kernel_ms")
    rec["bench"][0]["sdpa_cudnn_bwd_kernel_error"] = "RuntimeError: no kernel"
    assert bwd_record_problems(rec) == [
        "N=1024 d=64 causal=False: sdpa_cudnn_bwd_kernel_ms missing: RuntimeError: no kernel"]


@pytest.mark.parametrize("fault, words", [
    (lambda r: r["bench"][3].__setitem__("bwd_mma_tflops", 1.0), "bwd_mma_tflops"),
    (lambda r: r["bench"][3].__setitem__("flops_bwd", r["bench"][3]["flops_fwd"] * 2), "not 2.5 x"),
    (lambda r: r["bench"][0].pop("bwd_teaching_fwdbwd_call_ms"), "bwd_teaching_fwdbwd_call_ms missing"),
    (lambda r: r["bench"][0].__setitem__("bwd_teaching_skipped", "why not"), "skipped"),
    (lambda r: r["correctness"][0].__setitem__("dK_max_abs_err", 0.1), "above tolerance"),
    (lambda r: r["correctness"][1].__setitem__("nonfinite", True), "non-finite"),
    (lambda r: r["correctness"].pop(2), "no entry"),
    (lambda r: r["deterministic"][0].__setitem__("dQ_bitwise_equal", False), "not the same bits"),
    (lambda r: r["peak_bytes"][0].__setitem__("bwd_mma_peak_bytes", 10 ** 12), "not O(N)"),
    (lambda r: r["env"]["cubins"][0].__setitem__("source_sha256", "f" * 16), "cubin"),
    (lambda r: r["env"].pop("commit"), "commit"),
    (lambda r: r.__setitem__("cut_short", "deadline"), "cut short"),
    (lambda r: r["bench"].pop(), "rows miss"),
])
def test_the_bwd_data_check_names_each_fault(fault, words):
    rec = copy.deepcopy(_made_up_record())
    fault(rec)
    problems = bwd_record_problems(rec)
    assert problems and any(words in x for x in problems), problems


def test_the_bwd_data_check_reads_the_date_from_the_file_name():
    rec = _made_up_record()
    assert bwd_record_problems(rec, "bwd-h200-2026-12-04.json") != []
    assert bwd_record_problems(rec, "partial-bwd-h200-2026-12-05.json") != []


# ------------------------------------------------------------------- the benchmark's CPU side

def test_bench_bwd_help_and_plan_run_without_a_gpu():
    code = ("import runpy, sys; sys.argv = ['bench_bwd.py', '--plan']; "
            f"rc = runpy.run_path({str(SCRIPT)!r}, run_name='not_main')['main'](); "
            "print(rc, [m for m in ('cupy', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip().splitlines()[-1] == "0 []"
    assert "/bwd-<device>-<date>.json" in out and out.count("flops_bwd=") == 20
    quick = subprocess.run([sys.executable, str(SCRIPT), "--plan", "--quick"], capture_output=True, text=True,
                           check=True, cwd=ROOT).stdout
    assert "partial-bwd-<device>-<date>.json" in quick and quick.count("flops_bwd=") == 8
    helptext = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True,
                              cwd=ROOT).stdout
    assert "--quick" in helptext and "--plan" in helptext
    bad = subprocess.run([sys.executable, str(SCRIPT), "--plan", "--impls", "bwd_nope"], capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--impls" in bad.stderr


def _pretend_cc(monkeypatch, cc: int) -> None:
    """CuPy's current device, as ``device_facts`` gives it, pretended to be of compute capability cc."""
    import types

    from flashviz.gpu import common
    monkeypatch.setattr(common, "device_facts", lambda dev=None: types.SimpleNamespace(cc=cc))


def test_the_implementations_bwd_mma_is_the_default_call_with_two_other_dq_paths_beside_it(monkeypatch):
    """Issue 23's four implementations stay (bwd_mma: ours, the default call); deterministic=True and
    dq="atomic" are timed beside it, the atomics without a forward + backward figure; which calls
    promise the same bits follows what backward_plan runs on the device: on sm_90 the wgmma kernel's
    bulk dQ (no promise), elsewhere the mma kernel's separate pass."""
    from flashviz.gpu.tensorcore import bench_bwd as bb
    assert bb.IMPLS == REQUIRED_IMPLS and bb.OURS == "bwd_mma"
    assert bb.EXTRA_IMPLS == ("bwd_teaching_det", "bwd_mma_det", "bwd_mma_atomic")
    assert bb.MMA_DQ == {"bwd_mma": {}, "bwd_mma_det": {"deterministic": True}, "bwd_mma_atomic": {"dq": "atomic"}}
    assert bb.NO_FWDBWD == ("bwd_mma_atomic",)
    others = {"bwd_teaching": False, "sdpa_flash_bwd": False, "sdpa_cudnn_bwd": False, "bwd_teaching_det": True,
              "bwd_mma_det": True, "bwd_mma_atomic": False}
    for cc, default in ((90, False), (80, True)):
        _pretend_cc(monkeypatch, cc)
        assert {i: bb.promises_same_bits(i) for i in bb.ALL_IMPLS} == {"bwd_mma": default, **others}
    assert bb.mma_call("bwd_mma", 64, 90) == ("wgmma", "bulk", 64) and bb.mma_call("bwd_mma", 128, 90)[2] == 128
    assert bb.mma_call("bwd_mma_det", 64, 90) == ("wgmma", "separate", 128)
    assert bb.mma_call("bwd_mma_atomic", 64, 80) == ("mma", "atomic", 128)


@pytest.mark.parametrize("cc", [90, 80])
def test_the_tensor_core_implementations_call_the_default_and_name_what_it_runs(monkeypatch, cc):
    """bench_bwd._build with pretend torch and kernels: bwd_mma calls flash_backward_mma with no
    choice (its default), bwd_mma_det with deterministic=True, bwd_mma_atomic with dq="atomic"; each
    row names the kernel, dQ and Bc that call runs on the device (``mma_call``: on sm_90 the wgmma
    kernel's bulk dQ at Bc 64 for d = 64); bwd_mma and bwd_mma_det have a forward + backward call
    (flash_attention with their deterministic); the dQ pass's registers are recorded where it runs."""
    import types

    from flashviz.gpu import autograd as fa
    from flashviz.gpu.tensorcore import backward as bk
    from flashviz.gpu.tensorcore import bench_bwd as bb
    torch, nn, F = (types.ModuleType(n) for n in ("torch", "torch.nn", "torch.nn.functional"))
    torch.nn, nn.functional = nn, F
    torch.autograd = types.SimpleNamespace(grad=lambda out, leaves, grad_outputs: out)
    for m in (torch, nn, F):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    _pretend_cc(monkeypatch, cc)
    calls, compiled = [], []
    monkeypatch.setattr(bk, "flash_backward_mma", lambda *a, **kw: calls.append(kw) or ("dq", "dk", "dv"))

    def built(Bc, separate):
        return types.SimpleNamespace(Bc=Bc, num_regs=200, local_bytes=0, smem_bytes=1,
                                     dq=types.SimpleNamespace(num_regs=166, local_size_bytes=0) if separate else None,
                                     dq_smem_bytes=33_280 if separate else 0)

    monkeypatch.setattr(bk, "compile_backward_mma",
                        lambda dtype, Bc, d, causal, separate: compiled.append(("mma", Bc, separate)) or built(Bc, separate))
    monkeypatch.setattr(bk, "compile_backward_wgmma",
                        lambda dtype, Bc, d, causal, dq: compiled.append(("wgmma", Bc, dq)) or built(Bc, dq == "separate"))
    monkeypatch.setattr(fa, "flash_attention", lambda *a, **kw: ("flash_attention", kw))

    class Pretend:                                              # a tensor, as far as _build looks
        shape = (1, 2, 64, 64)

        def detach(self):
            return self

        def requires_grad_(self):
            return self

    x = Pretend()
    got = {n: bb._build(n, x, x, x, x, True, {"fwd": ("O", "lse")}) for n in bb.MMA_DQ}
    for n in bb.MMA_DQ:
        assert got[n].bwd() == ("dq", "dk", "dv")
    assert calls == [{"causal": True}, {"causal": True, "deterministic": True}, {"causal": True, "dq": "atomic"}]
    want = {90: {"bwd_mma": ("wgmma", "bulk", 64), "bwd_mma_det": ("wgmma", "separate", 128),
                 "bwd_mma_atomic": ("wgmma", "atomic", 128)},
            80: {"bwd_mma": ("mma", "separate", 128), "bwd_mma_det": ("mma", "separate", 128),
                 "bwd_mma_atomic": ("mma", "atomic", 128)}}[cc]
    for n, (kernel, dq, Bc) in want.items():
        info = got[n].info
        assert (info["kernel"], info["dq"], info["Bc"]) == (kernel, dq, Bc)
        assert ("dq_regs" in info) == (dq == "separate")
    assert compiled == [(k, Bc, dq if k == "wgmma" else dq == "separate") for k, dq, Bc in want.values()]
    assert got["bwd_mma_atomic"].fwdbwd is None
    assert got["bwd_mma"].fwdbwd() == ("flash_attention", {"causal": True, "deterministic": False})
    assert got["bwd_mma_det"].fwdbwd() == ("flash_attention", {"causal": True, "deterministic": True})


def test_only_the_full_run_gets_the_record_name():
    from flashviz.gpu.tensorcore import bench_bwd as bb
    full = dict(Ns=bb.BWD_N, ds=bb.BWD_D, causals=(False, True), impls=bb.ALL_IMPLS,
                teaching_max_n=bb.TEACHING_MAX_N, parts=bb.PARTS, peak_Ns=bb.PEAK_N)
    assert bb.is_full(**full)
    for change in (dict(Ns=bb.QUICK_N), dict(ds=(64,)), dict(causals=(True,)), dict(impls=bb.IMPLS),
                   dict(teaching_max_n=1024), dict(parts=("call", "kernel")), dict(peak_Ns=(1024,))):
        assert not bb.is_full(**{**full, **change}), change
    env = {"device": "NVIDIA H200", "date": "2026-12-05"}
    assert bb.record_path("out", env, True).name == "bwd-h200-2026-12-05.json"
    assert bb.record_path("out", env, False).name == "partial-bwd-h200-2026-12-05.json"


def test_derived_figures_and_the_printed_line():
    from flashviz.gpu.tensorcore import bench_bwd as bb
    r = bb.base_row(4096, 128, True)
    assert (r["B"], r["H"]) == (4, 16)
    assert r["flops_bwd"] == 2.5 * 4 * 4 * 16 * 4096 ** 2 * 128 / 2 and r["flops_fwdbwd"] == 1.4 * r["flops_bwd"]
    r.update(bwd_mma_call_ms=4.0, bwd_mma_kernel_ms=3.5, bwd_mma_fwdbwd_call_ms=5.0, sdpa_flash_bwd_call_ms=2.0,
             sdpa_flash_bwd_kernel_ms=1.75, sdpa_cudnn_bwd_error="RuntimeError: no cuDNN",
             bwd_teaching_skipped=bb.skip_reason("bwd_teaching", 4096, 2048))
    bb.derive(r, bb.IMPLS)
    assert r["bwd_mma_tflops"] == pytest.approx(r["flops_bwd"] / 4.0e9)
    assert r["bwd_mma_fwdbwd_tflops"] == pytest.approx(r["flops_fwdbwd"] / 5.0e9)
    assert "sdpa_cudnn_bwd_tflops" not in r and "sdpa_flash_bwd_fwdbwd_tflops" not in r
    assert bb.speed(r, "sdpa_flash_bwd", "call_ms") == 0.5 and bb.speed(r, "sdpa_flash_bwd", "kernel_ms") == 0.5
    assert bb.speed(r, "sdpa_cudnn_bwd", "call_ms") is None
    line = bb.row_line(r, bb.IMPLS)
    assert "flash/ours call 0.50x kernel 0.50x" in line and "cudnn/ours call -x" in line
    assert "FAILED sdpa_cudnn_bwd_error: RuntimeError: no cuDNN" in line and "teach " not in line


def test_the_full_plan_fits_the_device_budget():
    """The planned time (rates of the recorded probes) leaves room in the ~6 minutes the run may take."""
    from flashviz.gpu.tensorcore import bench_bwd as bb
    est = bb.estimate_seconds(bb.bench_shapes(), bb.ALL_IMPLS)
    assert est["total"] < 0.75 * 360
    assert bb.DEADLINE_S < 600                          # the device's limit for one command


# ------------------------------------------------------------------- the run's bookkeeping, with pretend calls

class _T:
    """A pretend gradient: clone() and equality by value (torch.equal of the pretend torch)."""

    def __init__(self, v):
        self.v = v

    def clone(self):
        return _T(self.v)


@pytest.fixture
def pretend_gpu(monkeypatch):
    """run_bwd_benchmark on a pretend GPU: torch, the environment, the inputs, the reference and
    every implementation's calls replaced; ``fail`` holds (stage, impl, N) to raise at."""
    import types

    from flashviz.gpu import common
    from flashviz.gpu.tensorcore import bench as mb
    from flashviz.gpu.tensorcore import bench_bwd as bb
    cuda = types.SimpleNamespace(is_available=lambda: True, synchronize=lambda: None, empty_cache=lambda: None,
                                 mem_get_info=lambda: (100e9, 141e9), memory_allocated=lambda: 0)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, equal=lambda a, b: a.v == b.v))
    monkeypatch.setattr(common, "gpu_status", lambda: (True, "pretend"))
    monkeypatch.setattr(common, "environment", lambda: {"device": "NVIDIA H200", "date": "2026-12-05",
                                                        "commit": "abc1234", "torch": "2.11", "cupy": "14.2"})
    monkeypatch.setattr(mb, "check_streams", lambda: None)
    _pretend_cc(monkeypatch, 90)                        # an H200: the default call runs the wgmma kernel
    peaks = iter([5, 50, 6, 6] * 8)                     # x one input: ours, math, flash, cuDNN at each N
    monkeypatch.setattr(mb, "torch_peak_bytes", lambda fn: next(peaks) * 16384 * 2048 * 2)
    h = "0123456789abcdef"
    monkeypatch.setattr(bb, "code_hashes", lambda: {"kernel_sources": {"flash_bwd_mma.cu": h},
                                                    "cubins": [{"name": "k", "sha256": h, "source_sha256": h}]})
    fail: set = set()
    state = {"N": 0}

    def inputs(N, d):
        state["N"] = N
        return ("q", "k", "v", "dO")

    def build(name, q, k, v, dO, causal, cache):
        if ("build", name, state["N"]) in fail:
            raise RuntimeError(f"no {name} here")
        runs = iter(range(100))
        # the atomic and bulk dQ's bits move (bwd_mma's on sm_90); the others' stay
        det = name != "bwd_mma_atomic" and (name != "bwd_mma" or bb.promises_same_bits("bwd_mma"))
        return bb._Impl(lambda: tuple(_T(0 if det else next(runs)) for _ in range(3)),
                        None if name in bb.NO_FWDBWD else (lambda: None))

    def measure(impl, fn, part, budget_s):
        if (part, "any", state["N"]) in fail:
            raise MemoryError("pretend")
        return {"call_ms": 2.0} if part == "call" else {"kernel_ms": 1.5, "kernel_name": "k", "per_call": 3}

    def compare(grads, ref, nh):
        out = {f"{g}_{k}": v for g in ("dQ", "dK", "dV") for k, v in (("max_abs_err", 1e-4), ("ref_max_abs", 1.0))}
        return {**out, "nonfinite": False}

    monkeypatch.setattr(bb, "_inputs", inputs)
    monkeypatch.setattr(bb, "_build", build)
    monkeypatch.setattr(bb, "_measure", measure)
    monkeypatch.setattr(bb, "_reference", lambda *a: (1, "ref"))
    monkeypatch.setattr(bb, "_compare", compare)
    return bb, fail


def test_a_failing_cell_is_recorded_and_the_run_goes_on(pretend_gpu, tmp_path):
    bb, fail = pretend_gpu
    fail |= {("build", "sdpa_cudnn_bwd", 2048), ("kernel", "any", 1024)}
    lines: list[str] = []
    path = bb.run_bwd_benchmark(tmp_path, Ns=(1024, 2048), ds=(64,), causals=(False,), teaching_max_n=1024,
                                peak_Ns=(1024,), log=lines.append)
    assert path.name == "partial-bwd-h200-2026-12-05.json" and path.with_suffix(".log").is_file()
    rec = json.loads(path.read_text())
    assert [r["N"] for r in rec["bench"]] == [1024, 2048] and rec["cut_short"] is None
    assert rec["bench"][1]["sdpa_cudnn_bwd_error"] == "RuntimeError: no sdpa_cudnn_bwd here"
    assert rec["bench"][1]["bwd_teaching_skipped"] and rec["bench"][1]["bwd_mma_kernel_ms"] == 1.5
    problems = bwd_record_problems(rec)
    assert sorted(problems) == sorted(
        [f"N=1024 d=64 causal=False: {i}_kernel_ms missing: MemoryError: pretend" for i in bb.ALL_IMPLS]
        + [f"N=2048 d=64 causal=False: sdpa_cudnn_bwd_{t} missing: RuntimeError: no sdpa_cudnn_bwd here"
           for t in ("call_ms", "kernel_ms", "fwdbwd_call_ms")]
        + ["correctness sdpa_cudnn_bwd N=2048 d=64 causal=False: RuntimeError: no sdpa_cudnn_bwd here"])
    det = {e["impl"]: e["bitwise_equal"] for e in rec["deterministic"]}
    assert det == {"bwd_teaching_det": True, "bwd_mma_det": True, "bwd_mma": False, "bwd_teaching": True,
                   "bwd_mma_atomic": False}
    # on sm_90 bwd_mma, the default call, adds dQ by bulk reductions: it promises nothing, nor do the atomics;
    # deterministic=True runs the separate pass and promises the same bits
    promised = {e["impl"]: (e["deterministic"], e.get("dq")) for e in rec["deterministic"]}
    assert promised == {"bwd_teaching_det": (True, None), "bwd_mma_det": (True, "separate"), "bwd_mma": (False, "bulk"),
                        "bwd_teaching": (False, None), "bwd_mma_atomic": (False, "atomic")}
    assert rec["no_fwdbwd"] == ["bwd_mma_atomic"] and rec["bench"][0]["bwd_mma_fwdbwd_call_ms"] == 2.0
    assert rec["bench"][0]["bwd_mma_det_fwdbwd_call_ms"] == 2.0
    assert "bwd_mma_atomic_fwdbwd_call_ms" not in rec["bench"][0] and rec["bench"][0]["bwd_mma_atomic_call_ms"] == 2.0
    assert any("bwd_mma is flash_backward_mma's default call: on this GPU, by head dimension, d=64: kernel 'wgmma', "
               "dq 'bulk', Bc 64" in n for n in rec["notes"])
    assert rec["peak_bytes"][0]["bwd_mma_peak_bytes"] == 5 * 16384 * 2048 * 2
    assert sum("FAILED" in line for line in lines) == 3 and lines[-1].startswith("done in")


@pytest.mark.parametrize("cc", [90, 80])
def test_a_path_that_promises_bits_and_changes_them_is_a_problem(pretend_gpu, tmp_path, monkeypatch, cc):
    """bwd_mma_det always, and bwd_mma where its default dQ is the separate pass (not sm_90),
    promise the same bits: a change of bits there is a problem of the record, where the atomic and
    bulk paths' is not."""
    bb, _ = pretend_gpu
    _pretend_cc(monkeypatch, cc)
    promising = ["bwd_mma_det"] if cc == 90 else ["bwd_mma_det", "bwd_mma"]     # in the record's order
    rec = json.loads(bb.run_bwd_benchmark(tmp_path, Ns=(1024,), ds=(64,), causals=(False,), teaching_max_n=1024,
                                          peak_Ns=(1024,), log=lambda line: None).read_text())
    assert not [x for x in bwd_record_problems(rec) if "same bits" in x]
    moved = copy.deepcopy(rec)
    for e in moved["deterministic"]:
        if e["impl"] in ("bwd_mma", "bwd_mma_det"):
            e.update(dQ_bitwise_equal=False, bitwise_equal=False)
    assert [x for x in bwd_record_problems(moved) if "same bits" in x] == [
        f"deterministic {i} d=64 causal=False: not the same bits over 5 runs ([False, True, True])" for i in promising]


def test_a_full_run_cut_short_is_written_as_partial(pretend_gpu, tmp_path):
    bb, _ = pretend_gpu
    path = bb.run_bwd_benchmark(tmp_path, deadline_s=-1, log=lambda line: None)
    assert path.name.startswith("partial-bwd-") and not (tmp_path / "bwd-h200-2026-12-05.json").exists()
    rec = json.loads(path.read_text())
    assert rec["full"] is False and rec["cut_short"].startswith("deadline") and rec["bench"] == []
    whole = bb.run_bwd_benchmark(tmp_path, log=lambda line: None)
    assert whole.name == "bwd-h200-2026-12-05.json"
    assert bwd_record_problems(json.loads(whole.read_text()), whole.name) == []


def test_the_record_names_the_sources_and_cubins_that_ran(monkeypatch, tmp_path):
    """code_hashes (run at every save) names each kernel file some loaded cubin came from, by the
    hash kernel_source_hashes gives, and each loaded cubin by its bytes' hash."""
    import hashlib

    from flashviz.gpu import nvrtc
    from flashviz.gpu.common import source, source_sha256
    from flashviz.gpu.tensorcore import bench_bwd as bb
    from flashviz.gpu.tensorcore.run import kernel_source_hashes
    assert kernel_source_hashes(("fa3",))["fa3"] == source_sha256("flash_fwd_fa3.cu") \
        == hashlib.sha256(source("flash_fwd_fa3.cu").encode()).hexdigest()[:16]
    cubin = tmp_path / "0123abcd.cubin"
    cubin.write_bytes(b"not really a cubin")
    monkeypatch.setattr(nvrtc, "_LOADED", {str(cubin): {
        "name": "_Z13flash_bwd_mma", "expression": "flash_bwd_mma<0,64,64,false>", "arch": "sm_90", "options": [],
        "source": source("flash_bwd_mma.cu")}})
    got = bb.code_hashes()
    assert got["kernel_sources"] == {"flash_bwd_mma.cu": source_sha256("flash_bwd_mma.cu")}
    assert got["cubins"] == [{"name": "_Z13flash_bwd_mma", "expression": "flash_bwd_mma<0,64,64,false>",
                              "arch": "sm_90", "options": [], "file": "0123abcd",
                              "sha256": hashlib.sha256(b"not really a cubin").hexdigest()[:16],
                              "source_sha256": source_sha256("flash_bwd_mma.cu")}]
    assert all(HEX16.match(h) for h in got["files_sha256"].values())
