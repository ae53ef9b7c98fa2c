// flash_bwd.cu: the FlashAttention-2 backward pass in float32, written to be read.
//
// Same algorithm and same names as flashviz/backward.py (_backward_fa2), so the two can be read
// side by side, and the same tiling and thread layout as the forward teaching kernel flash_fwd.cu:
//   Q_i, dO_i, L_i, D_i   a query block (Br rows): queries, output gradient, the forward's lse, D
//   K_j, V_j              a key block (Bc rows), kept in shared memory (SRAM) for the whole block
//   S_ij, P_ij            the Br x Bc score tile and its probabilities, recomputed from L_i
//   dP_ij, dS_ij          dO_i V_jᵀ and P_ij ∘ (dP_ij − D_i)
//   dK_j, dV_j            the key block's gradients, accumulated on chip (registers)
//   Br, Bc, Tr, Tc        block sizes and block counts; i = query block, j = key block
//   r0/r1, c0/c1          first/one-past-last row of the query block, column of the key block
// Each block of the kernels opens with a tag, "// [step] Alg. 2 line k: ...": the step's name in
// flashviz/steps.py and the line of FlashAttention-2 (Dao 2023), Algorithm 2, that it implements.
//
// Three kernels, launched in this order by flashviz/gpu/teaching/backward.py:
//   flash_bwd_preprocess<D>   D = rowsum(dO ∘ O) (minus dlse, the gradient of lse, when one is given)
//                             and dQ = 0 in HBM (Alg. 2 lines 3-4);
//   flash_bwd<Br, Bc, D>      key blocks j outer (one thread block per (j, head)), query blocks i inner:
//                             dK_j, dV_j on chip; dQ_i += scale·dS_ij K_j by float32 atomicAdd into
//                             HBM (FA2's choice: fast, but the order of the additions, hence dQ's last
//                             bits, changes from run to run) — or, with atomic_dQ = 0, no dQ at all;
//   flash_bwd_dq<Br, Bc, D>   the deterministic dQ (deterministic=True in Python): query blocks outer,
//                             like the forward, recomputing P_ij and dS_ij once more and keeping dQ_i
//                             on chip, so every element is summed in one fixed order: the same bits on
//                             every run, for two extra matmuls per tile (S_ij and dP_ij again).
//
// Timeline switch: built with -DFLASHVIZ_TRACE=1 (kernels/fv_trace.cuh), flash_bwd records for each
// thread block (key block j) its SM and times, and for each query block i and warp the steps load_Qi,
// recompute_P, accumulate_dV, compute_dS, accumulate_dK, update_dQ (FV_BSTAGE_*), with load_KV and
// write_dKdV once a block; the normal build has none of it (flashviz.gpu.trace_backward).
//
// Layout: Q, dQ (B,H,Nq,D), K, V, dK, dV (B,H,Nk,D), O, dO (B,H,Nq,D), lse, D (B,H,Nq): C-contiguous
// float32. Block 256 threads = 16 x 16 (ty, tx). Thread (ty, tx) owns
//   rows    r = ty + 16*a  (a < Br/16)  and columns c = tx + 16*b (b < Bc/16) of S_ij, P_ij, dP_ij, dS_ij
//   rows    c = ty + 16*b  (b < Bc/16)  and columns x = tx + 16*q (q < D/16)  of dK_j, dV_j
//   rows    r = ty + 16*a  (a < Br/16)  and columns x = tx + 16*q (q < D/16)  of dQ_i
//
// Causal masking is bottom-right aligned: query row r sees key c iff c <= r + Nk - Nq. A masked
// score has P = 0; a row that sees no key has lse = -inf and P = 0 on every key, so its dQ and its
// share of dK and dV are exactly 0 (never NaN). Key blocks no query sees write dK = dV = 0.
//
// Header-free on purpose: NVRTC from the pip CUDA wheels has no <mma.h> and no INFINITY.

#include "fv_ptx.cuh"   // neg_inf
#include "fv_trace.cuh" // the timeline switch of flash_bwd: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1

using fvptx::neg_inf;

namespace fvbwd {

// Padding of 4 floats per shared-memory row, as in flash_fwd.cu: rows stay 16-byte aligned (float4
// loads) and the float4 reads along d of eight consecutive rows land in eight different bank groups.
constexpr int PAD = 4;
constexpr float LOG2E = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))

// rows [row0, row0 + R) of a (N, D) matrix into a padded shared tile [R][D + PAD]; rows past N are 0.
template <int R, int D>
__device__ __forceinline__ void load_rows(float* tile, const float* __restrict__ src, int row0, int N, int tid)
{
    for (int e = tid; e < R * (D / 4); e += 256) {
        const int rr = e / (D / 4), k4 = e % (D / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row0 + rr < N) v = reinterpret_cast<const float4*>(src + (size_t)(row0 + rr) * D)[k4];
        *reinterpret_cast<float4*>(&tile[rr * (D + PAD) + 4 * k4]) = v;
    }
}

// acc[a][b] = sum_k A[ty + 16a][k] · B[tx + 16b][k]: one thread's sub-tile of A Bᵀ, A [.][D + PAD] and
// B [.][D + PAD] in shared memory (S_ij = Q_i K_jᵀ and dP_ij = dO_i V_jᵀ are both this product).
template <int NA, int NB, int D>
__device__ __forceinline__ void tile_ABt(float (&acc)[NA][NB], const float* A, const float* B, int ty, int tx)
{
#pragma unroll
    for (int a = 0; a < NA; ++a)
#pragma unroll
        for (int b = 0; b < NB; ++b) acc[a][b] = 0.f;
#pragma unroll 8
    for (int k = 0; k < D; k += 4) {
        float4 a4[NA], b4[NB];
#pragma unroll
        for (int a = 0; a < NA; ++a) a4[a] = *reinterpret_cast<const float4*>(&A[(ty + 16 * a) * (D + PAD) + k]);
#pragma unroll
        for (int b = 0; b < NB; ++b) b4[b] = *reinterpret_cast<const float4*>(&B[(tx + 16 * b) * (D + PAD) + k]);
#pragma unroll
        for (int a = 0; a < NA; ++a)
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                acc[a][b] = fmaf(a4[a].x, b4[b].x, acc[a][b]);
                acc[a][b] = fmaf(a4[a].y, b4[b].y, acc[a][b]);
                acc[a][b] = fmaf(a4[a].z, b4[b].z, acc[a][b]);
                acc[a][b] = fmaf(a4[a].w, b4[b].w, acc[a][b]);
            }
    }
}

// P_ij = exp(S_ij · scale − L_i) for one thread's sub-tile, in place: 0 where the key is past Nk or
// (causal) right of the diagonal, and on rows with L_i = −inf (no visible key; also the padding rows
// past Nq, whose L_i the loader sets to −inf). exp(s − L) <= 1 because L_i >= every score of row i.
template <int NA, int NB>
__device__ __forceinline__ void probabilities(float (&S)[NA][NB], const float* lse_i, int r0, int c0, int Nk,
                                              int offset, int causal, float scale, int ty, int tx)
{
#pragma unroll
    for (int a = 0; a < NA; ++a) {
        const int rr = ty + 16 * a, r = r0 + rr;
        const float L = lse_i[rr];
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const int c = c0 + tx + 16 * b;
            const bool masked = c >= Nk || (causal && c > r + offset) || L == neg_inf();
            S[a][b] = masked ? 0.f : exp2f((S[a][b] * scale - L) * LOG2E);
        }
    }
}

}  // namespace fvbwd

// ---------------------------------------------------------------------------------------------------
// Preprocessing. Grid (ceil(Nq / 8), B*H); 256 threads = 8 warps, one row each.
template <int D>
__global__ void __launch_bounds__(256)
flash_bwd_preprocess(const float* __restrict__ O, const float* __restrict__ dO, const float* __restrict__ dlse,
                     float* __restrict__ Dvec, float* __restrict__ dQ, int Nq, int zero_dQ)
{
    const int lane = threadIdx.x & 31, r = blockIdx.x * 8 + (threadIdx.x >> 5);
    const int bh = blockIdx.y;
    if (r >= Nq) return;
    const size_t row = (size_t)bh * Nq + r;
    // [compute_D] Alg. 2 lines 3-4: dQ = 0 in HBM (for the atomic adds); D_i = rowsum(dO_i ∘ O_i) to HBM.
    // With dlse (the gradient of the returned lse, when the caller uses it): D_i − dlse_i, because
    // dlse_i / dS_ij = P_ij folds into dS_ij = P_ij ∘ (dP_ij − D_i + dlse_i).
    float acc = 0.f;
    for (int x = lane; x < D; x += 32) {
        acc = fmaf(dO[row * D + x], O[row * D + x], acc);
        if (zero_dQ) dQ[row * D + x] = 0.f;
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) Dvec[row] = dlse ? acc - dlse[row] : acc;
}

// ---------------------------------------------------------------------------------------------------
// The main backward kernel, FA2 Algorithm 2. Grid (Tc, B*H): one thread block per (key block j, head).
// STORED_P (chapter 6's "recompute versus store", measured): read P_ij from P_stored, (B*H, Nq, Nk)
// float32 with 0 where masked, instead of recomputing it; P_stored is unused (null) otherwise.
template <int Br, int Bc, int D, bool STORED_P = false>
__global__ void __launch_bounds__(256)
flash_bwd(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
          const float* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ Dvec,
          float* __restrict__ dQ, float* __restrict__ dK, float* __restrict__ dV,
          int Nq, int Nk, float scale, int causal, int atomic_dQ, const float* __restrict__ P_stored FV_TRACE_PARAMS)
{
    using namespace fvbwd;
    static_assert(Br % 16 == 0 && Bc % 16 == 0 && D % 16 == 0, "Br, Bc, D must be multiples of 16");
    constexpr int A = Br / 16;       // rows of the score tile per thread
    constexpr int NB = Bc / 16;      // columns of the score tile per thread; rows of dK_j, dV_j per thread
    constexpr int X = D / 16;        // columns of dK_j, dV_j, dQ_i per thread
    constexpr int LD = D + PAD;      // row stride (floats) of Q_i, dO_i, K_j, V_j
    constexpr int LDP = Bc + PAD;    // row stride of P_ij, dS_ij

    // Shared memory (SRAM): K_j, V_j [Bc][D+4] | Q_i, dO_i [Br][D+4] | P_ij, dS_ij [Br][Bc+4] | L_i, D_i [Br]
    extern __shared__ float4 smem_f4[];
    float* K_j = reinterpret_cast<float*>(smem_f4);
    float* V_j = K_j + Bc * LD;
    float* Q_i = V_j + Bc * LD;
    float* dO_i = Q_i + Br * LD;
    float* P_ij = dO_i + Br * LD;
    float* dS_ij = P_ij + Br * LDP;
    float* L_i = dS_ij + Br * LDP;
    float* D_i = L_i + Br;

    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int bh = blockIdx.y;
    const int j = blockIdx.x;
    const int c0 = j * Bc;
    const int offset = Nk - Nq;                    // causal: row r sees columns c <= r + offset
    const int Tr = (Nq + Br - 1) / Br;

    const float* Qh = Q + (size_t)bh * Nq * D;
    const float* dOh = dO + (size_t)bh * Nq * D;
    const float* Lh = lse + (size_t)bh * Nq;
    const float* Dh = Dvec + (size_t)bh * Nq;
    float* dQh = dQ + (size_t)bh * Nq * D;

    // Query blocks that see K_j: all of them, or under the causal mask those with a row r such that
    // c0 <= r + offset, i.e. from the block holding row c0 - offset on (none when that row is past Nq).
    int i_first = 0;
    if (causal && c0 - offset > 0) i_first = (c0 - offset) / Br;
    const int i_last = (causal && c0 - offset >= Nq) ? -1 : Tr - 1;

    // timeline (FLASHVIZ_TRACE builds only): one record a block (key block j), one writer a warp, a
    // row per query block i; the steps are numbered FV_BSTAGE_* (fv_trace.cuh)
    FV_TRACE_BEGIN(8, tid >> 5, (tid & 31) == 0, tid == 0);
    FV_DECL(t_a);
    FV_DECL(t_b);
    FV_NOW(t_a);
    // [load_KV] Alg. 2 line 6: for key block j (the outer loop: this thread block), K_j, V_j from HBM
    // to SRAM once (columns past Nk are zero).
    load_rows<Bc, D>(K_j, K + (size_t)bh * Nk * D, c0, Nk, tid);
    load_rows<Bc, D>(V_j, V + (size_t)bh * Nk * D, c0, Nk, tid);
    FV_NOW(t_b);
    FV_EVENT(-1, FV_BSTAGE_LOAD_KV, t_a, t_b);

    // [init_dKdV] Alg. 2 line 7: dK_j = 0, dV_j = 0 on chip (registers). dK_j accumulates dS_ijᵀ Q_i;
    // the scale is applied once, when it is written.
    float dK_j[NB][X], dV_j[NB][X];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int q = 0; q < X; ++q) dK_j[b][q] = dV_j[b][q] = 0.f;

    // [load_Qi] Alg. 2 line 9: for each query block i that sees K_j (line 8), Q_i, dO_i, L_i, D_i from
    // HBM to SRAM. Rows past Nq are zero with L_i = -inf, so their P_ij and dS_ij are 0.
    for (int i = i_first; i <= i_last; ++i) {
        const int r0 = i * Br;
        __syncthreads();  // the previous query block is done with Q_i, dO_i, P_ij, dS_ij (and K_j, V_j are in)
        load_rows<Br, D>(Q_i, Qh, r0, Nq, tid);
        load_rows<Br, D>(dO_i, dOh, r0, Nq, tid);
        for (int rr = tid; rr < Br; rr += 256) {
            L_i[rr] = r0 + rr < Nq ? Lh[r0 + rr] : neg_inf();
            D_i[rr] = r0 + rr < Nq ? Dh[r0 + rr] : 0.f;
        }
        __syncthreads();
        FV_NOW(t_a);
        FV_EVENT(i, FV_BSTAGE_LOAD_QI, t_b, t_a);

        // [recompute_P] Alg. 2 lines 10-11: S_ij = scale · Q_i K_jᵀ on chip; P_ij = exp(S_ij − L_i)
        // (0 where masked), from the forward's L_i instead of a stored P.
        // STORED_P: P_ij as the forward left it in HBM (Nq x Nk per head) — no S_ij, no exp, but Br·Bc
        // numbers read for each tile
        float P[A][NB];
        if constexpr (STORED_P) {
            const float* Ph = P_stored + (size_t)bh * Nq * Nk;
#pragma unroll
            for (int a = 0; a < A; ++a) {
                const int r = r0 + ty + 16 * a;
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    const int c = c0 + tx + 16 * b;
                    P[a][b] = (r < Nq && c < Nk) ? Ph[(size_t)r * Nk + c] : 0.f;
                }
            }
        } else {
            tile_ABt<A, NB, D>(P, Q_i, K_j, ty, tx);
            probabilities<A, NB>(P, L_i, r0, c0, Nk, offset, causal, scale, ty, tx);
        }
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < NB; ++b) P_ij[(ty + 16 * a) * LDP + tx + 16 * b] = P[a][b];
        __syncthreads();  // P_ij is complete in SRAM
        FV_NOW(t_b);
        FV_EVENT(i, FV_BSTAGE_RECOMPUTE_P, t_a, t_b);

        // [accumulate_dV] Alg. 2 line 12: dV_j ← dV_j + P_ijᵀ dO_i. Thread (ty, tx) sums over the Br
        // rows r for its rows c = ty + 16b of dV_j: P_ij[r][c] is one word for a half-warp (broadcast),
        // dO_i[r][x] sixteen consecutive words.
#pragma unroll 4
        for (int r = 0; r < Br; ++r) {
            float p[NB], g[X];
#pragma unroll
            for (int b = 0; b < NB; ++b) p[b] = P_ij[r * LDP + ty + 16 * b];
#pragma unroll
            for (int q = 0; q < X; ++q) g[q] = dO_i[r * LD + tx + 16 * q];
#pragma unroll
            for (int b = 0; b < NB; ++b)
#pragma unroll
                for (int q = 0; q < X; ++q) dV_j[b][q] = fmaf(p[b], g[q], dV_j[b][q]);
        }
        FV_NOW(t_a);
        FV_EVENT(i, FV_BSTAGE_ACCUMULATE_DV, t_b, t_a);

        // [compute_dS] Alg. 2 lines 13-14: dP_ij = dO_i V_jᵀ; dS_ij = P_ij ∘ (dP_ij − D_i), to SRAM.
        float dP[A][NB];
        tile_ABt<A, NB, D>(dP, dO_i, V_j, ty, tx);
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const float Dr = D_i[ty + 16 * a];
#pragma unroll
            for (int b = 0; b < NB; ++b) dS_ij[(ty + 16 * a) * LDP + tx + 16 * b] = P[a][b] * (dP[a][b] - Dr);
        }
        __syncthreads();  // dS_ij is complete in SRAM
        FV_NOW(t_b);
        FV_EVENT(i, FV_BSTAGE_COMPUTE_DS, t_a, t_b);

        // [accumulate_dK] Alg. 2 line 16: dK_j ← dK_j + scale · dS_ijᵀ Q_i (scale at the write).
#pragma unroll 4
        for (int r = 0; r < Br; ++r) {
            float s[NB], qv[X];
#pragma unroll
            for (int b = 0; b < NB; ++b) s[b] = dS_ij[r * LDP + ty + 16 * b];
#pragma unroll
            for (int q = 0; q < X; ++q) qv[q] = Q_i[r * LD + tx + 16 * q];
#pragma unroll
            for (int b = 0; b < NB; ++b)
#pragma unroll
                for (int q = 0; q < X; ++q) dK_j[b][q] = fmaf(s[b], qv[q], dK_j[b][q]);
        }
        FV_NOW(t_a);
        FV_EVENT(i, FV_BSTAGE_ACCUMULATE_DK, t_b, t_a);

        // [update_dQ] Alg. 2 line 15: dQ_i ← dQ_i + scale · dS_ij K_j, added into HBM with float32
        // atomicAdd (other key blocks add to the same dQ_i at the same time). Skipped when the
        // deterministic dQ pass (flash_bwd_dq) computes dQ instead.
        if (atomic_dQ) {
#pragma unroll
            for (int a = 0; a < A; ++a) {
                const int r = r0 + ty + 16 * a;
                float acc[X];
#pragma unroll
                for (int q = 0; q < X; ++q) acc[q] = 0.f;
#pragma unroll 4
                for (int c = 0; c < Bc; ++c) {
                    const float s = dS_ij[(ty + 16 * a) * LDP + c];
#pragma unroll
                    for (int q = 0; q < X; ++q) acc[q] = fmaf(s, K_j[c * LD + tx + 16 * q], acc[q]);
                }
                if (r < Nq) {
#pragma unroll
                    for (int q = 0; q < X; ++q) atomicAdd(&dQh[(size_t)r * D + tx + 16 * q], scale * acc[q]);
                }
            }
        }
        FV_NOW(t_b);                                    // the next load_Qi starts here, atomics or not
        if (atomic_dQ) FV_EVENT(i, FV_BSTAGE_UPDATE_DQ, t_a, t_b);
    }
    FV_NOW(t_a);

    // [write_dKdV] Alg. 2 line 18: dK_j (times scale), dV_j to HBM, once per key block; zeros for a key
    // block no query sees.
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        const int c = c0 + ty + 16 * b;
        if (c < Nk) {
            float* dK_row = dK + ((size_t)bh * Nk + c) * D;
            float* dV_row = dV + ((size_t)bh * Nk + c) * D;
#pragma unroll
            for (int q = 0; q < X; ++q) {
                dK_row[tx + 16 * q] = scale * dK_j[b][q];
                dV_row[tx + 16 * q] = dV_j[b][q];
            }
        }
    }
    FV_NOW(t_b);
    FV_EVENT(-1, FV_BSTAGE_WRITE_DKDV, t_a, t_b);
    FV_TRACE_END(j, bh, 0, i_last - i_first + 1);
}

// ---------------------------------------------------------------------------------------------------
// The deterministic dQ pass. Grid (Tr, B*H): one thread block per (query block i, head), key blocks
// inner, like the forward; dQ_i stays on chip and is written once, so no atomics and one summation
// order. It recomputes P_ij and dS_ij, the price of determinism here (FA3 instead orders the atomic
// adds with semaphores).
template <int Br, int Bc, int D>
__global__ void __launch_bounds__(256)
flash_bwd_dq(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
             const float* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ Dvec,
             float* __restrict__ dQ, int Nq, int Nk, float scale, int causal)
{
    using namespace fvbwd;
    static_assert(Br % 16 == 0 && Bc % 16 == 0 && D % 16 == 0, "Br, Bc, D must be multiples of 16");
    constexpr int A = Br / 16, NB = Bc / 16, X = D / 16;
    constexpr int LD = D + PAD, LDP = Bc + PAD;

    // Shared memory (SRAM): Q_i, dO_i [Br][D+4] | K_j, V_j [Bc][D+4] | dS_ij [Br][Bc+4] | L_i, D_i [Br]
    extern __shared__ float4 smem_f4[];
    float* Q_i = reinterpret_cast<float*>(smem_f4);
    float* dO_i = Q_i + Br * LD;
    float* K_j = dO_i + Br * LD;
    float* V_j = K_j + Bc * LD;
    float* dS_ij = V_j + Bc * LD;
    float* L_i = dS_ij + Br * LDP;
    float* D_i = L_i + Br;

    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int bh = blockIdx.y;
    const int Tr = gridDim.x;
    const int i = causal ? (Tr - 1 - (int)blockIdx.x) : (int)blockIdx.x;   // causal: the longest rows first
    const int r0 = i * Br, r1 = min(r0 + Br, Nq);
    const int offset = Nk - Nq;
    const int Tc = (Nk + Bc - 1) / Bc;
    int n_j = Tc;
    if (causal) {
        const int last_visible = (r1 - 1) + offset;
        n_j = last_visible < 0 ? 0 : min(Tc, last_visible / Bc + 1);
    }
    const float* Kh = K + (size_t)bh * Nk * D;
    const float* Vh = V + (size_t)bh * Nk * D;

    // [load_Qi] Alg. 2 line 9: Q_i, dO_i, L_i, D_i from HBM to SRAM, once for this query block.
    load_rows<Br, D>(Q_i, Q + (size_t)bh * Nq * D, r0, Nq, tid);
    load_rows<Br, D>(dO_i, dO + (size_t)bh * Nq * D, r0, Nq, tid);
    for (int rr = tid; rr < Br; rr += 256) {
        L_i[rr] = r0 + rr < Nq ? lse[(size_t)bh * Nq + r0 + rr] : neg_inf();
        D_i[rr] = r0 + rr < Nq ? Dvec[(size_t)bh * Nq + r0 + rr] : 0.f;
    }
    float dQ_i[A][X];
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
        for (int q = 0; q < X; ++q) dQ_i[a][q] = 0.f;

    // [load_KV] Alg. 2 line 6: each key block j this query block sees, K_j, V_j from HBM to SRAM.
    for (int j = 0; j < n_j; ++j) {
        const int c0 = j * Bc;
        __syncthreads();  // the previous key block is done with K_j, V_j, dS_ij (and Q_i, dO_i are in)
        load_rows<Bc, D>(K_j, Kh, c0, Nk, tid);
        load_rows<Bc, D>(V_j, Vh, c0, Nk, tid);
        __syncthreads();

        // [recompute_P] Alg. 2 lines 10-11: S_ij = scale · Q_i K_jᵀ; P_ij = exp(S_ij − L_i), in registers.
        float P[A][NB];
        tile_ABt<A, NB, D>(P, Q_i, K_j, ty, tx);
        probabilities<A, NB>(P, L_i, r0, c0, Nk, offset, causal, scale, ty, tx);

        // [compute_dS] Alg. 2 lines 13-14: dP_ij = dO_i V_jᵀ; dS_ij = P_ij ∘ (dP_ij − D_i), to SRAM.
        float dP[A][NB];
        tile_ABt<A, NB, D>(dP, dO_i, V_j, ty, tx);
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const float Dr = D_i[ty + 16 * a];
#pragma unroll
            for (int b = 0; b < NB; ++b) dS_ij[(ty + 16 * a) * LDP + tx + 16 * b] = P[a][b] * (dP[a][b] - Dr);
        }
        __syncthreads();  // dS_ij is complete in SRAM

        // [update_dQ] Alg. 2 line 15: dQ_i ← dQ_i + dS_ij K_j, on chip (scale at the write), in the order
        // j = 0, 1, ...: no read-modify-write in HBM, the same bits on every run.
#pragma unroll
        for (int a = 0; a < A; ++a) {
#pragma unroll 4
            for (int c = 0; c < Bc; ++c) {
                const float s = dS_ij[(ty + 16 * a) * LDP + c];
#pragma unroll
                for (int q = 0; q < X; ++q) dQ_i[a][q] = fmaf(s, K_j[c * LD + tx + 16 * q], dQ_i[a][q]);
            }
        }
    }

    // [update_dQ] Alg. 2 line 15: dQ_i (times scale) to HBM, once; rows that see no key write 0.
#pragma unroll
    for (int a = 0; a < A; ++a) {
        const int r = r0 + ty + 16 * a;
        if (r < Nq) {
            float* dQ_row = dQ + ((size_t)bh * Nq + r) * D;
#pragma unroll
            for (int q = 0; q < X; ++q) dQ_row[tx + 16 * q] = scale * dQ_i[a][q];
        }
    }
}

#ifdef FLASHVIZ_PTX_CHECK
// Only for the CPU build check (`make ptx`: nvcc -DFLASHVIZ_PTX_CHECK --ptx): instantiate the
// templates for every supported (Br, Bc, d) so the compiler really compiles their bodies. The
// runner compiles the instantiations it needs through NVRTC and never defines this macro.
#define FLASHVIZ_INSTANTIATE(Br, Bc, D)                                                                       \
    template __global__ void flash_bwd<Br, Bc, D>(const float*, const float*, const float*, const float*,     \
                                                  const float*, const float*, float*, float*, float*, int,     \
                                                  int, float, int, int, const float* FV_TRACE_TYPES);          \
    template __global__ void flash_bwd<Br, Bc, D, true>(const float*, const float*, const float*, const float*, \
                                                        const float*, const float*, float*, float*, float*, int, \
                                                        int, float, int, int, const float* FV_TRACE_TYPES);    \
    template __global__ void flash_bwd_dq<Br, Bc, D>(const float*, const float*, const float*, const float*,  \
                                                     const float*, const float*, float*, int, int, float, int);
#define FLASHVIZ_INSTANTIATE_D(Br, Bc) \
    FLASHVIZ_INSTANTIATE(Br, Bc, 16) FLASHVIZ_INSTANTIATE(Br, Bc, 32) FLASHVIZ_INSTANTIATE(Br, Bc, 64) FLASHVIZ_INSTANTIATE(Br, Bc, 128)
template __global__ void flash_bwd_preprocess<16>(const float*, const float*, const float*, float*, float*, int, int);
template __global__ void flash_bwd_preprocess<32>(const float*, const float*, const float*, float*, float*, int, int);
template __global__ void flash_bwd_preprocess<64>(const float*, const float*, const float*, float*, float*, int, int);
template __global__ void flash_bwd_preprocess<128>(const float*, const float*, const float*, float*, float*, int, int);
FLASHVIZ_INSTANTIATE_D(16, 16) FLASHVIZ_INSTANTIATE_D(16, 32) FLASHVIZ_INSTANTIATE_D(16, 64) FLASHVIZ_INSTANTIATE_D(16, 128)
FLASHVIZ_INSTANTIATE_D(32, 16) FLASHVIZ_INSTANTIATE_D(32, 32) FLASHVIZ_INSTANTIATE_D(32, 64) FLASHVIZ_INSTANTIATE_D(32, 128)
FLASHVIZ_INSTANTIATE_D(64, 16) FLASHVIZ_INSTANTIATE_D(64, 32) FLASHVIZ_INSTANTIATE_D(64, 64) FLASHVIZ_INSTANTIATE_D(64, 128)
FLASHVIZ_INSTANTIATE_D(128, 16) FLASHVIZ_INSTANTIATE_D(128, 32) FLASHVIZ_INSTANTIATE_D(128, 64) FLASHVIZ_INSTANTIATE_D(128, 128)
#endif
