// fv_ptx.cuh: the inline-PTX wrappers every flashviz kernel shares.
//
// Included by each kernels/*.cu with `#include "fv_ptx.cuh"`. nvcc finds it beside the .cu file;
// flashviz.gpu.common.source() pastes it in before NVRTC compiles, so the text of this header is
// part of every kernel's compile-cache key and of the source hash a benchmark record keeps.
//
// Header-free on purpose (it includes nothing): NVRTC from the pip CUDA wheels has no
// <cuda_fp16.h> / <mma.h>, so fp16 and bf16 values travel as 16-bit integers (u16) and every
// conversion is one PTX instruction. References: PTX ISA 8.x — cp.async (9.7.9.25),
// cvt (9.7.9.21), ex2.approx (9.7.3.22), cvta (9.7.9.18).
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

namespace fvptx {

// -inf as a float, without <math.h>'s INFINITY.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 32-bit shared-memory address (the form cp.async, ldmatrix and wgmma descriptors take) of a
// generic pointer into shared memory.
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16-byte asynchronous copy global -> shared (sm_80+); src_bytes = 0 writes 16 zero bytes
// instead (rows past the end of a matrix). Copies are grouped by cp_async_commit and awaited
// with cp_async_wait<n>: "at most n of my newest groups still in flight".
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// 2^x, the hardware's approximate exp2 (one MUFU.EX2); exp(x) = ex2(x · log2 e).
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats -> one 32-bit register of two fp16 (DT 0) or bf16 (DT 1), round to nearest even;
// lo in the low half (the lower column index).
template <int DT>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    if constexpr (DT == 0) asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else                   asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

}  // namespace fvptx
