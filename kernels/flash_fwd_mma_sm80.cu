// flash_fwd_mma_sm80.cu: the FlashAttention-2 forward pass on tensor cores (sm_80 and later),
// fp16 or bf16 in, fp32 accumulation, fp16/bf16 out. The companion of flash_fwd.cu: same
// algorithm, same names (Q_i, K_j, V_j, S_ij, P_ij, m_i, l_i, O_i, Br, Bc), but the two
// products S_ij = Q_i K_j^T and O_i += P_ij V_j run on the tensor cores.
// Each block of the kernel opens with a tag, "// [step] Alg. 1 line k: ...": the step's name in
// flashviz/steps.py and the line of FlashAttention-2 (Dao 2023), Algorithm 1, that it implements.
//
// Partitioning (FA2). Grid (ceil(Nq/Br), H, B): one thread block per (query block i, head h,
// batch b). Block = Br/16 warps (2*Br threads). Warp w owns the 16 query rows
// r0 + 16w .. r0 + 16w + 15 of S_ij, P_ij, O_i, m_i, l_i for the whole loop over key blocks;
// K_j and V_j sit in shared memory, read by all warps. No warp ever needs another warp's
// rows, so the softmax needs no shared memory and no block barrier.
//
// Instructions (inline PTX only, no header files, so NVRTC from the pip wheels compiles it):
//   cp.async.cg.shared.global   16-byte copies HBM -> SRAM without passing through registers;
//                               src_bytes = 0 zero-fills a row past the end of Q or K/V.
//   cp.async.commit_group / wait_group   groups of copies; wait_group N = "all but the N
//                               newest groups of this thread have landed".
//   ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16   four 8x8 b16 matrices from SRAM
//                               straight into the mma fragment layout (.trans for V).
//   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}   D(16x8,f32) += A(16x16) B(16x8).
//   cvt.rn.{f16x2,bf16x2}.f32   two fp32 -> one packed register (first operand = upper half).
//   ex2.approx.ftz.f32          2^x: the softmax runs in base 2 (scale_log2 = scale*log2 e).
//
// Fragment layouts of m16n8k16 (lane = 4*g + t, g = lane/4 in 0..7, t = lane%4 in 0..3;
// each register holds two b16 values, the lower column/row index in the lower half):
//   A (16x16, row-major)  a0 = A[g][2t..2t+1]    a1 = A[g+8][2t..2t+1]
//                         a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B (16x8, "col")       b0 = B[2t..2t+1][g]    b1 = B[2t+8..2t+9][g]
//   C/D (16x8, fp32)      c0,c1 = C[g][2t], C[g][2t+1]      c2,c3 = C[g+8][2t], C[g+8][2t+1]
// So a thread holds rows g and g+8 of its warp's 16 rows (m_i, l_i: two values per thread)
// and a row is spread over the 4 lanes with the same g: row max/sum reduce with shfl_xor 1, 2.
//   S_ij = Q_i K_j^T: A = Q_i (row-major [16][D] per warp, ldmatrix), B[k][n] = K_j[n][k]:
//     K_j is row-major [Bc][D], i.e. exactly the "col" B operand: ldmatrix without .trans.
//   O_i += P_ij V_j: A = P_ij, taken from the S_ij accumulators without any memory traffic:
//     the C layout of two neighbouring n8 tiles 2kk, 2kk+1 is the A layout of k16 step kk
//     (a0 = tile 2kk c0c1, a1 = tile 2kk c2c3, a2 = tile 2kk+1 c0c1, a3 = tile 2kk+1 c2c3).
//     B[k][n] = V_j[k][n] is row-major, so its fragments come from ldmatrix.trans.
//
// Shared memory (dynamic, no padding), b16 elements:
//   Q_i [Br][D] | K_j stage 0 [Bc][D] | K_j stage 1 | V_j stage 0 [Bc][D] | V_j stage 1
//   SMEM_BYTES(Br, Bc, D) = (Br*D + 4*Bc*D) * 2
//   (e.g. Br=128, Bc=64, D=128: 98,304 bytes; Br=128, Bc=128, D=128: 163,840 bytes)
// Each tile row is D*2 bytes = D/8 chunks of 16 bytes; chunk c of row r is stored at chunk
// position c ^ (r & 7) (XOR swizzle). ldmatrix reads one chunk from each of 8 consecutive
// rows: after the swizzle they fall in 8 different 4-bank groups, so no bank conflicts.
//
// Pipeline over key blocks j (K and V double-buffered, stage j & 1):
//   wait K_j, barrier, prefetch K_{j+1} | S_ij = Q_i K_j^T, mask, online softmax, P_ij |
//   wait V_j, barrier, prefetch V_{j+1} | O_i = diag(alpha) O_i + P_ij V_j
// Every thread commits exactly one cp.async group per prefetch point (an empty group when
// there is nothing left to fetch), so "wait_group 1" always means "the tile needed now".
//
// Masking. Key columns c >= Nk are -inf (the last tile may be partial; its missing K/V rows
// are zero-filled so nothing undefined is read). Causal is bottom-right aligned: query row r
// sees key c iff c <= r + Nk - Nq. Key tiles entirely right of the last visible column of
// the block are skipped; only tiles that cross the boundary evaluate the mask. A row that
// sees no key writes O = 0 and lse = -inf; query rows >= Nq are not written.
//
// Output: O_i = diag(l_i)^-1 O_i in the input dtype, and lse = ln(sum_c exp(scale * s_rc))
// = (m_i*scale_log2 + log2 l_i) * ln 2 in fp32, where m_i is the max of the raw scores.

#include "fv_ptx.cuh"   // u16/u32/u64, neg_inf, smem_addr, cp.async, ex2, pack2
#include "fv_mma_sync.cuh"  // ldsm_x4, ldsm_x4_trans, mma16816, swz

namespace fv80 {

using namespace fvptx;
using namespace fvmma;

// Issue the cp.async copies of rows row0 .. row0+ROWS-1 of a [N][D] matrix (row stride
// `stride` elements) into a swizzled SRAM tile; rows >= N are zero-filled.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(u32 s_tile, const u16* __restrict__ g, long long stride,
                                          int row0, int N, int tid)
{
    constexpr int CH = D / 8;                      // 16-byte chunks per row
    static_assert((ROWS * CH) % NT == 0, "tile chunks must divide evenly among the threads");
#pragma unroll
    for (int k = 0; k < ROWS * CH / NT; ++k) {
        const int e = tid + k * NT;
        const int r = e / CH, c = e % CH;
        const bool ok = row0 + r < N;
        const u16* src = ok ? g + (long long)(row0 + r) * stride + c * 8 : g;  // g: any valid address
        cp_async16(s_tile + swz<D>(r, c), src, ok ? 16 : 0);
    }
}

}  // namespace fv80

template <int DT, int Br, int Bc, int D, bool CAUSAL>   // DT: 0 = fp16, 1 = bf16
__global__ void __launch_bounds__(Br * 2) flash_fwd_mma_sm80(
    const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
    u16* __restrict__ O, float* __restrict__ lse,
    int Nq, int Nk, int H,
    long long sQb, long long sQh, long long sQs,
    long long sKb, long long sKh, long long sKs,
    long long sVb, long long sVh, long long sVs,
    long long sOb, long long sOh, long long sOs,
    float scale_log2)
{
    using namespace fv80;
    static_assert(DT == 0 || DT == 1, "DT: 0 = fp16, 1 = bf16");
    static_assert(Br % 16 == 0 && Bc % 16 == 0 && D % 16 == 0, "Br, Bc, D must be multiples of 16");
    constexpr int NT = Br * 2;           // threads per block (Br/16 warps)
    constexpr int NS = Bc / 8;           // n8 tiles of S_ij per warp (S_ij: NS*4 = Bc/2 fp32 per thread)
    constexpr int NO = D / 8;            // n8 tiles of O_i per warp  (O_i:  NO*4 = D/2  fp32 per thread)
    constexpr int KQ = D / 16;           // k16 steps of Q_i K_j^T    (Q_i fragments: KQ*4 = D/4 regs)
    constexpr int KP = Bc / 16;          // k16 steps of P_ij V_j
    constexpr int CH = D / 8;            // 16-byte chunks per tile row
    constexpr u32 ROWB = D * 2;          // bytes per tile row
    constexpr u32 Q_BYTES = Br * D * 2, KV_BYTES = Bc * D * 2;
    // Q_i fragments stay in registers (loaded once) unless S_ij + O_i + Q_i would crowd the
    // 255-register limit (D = 128 with Bc = 128); then they are re-read from SRAM each k-step.
    constexpr bool Q_IN_REGS = !(D >= 128 && Bc >= 128);

    extern __shared__ uint4 fv80_smem[];
    const u32 sQ = smem_addr(fv80_smem);               // Q_i
    const u32 sK = sQ + Q_BYTES;                       // K_j, stage s at sK + s * KV_BYTES
    const u32 sV = sK + 2 * KV_BYTES;                  // V_j, stage s at sV + s * KV_BYTES

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;             // fragment coordinates (see header)
    const int h = blockIdx.y, b = blockIdx.z;
    // Causal: the last query blocks see the most keys; start them first.
    const int i = CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int r0 = i * Br;                             // first row of Q_i
    const int r1 = min(r0 + Br, Nq);                   // one past its last real row
    const int rw = r0 + 16 * warp;                     // first row of this warp
    const int offset = Nk - Nq;                        // causal: row r sees columns c <= r + offset

    const u16* Qh = Q + b * sQb + h * sQh;
    const u16* Kh = K + b * sKb + h * sKh;
    const u16* Vh = V + b * sVb + h * sVh;
    u16* Oh = O + b * sOb + h * sOh;

    // Number of key blocks Tc, or fewer under the causal mask: the last row r1-1 sees
    // columns 0 .. r1-1+offset, so tiles starting at or after r1+offset are skipped.
    int n_j = (Nk + Bc - 1) / Bc;
    if (CAUSAL) {
        const int visible = min(Nk, r1 + offset);
        n_j = visible <= 0 ? 0 : (visible + Bc - 1) / Bc;
    }

    // Per-lane parts of the ldmatrix addresses (see ldsm_x4: lanes 8q..8q+7 address matrix q).
    //  Q_i (A operand, 16x16 at k-step ks): matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) =
    //    a0, a1, a2, a3  ->  row lane&15, chunk 2ks + lane/16.
    //  K_j (B operand, two n8 tiles of one k-step): matrices (keys 0-7, d 0-7) b0 of tile 2np,
    //    (keys 0-7, d 8-15) b1 of 2np, (keys 8-15, d 0-7) b0 of 2np+1, (keys 8-15, d 8-15) b1
    //    of 2np+1  ->  row (lane&7) + 8*(lane/16), chunk 2ks + (lane/8)&1.
    //  V_j (.trans, B operand, two n8 tiles of d): matrices (keys 0-7 | 8-15) x (d 0-7 | 8-15)
    //    = b0, b1 of tile 2dp, b0, b1 of tile 2dp+1  ->  row lane&15, chunk 2dp + lane/16.
    // Every row offset is a multiple of 8 plus (lane & 7), so the swizzle term is lane & 7.
    const int x7 = lane & 7;
    const u32 q_row = (u32)(16 * warp + (lane & 15)) * ROWB;
    const int q_chunk = lane >> 4;
    const u32 k_row = (u32)((lane & 7) + ((lane >> 4) << 3)) * ROWB;
    const int k_chunk = (lane >> 3) & 1;
    const u32 v_row = (u32)(lane & 15) * ROWB;
    const int v_chunk = lane >> 4;

    // [load_Q] Alg. 1 line 4: Q_i HBM -> SRAM; with K_0 and V_0 (line 7) just below, three groups.
    if (n_j > 0) {
        load_tile<Br, D, NT>(sQ, Qh, sQs, r0, Nq, tid);
        cp_async_commit();
        // [load_KV] Alg. 1 line 7: the first stage, K_0 and V_0, before the loop.
        load_tile<Bc, D, NT>(sK, Kh, sKs, 0, Nk, tid);
        cp_async_commit();
        load_tile<Bc, D, NT>(sV, Vh, sVs, 0, Nk, tid);
        cp_async_commit();
    }

    // [load_Q] Alg. 1 line 4: Q_i as A fragments of this warp's 16 rows, kept in registers
    // for the whole loop.
    u32 qf[Q_IN_REGS ? KQ : 1][4];
    if constexpr (Q_IN_REGS) {
        if (n_j > 0) {
            cp_async_wait<2>();   // the Q_i group has landed (K_0, V_0 may still be in flight)
            __syncthreads();
#pragma unroll
            for (int ks = 0; ks < KQ; ++ks)
                ldsm_x4(qf[ks], sQ + q_row + (((2 * ks + q_chunk) ^ x7) << 4));
        }
    }

    // [init] Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf, for rows g (index 0) and g+8 (index 1).
    // l_i is a per-thread partial sum (its 2*NS columns of the row); reduced at the end.
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m_i[2] = {neg_inf(), neg_inf()};
    float l_i[2] = {0.f, 0.f};

    // [load_KV] Alg. 1 line 7: for j = 1 .. Tc (line 6), K_j and V_j stream through two stages.
#pragma unroll 1
    for (int j = 0; j < n_j; ++j) {
        const int c0 = j * Bc;                         // first key column of K_j
        const u32 st = (u32)(j & 1), nx = st ^ 1u;     // stage of K_j/V_j, stage of the prefetch
        const u32 sKj = sK + st * KV_BYTES;
        const u32 sVj = sV + st * KV_BYTES;

        // [load_KV] Alg. 1 line 7 (K half): K_j is in SRAM. The barrier also means every warp has
        // finished step j-1, so stage nx (K_{j-1}) may be overwritten by K_{j+1}.
        cp_async_wait<1>();
        __syncthreads();
        if (j + 1 < n_j) load_tile<Bc, D, NT>(sK + nx * KV_BYTES, Kh, sKs, c0 + Bc, Nk, tid);
        cp_async_commit();

        // [compute_S] Alg. 1 line 8: S_ij = Q_i K_j^T (raw scores, 16 x Bc per warp, fp32 accumulators).
        float s[NS][4];
#pragma unroll
        for (int n = 0; n < NS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KQ; ++ks) {
            u32 a[4];
            if constexpr (Q_IN_REGS) {
#pragma unroll
                for (int e = 0; e < 4; ++e) a[e] = qf[ks][e];
            } else {
                ldsm_x4(a, sQ + q_row + (((2 * ks + q_chunk) ^ x7) << 4));
            }
#pragma unroll
            for (int np = 0; np < NS / 2; ++np) {
                u32 kb[4];
                ldsm_x4(kb, sKj + (u32)(16 * np) * ROWB + k_row + (((2 * ks + k_chunk) ^ x7) << 4));
                mma16816<DT>(s[2 * np], a, kb[0], kb[1]);
                mma16816<DT>(s[2 * np + 1], a, kb[2], kb[3]);
            }
        }

        // [mask_S] Alg. 1 line 8: columns past Nk, and (causal) columns right of the diagonal.
        // Only a tile that crosses either boundary for some row of this warp pays for it.
        // s[n][e] is row rw + g + 8*(e>>1), column c0 + 8n + 2t + (e&1).
        if (c0 + Bc > Nk || (CAUSAL && c0 + Bc - 1 > rw + offset)) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int lim = CAUSAL ? min(Nk, rw + g + 8 * hf + offset + 1) : Nk;  // first hidden column
#pragma unroll
                for (int n = 0; n < NS; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (c0 + 8 * n + 2 * t + e >= lim) s[n][2 * hf + e] = neg_inf();
            }
        }

        // [update_ml] Alg. 1 line 9 (online softmax), per row g / g+8, in base 2:
        //   m_new = max(m_i, rowmax(S_ij))                 (raw scores)
        //   P_ij  = exp2(S_ij*scale_log2 - m_new*scale_log2)
        //   alpha = exp2((m_i - m_new)*scale_log2),  l_i = alpha*l_i + rowsum(P_ij)
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = m_i[hf];
#pragma unroll
            for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * hf], s[n][2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes g*4 .. g*4+3
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));  // hold one row
            // A row with no visible key so far has m_new = -inf: subtract 0 instead, so that
            // -inf - -inf = NaN never happens (masked scores give exp2(-inf) = 0).
            const float ms = (mx == neg_inf()) ? 0.f : mx * scale_log2;
            alpha[hf] = ex2(m_i[hf] * scale_log2 - ms);           // 0 while m_i = -inf
            m_i[hf] = mx;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = ex2(fmaf(s[n][2 * hf + e], scale_log2, -ms));
                    s[n][2 * hf + e] = p;                           // S_ij becomes P_ij in place
                    sum += p;
                }
            l_i[hf] = alpha[hf] * l_i[hf] + sum;                   // partial: this lane's columns
        }
        // [accumulate_O] Alg. 1 line 10 (first half): O_i = diag(alpha) O_i.
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
            o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
        }

        // [convert_P] Alg. 1 line 10: P_ij as A fragments, the A operand of P_ij V_j:
        // C tiles 2kk, 2kk+1 (fp32) -> A of k-step kk (fp16/bf16), no SRAM.
        u32 pf[KP][4];
#pragma unroll
        for (int kk = 0; kk < KP; ++kk) {
            pf[kk][0] = pack2<DT>(s[2 * kk][0], s[2 * kk][1]);          // row g,   keys 2t, 2t+1
            pf[kk][1] = pack2<DT>(s[2 * kk][2], s[2 * kk][3]);          // row g+8, keys 2t, 2t+1
            pf[kk][2] = pack2<DT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);  // row g,   keys 2t+8, 2t+9
            pf[kk][3] = pack2<DT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);  // row g+8, keys 2t+8, 2t+9
        }

        // [load_KV] Alg. 1 line 7 (V half): V_j is in SRAM (the one newer group is K_{j+1}); after the
        // barrier every warp is past step j-1's P V, so stage nx (V_{j-1}) may take V_{j+1}.
        cp_async_wait<1>();
        __syncthreads();
        if (j + 1 < n_j) load_tile<Bc, D, NT>(sV + nx * KV_BYTES, Vh, sVs, c0 + Bc, Nk, tid);
        cp_async_commit();

        // [accumulate_O] Alg. 1 line 10 (second half): O_i += P_ij V_j.
#pragma unroll
        for (int kk = 0; kk < KP; ++kk) {
#pragma unroll
            for (int dp = 0; dp < NO / 2; ++dp) {
                u32 vb[4];
                ldsm_x4_trans(vb, sVj + (u32)(16 * kk) * ROWB + v_row + (((2 * dp + v_chunk) ^ x7) << 4));
                mma16816<DT>(o[2 * dp], pf[kk], vb[0], vb[1]);
                mma16816<DT>(o[2 * dp + 1], pf[kk], vb[2], vb[3]);
            }
        }
    }

    // [write_O] Alg. 1 lines 12-15: l_i summed over the 4 lanes of each row; O_i = diag(l_i)^-1 O_i;
    // lse_i = m_i + log l_i (natural log, of scale*s). A row that saw no key: O = 0, lse = -inf.
    float inv_l[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        l_i[hf] += __shfl_xor_sync(0xffffffffu, l_i[hf], 1);
        l_i[hf] += __shfl_xor_sync(0xffffffffu, l_i[hf], 2);
        inv_l[hf] = l_i[hf] == 0.f ? 0.f : 1.f / l_i[hf];  // NaN stays NaN
    }

    // O_i goes through this warp's own 16 rows of the Q_i tile (no other warp reads them, and
    // no copy into them is pending), so the HBM stores are whole 16-byte chunks of a row.
    // Column 8n + 2t of row g (+8) is chunk n, bytes 4t..4t+3: the 8 rows g hit 8 bank groups.
    __syncwarp();
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int rl = 16 * warp + g + 8 * hf;         // row within the Q_i tile
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            const u32 v = pack2<DT>(o[n][2 * hf] * inv_l[hf], o[n][2 * hf + 1] * inv_l[hf]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + swz<D>(rl, n) + 4 * t), "r"(v) : "memory");
        }
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 16 * CH / 32; ++k) {
        const int e = lane + 32 * k;
        const int rr = e / CH, c = e % CH;             // row of this warp, chunk
        if (rw + rr < Nq) {
            u32 v0, v1, v2, v3;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(sQ + swz<D>(16 * warp + rr, c)) : "memory");
            u16* dst = Oh + (long long)(rw + rr) * sOs + c * 8;
            asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"l"(dst), "r"(v0), "r"(v1), "r"(v2), "r"(v3) : "memory");
        }
    }
    if (t == 0) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = rw + g + 8 * hf;
            if (r < Nq)
                lse[((long long)b * H + h) * Nq + r] =
                    l_i[hf] == 0.f ? neg_inf() : (m_i[hf] * scale_log2 + log2f(l_i[hf])) * 0.6931471805599453f;
        }
    }
}

#ifdef FLASHVIZ_PTX_CHECK
// Only for the CPU build check (nvcc -DFLASHVIZ_PTX_CHECK --ptx): instantiate every supported
// (DT, Br, Bc, D, CAUSAL) so that each body really compiles. The runner compiles the one it
// needs through NVRTC name expressions and never defines this macro.
#define FV80_INST(DT, Br, Bc, D, C)                                                              \
    template __global__ void flash_fwd_mma_sm80<DT, Br, Bc, D, C>(                               \
        const u16*, const u16*, const u16*, u16*, float*, int, int, int, long long, long long, \
        long long, long long, long long, long long, long long, long long, long long, long long, \
        long long, long long, float);
#define FV80_INST_C(DT, Br, Bc, D) FV80_INST(DT, Br, Bc, D, false) FV80_INST(DT, Br, Bc, D, true)
#define FV80_INST_D(DT, Br, Bc) FV80_INST_C(DT, Br, Bc, 64) FV80_INST_C(DT, Br, Bc, 128)
#define FV80_INST_BC(DT, Br) FV80_INST_D(DT, Br, 32) FV80_INST_D(DT, Br, 64) FV80_INST_D(DT, Br, 128)
#define FV80_INST_BR(DT) FV80_INST_BC(DT, 64) FV80_INST_BC(DT, 128)
FV80_INST_BR(0)
FV80_INST_BR(1)
#endif
