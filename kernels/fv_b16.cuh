// fv_b16.cuh: fp16 / bf16 values held as 16-bit integers (u16), to and from fp32.
//
// NVRTC from the pip CUDA wheels has no <cuda_fp16.h>, so the kernels keep fp16 (DT 0) and bf16
// (DT 1) values as raw bits and convert with one PTX instruction (PTX ISA 8.x, cvt 9.7.9.21).
#pragma once

#include "fv_ptx.cuh"

namespace fvb16 {

// one b16 value (fp16 / bf16 bits, in the low half of h) -> fp32
template <int DT>
__device__ __forceinline__ float to_f32(u32 h)
{
    if constexpr (DT == 0) {
        float f;
        asm("{ .reg .b16 x; cvt.u16.u32 x, %1; cvt.f32.f16 %0, x; }" : "=f"(f) : "r"(h));
        return f;
    } else {
        return __uint_as_float((h & 0xffffu) << 16);
    }
}

// fp32 -> one b16 value, round to nearest even
template <int DT>
__device__ __forceinline__ u16 from_f32(float x)
{
    return (u16)(fvptx::pack2<DT>(x, 0.f) & 0xffffu);
}

}  // namespace fvb16
