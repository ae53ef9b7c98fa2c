// fv_bwd.cuh: what the backward kernels share (FlashAttention-2, Algorithm 2): L_i as they keep
// it and the load of a query block's row vectors L_i, D_i (kernels/flash_bwd_mma.cu, mma.sync, and
// kernels/flash_bwd_wgmma.cu, Hopper wgmma; the latter by cp.async), and a thread block's key block
// with the query blocks that see it (flash_bwd_wgmma.cu). Header-free, like fv_ptx.cuh.
#pragma once

#include "fv_ptx.cuh"

namespace fvbwd {

using namespace fvptx;

constexpr float LOG2E = 1.4426950408889634f;

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// L_i as the kernels keep it: the forward's natural-log lse in base 2, and +inf for a row that sees
// no key (lse = −inf) or lies past Nq (given −inf), so that exp2(s − L_i) = 0 there.
__device__ __forceinline__ float lse_base2(float lse) { return lse == neg_inf() ? pos_inf() : lse * LOG2E; }

// L_i (lse_base2) and D_i of the ROWS query rows r0 .. r0 + ROWS − 1 of one head into shared
// memory by plain loads and stores, NT threads; rows past Nq get L = +inf, D = 0. Visible to the
// other threads after the caller's next barrier.
template <int ROWS, int NT>
__device__ __forceinline__ void load_LD(float* L_i, float* D_i, const float* __restrict__ Lh,
                                        const float* __restrict__ Dh, int r0, int Nq, int tid)
{
    for (int rr = tid; rr < ROWS; rr += NT) {
        L_i[rr] = lse_base2(r0 + rr < Nq ? Lh[r0 + rr] : neg_inf());
        D_i[rr] = r0 + rr < Nq ? Dh[r0 + rr] : 0.f;
    }
}

// The forward's lse (natural log) and D of the ROWS rows r0 .. r0 + ROWS − 1 of one head into shared
// memory by 4-byte cp.async copies (NT threads, in the caller's open commit group), raw: the reader
// applies lse_base2. Rows past Nq arrive as zeros (their Q_i, dO_i rows are zeros too, so they add
// nothing to dK, dV and their dQ is not written).
template <int ROWS, int NT>
__device__ __forceinline__ void load_LD_async(u32 sL, u32 sD, const float* __restrict__ Lh,
                                              const float* __restrict__ Dh, int r0, int Nq, int tid)
{
    for (int e = tid; e < 2 * ROWS; e += NT) {
        const int rr = e % ROWS;
        const bool ok = r0 + rr < Nq;
        const float* src = (e < ROWS ? Lh : Dh) + (ok ? r0 + rr : 0);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"((e < ROWS ? sL : sD) + 4 * rr), "l"(src),
                     "r"(ok ? 4 : 0) : "memory");
    }
}

// The key block j of one head that a thread block of the main kernels owns (grid (Tc, B·H)): the
// head bh, its first key c0, the causal offset Nk − Nq, the head's rows of Q, dO, lse, D and dQacc
// (contiguous (B·H, N, D) / (B·H, N)), and the query blocks i_first .. i_last (of Br rows) that see
// it: all, or (causal, bottom-right) from the block holding row c0 − offset on; i_last = −1 when no
// query sees it. Unpacked by a structured binding in the kernels.
struct KeyBlock {
    int bh, c0, offset, i_first, i_last;
    const u16* Qh;
    const u16* dOh;
    const float* Lh;
    const float* Dh;
    float* dQh;
};

template <int Br, int Bc, int D, bool CAUSAL>
__device__ __forceinline__ KeyBlock key_block(const u16* Q, const u16* dO, const float* lse, const float* Dvec,
                                              float* dQacc, int Nq, int Nk)
{
    const int bh = blockIdx.y, c0 = blockIdx.x * Bc, offset = Nk - Nq;
    const int Tr = (Nq + Br - 1) / Br;
    const int i_first = (CAUSAL && c0 - offset > 0) ? (c0 - offset) / Br : 0;
    const int i_last = (CAUSAL && c0 - offset >= Nq) ? -1 : Tr - 1;
    return KeyBlock{bh, c0, offset, i_first, i_last, Q + (size_t)bh * Nq * D, dO + (size_t)bh * Nq * D,
                    lse + (size_t)bh * Nq, Dvec + (size_t)bh * Nq, dQacc + (size_t)bh * Nq * D};
}

}  // namespace fvbwd
