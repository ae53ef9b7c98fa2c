"""The public call of the tensor-core kernels: stream ordering, CUDA-graph capture, one read
of the sources per process, mixed inputs, and the shared argument checks of both kernels.

GPU tests (marked ``gpu``) check values against float64 references (torch SDPA in float64);
the CPU tests check the argument rules that need no device.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from flashviz.gpu.common import LOG2E, check_scale

# ---------------------------------------------------------------- CPU: the shared checks

def test_one_scale_rule_for_both_kernels():
    """The teaching kernel receives scale, the tensor-core kernels scale·log2(e); both must be
    normal float32 values, so the limits differ by exactly log2(e)."""
    f32 = np.finfo(np.float32)
    assert check_scale(None, 64) == pytest.approx(1 / 8)
    assert check_scale(0.3, 64) == 0.3
    top = float(f32.max)
    assert check_scale(top * 0.99, 64) == pytest.approx(top * 0.99)                 # teaching: fits
    with pytest.raises(ValueError, match="normal float32"):
        check_scale(top * 0.99, 64, factor=LOG2E)                                 # ·log2(e) overflows
    for bad in (0.0, -1.0, math.nan, math.inf, 1e39, 1e-40):
        with pytest.raises(ValueError, match="scale must be > 0"):
            check_scale(bad, 64)
    for bad in ("0.1", True, [0.1]):
        with pytest.raises(TypeError, match="scale must be a real number"):
            check_scale(bad, 64)


@pytest.mark.parametrize("bad", [[[0.0] * 64] * 4, (1.0, 2.0), "Q", None, 3.0])
def test_lists_and_other_objects_are_one_line_type_errors(bad):
    from flashviz.gpu.tensorcore.operands import as_operand
    with pytest.raises(TypeError, match="must be a torch tensor, CuPy or NumPy float array") as info:
        as_operand(bad, "Q", None)
    assert "\n" not in str(info.value)


def test_the_source_is_read_once(monkeypatch):
    from flashviz.gpu import common
    monkeypatch.setattr(common, "_SOURCES", {})
    calls = []
    real = common.kernel_source
    monkeypatch.setattr(common, "kernel_source", lambda name: calls.append(name) or real(name))
    a = common.source("flash_fwd_mma.cu")
    b = common.source("flash_fwd_mma.cu")
    assert a is b and calls == ["flash_fwd_mma.cu", "fv_ptx.cuh", "fv_wgmma.cuh", "fv_trace.cuh"] and "flash_fwd_mma" in a


# ---------------------------------------------------------------- GPU

def _torch():
    return pytest.importorskip("torch")


def _ref(q, k, v, causal=False, scale=None):
    torch = _torch()
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            is_causal=causal, scale=scale)


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.gpu
def test_launch_is_ordered_after_a_slow_producer_on_torchs_stream():
    """A producer on a side stream sleeps, then writes Q. Our call on that stream must see the
    written Q. The same launch on another stream (the control) reads the unwritten buffer —
    so this test can fail, and would if the runner launched on the wrong stream."""
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    from flashviz.gpu.tensorcore.operands import as_operand
    g = torch.Generator(device="cuda").manual_seed(5)
    src, k, v = (torch.randn(2, 4, 512, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    want = _ref(src, k, v)
    mma.flash_forward_mma(src, k, v)               # compile and warm outside the race
    side = torch.cuda.Stream()
    cycles = int(2e8)                              # ~0.1 s at 1.98 GHz
    # control: launch on the legacy default stream while the producer is still asleep
    q = torch.zeros_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        q.copy_(src)
    qo, ko, vo = (as_operand(x, n, None) for x, n in ((q, "Q"), (k, "K"), (v, "V")))
    mk = mma.compile_mma("float16", None, None, 64, False)
    o, O_wrong, lse, lp = mma.out_like(qo)
    import cupy as cp
    mma.launch_mma(mk, qo, ko, vo, o, lp, 0.125, cp.cuda.Stream.null)
    torch.cuda.synchronize()
    assert _rel(O_wrong, want) > 0.1, "the control should read the unwritten (zero) Q"
    # the runner: the same race, but launched through the public call on torch's current stream
    q = torch.zeros_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        q.copy_(src)
        O, _ = mma.flash_forward_mma(q, k, v)
    torch.cuda.synchronize()
    assert _rel(O, want) <= 2e-3


@pytest.mark.gpu
def test_arrays_mixed_with_tensors_follow_torchs_stream():
    """NumPy Q with torch K and V produced late on a side stream: Q is copied and the kernel
    launched on torch's current stream there, after K and V are written; Q follows K's dtype."""
    torch = _torch()
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    g = torch.Generator(device="cuda").manual_seed(6)
    q, k_src, v_src = (torch.randn(1, 2, 300, 64, device="cuda", dtype=torch.bfloat16, generator=g)
                       for _ in range(3))
    flash_forward_mma(q, k_src, v_src)
    side = torch.cuda.Stream()
    k, v = torch.zeros_like(k_src), torch.zeros_like(v_src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(2e8))
        k.copy_(k_src)
        v.copy_(v_src)
        O, L = flash_forward_mma(q.float().cpu().numpy(), k, v)
    torch.cuda.synchronize()
    O = torch.as_tensor(O, device="cuda")           # a CuPy array (Q's kind), bf16 widened to float32
    assert _rel(O, _ref(q, k_src, v_src)) <= 1e-2


@pytest.mark.gpu
def test_the_public_call_works_inside_cuda_graph_capture():
    torch = _torch()
    from flashviz.gpu.tensorcore.kernel import flash_forward_mma
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(2, 3, 700, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    flash_forward_mma(q, k, v, causal=True)        # warm: compile and load outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        O, L = flash_forward_mma(q, k, v, causal=True)
    q.copy_(torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=g))   # new values, same buffer
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(O, _ref(q, k, v, causal=True)) <= 2e-3
    s = (q[1, 2].double() @ k[1, 2].double().T) / math.sqrt(128)
    s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    assert (L[1, 2].double() - torch.logsumexp(s, -1)).abs().max().item() <= 1e-2


@pytest.mark.gpu
def test_a_repeated_call_reads_no_file_and_compiles_nothing(monkeypatch):
    torch = _torch()
    from flashviz.gpu import common, nvrtc
    from flashviz.gpu.tensorcore import kernel as mma
    q = torch.randn(1, 1, 64, 64, device="cuda", dtype=torch.float16)
    mma.flash_forward_mma(q, q, q)

    def boom(*a, **k):
        raise AssertionError("the per-call path touched the disk or the compiler")
    monkeypatch.setattr(common, "kernel_source", boom)
    monkeypatch.setattr(nvrtc, "compile_cubin", boom)
    O, _ = mma.flash_forward_mma(q, q, q)
    assert _rel(O, _ref(q, q, q)) <= 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_the_fast_path_gives_fresh_contiguous_outputs_equal_to_the_general_path(dt):
    torch = _torch()
    from flashviz.gpu.tensorcore import kernel as mma
    g = torch.Generator(device="cuda").manual_seed(3)
    tdt = getattr(torch, dt)
    # K and V as views of one BSHD buffer: strided operands on the fast path
    q = torch.randn(2, 4, 300, 64, device="cuda", dtype=tdt, generator=g)
    kv = torch.randn(2, 300, 2, 4, 64, device="cuda", dtype=tdt, generator=g)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    mma.flash_forward_mma(q, k, v, causal=True)                        # compile: later calls are fast
    fast = mma._torch_fast(q, k, v, True, None, None, None, None, None)
    assert fast is not None, "a warm call with plain tensors should take the fast path"
    O1, L1 = fast
    O2, L2 = mma._torch_fast(q, k, v, True, None, None, None, None, None)
    qo, ko, vo = (mma.torch_operand(x, n, None) for x, n in ((q, "Q"), (k, "K"), (v, "V")))
    Og, Lg = mma._run(q, qo, ko, vo, True, None, None, None, None, 0, mma.torch_stream(0), True)
    torch.cuda.synchronize()
    for O, L in ((O1, L1), (O2, L2)):
        assert O.shape == (2, 4, 300, 64) and O.dtype == tdt and O.is_contiguous()
        assert L.shape == (2, 4, 300) and L.dtype == torch.float32 and L.is_contiguous()
        assert torch.equal(O, Og) and torch.equal(L, Lg)                  # bit-identical to the general path
    assert O1.data_ptr() != O2.data_ptr() and L1.data_ptr() != L2.data_ptr()    # fresh outputs each call
    assert _rel(O1, _ref(q, k, v, causal=True)) <= (2e-3 if dt == "float16" else 1e-2)


@pytest.mark.gpu
def test_teaching_kernel_uses_the_disk_cache_and_the_scale_rule(monkeypatch, tmp_path):
    import cupy as cp

    from flashviz.gpu.teaching import kernel as runner
    monkeypatch.setenv("FLASHVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(runner, "_CACHE", {})
    ck = runner.compile_kernel(32, 32, 32)
    assert list((tmp_path / "cubin").glob("*.cubin")), "the teaching kernel's cubin was not cached on disk"
    monkeypatch.setattr(runner, "_CACHE", {})
    again = runner.compile_kernel(32, 32, 32)
    assert again.compile_ms < ck.compile_ms
    Q = cp.random.standard_normal((40, 32), dtype=cp.float32)
    with pytest.raises(ValueError, match="normal float32"):
        runner.flash_forward_gpu(Q, Q, Q, Br=32, Bc=32, scale=1e39)
