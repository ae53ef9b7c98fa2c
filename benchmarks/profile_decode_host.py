"""Where the host time of a decode public call goes (issue 24: B = 1, H = 32, H_kv = 8, Nk = 4k, d = 128,
fp16, the latency-bound row; the call measured 45 µs against cuDNN's 24 on the H200, 2026-12-05).

    python benchmarks/profile_decode_host.py [--out DIR]

For each of: ours with the heuristic split (both variants), ours unsplit, SDPA-cuDNN, SDPA-flash,
and a bare torch.empty + one empty kernel launch as the floor, prints the host µs per call (calls
queued without synchronising, median of a round, lowest of 5 rounds: ``gpu.timing.host_times_us``)
and then cProfile's top functions by own time over 3,000 calls of each of ours (cProfile inflates
small functions; read it for shares, not for µs). Writes the text to DIR/decode-host-profile.txt
when --out is given."""
import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from flashviz import gpu  # noqa: E402
from flashviz.gpu.timing import host_times_us  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=None)
args = ap.parse_args()
lines = []


def say(s=""):
    print(s, flush=True)
    lines.append(s)


B, H, H_kv, Nq, Nk, d = 1, 32, 8, 1, 4096, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(B, H, Nq, d, device="cuda", generator=g).half()
k = torch.randn(B, H_kv, Nk, d, device="cuda", generator=g).half()
v = torch.randn(B, H_kv, Nk, d, device="cuda", generator=g).half()
kx, vx = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
say(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  B={B} H={H} H_kv={H_kv} Nq={Nq} Nk={Nk} d={d} fp16")

ours = {
    "mma_split": lambda: gpu.flash_decode_gpu(q, k, v, variant="mma"),
    "simt_split": lambda: gpu.flash_decode_gpu(q, k, v, variant="simt"),
    "mma_nosplit": lambda: gpu.flash_decode_gpu(q, k, v, variant="mma", num_splits=1),
    "default": lambda: gpu.flash_decode_gpu(q, k, v),
}


def sdpa(backend):
    def call():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, kx, vx)
    return call


floor_buf = torch.empty(1, device="cuda")
named = dict(ours, sdpa_cudnn=sdpa(SDPBackend.CUDNN_ATTENTION), sdpa_flash=sdpa(SDPBackend.FLASH_ATTENTION),
             torch_empty_x3=lambda: (torch.empty(4096, device="cuda"), torch.empty(32, device="cuda"),
                                     torch.empty(33 * 4096, device="cuda")),
             torch_zero_=lambda: floor_buf.zero_())
for f in named.values():
    f()
torch.cuda.synchronize()
us = host_times_us(named, repeat=200, rounds=5)
say("host µs per call (queued, median of a round, lowest of 5 rounds of 200):")
for key, val in us.items():
    say(f"  {key:>14}: {val:7.2f}")

for key in ("mma_split", "mma_nosplit"):
    f = ours[key]
    prof = cProfile.Profile()
    prof.enable()
    for i in range(3000):
        f()
        if i % 500 == 499:
            torch.cuda.synchronize()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    say(f"\ncProfile, {key}, 3000 calls, by own time:")
    say(s.getvalue())

if args.out:
    Path(args.out, "decode-host-profile.txt").write_text("\n".join(lines) + "\n")
