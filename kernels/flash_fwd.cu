// flash_fwd.cu: the FlashAttention-2 forward pass in float32, written to be read.
//
// Same algorithm and same names as flashviz/tiled.py (_forward_fa2), so the two can be
// read side by side:
//   Q_i, K_j, V_j   tiles of Q (Br rows), K and V (Bc rows), staged in shared memory (SRAM)
//   S_ij, P_ij      the Br x Bc score tile and its exponentials
//   m_i, l_i, O_i   running row max, running row sum, unnormalised output (registers)
//   alpha           exp(m_old - m_new), the rescale factor of the online softmax
//   Br, Bc, Tr, Tc  block sizes and block counts; i = query block, j = key block
//   r0/r1, c0/c1    first/one-past-last row of the query block, column of the key block
// Each block of the kernel opens with a tag, "// [step] Alg. 1 line k: ...": the step's name in
// flashviz/steps.py (the Trace's event kinds, the tags of tiled.py) and the line of
// FlashAttention-2 (Dao 2023), Algorithm 1, that it implements.
//
// Layout: Q (B,H,Nq,D), K and V (B,H,Nk,D), C-contiguous float32; O (B,H,Nq,D) and
// lse (B,H,Nq) float32. Grid (Tr, B*H): one thread block per (query block i, head bh).
// Block 256 threads = 16 x 16 (ty, tx). Thread (ty, tx) owns
//   rows     r = ty + 16*a   (a < Br/16)   of S_ij, P_ij, O_i, m_i, l_i
//   columns  c = tx + 16*b   (b < Bc/16)   of S_ij
//   columns  x = tx + 16*q   (q < D/16)    of O_i
// so one row of S_ij lives in the 16 lanes of one half-warp: row max and row sum are
// reduced with __shfl_xor_sync over offsets 8, 4, 2, 1 without touching shared memory.
//
// Causal masking is bottom-right aligned: query row r sees key c iff c <= r + Nk - Nq.
// Masked scores are a true -inf; a row that sees no key writes O = 0 and lse = -inf.
//
// Header-free on purpose: NVRTC from the pip CUDA wheels has no <mma.h> and no INFINITY.

#include "fv_ptx.cuh"   // neg_inf (and the PTX wrappers the tensor-core kernels use)
#include "fv_trace.cuh" // the timeline switch: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1

using fvptx::neg_inf;

// Padding of 4 floats per shared-memory row: rows stay 16-byte aligned (float4 loads) and
// eight consecutive rows start in eight different 4-bank groups, so the float4 reads along
// the reduction dimension in the two inner products are free of bank conflicts.
constexpr int PAD = 4;
constexpr float LOG2E = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e)); exp2 is one instruction

template <int Br, int Bc, int D>
__global__ void __launch_bounds__(256)
flash_fwd(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
          float* __restrict__ O, float* __restrict__ lse,
          int Nq, int Nk, float scale, int causal FV_TRACE_PARAMS)
{
    static_assert(Br % 16 == 0 && Bc % 16 == 0 && D % 16 == 0, "Br, Bc, D must be multiples of 16");
    constexpr int A = Br / 16;       // rows of S_ij / O_i per thread
    constexpr int NB = Bc / 16;      // columns of S_ij per thread
    constexpr int X = D / 16;        // columns of O_i per thread
    constexpr int LDQ = D + PAD;     // row strides (floats) of the shared-memory tiles
    constexpr int LDK = D + PAD;
    constexpr int LDV = Bc + PAD;
    constexpr int LDP = Bc + PAD;
    // Unrolling: the two inner products below are fully unrolled when a thread's tile is
    // small; when it holds more than 64 accumulators (S_ij plus O_i, e.g. Br=128 with
    // Bc=128 or d=128) full unrolling makes the code too large and an unroll of 4 was
    // about 2x faster on an H200 (128x64, d=128: 66 ms -> 32 ms at N=4096).
    constexpr int UNROLL = (A * NB + A * X > 64) ? 4 : 32;

    // Shared memory (SRAM): Q_i [Br][D+4] | K_j [Bc][D+4] | V_j transposed, Vt_j [D][Bc+4] | P_ij [Br][Bc+4]
    extern __shared__ float4 smem_f4[];
    float* Q_i = reinterpret_cast<float*>(smem_f4);
    float* K_j = Q_i + Br * LDQ;
    float* Vt_j = K_j + Bc * LDK;
    float* P_ij = Vt_j + D * LDV;

    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    int bh = blockIdx.y;                             // batch * head index
    const int Tr = gridDim.x;
    // Causal: the last query blocks see the most keys; start those first so the tail of the
    // launch is made of short blocks.
    int i = causal ? (Tr - 1 - (int)blockIdx.x) : (int)blockIdx.x;
    [[maybe_unused]] int b0 = 0;                     // (the batch is in bh)
    FV_BLOCK_ORDER(i, bh, b0);                       // the lesson's other orders (fv_trace.cuh); nothing by default
    const int r0 = i * Br;
    const int r1 = min(r0 + Br, Nq);
    const int offset = Nk - Nq;                      // causal: row r sees columns c <= r + offset
    // timeline (traced builds only): lane 0 of each of the 8 warps writes its warp's steps
    FV_TRACE_BEGIN(8, tid >> 5, (tid & 31) == 0, tid == 0);
    FV_DECL(t_a);
    FV_DECL(t_b);
    FV_NOW(t_a);

    const float* Qh = Q + (size_t)bh * Nq * D;
    const float* Kh = K + (size_t)bh * Nk * D;
    const float* Vh = V + (size_t)bh * Nk * D;

    // Key blocks this query block visits (Tc, or fewer under the causal mask: tiles right of
    // the diagonal are skipped entirely).
    const int Tc = (Nk + Bc - 1) / Bc;
    int n_j = Tc;
    if (causal) {
        const int last_visible = (r1 - 1) + offset;
        n_j = last_visible < 0 ? 0 : min(Tc, last_visible / Bc + 1);
    }

    // [load_Q] Alg. 1 line 4: load Q_i from HBM to SRAM (rows past Nq are zero).
    for (int e = tid; e < Br * (D / 4); e += 256) {
        const int rr = e / (D / 4), k4 = e % (D / 4);
        float4 q4 = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + rr < Nq) q4 = reinterpret_cast<const float4*>(Qh + (size_t)(r0 + rr) * D)[k4];
        *reinterpret_cast<float4*>(&Q_i[rr * LDQ + 4 * k4]) = q4;
    }

    FV_NOW(t_b);
    FV_EVENT(-1, FV_STAGE_LOAD_Q, t_a, t_b);

    // [init] Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf (on chip, in registers).
    float m_i[A], l_i[A], O_i[A][X];
#pragma unroll
    for (int a = 0; a < A; ++a) {
        m_i[a] = neg_inf();
        l_i[a] = 0.f;
#pragma unroll
        for (int q = 0; q < X; ++q) O_i[a][q] = 0.f;
    }

    // [load_KV] Alg. 1 line 7: for j = 1 .. Tc (line 6), load K_j, V_j from HBM to SRAM.
    for (int j = 0; j < n_j; ++j) {
        const int c0 = j * Bc;

        __syncthreads();  // the previous step is done reading K_j, Vt_j, P_ij (and Q_i is written)
        FV_NOW(t_a);

        // K_j, then V_j (columns past Nk are zero).
        for (int e = tid; e < Bc * (D / 4); e += 256) {
            const int cc = e / (D / 4), k4 = e % (D / 4);
            float4 k4v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (c0 + cc < Nk) k4v = reinterpret_cast<const float4*>(Kh + (size_t)(c0 + cc) * D)[k4];
            *reinterpret_cast<float4*>(&K_j[cc * LDK + 4 * k4]) = k4v;
        }
        // V_j is stored transposed (Vt_j[x][c]) so that O_i += P_ij V_j also reads float4
        // along its reduction dimension c. Neighbouring threads take neighbouring c: the
        // scattered shared-memory writes then land in different banks.
        for (int e = tid; e < Bc * (D / 4); e += 256) {
            const int cc = e % Bc, x4 = e / Bc;
            float4 v4 = make_float4(0.f, 0.f, 0.f, 0.f);
            if (c0 + cc < Nk) v4 = reinterpret_cast<const float4*>(Vh + (size_t)(c0 + cc) * D)[x4];
            Vt_j[(4 * x4 + 0) * LDV + cc] = v4.x;
            Vt_j[(4 * x4 + 1) * LDV + cc] = v4.y;
            Vt_j[(4 * x4 + 2) * LDV + cc] = v4.z;
            Vt_j[(4 * x4 + 3) * LDV + cc] = v4.w;
        }
        __syncthreads();
        FV_NOW(t_b);
        FV_EVENT(j, FV_STAGE_LOAD_KV, t_a, t_b);

        // [compute_S] Alg. 1 line 8: S_ij = Q_i K_j^T (times scale), each thread an A x NB sub-tile.
        // The scale and the mask are applied in the next loop, on the way to the row max.
        float S_ij[A][NB];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < NB; ++b) S_ij[a][b] = 0.f;
#pragma unroll UNROLL
        for (int k = 0; k < D; k += 4) {
            float4 q4[A], k4[NB];
#pragma unroll
            for (int a = 0; a < A; ++a) q4[a] = *reinterpret_cast<const float4*>(&Q_i[(ty + 16 * a) * LDQ + k]);
#pragma unroll
            for (int b = 0; b < NB; ++b) k4[b] = *reinterpret_cast<const float4*>(&K_j[(tx + 16 * b) * LDK + k]);
#pragma unroll
            for (int a = 0; a < A; ++a)
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    S_ij[a][b] = fmaf(q4[a].x, k4[b].x, S_ij[a][b]);
                    S_ij[a][b] = fmaf(q4[a].y, k4[b].y, S_ij[a][b]);
                    S_ij[a][b] = fmaf(q4[a].z, k4[b].z, S_ij[a][b]);
                    S_ij[a][b] = fmaf(q4[a].w, k4[b].w, S_ij[a][b]);
                }
        }

        FV_NOW(t_a);
        FV_EVENT(j, FV_STAGE_COMPUTE_S, t_b, t_a);

        // [update_ml] Alg. 1 line 9: S_ij scaled and masked; m_new = max(m_i, rowmax(S_ij));
        // P_ij = exp(S_ij - m_new); l_i = alpha * l_i + rowsum(P_ij) with alpha = exp(m_i - m_new).
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const int r = r0 + ty + 16 * a;
            float row_max = neg_inf();
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const int c = c0 + tx + 16 * b;
                float s = S_ij[a][b] * scale;
                if (c >= Nk || (causal && c > r + offset)) s = neg_inf();  // partial tile / causal mask
                S_ij[a][b] = s;
                row_max = fmaxf(row_max, s);
            }
#pragma unroll
            for (int off = 8; off >= 1; off >>= 1)  // the 16 lanes of this half-warp hold row r
                row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, off));
            const float m_new = fmaxf(m_i[a], row_max);
            // A row that has seen no key yet has m_new = -inf: subtract 0 instead, so that
            // exp(-inf - -inf) = NaN never happens (exp(-inf - 0) = 0).
            const float m_use = (m_new == neg_inf()) ? 0.f : m_new;
            const float alpha = exp2f((m_i[a] - m_use) * LOG2E);  // 0 on the first visible tile
            float row_sum = 0.f;
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const float p = exp2f((S_ij[a][b] - m_use) * LOG2E);  // masked: exp(-inf) = 0
                P_ij[(ty + 16 * a) * LDP + tx + 16 * b] = p;
                row_sum += p;
            }
#pragma unroll
            for (int off = 8; off >= 1; off >>= 1)
                row_sum += __shfl_xor_sync(0xffffffffu, row_sum, off);
            l_i[a] = alpha * l_i[a] + row_sum;
            m_i[a] = m_new;
            // [accumulate_O] Alg. 1 line 10 (first half): O_i = diag(alpha) O_i
#pragma unroll
            for (int q = 0; q < X; ++q) O_i[a][q] *= alpha;
        }
        FV_NOW(t_b);
        FV_EVENT(j, FV_STAGE_UPDATE_ML, t_a, t_b);
        __syncthreads();  // P_ij is complete in SRAM

        // [accumulate_O] Alg. 1 line 10 (second half): O_i += P_ij V_j
#pragma unroll UNROLL
        for (int c = 0; c < Bc; c += 4) {
            float4 p4[A], v4[X];
#pragma unroll
            for (int a = 0; a < A; ++a) p4[a] = *reinterpret_cast<const float4*>(&P_ij[(ty + 16 * a) * LDP + c]);
#pragma unroll
            for (int q = 0; q < X; ++q) v4[q] = *reinterpret_cast<const float4*>(&Vt_j[(tx + 16 * q) * LDV + c]);
#pragma unroll
            for (int a = 0; a < A; ++a)
#pragma unroll
                for (int q = 0; q < X; ++q) {
                    O_i[a][q] = fmaf(p4[a].x, v4[q].x, O_i[a][q]);
                    O_i[a][q] = fmaf(p4[a].y, v4[q].y, O_i[a][q]);
                    O_i[a][q] = fmaf(p4[a].z, v4[q].z, O_i[a][q]);
                    O_i[a][q] = fmaf(p4[a].w, v4[q].w, O_i[a][q]);
                }
        }
        FV_NOW(t_a);
        FV_EVENT(j, FV_STAGE_ACCUMULATE_O, t_b, t_a);    // waits for P_ij, then O_i += P_ij V_j
    }
    FV_NOW(t_a);

    // [write_O] Alg. 1 lines 12-15: O_i = diag(l_i)^-1 O_i; lse_i = m_i + log(l_i); write both to HBM.
    // A row that saw no key (l_i = 0) writes O = 0 and lse = -inf.
#pragma unroll
    for (int a = 0; a < A; ++a) {
        const int r = r0 + ty + 16 * a;
        if (r < Nq) {
            const bool seen = l_i[a] > 0.f;
            const float inv_l = seen ? 1.f / l_i[a] : 0.f;
            float* O_row = O + ((size_t)bh * Nq + r) * D;
#pragma unroll
            for (int q = 0; q < X; ++q) O_row[tx + 16 * q] = O_i[a][q] * inv_l;
            if (tx == 0) lse[(size_t)bh * Nq + r] = seen ? m_i[a] + logf(l_i[a]) : neg_inf();
        }
    }
    FV_NOW(t_b);
    FV_EVENT(-1, FV_STAGE_WRITE_O, t_a, t_b);
    FV_TRACE_END(i, bh, 0, n_j);
}

#ifdef FLASHVIZ_PTX_CHECK
// Only for the CPU build check (`make ptx`: nvcc -DFLASHVIZ_PTX_CHECK --ptx): instantiate the
// template for every supported (Br, Bc, d) so the compiler really compiles its body. The
// runner compiles the instantiation it needs through NVRTC and never defines this macro.
#define FLASHVIZ_INSTANTIATE(Br, Bc, D) \
    template __global__ void flash_fwd<Br, Bc, D>(const float*, const float*, const float*, float*, float*, int, int, float, int FV_TRACE_TYPES);
#define FLASHVIZ_INSTANTIATE_D(Br, Bc) FLASHVIZ_INSTANTIATE(Br, Bc, 32) FLASHVIZ_INSTANTIATE(Br, Bc, 64) FLASHVIZ_INSTANTIATE(Br, Bc, 128)
FLASHVIZ_INSTANTIATE_D(16, 16) FLASHVIZ_INSTANTIATE_D(16, 32) FLASHVIZ_INSTANTIATE_D(16, 64) FLASHVIZ_INSTANTIATE_D(16, 128)
FLASHVIZ_INSTANTIATE_D(32, 16) FLASHVIZ_INSTANTIATE_D(32, 32) FLASHVIZ_INSTANTIATE_D(32, 64) FLASHVIZ_INSTANTIATE_D(32, 128)
FLASHVIZ_INSTANTIATE_D(64, 16) FLASHVIZ_INSTANTIATE_D(64, 32) FLASHVIZ_INSTANTIATE_D(64, 64) FLASHVIZ_INSTANTIATE_D(64, 128)
FLASHVIZ_INSTANTIATE_D(128, 16) FLASHVIZ_INSTANTIATE_D(128, 32) FLASHVIZ_INSTANTIATE_D(128, 64) FLASHVIZ_INSTANTIATE_D(128, 128)
#endif
