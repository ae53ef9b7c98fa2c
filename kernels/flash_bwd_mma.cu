// flash_bwd_mma.cu: the FlashAttention-2 backward pass on tensor cores (sm_80 and later, Hopper
// included), fp16 or bf16 in, fp32 accumulation. The companion of flash_bwd.cu (the fp32 teaching
// kernel): the same algorithm, the same names (Q_i, K_j, V_j, dO_i, L_i, D_i, S_ij, P_ij, dP_ij,
// dS_ij, dK_j, dV_j, Br, Bc), but the five products run on the tensor cores with mma.sync.
// Each block of the kernels opens with a tag, "// [step] Alg. 2 line k: ...": the step's name in
// flashviz/steps.py and the line of FlashAttention-2 (Dao 2023), Algorithm 2, that it implements.
//
// Three kernels (four with the deterministic dQ), launched in this order by
// flashviz/gpu/tensorcore/backward.py:
//   flash_bwd_mma_preprocess<DT, D>  D = rowsum(dO ∘ O) (− dlse) in fp32, dQacc = 0 (fp32) in HBM
//                                    (atomic dQ only: the separate pass passes no dQacc);
//   flash_bwd_mma<DT, Bc, D, CAUSAL, true>  key blocks j outer (grid (Tc, B*H)), query blocks i
//                                    inner; dK_j, dV_j in registers; dQ_i by fp32 atomicAdd into
//                                    dQacc (FA2's choice: fast, the last bits of dQ may change run to
//                                    run: the order of the atomic adds does);
//   flash_bwd_mma_convert<DT>        dQ = dQacc in the input dtype.
// Deterministic dQ (``deterministic=True``): the main kernel with ATOMIC_DQ = false (dK_j, dV_j
// only), then flash_bwd_mma_dq<DT, D, CAUSAL>: query blocks i outer (grid (Tr, B*H)), key blocks j
// inner, each warp recomputing S_ij, P_ij, dP_ij, dS_ij for its 16 query rows and keeping dQ_i in
// registers: every dQ element is summed by one thread in one order, so the bits are the same on
// every run (FlashAttention-1's loop order for dQ; 3 products a tile against the main kernel's 5).
//
// Partitioning. Br = 64 query rows per inner step; Bc = 16·W key rows per block, W warps. Warp w
// owns the 16 key rows c0 + 16w .. c0 + 16w + 15 of K_j, V_j, dK_j, dV_j for the whole loop and
// computes the transposed tiles S_ijᵀ, P_ijᵀ, dP_ijᵀ, dS_ijᵀ of those rows (16 x Br), so that
//   S_ijᵀ  = K_j Q_iᵀ     A = K_j rows (ldmatrix),   B[k][n] = Q_i[n][k]  (ldmatrix, no .trans)
//   dV_j  += P_ijᵀ dO_i   A = P_ijᵀ (registers),      B = dO_i row-major    (ldmatrix .trans)
//   dP_ijᵀ = V_j dO_iᵀ    A = V_j rows (ldmatrix),   B[k][n] = dO_i[n][k] (ldmatrix, no .trans)
//   dK_j  += dS_ijᵀ Q_i   A = dS_ijᵀ (registers),     B = Q_i row-major     (ldmatrix .trans)
// need nothing from another warp: these are flash_fwd_mma_sm80.cu's two products with the roles
// of queries and keys exchanged (S_ijᵀ as its S_ij, dV_j and dK_j as its O_i). The fifth,
//   dQ_i  += dS_ij K_j    A = dS_ij (SRAM, written by all warps), B = K_j row-major (.trans)
// mixes every warp's keys: dS_ij goes through shared memory, then warp w computes 16 query rows
// (and, with 8 warps, half the columns) and adds them into dQacc with fp32 atomicAdd.
//
// Fragment layouts of m16n8k16 (lane = 4g + t): A a0 = A[g][2t..], a1 = A[g+8][2t..],
// a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]; B b0 = B[2t..][g], b1 = B[2t+8..][g]; C c0,c1 = C[g][2t, 2t+1],
// c2,c3 = C[g+8][2t, 2t+1]. The C layout of n8 tiles 2kk, 2kk+1 is the A layout of k-step kk.
//
// Shared memory (b16, rows of 16-byte chunks, chunk c of row r at c ^ (r & 7): no bank conflicts):
//   K_j, V_j [Bc][D] | Q_i [STAGES][Br][D] | dO_i [STAGES][Br][D] | dS_ij [Br][Bc] | L_i, D_i [STAGES][Br] fp32
//   bytes = 2·(2·Bc·D + 2·STAGES·Br·D + Br·Bc) + 8·STAGES·Br
//   (one stage: Bc = 64, D = 128: 74,240; Bc = 128, D = 128: 115,200; two stages there: 148,480)
// The dQ pass: Q_i, dO_i [Br][D] | K_j, V_j [STAGES][64][D] | L_i, D_i [Br] fp32.
//
// Masking: key c >= Nk, or (causal, bottom-right) c > r + Nk − Nq, gives P = 0. A query row past Nq
// or with lse = −inf (it sees no key) is given L_i = +inf, so exp2(s − L) = 0: its dQ and its share
// of dK, dV are exactly 0, never NaN. Key blocks no query reaches write dK = dV = 0.

#include "fv_ptx.cuh"   // u16/u32, neg_inf, smem_addr, cp.async, ex2, pack2
#include "fv_b16.cuh"   // to_f32: one fp16 / bf16 value to fp32
#include "fv_mma_sync.cuh"  // ldsm_x4, ldsm_x4_trans, mma16816, swz
#include "fv_bwd.cuh"   // LOG2E, pos_inf, lse_base2, load_LD (L_i, D_i)
#include "fv_trace.cuh"  // the timeline switch of flash_bwd_mma: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1

namespace fvbm {

using namespace fvptx;
using namespace fvmma;
using namespace fvbwd;
using fvb16::to_f32;

constexpr int Br = 64;                                // query rows per inner step

// cp.async the rows row0 .. row0+ROWS-1 of a contiguous [N][D] matrix into a swizzled tile; rows
// past N are zero-filled.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(u32 s_tile, const u16* __restrict__ g, int row0, int N, int tid)
{
    constexpr int CH = D / 8;
    static_assert((ROWS * CH) % NT == 0, "tile chunks must divide evenly among the threads");
#pragma unroll
    for (int k = 0; k < ROWS * CH / NT; ++k) {
        const int e = tid + k * NT;
        const int r = e / CH, c = e % CH;
        const bool ok = row0 + r < N;
        const u16* src = ok ? g + (long long)(row0 + r) * D + c * 8 : g;
        cp_async16(s_tile + swz<D>(r, c), src, ok ? 16 : 0);
    }
}

// [load_Qi] Alg. 2 line 9: query block i of one head into one stage of SRAM: Q_i, dO_i by cp.async
// (committed as one group), L_i (lse_base2) and D_i by plain loads and stores (visible after the
// caller's next __syncthreads).
template <int D, int NT>
__device__ __forceinline__ void load_query_block(u32 sQ, u32 sdO, float* L_i, float* D_i, const u16* __restrict__ Qh,
                                                 const u16* __restrict__ dOh, const float* __restrict__ Lh,
                                                 const float* __restrict__ Dh, int r0, int Nq, int tid)
{
    load_tile<Br, D, NT>(sQ, Qh, r0, Nq, tid);
    load_tile<Br, D, NT>(sdO, dOh, r0, Nq, tid);
    cp_async_commit();
    load_LD<Br, NT>(L_i, D_i, Lh, Dh, r0, Nq, tid);
}

// acc (16 x 8·NN, C layout) = A B^T over D, A = 16 rows of an SRAM tile (row a_row0), B^T = the
// NN·8 rows of another SRAM tile (row 0): both [.][D] row-major (S_ijᵀ = K_j Q_iᵀ, dP_ijᵀ = V_j dO_iᵀ).
template <int DT, int NN, int D>
__device__ __forceinline__ void rows_times_rows_t(float (&acc)[NN][4], u32 sA, int a_row0, u32 sB, int lane)
{
    constexpr u32 ROWB = D * 2;
    const int x7 = lane & 7;
    const u32 a_row = (u32)(a_row0 + (lane & 15)) * ROWB;
    const int a_chunk = lane >> 4;
    const u32 b_row = (u32)((lane & 7) + ((lane >> 4) << 3)) * ROWB;
    const int b_chunk = (lane >> 3) & 1;
#pragma unroll
    for (int n = 0; n < NN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        u32 a[4];
        ldsm_x4(a, sA + a_row + (((2 * ks + a_chunk) ^ x7) << 4));
#pragma unroll
        for (int np = 0; np < NN / 2; ++np) {
            u32 b[4];
            ldsm_x4(b, sB + (u32)(16 * np) * ROWB + b_row + (((2 * ks + b_chunk) ^ x7) << 4));
            mma16816<DT>(acc[2 * np], a, b[0], b[1]);
            mma16816<DT>(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 x D, C layout) += A (16 x 16·KK, registers, A layout) · B, B = an SRAM tile [16·KK][D]
// row-major (ldmatrix .trans): dV_j += P_ijᵀ dO_i and dK_j += dS_ijᵀ Q_i.
template <int DT, int KK, int D>
__device__ __forceinline__ void regs_times_rows(float (&acc)[D / 8][4], const u32 (&a)[KK][4], u32 sB, int lane)
{
    constexpr u32 ROWB = D * 2;
    const int x7 = lane & 7;
    const u32 v_row = (u32)(lane & 15) * ROWB;
    const int v_chunk = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk)
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            u32 b[4];
            ldsm_x4_trans(b, sB + (u32)(16 * kk) * ROWB + v_row + (((2 * dp + v_chunk) ^ x7) << 4));
            mma16816<DT>(acc[2 * dp], a[kk], b[0], b[1]);
            mma16816<DT>(acc[2 * dp + 1], a[kk], b[2], b[3]);
        }
}

// C tiles 2kk, 2kk+1 (fp32) -> A fragments of k-step kk (fp16 / bf16), no SRAM.
template <int DT, int KK>
__device__ __forceinline__ void c_to_a(u32 (&a)[KK][4], const float (&c)[2 * KK][4])
{
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        a[kk][0] = pack2<DT>(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = pack2<DT>(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = pack2<DT>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = pack2<DT>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

}  // namespace fvbm

// ---------------------------------------------------------------------------------------------------
// Preprocessing. Grid (ceil(Nq / 8), B*H), 256 threads = 8 warps, one row each.
template <int DT, int D>
__global__ void __launch_bounds__(256)
flash_bwd_mma_preprocess(const u16* __restrict__ O, const u16* __restrict__ dO, const float* __restrict__ dlse,
                         float* __restrict__ Dvec, float* __restrict__ dQacc, int Nq)
{
    using namespace fvbm;
    const int lane = threadIdx.x & 31, r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= Nq) return;
    const size_t row = (size_t)blockIdx.y * Nq + r;
    // [compute_D] Alg. 2 lines 3-4: D_i = rowsum(dO_i ∘ O_i) (− dlse_i) in fp32 to HBM; dQacc = 0 if given.
    const u32* o2 = reinterpret_cast<const u32*>(O + row * D);
    const u32* g2 = reinterpret_cast<const u32*>(dO + row * D);
    float acc = 0.f;
#pragma unroll
    for (int p = lane; p < D / 2; p += 32) {
        const u32 a = o2[p], b = g2[p];
        acc = fmaf(to_f32<DT>(a & 0xffffu), to_f32<DT>(b & 0xffffu), acc);
        acc = fmaf(to_f32<DT>(a >> 16), to_f32<DT>(b >> 16), acc);
        if (dQacc) {                                    // the atomic dQ's buffer; null for the separate pass
            dQacc[row * D + 2 * p] = 0.f;
            dQacc[row * D + 2 * p + 1] = 0.f;
        }
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) Dvec[row] = dlse ? acc - dlse[row] : acc;
}

// ---------------------------------------------------------------------------------------------------
// The main kernel. Grid (Tc, B*H); Bc/16 warps. STAGES = 2: Q_i, dO_i, L_i, D_i double-buffered, the
// next query block's copies in flight while this one is computed (v2); 1: load, wait, compute (v1).
template <int DT, int Bc, int D, bool CAUSAL, bool ATOMIC_DQ, int STAGES>
__global__ void __launch_bounds__(Bc * 2)
flash_bwd_mma(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
              const u16* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ Dvec,
              float* __restrict__ dQacc, u16* __restrict__ dK, u16* __restrict__ dV,
              int Nq, int Nk, float scale FV_TRACE_PARAMS)
{
    using namespace fvbm;
    static_assert(DT == 0 || DT == 1, "DT: 0 = fp16, 1 = bf16");
    static_assert((Bc == 64 || Bc == 128) && (D == 64 || D == 128), "Bc in {64, 128}, D in {64, 128}");
    static_assert(STAGES == 1 || STAGES == 2, "STAGES in {1, 2}");
    constexpr int NT = Bc * 2;                  // threads (Bc/16 warps)
    static_assert(NT >= Br, "one thread a row of L_i, D_i (the two-stage prefetch)");
    constexpr int NW = Bc / 16;
    constexpr int NS = Br / 8;                  // n8 tiles of S_ijᵀ per warp (16 x Br)
    constexpr int KP = Br / 16;                 // k16 steps of P_ijᵀ dO_i and dS_ijᵀ Q_i
    constexpr int NO = D / 8;                   // n8 tiles of dK_j, dV_j per warp (16 x D)
    constexpr u32 ROWB = D * 2, KV_BYTES = Bc * D * 2, Q_BYTES = Br * D * 2, S_BYTES = Br * Bc * 2;
    const float scale_log2 = scale * LOG2E;

    extern __shared__ uint4 fvbm_smem[];
    const u32 sK = smem_addr(fvbm_smem);
    const u32 sV = sK + KV_BYTES;
    const u32 sQ0 = sV + KV_BYTES;                       // stage st: Q_i at sQ0 + st·Q_BYTES
    const u32 sdO0 = sQ0 + STAGES * Q_BYTES;             //           dO_i at sdO0 + st·Q_BYTES
    const u32 sdS = sdO0 + STAGES * Q_BYTES;
    float* L_s = reinterpret_cast<float*>(reinterpret_cast<char*>(fvbm_smem) + 2 * KV_BYTES + 2 * STAGES * Q_BYTES + S_BYTES);
    float* D_s = L_s + STAGES * Br;                      // L_i, D_i of stage st at + st·Br

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int bh = blockIdx.y;
    const int c0 = blockIdx.x * Bc;
    const int offset = Nk - Nq;
    const int Tr = (Nq + Br - 1) / Br;
    const u16* Qh = Q + (size_t)bh * Nq * D;
    const u16* dOh = dO + (size_t)bh * Nq * D;
    const float* Lh = lse + (size_t)bh * Nq;
    const float* Dh = Dvec + (size_t)bh * Nq;
    float* dQh = ATOMIC_DQ ? dQacc + (size_t)bh * Nq * D : nullptr;   // null in the separate pass

    // Query blocks that see K_j (causal: from the block holding row c0 − offset on).
    int i_first = 0;
    if (CAUSAL && c0 - offset > 0) i_first = (c0 - offset) / Br;
    const int i_last = (CAUSAL && c0 - offset >= Nq) ? -1 : Tr - 1;

    // timeline (FLASHVIZ_TRACE builds only): one record a block (key block j), one writer a warp, a
    // row per query block i; the steps are numbered FV_BSTAGE_* (fv_trace.cuh)
    FV_TRACE_BEGIN(NW, warp, lane == 0, tid == 0);
    FV_DECL(t_a);
    FV_DECL(t_b);
    FV_NOW(t_a);

    // [load_KV] Alg. 2 line 6: key block j (this thread block): K_j, V_j from HBM to SRAM, once.
    load_tile<Bc, D, NT>(sK, K + (size_t)bh * Nk * D, c0, Nk, tid);
    load_tile<Bc, D, NT>(sV, V + (size_t)bh * Nk * D, c0, Nk, tid);
    cp_async_commit();
    FV_NOW(t_b);
    FV_EVENT(-1, FV_BSTAGE_LOAD_KV, t_a, t_b);                  // issued; they land with the first Q_i

    // [init_dKdV] Alg. 2 line 7: dK_j = 0, dV_j = 0 on chip: this warp's 16 key rows, C layout.
    float dKa[NO][4], dVa[NO][4];
#pragma unroll
    for (int n = 0; n < NO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dKa[n][e] = dVa[n][e] = 0.f;

    // [load_Qi] Alg. 2 line 9: for each query block i that sees K_j, Q_i, dO_i, L_i, D_i from HBM to
    // SRAM (load_query_block). Two stages: the first block's copies start here, with K_j, V_j's.
    if (STAGES == 2 && i_first <= i_last)
        load_query_block<D, NT>(sQ0, sdO0, L_s, D_s, Qh, dOh, Lh, Dh, i_first * Br, Nq, tid);
#pragma unroll 1
    for (int i = i_first; i <= i_last; ++i) {
        const int r0 = i * Br;
        const int st = STAGES == 2 ? (i - i_first) & 1 : 0;
        const u32 sQ = sQ0 + st * Q_BYTES, sdO = sdO0 + st * Q_BYTES;
        const float* L_i = L_s + st * Br;
        const float* D_i = D_s + st * Br;
        __syncthreads();                              // step i−1 is done with its stage and dS_ij
        float lse_next = 0.f, D_next = 0.f;           // (two stages) row tid of block i+1, from HBM
        if constexpr (STAGES == 1) {
            load_query_block<D, NT>(sQ, sdO, L_s, D_s, Qh, dOh, Lh, Dh, r0, Nq, tid);
            cp_async_wait<0>();
        } else if (i < i_last) {                      // block i+1 into the other stage, then wait for i's:
            load_tile<Br, D, NT>(sQ0 + (st ^ 1) * Q_BYTES, Qh, r0 + Br, Nq, tid);
            load_tile<Br, D, NT>(sdO0 + (st ^ 1) * Q_BYTES, dOh, r0 + Br, Nq, tid);
            cp_async_commit();
            if (tid < Br) {                           // its L_i, D_i row into registers, stored after this
                const int r = r0 + Br + tid;          // step (the loads' latency hidden by its work)
                lse_next = r < Nq ? Lh[r] : neg_inf();
                D_next = r < Nq ? Dh[r] : 0.f;
            }
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        FV_NOW(t_a);
        FV_EVENT(i, FV_BSTAGE_LOAD_QI, t_b, t_a);

        // [recompute_P] Alg. 2 lines 10-11: S_ijᵀ = K_j Q_iᵀ (this warp's 16 keys x Br queries);
        // P_ijᵀ = exp2(S·scale·log2 e − L_i), 0 where masked. s[n][e]: key c0 + 16w + g + 8(e>>1),
        // query r0 + 8n + 2t + (e&1).
        float s[NS][4];
        rows_times_rows_t<DT, NS, D>(s, sK, 16 * warp, sQ, lane);
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = c0 + 16 * warp + g + 8 * (e >> 1);
                const int rl = 8 * n + 2 * t + (e & 1);
                const bool masked = c >= Nk || (CAUSAL && c > r0 + rl + offset);
                s[n][e] = masked ? 0.f : ex2(fmaf(s[n][e], scale_log2, -L_i[rl]));
            }
        FV_NOW(t_b);
        FV_EVENT(i, FV_BSTAGE_RECOMPUTE_P, t_a, t_b);

        // [accumulate_dV] Alg. 2 line 12: dV_j ← dV_j + P_ijᵀ dO_i (P_ijᵀ rounded to the input dtype).
        {
            u32 pa[KP][4];
            c_to_a<DT, KP>(pa, s);
            regs_times_rows<DT, KP, D>(dVa, pa, sdO, lane);
        }
        FV_NOW(t_a);
        FV_EVENT(i, FV_BSTAGE_ACCUMULATE_DV, t_b, t_a);

        // [compute_dS] Alg. 2 lines 13-14: dP_ijᵀ = V_j dO_iᵀ; dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i), and
        // dS_ij (not transposed) to SRAM for the dQ product, in the input dtype.
        float dp[NS][4];
        rows_times_rows_t<DT, NS, D>(dp, sV, 16 * warp, sdO, lane);
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int rl = 8 * n + 2 * t + (e & 1);
                s[n][e] = s[n][e] * (dp[n][e] - D_i[rl]);        // s now holds dS_ijᵀ
                if constexpr (ATOMIC_DQ) {
                    const int kl = 16 * warp + g + 8 * (e >> 1);  // key within the block
                    const u32 bits = pack2<DT>(s[n][e], 0.f) & 0xffffu;
                    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(sdS + swz<Bc>(rl, kl >> 3) + 2 * (kl & 7)),
                                 "h"((unsigned short)bits) : "memory");
                }
            }
        FV_NOW(t_b);
        FV_EVENT(i, FV_BSTAGE_COMPUTE_DS, t_a, t_b);

        // [accumulate_dK] Alg. 2 line 16: dK_j ← dK_j + dS_ijᵀ Q_i (scale at the write).
        {
            u32 sa[KP][4];
            c_to_a<DT, KP>(sa, s);
            regs_times_rows<DT, KP, D>(dKa, sa, sQ, lane);
        }
        FV_NOW(t_a);
        FV_EVENT(i, FV_BSTAGE_ACCUMULATE_DK, t_b, t_a);
        if constexpr (ATOMIC_DQ) {                    // else dQ: flash_bwd_mma_dq, in a fixed order
            __syncthreads();                              // dS_ij is complete in SRAM

            // [update_dQ] Alg. 2 line 15: dQ_i ← dQ_i + scale · dS_ij K_j, by fp32 atomicAdd into dQacc.
            // Warp w: query rows 16·(w mod 4) .. +15, columns split among the NW/4 warps of a row group,
            // 32 columns (4 n8 tiles) at a time to keep registers free.
            {
                constexpr int RG = Br / 16;                            // 4 row groups
                constexpr int COLS = D / (NW / RG);                    // columns per warp
                const int rg = warp % RG, x0 = (warp / RG) * COLS;
                const int x7 = lane & 7;
                const u32 a_row = (u32)(16 * rg + (lane & 15)) * (Bc * 2);
                const int a_chunk = lane >> 4;
                const u32 v_row = (u32)(lane & 15) * ROWB;
                const int v_chunk = lane >> 4;
#pragma unroll 1
                for (int xc = x0; xc < x0 + COLS; xc += 32) {
                    float q[4][4];
#pragma unroll
                    for (int n = 0; n < 4; ++n) q[n][0] = q[n][1] = q[n][2] = q[n][3] = 0.f;
#pragma unroll
                    for (int ks = 0; ks < Bc / 16; ++ks) {
                        u32 a[4];
                        ldsm_x4(a, sdS + a_row + (((2 * ks + a_chunk) ^ x7) << 4));
#pragma unroll
                        for (int dp2 = 0; dp2 < 2; ++dp2) {
                            u32 b[4];
                            const int chunk = xc / 8 + 2 * dp2 + v_chunk;
                            ldsm_x4_trans(b, sK + (u32)(16 * ks) * ROWB + v_row + ((chunk ^ x7) << 4));
                            mma16816<DT>(q[2 * dp2], a, b[0], b[1]);
                            mma16816<DT>(q[2 * dp2 + 1], a, b[2], b[3]);
                        }
                    }
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) {
                        const int r = r0 + 16 * rg + g + 8 * hf;
                        if (r < Nq) {
#pragma unroll
                            for (int n = 0; n < 4; ++n) {
                                float* dst = dQh + (size_t)r * D + xc + 8 * n + 2 * t;
                                atomicAdd(dst, scale * q[n][2 * hf]);
                                atomicAdd(dst + 1, scale * q[n][2 * hf + 1]);
                            }
                        }
                    }
                }
            }
        }
        FV_NOW(t_b);                                    // the next load_Qi starts here, atomics or not
        if (ATOMIC_DQ) FV_EVENT(i, FV_BSTAGE_UPDATE_DQ, t_a, t_b);
        if (STAGES == 2 && i < i_last && tid < Br) {   // block i+1's L_i, D_i into its stage (free since
            L_s[(st ^ 1) * Br + tid] = lse_base2(lse_next);   // step i began; read after step i+1's barriers)
            D_s[(st ^ 1) * Br + tid] = D_next;
        }
    }

    // [write_dKdV] Alg. 2 line 18: dK_j (times scale) and dV_j to HBM in the input dtype, once per key
    // block; zeros for a key block no query sees (whose K_j, V_j copies are awaited first).
    cp_async_wait<0>();
    FV_NOW(t_a);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int c = c0 + 16 * warp + g + 8 * hf;
        if (c < Nk) {
            u16* dKr = dK + ((size_t)bh * Nk + c) * D;
            u16* dVr = dV + ((size_t)bh * Nk + c) * D;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                *reinterpret_cast<u32*>(dKr + 8 * n + 2 * t) = pack2<DT>(scale * dKa[n][2 * hf], scale * dKa[n][2 * hf + 1]);
                *reinterpret_cast<u32*>(dVr + 8 * n + 2 * t) = pack2<DT>(dVa[n][2 * hf], dVa[n][2 * hf + 1]);
            }
        }
    }
    FV_NOW(t_b);
    FV_EVENT(-1, FV_BSTAGE_WRITE_DKDV, t_a, t_b);
    FV_TRACE_END(blockIdx.x, bh, 0, i_last - i_first + 1);
}

// ---------------------------------------------------------------------------------------------------
// The deterministic dQ. Grid (Tr, B*H); 4 warps, warp w the query rows r0 + 16w .. r0 + 16w + 15 of
// query block i; key blocks j of DQ_BC = 64 keys visited in order, one at a time. STAGES = 2: K_j, V_j
// double-buffered, K_{j+1}, V_{j+1} in flight while block j is computed (v2); 1: load, wait, compute.
namespace fvbm {
constexpr int DQ_BC = 64;                              // keys per step of the deterministic dQ
}  // namespace fvbm

template <int DT, int D, bool CAUSAL, int STAGES>
__global__ void __launch_bounds__(128)
flash_bwd_mma_dq(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
                 const u16* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ Dvec,
                 u16* __restrict__ dQ, int Nq, int Nk, float scale)
{
    using namespace fvbm;
    static_assert(DT == 0 || DT == 1, "DT: 0 = fp16, 1 = bf16");
    static_assert(D == 64 || D == 128, "D in {64, 128}");
    static_assert(STAGES == 1 || STAGES == 2, "STAGES in {1, 2}");
    constexpr int NT = 128, Bc = DQ_BC;
    constexpr int NS = Bc / 8;                  // n8 tiles of S_ij per warp (16 x Bc)
    constexpr int KP = Bc / 16;                 // k16 steps of dS_ij K_j
    constexpr int NO = D / 8;                   // n8 tiles of dQ_i per warp (16 x D)
    constexpr u32 KV_BYTES = Bc * D * 2, Q_BYTES = Br * D * 2;
    const float scale_log2 = scale * LOG2E;

    extern __shared__ uint4 fvbm_smem[];
    const u32 sQ = smem_addr(fvbm_smem);
    const u32 sdO = sQ + Q_BYTES;
    const u32 sK0 = sdO + Q_BYTES;                       // stage st: K_j at sK0 + st·KV_BYTES
    const u32 sV0 = sK0 + STAGES * KV_BYTES;             //           V_j at sV0 + st·KV_BYTES
    float* L_i = reinterpret_cast<float*>(reinterpret_cast<char*>(fvbm_smem) + 2 * Q_BYTES + 2 * STAGES * KV_BYTES);
    float* D_i = L_i + Br;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int bh = blockIdx.y;
    const int i_blk = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;   // causal: long rows first
    const int r0 = i_blk * Br;
    const int offset = Nk - Nq;
    const u16* Kh = K + (size_t)bh * Nk * D;
    const u16* Vh = V + (size_t)bh * Nk * D;

    // [load_Qi] Alg. 2 line 9: Q_i, dO_i, L_i and D_i, once (load_query_block).
    load_query_block<D, NT>(sQ, sdO, L_i, D_i, Q + (size_t)bh * Nq * D, dO + (size_t)bh * Nq * D,
                            lse + (size_t)bh * Nq, Dvec + (size_t)bh * Nq, r0, Nq, tid);
    // key blocks block i sees: all, or (causal) up to its last row's last visible key
    int n_end = Nk;
    if (CAUSAL) n_end = min(Nk, r0 + Br + offset);
    const int Tc = n_end > 0 ? (n_end + Bc - 1) / Bc : 0;
    // [load_KV] Alg. 2 line 6, two stages: K_0, V_0's copies start here, with Q_i's.
    if (STAGES == 2 && Tc > 0) {
        load_tile<Bc, D, NT>(sK0, Kh, 0, Nk, tid);
        load_tile<Bc, D, NT>(sV0, Vh, 0, Nk, tid);
        cp_async_commit();
    }

    float dq[NO][4];
#pragma unroll
    for (int n = 0; n < NO; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
    const int rw = 16 * warp;                   // this warp's first row in the block
#pragma unroll 1
    for (int j = 0; j < Tc; ++j) {
        const int c0 = j * Bc;
        const int st = STAGES == 2 ? j & 1 : 0;
        const u32 sK = sK0 + st * KV_BYTES, sV = sV0 + st * KV_BYTES;
        __syncthreads();                        // step j−1 is done with its stage
        // [load_KV] Alg. 2 line 6: K_j, V_j from HBM to SRAM (rows past Nk zero-filled); two stages:
        // K_{j+1}, V_{j+1} into the other stage, then wait for K_j, V_j.
        if constexpr (STAGES == 1) {
            load_tile<Bc, D, NT>(sK, Kh, c0, Nk, tid);
            load_tile<Bc, D, NT>(sV, Vh, c0, Nk, tid);
            cp_async_commit();
            cp_async_wait<0>();
        } else if (j + 1 < Tc) {
            load_tile<Bc, D, NT>(sK0 + (st ^ 1) * KV_BYTES, Kh, c0 + Bc, Nk, tid);
            load_tile<Bc, D, NT>(sV0 + (st ^ 1) * KV_BYTES, Vh, c0 + Bc, Nk, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        // [recompute_P] Alg. 2 lines 10-11: S_ij = Q_i K_jᵀ (this warp's 16 queries x Bc keys);
        // P_ij = exp2(S·scale·log2 e − L_i), 0 where masked. s[n][e]: query r0 + rw + g + 8(e>>1),
        // key c0 + 8n + 2t + (e&1).
        float s[NS][4];
        rows_times_rows_t<DT, NS, D>(s, sQ, rw, sK, lane);
        // [compute_dS] Alg. 2 lines 13-14: dP_ij = dO_i V_jᵀ; dS_ij = P_ij ∘ (dP_ij − D_i).
        float dp[NS][4];
        rows_times_rows_t<DT, NS, D>(dp, sdO, rw, sV, lane);
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int rl = rw + g + 8 * (e >> 1);
                const int c = c0 + 8 * n + 2 * t + (e & 1);
                const bool masked = c >= Nk || (CAUSAL && c > r0 + rl + offset);
                const float p = masked ? 0.f : ex2(fmaf(s[n][e], scale_log2, -L_i[rl]));
                s[n][e] = p * (dp[n][e] - D_i[rl]);
            }
        // [update_dQ] Alg. 2 line 15: dQ_i ← dQ_i + dS_ij K_j (dS_ij rounded to the input dtype,
        // as the atomic path does; scale at the write), in registers: one thread, one order.
        {
            u32 sa[KP][4];
            c_to_a<DT, KP>(sa, s);
            regs_times_rows<DT, KP, D>(dq, sa, sK, lane);
        }
    }
    cp_async_wait<0>();                         // a block that sees no key: its Q_i, dO_i copies too

    // dQ_i (times scale) to HBM in the input dtype, once; 0 for rows that see no key.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = r0 + rw + g + 8 * hf;
        if (r < Nq) {
            u16* dst = dQ + ((size_t)bh * Nq + r) * D;
#pragma unroll
            for (int n = 0; n < NO; ++n)
                *reinterpret_cast<u32*>(dst + 8 * n + 2 * t) = pack2<DT>(scale * dq[n][2 * hf], scale * dq[n][2 * hf + 1]);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// dQ = dQacc in the input dtype. Grid ceil(n / 512), 256 threads, two elements each.
template <int DT>
__global__ void __launch_bounds__(256)
flash_bwd_mma_convert(const float* __restrict__ dQacc, u16* __restrict__ dQ, long long n)
{
    const long long p = (long long)blockIdx.x * 256 + threadIdx.x;     // pair index
    // [update_dQ] Alg. 2 line 15: the accumulated dQ_i, rounded once to the input dtype.
    if (2 * p < n) reinterpret_cast<u32*>(dQ)[p] = fvptx::pack2<DT>(dQacc[2 * p], dQacc[2 * p + 1]);
}

#ifdef FLASHVIZ_PTX_CHECK
// Only for the CPU build check (`make ptx`): instantiate every supported (DT, Bc, D, CAUSAL, ATOMIC_DQ, STAGES)
// by taking the kernels' addresses.
#define FVBM_INST(DT, Bc, D, C) (const void*)&flash_bwd_mma<DT, Bc, D, C, true, 1>,  \
                                (const void*)&flash_bwd_mma<DT, Bc, D, C, false, 1>, \
                                (const void*)&flash_bwd_mma<DT, Bc, D, C, true, 2>,  \
                                (const void*)&flash_bwd_mma<DT, Bc, D, C, false, 2>,
#define FVBM_INST_C(DT, Bc, D) FVBM_INST(DT, Bc, D, false) FVBM_INST(DT, Bc, D, true)
#define FVBM_INST_DT(DT)                                                                                  \
    FVBM_INST_C(DT, 64, 64) FVBM_INST_C(DT, 64, 128) FVBM_INST_C(DT, 128, 64) FVBM_INST_C(DT, 128, 128)  \
    (const void*)&flash_bwd_mma_preprocess<DT, 64>, (const void*)&flash_bwd_mma_preprocess<DT, 128>,      \
    (const void*)&flash_bwd_mma_dq<DT, 64, false, 1>, (const void*)&flash_bwd_mma_dq<DT, 64, true, 1>,    \
    (const void*)&flash_bwd_mma_dq<DT, 128, false, 1>, (const void*)&flash_bwd_mma_dq<DT, 128, true, 1>,  \
    (const void*)&flash_bwd_mma_dq<DT, 64, false, 2>, (const void*)&flash_bwd_mma_dq<DT, 64, true, 2>,    \
    (const void*)&flash_bwd_mma_dq<DT, 128, false, 2>, (const void*)&flash_bwd_mma_dq<DT, 128, true, 2>,  \
    (const void*)&flash_bwd_mma_convert<DT>,
__attribute__((used)) static const void* const fvbm_ptx_check[] = {FVBM_INST_DT(0) FVBM_INST_DT(1)};
#endif
