// fv_attn.cuh: the tile vocabulary of attention on Hopper (sm_90a), fp16 / bf16 in, fp32 math.
//
// The steps of FlashAttention-2's Algorithm 1 (Dao 2023) as the Hopper kernels run them on one
// consumer warpgroup's 64 query rows, written once and used by every Hopper attention kernel
// (kernels/flash_fwd_mma.cu: FlashAttention-2 on wgmma; kernels/flash_fwd_fa3.cu:
// FlashAttention-3). Each step's code opens with the tag of the step of flashviz/steps.py it
// implements ("// [compute_S] Alg. 1 line 8: ..."), so chapter 7 cuts it beside the NumPy code:
//
//   key_tiles                   which key tiles a query block visits
//   issue_S                     compute_S       S_ij = Q_i K_jᵀ on the tensor cores      line 8
//   mask_S                      mask_S          keys past Nk; causal, bottom-right       line 8
//   RowStats                    update_ml       m_i, P_ij = exp(S_ij − m_i), l_i, alpha  line 9
//                               accumulate_O    O_i = diag(alpha) O_i                    line 10
//                               write_O         O = O_i / l_i, lse_i to HBM              lines 12-15
//   convert_P                   convert_P       P_ij to fp16/bf16, the A operand         line 10
//   issue_PV                    accumulate_O    O_i += P_ij V_j on the tensor cores      line 10
//
// The warp-specialised pipeline around these steps (TMA rings, turns): kernels/fv_pipeline.cuh.
// The thread's place in the accumulators (wgmma's m64nN fp32 layout): warp w4 of the warpgroup
// holds rows 16·w4 .. 16·w4 + 15; lane = 4·g + t holds rows g and g + 8 of those and, for each
// group n8 of 8 columns, columns 8·n8 + 2t and 8·n8 + 2t + 1: s[4·n8 + 0..1] of row g and
// s[4·n8 + 2..3] of row g + 8. Four lanes (t = 0..3) share a row: a row's max and sum are
// reduced over them with two shuffles.
//
// Shared-memory tiles: d/64 column blocks of [rows][64] elements, 128-byte swizzle, each block on
// a 1024-byte boundary (fv_wgmma.cuh). Header-free, like fv_ptx.cuh. FV_ATTN_INST (at the end): the
// PTX check's instantiations.
#pragma once

#include "fv_ptx.cuh"
#include "fv_wgmma.cuh"

namespace fvattn {

using namespace fvptx;
using namespace fvmma;

// Key tiles query block i (rows [i·Br, i·Br + Br)) visits: all Tc = ceil(Nk / Bc) of them, or
// (causal, bottom-right: row r sees key c iff c <= r + Nk − Nq) up to the block's last visible
// key. 0 when no row of the block sees a key.
template <int Br, int Bc, bool CAUSAL>
__device__ __forceinline__ int key_tiles(int i, int Nq, int Nk) {
    int n_end = Nk;
    if (CAUSAL) n_end = min(Nk, i * Br + Br + Nk - Nq);
    return n_end > 0 ? (n_end + Bc - 1) / Bc : 0;
}

// Masking one key tile (columns c0 .. c0 + Bc − 1) of this thread's two rows; last0 (row g) and
// last1 (row g + 8) are the last keys the rows see (causal: row + Nk − Nq).
template <int Bc, bool CAUSAL>
__device__ __forceinline__ void mask_S(float* s, int c0, int Nk, int last0, int last1, int t) {
    // [mask_S] Alg. 1 line 8: scores of keys past Nk, and (causal) of keys past a row's last visible
    // key, become −inf.
#pragma unroll
    for (int n8 = 0; n8 < Bc / 8; ++n8) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = c0 + n8 * 8 + 2 * t + e;
            if (c >= Nk || (CAUSAL && c > last0)) s[4 * n8 + e] = neg_inf();
            if (c >= Nk || (CAUSAL && c > last1)) s[4 * n8 + 2 + e] = neg_inf();
        }
    }
}

// The first product of a key tile for one warpgroup's 64 rows (sQw: those rows of Q_i, in a tile
// of Br rows; sKj: K_j). The caller fences the accumulators before and waits for the group after.
template <int DT, int Br, int Bc, int D>
__device__ __forceinline__ void issue_S(float* s, u32 sQw, u32 sKj) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // [compute_S] Alg. 1 line 8: S_ij = Q_i K_jᵀ on the tensor cores: d/16 k-slices of m64nBck16
    // (A = Q_i, B = K_j, both read from shared memory through descriptors), one commit group.
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u64 da = desc128(sQw + (kk >> 2) * (Br * 128) + (kk & 3) * 32, 16, 1024);
        const u64 db = desc128(sKj + (kk >> 2) * (Bc * 128) + (kk & 3) * 32, 16, 1024);
        wgmma_ss<DT, Bc>(s, da, db, kk > 0);
    }
    wgmma_commit();
#endif
}

// The second product of a key tile (p: P_ij as convert_P leaves it; sVj: V_j).
template <int DT, int Bc, int D>
__device__ __forceinline__ void issue_PV(float* o, const u32 (*p)[4], u32 sVj) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // [accumulate_O] Alg. 1 line 10: O_i += P_ij V_j on the tensor cores: Bc/16 k-slices, one
    // m64n64k16 per 64 columns of d (A = P_ij from registers, B = V_j read N-major), one commit group.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
#pragma unroll
        for (int cb = 0; cb < D / 64; ++cb)
            wgmma_rs<DT, 64>(o + cb * 32, p[kk], desc128(sVj + cb * (Bc * 128) + kk * (16 * 128), 1024, 1024));
    }
    wgmma_commit();
#endif
}

// P_ij (fp32 accumulators, Bc/2 a thread) into Bc/16 A slices of four registers each.
template <int DT, int Bc>
__device__ __forceinline__ void convert_P(u32 (*p)[4], const float* s) {
    // [convert_P] Alg. 1 line 10: P_ij to fp16/bf16 in registers. Two adjacent n8 column groups of
    // the accumulator are exactly one 64 x 16 A slice of the next product: no data moves between lanes.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
        p[kk][0] = pack2<DT>(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = pack2<DT>(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = pack2<DT>(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = pack2<DT>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

// One value for each of this thread's two rows: row g (r0) and row g + 8 (r1).
struct Rows {
    float r0, r1;
};

// The online softmax's row statistics of this thread's two rows (Alg. 1 lines 5, 9, 10, 12-15),
// in the exp2 domain (scale_log2 = scale · log2 e): m_i the running row max of the *raw* scores,
// l_i this thread's part of the running row sum (its four lanes' parts add up at the end).
struct RowStats {
    Rows l_i, m_i;

    __device__ __forceinline__ void init() {
        // [init] Alg. 1 line 5: m_i = −inf, l_i = 0.
        m_i = Rows{neg_inf(), neg_inf()};
        l_i = Rows{0.f, 0.f};
    }

    // The online softmax of one score tile: S_ij becomes P_ij in place; returns alpha and sets
    // rowsum to this thread's part of rowsum P_ij.
    template <int Bc>
    __device__ __forceinline__ Rows update(float* s, float scale_log2, Rows& rowsum) {
        // [update_ml] Alg. 1 line 9: m_new = max(m_i, rowmax S_ij) (4 lanes a row: two shuffles);
        // alpha = exp(m_i − m_new); P_ij = exp(S_ij − m_new); m_i = m_new. A row with nothing
        // visible yet keeps m = −inf and subtracts 0, so exp2(−inf − 0) = 0, not NaN.
        float mn0 = m_i.r0, mn1 = m_i.r1;
#pragma unroll
        for (int n8 = 0; n8 < Bc / 8; ++n8) {
            mn0 = fmaxf(mn0, fmaxf(s[4 * n8], s[4 * n8 + 1]));
            mn1 = fmaxf(mn1, fmaxf(s[4 * n8 + 2], s[4 * n8 + 3]));
        }
        mn0 = fmaxf(mn0, __shfl_xor_sync(0xffffffff, mn0, 1));
        mn0 = fmaxf(mn0, __shfl_xor_sync(0xffffffff, mn0, 2));
        mn1 = fmaxf(mn1, __shfl_xor_sync(0xffffffff, mn1, 1));
        mn1 = fmaxf(mn1, __shfl_xor_sync(0xffffffff, mn1, 2));
        const float mu0 = (mn0 == neg_inf()) ? 0.f : mn0 * scale_log2;
        const float mu1 = (mn1 == neg_inf()) ? 0.f : mn1 * scale_log2;
        Rows alpha;
        alpha.r0 = ex2(m_i.r0 * scale_log2 - mu0);
        alpha.r1 = ex2(m_i.r1 * scale_log2 - mu1);
        m_i.r0 = mn0;
        m_i.r1 = mn1;
        rowsum.r0 = 0.f;
        rowsum.r1 = 0.f;
#pragma unroll
        for (int n8 = 0; n8 < Bc / 8; ++n8) {
            s[4 * n8 + 0] = ex2(fmaf(s[4 * n8 + 0], scale_log2, -mu0));
            s[4 * n8 + 1] = ex2(fmaf(s[4 * n8 + 1], scale_log2, -mu0));
            s[4 * n8 + 2] = ex2(fmaf(s[4 * n8 + 2], scale_log2, -mu1));
            s[4 * n8 + 3] = ex2(fmaf(s[4 * n8 + 3], scale_log2, -mu1));
            rowsum.r0 += s[4 * n8] + s[4 * n8 + 1];
            rowsum.r1 += s[4 * n8 + 2] + s[4 * n8 + 3];
        }
        return alpha;
    }

    __device__ __forceinline__ void add(Rows alpha, Rows rowsum) {
        // [update_ml] Alg. 1 line 9: l_i = alpha · l_i + rowsum P_ij.
        l_i.r0 = l_i.r0 * alpha.r0 + rowsum.r0;
        l_i.r1 = l_i.r1 * alpha.r1 + rowsum.r1;
    }

    template <int D>
    __device__ __forceinline__ static void rescale(float* o, Rows alpha) {
        // [accumulate_O] Alg. 1 line 10: O_i = diag(alpha) O_i (D/2 accumulators a thread).
#pragma unroll
        for (int n8 = 0; n8 < D / 8; ++n8) {
            o[4 * n8 + 0] *= alpha.r0;
            o[4 * n8 + 1] *= alpha.r0;
            o[4 * n8 + 2] *= alpha.r1;
            o[4 * n8 + 3] *= alpha.r1;
        }
    }

    // The end of a query block: O (b16, BHSD with element strides sOb, sOh, sOs) and lse (B, H, Nq)
    // of batch b, head h; row0, row1 the thread's global query rows (rows >= Nq are not written);
    // t its lane in the row.
    template <int DT, int D>
    __device__ __forceinline__ void write_O(u16* O, float* lse, int b, int h, int H, long long sOb, long long sOh,
                                            long long sOs, int Nq, int row0, int row1, int t, const float* o,
                                            float scale_log2) {
        // [write_O] Alg. 1 lines 12-15: O = O_i / l_i, lse_i = scale·m_i + log l_i (natural log), to
        // HBM once; l_i: the four lanes of a row add up their parts. l_i == 0: the row saw no key
        // (O = 0, lse = −inf); a NaN l_i (NaN in the inputs) stays NaN.
        l_i.r0 += __shfl_xor_sync(0xffffffff, l_i.r0, 1);
        l_i.r0 += __shfl_xor_sync(0xffffffff, l_i.r0, 2);
        l_i.r1 += __shfl_xor_sync(0xffffffff, l_i.r1, 1);
        l_i.r1 += __shfl_xor_sync(0xffffffff, l_i.r1, 2);
        const float inv0 = l_i.r0 == 0.f ? 0.f : 1.f / l_i.r0;
        const float inv1 = l_i.r1 == 0.f ? 0.f : 1.f / l_i.r1;
        u16* Op = O + b * sOb + h * sOh;
        if (row0 < Nq) {
            u32* dst = reinterpret_cast<u32*>(Op + row0 * sOs + 2 * t);
#pragma unroll
            for (int n8 = 0; n8 < D / 8; ++n8) dst[n8 * 4] = pack2<DT>(o[4 * n8] * inv0, o[4 * n8 + 1] * inv0);
        }
        if (row1 < Nq) {
            u32* dst = reinterpret_cast<u32*>(Op + row1 * sOs + 2 * t);
#pragma unroll
            for (int n8 = 0; n8 < D / 8; ++n8)
                dst[n8 * 4] = pack2<DT>(o[4 * n8 + 2] * inv1, o[4 * n8 + 3] * inv1);
        }
        if (t == 0) {
            const float LN2 = 0.6931471805599453f;
            float* L = lse + ((long long)b * H + h) * Nq;
            if (row0 < Nq) L[row0] = l_i.r0 == 0.f ? neg_inf() : (m_i.r0 * scale_log2 + __log2f(l_i.r0)) * LN2;
            if (row1 < Nq) L[row1] = l_i.r1 == 0.f ? neg_inf() : (m_i.r1 * scale_log2 + __log2f(l_i.r1)) * LN2;
        }
    }
};

}  // namespace fvattn

// The PTX check (`make ptx`: -DFLASHVIZ_PTX_CHECK) instantiates a kernel K<DT, Br, Bc, d, causal> by
// taking its address, which needs no copy of its parameter list: FV_ATTN_INST(K, DT, Br, Bc) lists
// the four addresses of d = 64, 128, causal and not.
#define FV_ATTN_INST(K, DT, BR, BC)                                                            \
    (const void*)&K<DT, BR, BC, 64, false>, (const void*)&K<DT, BR, BC, 64, true>,              \
        (const void*)&K<DT, BR, BC, 128, false>, (const void*)&K<DT, BR, BC, 128, true>,
