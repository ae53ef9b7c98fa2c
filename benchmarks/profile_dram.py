"""DRAM bytes measured with Nsight Compute, beside the IO model: the paper's block-size
experiment (FlashAttention, Fig. 2) on real hardware.

For N = 4096, d = 64 (B·N = 16k tokens, H = 32 heads) it profiles one forward call of
  * the tensor-core kernel (fp16) for every supported (Br, Bc),
  * the teaching kernel (fp32) for its (Br, Bc) grid,
  * naive CuPy attention (fp32, S materialised: cuBLAS + elementwise passes),
each in its own process under

    ncu --clock-control none --profile-from-start off --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv

(the child starts the profiler only around the call, after the inputs exist), sums the
bytes over every kernel the call launched, and writes one JSON beside the IO model's
HBM bytes for the same blocks (flashviz.iomodel). Usage on a GPU machine with ncu:

    python benchmarks/profile_dram.py [--out DIR] [--N 4096] [--d 64]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRICS = "dram__bytes_read.sum,dram__bytes_write.sum"


def child(impl: str, N: int, d: int, Br: int, Bc: int, causal: bool) -> None:
    """Run one forward call of impl between cudaProfilerStart / Stop."""
    import cupy as cp
    B, H = max(1, 16384 // N), 2048 // d
    rs = cp.random.RandomState(0)
    Q, K, V = (rs.standard_normal((B, H, N, d), dtype=cp.float32) for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    if impl == "mma":
        from flashviz.gpu.tensorcore.kernel import compile_mma, launch_mma, out_like
        from flashviz.gpu.tensorcore.operands import as_operand
        q, k, v = (as_operand(x, n, "float16") for x, n in ((Q, "Q"), (K, "K"), (V, "V")))
        mk = compile_mma("float16", Br, Bc, d, causal)
        o, O, lse, lp = out_like(q)
        fn = lambda: launch_mma(mk, q, k, v, o, lp, scale)  # noqa: E731
    elif impl == "teaching":
        from flashviz.gpu.teaching.kernel import compile_kernel, launch
        ck = compile_kernel(Br, Bc, d)
        Qd, Kd, Vd = (x.reshape(B * H, N, d) for x in (Q, K, V))
        O = cp.empty_like(Qd)
        L = cp.empty(Qd.shape[:2], dtype=cp.float32)
        fn = lambda: launch(ck, Qd, Kd, Vd, O, L, causal=causal, scale=scale)  # noqa: E731
    else:
        from flashviz.gpu.teaching.kernel import naive_attention_gpu
        fn = lambda: naive_attention_gpu(Q, K, V, causal=causal, scale=scale)  # noqa: E731
    fn()  # warm: compile, cuBLAS handles, CuPy kernels
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    fn()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()


def _ncu_bytes(ncu: str, args: list[str]) -> dict:
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", METRICS, "--csv",
           sys.executable, __file__, "--child", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    text = p.stdout
    start = text.find('"ID"')
    if p.returncode != 0 or start < 0:
        return {"error": f"ncu rc={p.returncode}: {(p.stderr or p.stdout)[-400:]}"}
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    read = write = 0.0
    kernels = set()
    for r in rows:
        unit = r.get("Metric Unit", "byte")
        mult = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(unit, 1)
        val = float(r["Metric Value"].replace(",", "")) * mult
        kernels.add((r.get("ID"), r.get("Kernel Name", "")[:60]))
        if r["Metric Name"] == "dram__bytes_read.sum":
            read += val
        elif r["Metric Name"] == "dram__bytes_write.sum":
            write += val
    return {"dram_read_bytes": read, "dram_write_bytes": write, "dram_bytes": read + write,
            "kernels": len(kernels), "kernel_names": sorted({k[1] for k in kernels})[:12]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=6, metavar=("IMPL", "N", "D", "BR", "BC", "CAUSAL"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    args = ap.parse_args(argv)
    if args.child:
        impl, N, d, Br, Bc, causal = args.child
        child(impl, int(N), int(d), int(Br), int(Bc), causal == "1")
        return 0
    from flashviz.gpu.common import environment
    from flashviz.gpu.teaching.limits import supported_blocks
    from flashviz.iomodel import flash_forward_io, standard_attention_io
    from flashviz.mma_limits import mma_blocks
    ncu = shutil.which("ncu") or next((str(p) for p in Path("/opt/nvidia").glob("nsight-compute/*/ncu")), None)
    if not ncu:
        print("ncu not found")
        return 1
    N, d = args.N, args.d
    B, H = max(1, 16384 // N), 2048 // d
    env = environment()
    env["ncu"] = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    rows = []
    plan = [("mma", Br, Bc, 2) for Br, Bc in mma_blocks(d)]
    plan += [("teaching", Br, Bc, 4) for Br, Bc in supported_blocks(d) if Br >= 32 and Bc >= 32]
    plan += [("naive", 0, 0, 4)]
    for impl, Br, Bc, itemsize in plan:
        r = {"impl": impl, "N": N, "d": d, "B": B, "H": H, "Br": Br, "Bc": Bc, "itemsize": itemsize}
        if impl == "naive":
            io_ = standard_attention_io(N, N, d, itemsize=itemsize).scaled(B * H)
        else:
            io_ = flash_forward_io(N, N, d, Br=Br, Bc=Bc, itemsize=itemsize).scaled(B * H)
        r["model_hbm_bytes"] = io_.hbm_bytes
        r.update(_ncu_bytes(ncu, [impl, str(N), str(d), str(Br), str(Bc), "0"]))
        rows.append(r)
        print(f"{impl:9s} Br={Br:4d} Bc={Bc:4d}  model {r['model_hbm_bytes'] / 1e9:8.3f} GB  "
              f"ncu {r.get('dram_bytes', float('nan')) / 1e9:8.3f} GB  {r.get('error', '')}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    from flashviz.gpu.tensorcore.run import device_slug
    path = Path(args.out) / f"dram-{device_slug(env)}-{env['date']}.json"
    path.write_text(json.dumps({"kind": "flashviz DRAM bytes (ncu) vs IO model", "env": env,
                                "metrics": METRICS, "rows": rows}, indent=1))
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
