// flash_bwd_wgmma.cu: the FlashAttention-2 backward pass on Hopper's warpgroup tensor cores (wgmma,
// sm_90a), fp16 or bf16 in, fp32 accumulation: the main kernel. The companion of flash_bwd_mma.cu
// (the same algorithm on mma.sync): the same names (Q_i, K_j, V_j, dO_i, L_i, D_i, S_ij, P_ij, dP_ij,
// dS_ij, dK_j, dV_j, Br, Bc) and the same step tags, "// [step] Alg. 2 line k: ...": the step's
// name in flashviz/steps.py and the line of FlashAttention-2 (Dao 2023), Algorithm 2.
//
// flashviz/gpu/tensorcore/backward.py (``flash_backward_mma(kernel="wgmma")``) launches, in order:
//   flash_bwd_mma_preprocess<DT, D>   (flash_bwd_mma.cu) D = rowsum(dO ∘ O) (− dlse), dQacc = 0;
//   flash_bwd_wgmma<DT, Bc, D, CAUSAL, DQ>  this kernel: grid (Tc, B·H), key blocks j outer (one
//                                     block of threads each), query blocks i inner;
//   DQ = 1, 2: flash_bwd_mma_convert<DT> (flash_bwd_mma.cu) dQ = dQacc in the input dtype;
//   DQ = 0:    flash_bwd_mma_dq<DT, D, CAUSAL, 2> (flash_bwd_mma.cu) dQ by the fixed-order pass.
//
// dQ three ways (the template argument DQ):
//   0  none here: dK_j, dV_j only; dQ by the separate pass (the same bits on every run);
//   1  dQ_i += dS_ij K_j by wgmma, then fp32 atomicAdd of each element into dQacc (FA2's way);
//   2  the same product, its fp32 tile staged in shared memory and added into dQacc by the copy
//      engine's bulk reductions (cp.reduce.async.bulk .add.f32): each warp adds the 16 rows it staged
//      (its warpgroup's columns) after a fence and a warp barrier, no block barrier; Br·NWG small
//      instructions instead of Br·d atomics (FA3 reduces the tile with one TMA instruction); the last
//      bits may change between runs, as with 1. Rows are padded by 32 bytes so that the staging stores
//      from the accumulator layout (float2, a half-warp a wavefront) hit 32 distinct banks.
//
// Partitioning. Br = 64 query rows per inner step; Bc = 64·NWG key rows per block, NWG = 1 or 2
// consumer warpgroups (128 threads each), no producer: every thread issues the cp.async copies
// (Q_i, dO_i 16 bytes a copy; the lse and D rows 4 bytes a copy, raw: L_i is formed where it is read).
// Warpgroup w owns the 64 key rows c0 + 64w .. c0 + 64w + 63 of K_j, V_j, dK_j, dV_j for the whole
// loop and computes the transposed tiles of those rows (64 x Br), each product one wgmma group:
//   S_ijᵀ  = K_j Q_iᵀ     A = K_j rows (smem, K-major),  B = Q_i (smem, K-major)     issue_S
//   dP_ijᵀ = V_j dO_iᵀ    A = V_j rows (smem),           B = dO_i (smem, K-major)    issue_S
//   dV_j  += P_ijᵀ dO_i   A = P_ijᵀ (registers),         B = dO_i (smem, N-major)    issue_PV
//   dK_j  += dS_ijᵀ Q_i   A = dS_ijᵀ (registers),        B = Q_i (smem, N-major)     issue_PV
// (fv_attn.cuh's two products of the forward with the roles of queries and keys exchanged: S_ijᵀ as
// its S_ij, dV_j and dK_j as its O_i; the accumulator of S_ijᵀ is the A operand of the next product
// with no data moved between lanes, convert_P). The fifth mixes every warpgroup's keys:
//   dQ_i  += dS_ij K_j    A = dS_ij (smem, M-major: dS_ijᵀ stored row-major), B = K_j (smem, N-major)
// dS_ijᵀ goes to shared memory, then warpgroup w computes 64 of dQ_i's d columns (d = 64 with two
// warpgroups: all 64 columns over its own 64 keys; both add).
//
// Accumulator layout (wgmma m64nN fp32, fv_attn.cuh): warp w4 of a warpgroup holds rows 16·w4 ..
// 16·w4 + 15, lane 4g + t rows g and g + 8 and, for each group n8 of 8 columns, columns 8·n8 + 2t, +1:
// x[4·n8 + 0..1] of row g, x[4·n8 + 2..3] of row g + 8. For S_ijᵀ: rows are keys, columns queries.
//
// Shared memory (1024-byte aligned tiles, 128-byte swizzle, d/64 column blocks of [rows][64], as
// fv_wgmma.cuh's load_tile_sw128 writes them and wgmma reads them):
//   K_j, V_j [Bc][d] | Q_i, dO_i [2 stages][Br][d] | dS_ijᵀ [Bc][Br] (DQ > 0) |
//   dQ_i fp32 [KS][Br] rows of 4·d + 32 bytes (DQ = 2; KS = 2 for d = 64 with two warpgroups, else 1) |
//   L_i, D_i [2][Br] fp32
//   bytes = 1024 (alignment) + 2·(2·Bc·d + 4·Br·d) + (DQ > 0) 2·Bc·Br + (DQ = 2) KS·Br·(4·d + 32) + 16·Br
// Two stages: query block i+1's Q, dO, L, D are copied while block i is computed.
//
// Masking: key c >= Nk, or (causal, bottom-right) c > r + Nk − Nq, gives P = 0. A query row with
// lse = −inf (it sees no key) gets L_i = +inf (lse_base2), so exp2(s − L_i) = 0: its dQ and its
// share of dK, dV are exactly 0, never NaN. A row past Nq arrives as zeros (Q_i, dO_i, lse, D): its
// P is 1 where unmasked but dP = 0, D = 0, dO = 0 make its dS and its share of dV exactly 0, and its
// dQ is not written. Key blocks no query reaches write dK = dV = 0.

#include "fv_ptx.cuh"    // u16/u32/u64, neg_inf, smem_addr, cp.async, ex2, pack2
#include "fv_wgmma.cuh"  // load_tile_sw128, desc128, fences, wgmma_ss_tt, wgmma fence/commit/wait
#include "fv_attn.cuh"   // issue_S, issue_PV, convert_P (the forward's products, roles exchanged)
#include "fv_tma.cuh"    // bulk_reduce_add_f32, bulk_commit, bulk_wait (DQ = 2)
#include "fv_bwd.cuh"    // key_block, LOG2E, lse_base2 (+inf for keyless rows), load_LD_async (L_i, D_i)
#include "fv_trace.cuh"  // the timeline switch: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1

namespace fvbw {

constexpr int Br = 64;                                  // query rows per inner step

// The kernel's fixed sizes for (Bc, d, DQ).
template <int Bc, int D, int DQ>
struct Shape {
    static constexpr int NWG = Bc / 64;                 // consumer warpgroups (64 keys each)
    static constexpr int NT = 128 * NWG;                // threads
    static constexpr int NCB = D / 64;                  // column blocks of d
    static constexpr int KS = NCB >= NWG ? 1 : NWG / NCB;  // dQ: key parts summed apart (d = 64, 2 WGs)
    static constexpr int CB_PER = NCB >= NWG ? NCB / NWG : 1;   // dQ column blocks per warpgroup
    static constexpr u32 KV = Bc * D * 2, QT = Br * D * 2;     // bytes of a K_j / Q_i tile
    static constexpr u32 DS = DQ > 0 ? Bc * Br * 2 : 0;        // dS_ijᵀ
    static constexpr u32 DQ_ROW = D * 4 + 32;                  // a staged fp32 dQ_i row, padded: no bank conflicts
    static constexpr u32 DQT = Br * DQ_ROW;                    // one staged dQ_i tile
    static constexpr u32 DQS = DQ == 2 ? KS * DQT : 0;
    static constexpr u32 SMEM = 1024 + 2 * KV + 4 * QT + DS + DQS + 16 * Br;
};

}  // namespace fvbw

template <int DT, int Bc, int D, bool CAUSAL, int DQ>
__global__ void __launch_bounds__(Bc * 2)
flash_bwd_wgmma(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
                const u16* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ Dvec,
                float* __restrict__ dQacc, u16* __restrict__ dK, u16* __restrict__ dV,
                int Nq, int Nk, float scale FV_TRACE_PARAMS)
{
    static_assert(DT == 0 || DT == 1, "DT: 0 = fp16, 1 = bf16");
    static_assert((Bc == 64 || Bc == 128) && (D == 64 || D == 128), "Bc in {64, 128}, D in {64, 128}");
    static_assert(DQ >= 0 && DQ <= 2, "DQ: 0 separate pass, 1 atomics, 2 bulk reduction");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fvbw;
    using namespace fvattn;
    using namespace fvtma;
    using namespace fvbwd;
    using Sh = Shape<Bc, D, DQ>;
    constexpr int NT = Sh::NT;
    constexpr int NS = Br / 2;                          // S_ijᵀ accumulators a thread (64 x Br)
    constexpr int NO = D / 2;                           // dK_j, dV_j accumulators a thread (64 x d)
    const float scale_log2 = scale * LOG2E;

    extern __shared__ unsigned char fvbw_smem[];
    const u32 base = (smem_addr(fvbw_smem) + 1023u) & ~1023u;
    const u32 sK = base, sV = sK + Sh::KV;
    const u32 sQ0 = sV + Sh::KV;                        // stage st: Q_i at sQ0 + st·QT
    const u32 sdO0 = sQ0 + 2 * Sh::QT;                  //           dO_i at sdO0 + st·QT
    const u32 sdS = sdO0 + 2 * Sh::QT;                  // dS_ijᵀ [Bc][Br]
    const u32 sdQ = sdS + Sh::DS;                       // fp32 dQ_i [KS][Br] rows of DQ_ROW bytes
    unsigned char* const gen = fvbw_smem + (base - smem_addr(fvbw_smem));   // generic pointer to base
    float* const dQ_s = reinterpret_cast<float*>(gen + (sdQ - base));
    float* const L_s = reinterpret_cast<float*>(gen + (sdQ + Sh::DQS - base));   // L_i [2][Br]
    float* const D_s = L_s + 2 * Br;                                                 // D_i [2][Br]

    const int tid = threadIdx.x;
    const int w = tid >> 7;                             // consumer warpgroup: keys 64w .. 64w + 63
    const int w4 = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int kw = 64 * w + 16 * w4 + g;                // this thread's first key row in the block
    // key block j of head bh, and the query blocks i_first .. i_last that see it (fv_bwd.cuh)
    const auto [bh, c0, offset, i_first, i_last, Qh, dOh, Lh, Dh, dQh] =
        key_block<Br, Bc, D, CAUSAL>(Q, dO, lse, Dvec, dQacc, Nq, Nk);

    // timeline (FLASHVIZ_TRACE builds only): one record a block (key block j), one writer a warpgroup
    // (its thread 0), a row per query block i; the steps are numbered FV_BSTAGE_* (fv_trace.cuh). The
    // tensor cores run behind the issuing threads: a step that issues a product ends when it is issued,
    // and the wait for it falls in the step that reads its result.
    FV_TRACE_BEGIN(Sh::NWG, w, (tid & 127) == 0, tid == 0);
    FV_MARKS(t_a, t_b);

    // [load_KV] Alg. 2 line 6: key block j (this thread block): K_j, V_j from HBM to SRAM, once
    // (cp.async, one group; rows past Nk arrive as zeros).
    FV_SCOPE(-1, FV_BSTAGE_LOAD_KV, t_a, t_b) {          // issued; they land with the first Q_i
        load_tile_sw128<Bc, D, NT>(sK, K + (size_t)bh * Nk * D, D, c0, Nk, tid);
        load_tile_sw128<Bc, D, NT>(sV, V + (size_t)bh * Nk * D, D, c0, Nk, tid);
        cp_async_commit();
    }

    // [init_dKdV] Alg. 2 line 7: dK_j = 0, dV_j = 0 on chip: this warpgroup's 64 key rows (fp32).
    float dKa[NO], dVa[NO];
#pragma unroll
    for (int x = 0; x < NO; ++x) dKa[x] = dVa[x] = 0.f;

    // [load_Qi] Alg. 2 line 9: the first query block's Q_i, dO_i (cp.async, one group) and L_i, D_i
    // into stage 0.
    if (i_first <= i_last) {
        load_tile_sw128<Br, D, NT>(sQ0, Qh, D, i_first * Br, Nq, tid);
        load_tile_sw128<Br, D, NT>(sdO0, dOh, D, i_first * Br, Nq, tid);
        load_LD_async<Br, NT>(smem_addr(L_s), smem_addr(D_s), Lh, Dh, i_first * Br, Nq, tid);
        cp_async_commit();
    }

#pragma unroll 1
    for (int i = i_first; i <= i_last; ++i) {
        const int r0 = i * Br;
        const int st = (i - i_first) & 1;
        const u32 sQ = sQ0 + st * Sh::QT, sdO = sdO0 + st * Sh::QT;
        const float* L_i = L_s + st * Br;
        const float* D_i = D_s + st * Br;
        if (DQ == 2 && lane < 16) bulk_wait_read<0>();  // its dQ_s row read by the copy engine
        __syncthreads();                                // step i−1 is done with the other stage, dS, dQ_s

        // [load_Qi] Alg. 2 line 9: query block i+1 (Q_i, dO_i, lse and D rows, one cp.async group) into
        // the other stage while block i is computed; then wait for block i's copies and make them
        // visible to the tensor cores.
        if (i < i_last) {
            load_tile_sw128<Br, D, NT>(sQ0 + (st ^ 1) * Sh::QT, Qh, D, r0 + Br, Nq, tid);
            load_tile_sw128<Br, D, NT>(sdO0 + (st ^ 1) * Sh::QT, dOh, D, r0 + Br, Nq, tid);
            load_LD_async<Br, NT>(smem_addr(L_s + (st ^ 1) * Br), smem_addr(D_s + (st ^ 1) * Br), Lh, Dh, r0 + Br, Nq, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        FV_NOW32(t_a);
        FV_EVENT32(i, FV_BSTAGE_LOAD_QI, t_b, t_a);         // from the end of step i−1: waits included

        // [recompute_P] Alg. 2 lines 10-11: S_ijᵀ = K_j Q_iᵀ and (issued with it, waited for below)
        // dP_ijᵀ = V_j dO_iᵀ on the tensor cores, this warpgroup's 64 keys x Br queries; then
        // P_ijᵀ = exp2(S·scale·log2 e − L_i), 0 where masked. s[x]: key c0 + kw + 8·((x >> 1) & 1),
        // query r0 + 8·(x >> 2) + 2t + (x & 1).
        float s[NS], dp[NS];
        fence_regs<NS>(s);
        fence_regs<NS>(dp);
        wgmma_fence();
        issue_S<DT, Bc, Br, D>(s, sK + w * (64 * 128), sQ);
        issue_S<DT, Bc, Br, D>(dp, sV + w * (64 * 128), sdO);
        wgmma_wait<1>();                                // S_ijᵀ done; dP_ijᵀ may still run
        fence_regs<NS>(s);
        const bool edge = c0 + Bc > Nk || (CAUSAL && c0 + Bc - 1 > r0 + offset);
#pragma unroll
        for (int x = 0; x < NS; ++x) {
            const int c = c0 + kw + 8 * ((x >> 1) & 1);
            const int ql = 8 * (x >> 2) + 2 * t + (x & 1);
            const bool masked = edge && (c >= Nk || (CAUSAL && c > r0 + ql + offset));
            s[x] = masked ? 0.f : ex2(fmaf(s[x], scale_log2, -lse_base2(L_i[ql])));
        }
        FV_STEP32(t_b, i, FV_BSTAGE_RECOMPUTE_P, t_a);

        // [accumulate_dV] Alg. 2 line 12: dV_j ← dV_j + P_ijᵀ dO_i on the tensor cores (P_ijᵀ rounded
        // to the input dtype, from registers; dO_i read N-major), issued behind dP_ijᵀ.
        u32 pa[Br / 16][4];
        convert_P<DT, Br>(pa, s);
        fence_regs<NO>(dVa);
        wgmma_fence();
        issue_PV<DT, Br, D>(dVa, pa, sdO);
        FV_STEP32(t_a, i, FV_BSTAGE_ACCUMULATE_DV, t_b);     // issued

        // [compute_dS] Alg. 2 lines 13-14: wait for dP_ijᵀ (dV's product may still run);
        // dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i), rounded to the input dtype; for dQ, to SRAM as dS_ijᵀ,
        // Bc x Br row-major (128-byte swizzle): the M-major A operand of dS_ij K_j.
        wgmma_wait<1>();
        fence_regs<NS>(dp);
#pragma unroll
        for (int x = 0; x < NS; ++x) s[x] *= dp[x] - D_i[8 * (x >> 2) + 2 * t + (x & 1)];   // s holds dS_ijᵀ
        u32 da[Br / 16][4];
        convert_P<DT, Br>(da, s);
        if constexpr (DQ > 0) {
#pragma unroll
            for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
                for (int y = 0; y < 4; ++y) {                 // da[kk][y]: key kw + 8(y & 1), queries
                    const int kl = kw + 8 * (y & 1);          // 16kk + 8(y >> 1) + 2t, +1
                    const int chunk = 2 * kk + (y >> 1);
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sdS + kl * 128 + ((chunk ^ (kl & 7)) << 4) + 4 * t),
                                 "r"(da[kk][y]) : "memory");
                }
        }

        FV_STEP32(t_b, i, FV_BSTAGE_COMPUTE_DS, t_a);

        // [accumulate_dK] Alg. 2 line 16: dK_j ← dK_j + dS_ijᵀ Q_i on the tensor cores (scale at the write).
        fence_regs<NO>(dKa);
        wgmma_fence();
        issue_PV<DT, Br, D>(dKa, da, sQ);
        if constexpr (DQ > 0) {
            FV_STEP32(t_a, i, FV_BSTAGE_ACCUMULATE_DK, t_b);  // issued; waited for in update_dQ
            fence_proxy_async();                        // dS_ijᵀ's stores, visible to the tensor cores
            __syncthreads();                            // dS_ijᵀ complete: every warpgroup's keys

            // [update_dQ] Alg. 2 line 15: dQ_i ← dQ_i + scale · dS_ij K_j on the tensor cores (both from
            // SRAM: dS_ij M-major, K_j N-major), 64 of d's columns a warpgroup at a time; then into the
            // fp32 dQacc in HBM by atomicAdd (DQ = 1) or staged in SRAM and added by the copy engine's
            // bulk reductions, one a row (DQ = 2).
            constexpr int KSTEPS = Bc / 16 / Sh::KS;   // k16 slices of this warpgroup's key part
            const int kp = Sh::KS > 1 ? w : 0;          // key part (d = 64, two warpgroups: its own keys)
#pragma unroll
            for (int q = 0; q < Sh::CB_PER; ++q) {
                const int cb = Sh::KS > 1 ? 0 : w + q * Sh::NWG;
                float dq[32];
                fence_regs<32>(dq);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < KSTEPS; ++kk) {
                    const int ks = kp * KSTEPS + kk;
                    wgmma_ss_tt<DT, 64>(dq, desc128(sdS + ks * (16 * 128), 1024, 1024),
                                        desc128(sK + cb * (Bc * 128) + ks * (16 * 128), 1024, 1024), kk > 0);
                }
                wgmma_commit();
                wgmma_wait<0>();                        // (dV's and dK's products are done too)
                fence_regs<32>(dq);
                fence_regs<NO>(dVa);
                fence_regs<NO>(dKa);
#pragma unroll
                for (int x = 0; x < 32; x += 2) {       // query 16·w4 + g + 8((x >> 1) & 1), column 64cb + 8(x >> 2) + 2t
                    const int ql = 16 * w4 + g + 8 * ((x >> 1) & 1);
                    const int col = 64 * cb + 8 * (x >> 2) + 2 * t;
                    if constexpr (DQ == 1) {
                        if (r0 + ql < Nq) {
                            float* dst = dQh + (size_t)(r0 + ql) * D + col;
                            atomicAdd(dst, scale * dq[x]);
                            atomicAdd(dst + 1, scale * dq[x + 1]);
                        }
                    } else {
                        *reinterpret_cast<float2*>(dQ_s + (kp * Sh::DQT + ql * Sh::DQ_ROW) / 4 + col) =
                            make_float2(scale * dq[x], scale * dq[x + 1]);
                    }
                }
            }
            if constexpr (DQ == 2) {
                // each warp adds the rows it staged (16, this warpgroup's columns) itself: no block barrier
                fence_proxy_async();                    // dQ_s's stores, visible to the copy engine
                __syncwarp();
                constexpr int NC = 64 * Sh::CB_PER;     // this warpgroup's columns of a row
                const int col0 = Sh::KS > 1 ? 0 : NC * w;
                const int ql = 16 * w4 + lane;
                if (lane < 16 && r0 + ql < Nq) {
                    bulk_reduce_add_f32(dQh + (size_t)(r0 + ql) * D + col0, sdQ + kp * Sh::DQT + ql * Sh::DQ_ROW + 4 * col0,
                                        NC * 4);
                    bulk_commit();
                }
            }
            // update_dQ: its product, the wait for every product of step i, the adds issued
            FV_STEP32(t_b, i, FV_BSTAGE_UPDATE_DQ, t_a);
        } else {
            wgmma_wait<0>();
            fence_regs<NO>(dVa);
            fence_regs<NO>(dKa);
            FV_STEP32(t_a, i, FV_BSTAGE_ACCUMULATE_DK, t_b);  // issued and waited for (with dV's)
            FV_SET(t_b, t_a);                               // the mark the next load_Qi starts from
        }
    }

    // [write_dKdV] Alg. 2 line 18: dK_j (times scale) and dV_j to HBM in the input dtype, once per key
    // block; zeros for a key block no query sees (whose K_j, V_j copies are awaited first).
    cp_async_wait<0>();
    if (DQ == 2 && lane < 16) bulk_wait<0>();
    FV_NOW32(t_a);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int c = c0 + kw + 8 * hf;
        if (c < Nk) {
            u16* dKr = dK + ((size_t)bh * Nk + c) * D;
            u16* dVr = dV + ((size_t)bh * Nk + c) * D;
#pragma unroll
            for (int n8 = 0; n8 < D / 8; ++n8) {
                *reinterpret_cast<u32*>(dKr + 8 * n8 + 2 * t) = pack2<DT>(scale * dKa[4 * n8 + 2 * hf], scale * dKa[4 * n8 + 2 * hf + 1]);
                *reinterpret_cast<u32*>(dVr + 8 * n8 + 2 * t) = pack2<DT>(dVa[4 * n8 + 2 * hf], dVa[4 * n8 + 2 * hf + 1]);
            }
        }
    }
    FV_STEP32(t_b, -1, FV_BSTAGE_WRITE_DKDV, t_a);
    FV_TRACE_END(blockIdx.x, bh, 0, i_last - i_first + 1);
#else
    __trap();  // wgmma needs sm_90a: compile with -arch=sm_90a (NVRTC) / compute_90a (nvcc)
#endif
}

#ifdef FLASHVIZ_PTX_CHECK
// Only for the CPU build check (`make ptx`): every (DT, Bc, D, CAUSAL, DQ) the runner may launch.
#define FVBW_INST(DT, Bc, D, C) (const void*)&flash_bwd_wgmma<DT, Bc, D, C, 0>, \
                                (const void*)&flash_bwd_wgmma<DT, Bc, D, C, 1>, \
                                (const void*)&flash_bwd_wgmma<DT, Bc, D, C, 2>,
#define FVBW_INST_C(DT, Bc, D) FVBW_INST(DT, Bc, D, false) FVBW_INST(DT, Bc, D, true)
#define FVBW_INST_DT(DT) FVBW_INST_C(DT, 64, 64) FVBW_INST_C(DT, 64, 128) FVBW_INST_C(DT, 128, 64) FVBW_INST_C(DT, 128, 128)
__attribute__((used)) static const void* const fvbw_ptx_check[] = {FVBW_INST_DT(0) FVBW_INST_DT(1)};
#endif
