// fv_mma_sync.cuh: the warp-level tensor-core pieces of the Ampere-style kernels (mma.sync, sm_80
// and later): ldmatrix loads of 8x8 b16 matrices from shared memory, the m16n8k16 product, and the
// XOR swizzle of a row-major b16 tile. Used by flash_fwd_mma_sm80.cu (FA2 forward) and
// flash_bwd_mma.cu (the tensor-core backward); the Hopper kernels use fv_wgmma.cuh instead.
// PTX ISA 8.x: ldmatrix 9.7.14.5.15, mma.sync m16n8k16 9.7.14.5.
#pragma once

#include "fv_ptx.cuh"

namespace fvmma {

// Four 8x8 b16 matrices. Lanes 8q..8q+7 give the 8 row addresses of matrix q; every lane gets
// register q = (row g, columns 2t, 2t+1) of matrix q (with .trans: (rows 2t, 2t+1, column g)).
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(u32 (&r)[4], u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// c (16x8 fp32) += a (16x16) * b (16x8); DT 0 = fp16, 1 = bf16.
template <int DT>
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    if constexpr (DT == 0) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Byte offset of 16-byte chunk c of row r in a swizzled row-major tile of COLS b16 columns
// (COLS >= 64: a row is at least 128 bytes, so the XOR spreads 8 rows over the 8 bank groups).
template <int COLS>
__device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * (COLS * 2) + ((c ^ (r & 7)) << 4)); }

}  // namespace fvmma
