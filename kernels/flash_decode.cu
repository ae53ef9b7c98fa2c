// flash_decode.cu: decode attention, split over the keys (Flash-Decoding), fp16 or bf16 in, fp32 math.
//
// At decode a model has Nq = 1 (up to a few) query rows per head and a KV cache of Nk keys. One
// block of `flash_decode` takes one (sequence b, KV head g, split s) and the R = G·Nq query rows
// that read that KV head (G = H / H_kv query heads of a GQA group, packed as flashviz.decode packs
// them: row r is query head g·G + r / Nq, query row r % Nq); it streams the split's key tiles
// K_j, V_j (Bc = 64 keys) through shared memory with the online softmax of FlashAttention-2
// (Dao 2023, Algorithm 1, lines 7-10) and writes the split's partial: O_s = diag(l_s)⁻¹ Õ_s and
// lse_s (Flash-Decoding step 2). `flash_decode_merge` then merges the splits by their lse (step 3).
// With one split the block writes O and lse itself and there is no merge. Two kernels compute the
// split pass: `flash_decode` (v1, the CUDA cores, every warp on every key; below) and
// `flash_decode_mma` (v2, the tensor cores, each warp on its own keys; after it) — one parameter
// list, one grid, one partial layout, one merge; `gpu.decode` picks one by its `variant`.
//
// The same algorithm as flashviz/decode.py (`decode_attention`), with the same names: the split
// s covers key tiles [s·Tc/S, (s+1)·Tc/S) (masking.split_ranges), causal is bottom-right (query i
// sees key c iff c <= i + Nk − Nq), a row that sees no key gets O = 0 and lse = −inf.
//
// Memory-bound by design: each K, V byte is used by R rows only (R FMAs a byte pair), so the
// kernel's job is to keep HBM busy: 16-byte cp.async copies, the next tile in flight while this
// one is computed (two buffers), and enough blocks (splits) to give every SM work.
//
// Layouts (b16 = fp16 / bf16 bits):
//   Q       (B, H, Nq, D) contiguous;     O (B, H, Nq, D) b16, lse (B, H, Nq) fp32 (natural log)
//   K, V    contiguous: (B, H_kv, Nk, D); paged (PAGED): pools (num_pages, page_size, H_kv, D) and
//           block_table (B, max_pages) int32: key c of sequence b is row c % page_size of pool
//           page block_table[b, c / page_size] (FlashAttention's k_cache / block_table layout)
//   O_part  (B, H, Nq, S, D) fp32, lse_part (B, H, Nq, S) fp32: the partials when S > 1
// Grid (S, H_kv · chunks, B), 128 threads; a block takes rows [chunk·RM, chunk·RM + RM) of its
// group when R > RM (RM = 32 for v1, RM2 = 16 for v2; the runner counts the chunks).
//
// Shared memory: Qs [RM][D] fp32 (pre-scaled by scale·log2 e) | Ks, Vs [2][Bc][D] b16 | Ss [RM][Bc]
// fp32 | m, l, alpha [RM] fp32: D = 128: 16,384 + 65,536 + 8,192 + 384 = 90,496 bytes.

#include "fv_ptx.cuh"
#include "fv_b16.cuh"
#include "fv_mma_sync.cuh" // flash_decode_mma: ldsm_x4, ldsm_x4_trans, mma16816, swz
#include "fv_trace.cuh" // the timeline switch: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1

namespace fvdec {

using namespace fvptx;
using fvb16::from_f32;
using fvb16::to_f32;

constexpr int Bc = 64;                     // keys per tile
constexpr int RM = 32;                     // query rows per block at most
constexpr int NT = 128;                    // threads per block
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// Bytes of dynamic shared memory a block uses at head dimension D (its carve-up is in the kernel):
// gpu.decode.decode_smem_bytes mirrors this sum and tests/gpu/test_decode_gpu.py checks they agree.
// __host__ __device__: NVRTC rejects a function without an execution space, even an unused one.
template <int D>
__host__ __device__ constexpr int smem_bytes() { return RM * D * 4 + 2 * 2 * Bc * D * 2 + RM * Bc * 4 + 3 * RM * 4; }

// Where key row c (of sequence b, KV head g) lives: a contiguous cache or a page of the pool.
template <int D, bool PAGED>
__device__ __forceinline__ const u16* key_row(const u16* X, const int* block_table, int max_pages, int page_size,
                                              int b, int g, int H_kv, int Nk, int c)
{
    if constexpr (PAGED) {
        const int page = block_table[(long long)b * max_pages + c / page_size];
        return X + (((long long)page * page_size + c % page_size) * H_kv + g) * D;
    } else {
        return X + (((long long)b * H_kv + g) * Nk + c) * D;
    }
}

// Start the copy of tile j (keys [j·Bc, j·Bc + Bc)) of K and V into buffer `buf`; keys past Nk are
// zero-filled (and masked later).
template <int D, bool PAGED>
__device__ __forceinline__ void load_tile(u16* Ks, u16* Vs, const u16* K, const u16* V, const int* block_table,
                                          int max_pages, int page_size, int b, int g, int H_kv, int Nk, int j)
{
    constexpr int CHUNKS = D / 8;                        // 16-byte chunks of one row
    for (int idx = threadIdx.x; idx < Bc * CHUNKS; idx += NT) {
        const int c = idx / CHUNKS, q = idx % CHUNKS;
        const int key = j * Bc + c;
        const bool in = key < Nk;
        const int row = in ? key : Nk - 1;               // a valid address; 0 bytes copied
        const u16* k = key_row<D, PAGED>(K, block_table, max_pages, page_size, b, g, H_kv, Nk, row);
        const u16* v = key_row<D, PAGED>(V, block_table, max_pages, page_size, b, g, H_kv, Nk, row);
        cp_async16(smem_addr(Ks + c * D + q * 8), k + q * 8, in ? 16 : 0);
        cp_async16(smem_addr(Vs + c * D + q * 8), v + q * 8, in ? 16 : 0);
    }
}

// What one block of a split kernel (at most RMAX query rows a block) works on, from its place in the
// grid (S, H_kv · chunks, B): split s of sequence b's KV head g, its rows [r0, r0 + R) of the G·Nq
// that read g, the split's key tiles [j0, j1) of Tc (masking.split_ranges). row(r): the index of
// row r's query in (B, H, Nq) — head g·G + (r0 + r) / Nq, query row (r0 + r) % Nq.
template <int RMAX>
struct Work {
    int H, Nq, s, b, G, g, r0, R, Tc, j0, j1;
    __device__ __forceinline__ Work(int H_, int H_kv, int Nq_, int Nk, int S)
        : H(H_), Nq(Nq_), s(blockIdx.x), b(blockIdx.z), G(H_ / H_kv) {
        const int chunks = (G * Nq + RMAX - 1) / RMAX;
        g = blockIdx.y / chunks;
        r0 = (blockIdx.y % chunks) * RMAX;
        R = min(RMAX, G * Nq - r0);
        Tc = (Nk + Bc - 1) / Bc;
        j0 = (int)((long long)s * Tc / S);
        j1 = (int)((long long)(s + 1) * Tc / S);
    }
    __device__ __forceinline__ long long row(int r) const {
        const int rr = r0 + r, h = g * G + rr / Nq, i = rr % Nq;
        return ((long long)b * H + h) * Nq + i;
    }
};

// ROWS (1, 2, 4, 8, 16 or 32; the runner picks the smallest power of two >= a block's rows R):
// the row loops below run ROWS / (threads sharing a key or a column) times, unrolled, so a block
// of one query row (MHA decode) does not pay for 32 guarded rows on every key.
template <int DT, int D, bool PAGED, int ROWS>
__global__ void __launch_bounds__(NT) flash_decode(
    const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
    const int* __restrict__ block_table, int max_pages, int page_size,
    float* __restrict__ O_part, float* __restrict__ lse_part, u16* __restrict__ O, float* __restrict__ lse,
    int H, int H_kv, int Nq, int Nk, int S, int causal, float scale FV_TRACE_PARAMS)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float* Qs = reinterpret_cast<float*>(smem);                        // [RM][D]
    u16* Ks = reinterpret_cast<u16*>(Qs + RM * D);                     // [2][Bc][D]
    u16* Vs = Ks + 2 * Bc * D;                                         // [2][Bc][D]
    float* Ss = reinterpret_cast<float*>(Vs + 2 * Bc * D);             // [RM][Bc]
    float* m_s = Ss + RM * Bc;                                         // [RM] running max (log2 units)
    float* l_s = m_s + RM;                                             // [RM] running sum
    float* alpha_s = l_s + RM;                                         // [RM] this tile's rescale

    const Work<RM> wk(H, H_kv, Nq, Nk, S);
    const int s = wk.s, b = wk.b, g = wk.g, r0 = wk.r0, R = wk.R, j0 = wk.j0, j1 = wk.j1;  // R: rows of this block
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    // timeline (FLASHVIZ_TRACE builds only): one record a block, one writer a warp; its key-tile rows
    // are the split's own tiles, j − j0
    FV_TRACE_BEGIN(NT / 32, warp, lane == 0, t == 0);
    FV_DECL(t_a);
    FV_DECL(t_b);
    FV_NOW(t_a);

    // [load_Q] Alg. 1 line 4: the R query rows of this KV head to SRAM, as fp32 times scale·log2 e
    static_assert(ROWS >= 1 && ROWS <= RM && (ROWS & (ROWS - 1)) == 0, "ROWS: a power of two up to RM");
    for (int idx = t; idx < ROWS * D; idx += NT) {
        const int r = idx / D, k = idx % D;
        float x = 0.f;
        if (r < R) x = to_f32<DT>(Q[wk.row(r) * D + k]) * scale * LOG2E;
        Qs[idx] = x;
    }
    // [init] Alg. 1 line 5: m = −inf, l = 0, O = 0 (O in registers: thread t keeps column t % D of
    // the rows r ≡ t / D (mod NT / D))
    constexpr int CPT = NT / D;                                        // threads per column: 1 or 2
    constexpr int RPT = (ROWS + CPT - 1) / CPT;                        // rows per thread
    const int col = t % D, rsub = t / D;
    float acc[RPT];
#pragma unroll
    for (int k = 0; k < RPT; ++k) acc[k] = 0.f;
    if (t < RM) { m_s[t] = neg_inf(); l_s[t] = 0.f; }

    // [load_KV] Alg. 1 line 7: the split's first tile in flight
    if (j0 < j1) load_tile<D, PAGED>(Ks, Vs, K, V, block_table, max_pages, page_size, b, g, H_kv, Nk, j0);
    cp_async_commit();
    FV_NOW(t_b);
    FV_EVENT(-1, FV_STAGE_LOAD_Q, t_a, t_b);
    for (int j = j0; j < j1; ++j) {
        const int buf = (j - j0) & 1;
        u16* Kj = Ks + buf * Bc * D;
        u16* Vj = Vs + buf * Bc * D;
        // [load_KV] Alg. 1 line 7: tile j + 1 in flight while tile j is computed
        if (j + 1 < j1)
            load_tile<D, PAGED>(Ks + (buf ^ 1) * Bc * D, Vs + (buf ^ 1) * Bc * D, K, V, block_table, max_pages,
                                page_size, b, g, H_kv, Nk, j + 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        FV_NOW(t_a);
        FV_EVENT(j - j0, FV_STAGE_LOAD_KV, t_b, t_a);                 // tile j + 1 issued, tile j landed

        // [compute_S] Alg. 1 line 8: S_ij = Q_i K_jᵀ (log2 units): thread t takes key c = t % Bc and
        // the rows r ≡ t / Bc (mod NT / Bc); it walks the row's 16-byte chunks from chunk c, so the
        // eight lanes of a shared-memory phase read eight different banks
        {
            const int c = t % Bc;
            constexpr int RS = NT / Bc;                                // rows sharing one key: 2
            constexpr int CHUNKS = D / 8;
            constexpr int SR = (ROWS + RS - 1) / RS;                   // rows per thread
            float sacc[SR];
#pragma unroll
            for (int k = 0; k < SR; ++k) sacc[k] = 0.f;
            for (int qq = 0; qq < CHUNKS; ++qq) {
                const int q = (qq + c) % CHUNKS;
                const uint4 kv = *reinterpret_cast<const uint4*>(Kj + c * D + q * 8);
                const u32 w[4] = {kv.x, kv.y, kv.z, kv.w};
                float kf[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) { kf[2 * e] = to_f32<DT>(w[e] & 0xffffu); kf[2 * e + 1] = to_f32<DT>(w[e] >> 16); }
#pragma unroll
                for (int k = 0; k < SR; ++k) {
                    const int r = k * RS + t / Bc;
                    if (r < R) {
                        const float* qr = Qs + r * D + q * 8;
#pragma unroll
                        for (int e = 0; e < 8; ++e) sacc[k] = fmaf(qr[e], kf[e], sacc[k]);
                    }
                }
            }
            // [mask_S] Alg. 1 line 8: keys past Nk, and (causal, bottom-right) keys after the row's
            // last visible one, get a true −inf
            const int key = j * Bc + c;
#pragma unroll
            for (int k = 0; k < SR; ++k) {
                const int r = k * RS + t / Bc;
                if (r < ROWS) {
                    const int i = (r0 + r) % Nq;
                    const bool hidden = r >= R || key >= Nk || (causal && key > i + Nk - Nq);
                    Ss[r * Bc + c] = hidden ? neg_inf() : sacc[k];
                }
            }
        }
        __syncthreads();
        FV_NOW(t_b);
        FV_EVENT(j - j0, FV_STAGE_COMPUTE_S, t_a, t_b);

        // [update_ml] Alg. 1 line 9: m_new = max(m, rowmax S_ij); P_ij = 2^(S_ij − m_new);
        // l = alpha · l + rowsum P_ij with alpha = 2^(m − m_new); warp w takes rows w, w + 4, ...
        for (int r = warp; r < R; r += NT / 32) {
            float x0 = Ss[r * Bc + lane], x1 = Ss[r * Bc + lane + 32];
            float mx = fmaxf(x0, x1);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, mx);
            const float m_use = m_new == neg_inf() ? 0.f : m_new;    // a row with nothing visible yet: no NaN
            const float p0 = ex2(x0 - m_use), p1 = ex2(x1 - m_use);  // ex2(−inf) = 0
            float sum = p0 + p1;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            Ss[r * Bc + lane] = p0;
            Ss[r * Bc + lane + 32] = p1;
            __syncwarp();                                  // every lane has read m_s[r] before lane 0 writes it
            if (lane == 0) {
                const float alpha = ex2(m_old - m_use);                // m_old = −inf: 0 (nothing to keep)
                alpha_s[r] = alpha;
                l_s[r] = alpha * l_s[r] + sum;
                m_s[r] = m_new;
            }
        }
        __syncthreads();
        FV_NOW(t_a);
        FV_EVENT(j - j0, FV_STAGE_UPDATE_ML, t_b, t_a);

        // [accumulate_O] Alg. 1 line 10: O = diag(alpha) O + P_ij V_j, thread t its column of its rows;
        // each V_j value is read and converted once and used by all of the thread's rows
#pragma unroll
        for (int k = 0; k < RPT; ++k) {
            const int r = k * CPT + rsub;
            if (r < R) acc[k] *= alpha_s[r];
        }
        for (int c = 0; c < Bc; ++c) {
            const float vc = to_f32<DT>(Vj[c * D + col]);
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const int r = k * CPT + rsub;
                if (r < R) acc[k] = fmaf(Ss[r * Bc + c], vc, acc[k]);
            }
        }
        __syncthreads();                                               // buffer buf is refilled next
        FV_NOW(t_b);
        FV_EVENT(j - j0, FV_STAGE_ACCUMULATE_O, t_a, t_b);
    }
    cp_async_wait<0>();
    __syncthreads();          // an empty split (j0 == j1) never entered the loop: m, l set above must be seen
    FV_NOW(t_a);

    // [write_partial] Flash-Decoding step 2: O_s = diag(l_s)⁻¹ Õ_s and lse_s = (m_s + log2 l_s)·ln 2;
    // with one split these are O and lse themselves (an empty split or a row that saw no key:
    // O = 0, lse = −inf)
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const int r = k * CPT + rsub;
        if (r < R) {
            const long long row = wk.row(r);
            const float l = l_s[r];
            const float o = l > 0.f ? acc[k] / l : 0.f;
            const float L = l > 0.f ? (m_s[r] + __log2f(l)) * LN2 : neg_inf();
            if (S == 1) {
                O[row * D + col] = from_f32<DT>(o);
                if (col == 0) lse[row] = L;
            } else {
                O_part[(row * S + s) * D + col] = o;
                if (col == 0) lse_part[row * S + s] = L;
            }
        }
    }
    FV_NOW(t_b);
    FV_EVENT(-1, FV_STAGE_WRITE_O, t_a, t_b);                          // write_partial when S > 1
    FV_TRACE_END(s, blockIdx.y, b, j1 - j0);
}

// ---------------------------------------------------------------------------------------------------
// flash_decode_mma (v2): the same split, the same partials, on the tensor cores.
//
// v1 above computes a tile's scores and P·V on the CUDA cores with every warp of the block on every
// key (R FMAs a byte pair, read and converted from shared memory, four block barriers a tile); its
// first runs were issue-bound (benchmarks/NOTES.md, Decode). Here the block's R <= RM2 = 16 query
// rows are one m16 row tile of `mma.sync.m16n8k16` (rows >= R are zero, computed and never
// written: at decode the tensor cores have time to spare), and the warps split the keys instead
// of the rows: warp w takes keys [j·Bc + 16w, j·Bc + 16w + 16) of every key tile j of the split,
// streams them through its own ring of ST stages in shared memory (cp.async, no block barrier in
// the loop: a warp reads only what its own lanes copied, after cp.async.wait_group and
// __syncwarp), and runs FlashAttention-2's online softmax over them exactly as the forward
// kernel's warps do over theirs (flash_fwd_mma_sm80.cu: the same fragment layouts, ldmatrix
// addressing and XOR swizzle, fv_mma_sync.cuh). At the end the block merges its four warps'
// (m, l, O) through shared memory — the merge of Flash-Decoding's step 3, inside one block — and
// writes the split's partial (or O and lse when S = 1) in the layout v1 writes, so the merge
// kernel and the runner's arithmetic are shared.
//
// Shared memory: Q_i [RM2][D] b16 | per warp, ST stages of K [KW][D] then V [KW][D] b16 (rows
// swizzled as in flash_fwd_mma_sm80.cu). After the loop the rings hold the warps' O [NW][RM2][D]
// fp32, m, l [NW][RM2], the merge weights [NW][RM2] and lse [RM2].
// D = 128: 4,096 + 4·3·2·16·256 = 102,400 bytes (two blocks an SM); D = 64: 51,200 (four).
constexpr int RM2 = 16;                    // query rows a block takes at most (one m16 tile)
constexpr int KW = 16;                     // keys a warp takes of each key tile
constexpr int NW = NT / 32;                // warps a block; NW · KW = Bc
constexpr int ST = 3;                      // ring stages of each warp
static_assert(NW * KW == Bc, "the warps' key slices make up one key tile");

// Bytes of dynamic shared memory of one flash_decode_mma block (gpu.decode.decode_smem_bytes mirrors it).
template <int D>
__host__ __device__ constexpr int mma_smem_bytes() { return RM2 * D * 2 + NW * ST * 2 * KW * D * 2; }

// Issue warp `warp`'s copies of its 16 keys of key tile j (K then V) into ring stage `st` (a shared
// address); keys past Nk are zero-filled.
template <int D, bool PAGED>
__device__ __forceinline__ void load_slice(u32 st, const u16* K, const u16* V, const int* block_table, int max_pages,
                                           int page_size, int b, int g, int H_kv, int Nk, int c0, int lane)
{
    constexpr int CH = D / 8;                          // 16-byte chunks of a row
#pragma unroll
    for (int k = 0; k < KW * CH / 32; ++k) {
        const int e = lane + 32 * k, r = e / CH, c = e % CH;
        const int key = c0 + r;
        const bool in = key < Nk;
        const int row = in ? key : Nk - 1;             // a valid address; 0 bytes copied
        const u16* kr = key_row<D, PAGED>(K, block_table, max_pages, page_size, b, g, H_kv, Nk, row);
        const u16* vr = key_row<D, PAGED>(V, block_table, max_pages, page_size, b, g, H_kv, Nk, row);
        cp_async16(st + fvmma::swz<D>(r, c), kr + c * 8, in ? 16 : 0);
        cp_async16(st + KW * D * 2 + fvmma::swz<D>(r, c), vr + c * 8, in ? 16 : 0);
    }
}

template <int DT, int D, bool PAGED>
__global__ void __launch_bounds__(NT, D == 64 ? 4 : 2) flash_decode_mma(
    const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
    const int* __restrict__ block_table, int max_pages, int page_size,
    float* __restrict__ O_part, float* __restrict__ lse_part, u16* __restrict__ O, float* __restrict__ lse,
    int H, int H_kv, int Nq, int Nk, int S, int causal, float scale FV_TRACE_PARAMS)
{
    using namespace fvmma;
    constexpr int KQ = D / 16;                         // k16 steps of Q_i K_jᵀ
    constexpr int NO = D / 8;                          // n8 tiles of O (NO·4 = D/2 fp32 a thread)
    constexpr int CH = D / 8;
    constexpr u32 ROWB = D * 2;                        // bytes of a row
    constexpr u32 STAGE = 2 * KW * ROWB;               // one ring stage: K then V
    // the in-block merge's scratch (O [NW][RM2][D] fp32, then m, l, weights [NW][RM2] and lse [RM2])
    // lives in the rings once every warp has left its loop: it must fit there
    static_assert(NW * RM2 * D * 4 + (3 * NW + 1) * RM2 * 4 <= NW * ST * (int)STAGE,
                  "the merge scratch must fit in the warps' rings");

    extern __shared__ __align__(16) unsigned char smem[];
    const u32 sQ = smem_addr(smem);
    const Work<RM2> wk(H, H_kv, Nq, Nk, S);
    const int s = wk.s, b = wk.b, g = wk.g, r0 = wk.r0, R = wk.R, j0 = wk.j0;   // R: rows of this block
    const int n = wk.j1 - j0;                             // key tiles of the split: steps of every warp
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int gr = lane >> 2, tq = lane & 3;           // fragment coordinates (flash_fwd_mma_sm80.cu)
    const u32 ring = sQ + RM2 * ROWB + (u32)warp * ST * STAGE;
    const float scale_log2 = scale * LOG2E;
    FV_TRACE_BEGIN(NW, warp, lane == 0, t == 0);
    FV_DECL(t_a);
    FV_DECL(t_b);
    FV_NOW(t_a);

    // [load_Q] Alg. 1 line 4: the R query rows of this KV head to SRAM (rows >= R zero-filled)
    for (int idx = t; idx < RM2 * CH; idx += NT) {
        const int r = idx / CH, c = idx % CH;
        const u16* src = Q;                            // any valid address when r >= R
        if (r < R) src = Q + wk.row(r) * D + c * 8;
        cp_async16(sQ + swz<D>(r, c), src, r < R ? 16 : 0);
    }
    cp_async_commit();
    // [load_KV] Alg. 1 line 7: this warp's first ST − 1 slices in flight (one group each, empty past the split)
#pragma unroll
    for (int u = 0; u < ST - 1; ++u) {
        if (u < n) load_slice<D, PAGED>(ring + u * STAGE, K, V, block_table, max_pages, page_size, b, g, H_kv, Nk,
                                        (j0 + u) * Bc + KW * warp, lane);
        cp_async_commit();
    }
    cp_async_wait<ST - 1>();                           // Q_i has landed (this thread's part)
    __syncthreads();                                   // and every thread's
    // Q_i as A fragments, in registers for the whole loop (ldmatrix: row lane & 15, chunk 2ks + lane / 16)
    const int x7 = lane & 7;
    u32 qf[KQ][4];
#pragma unroll
    for (int ks = 0; ks < KQ; ++ks) ldsm_x4(qf[ks], sQ + (u32)(lane & 15) * ROWB + (((2 * ks + (lane >> 4)) ^ x7) << 4));
    // K slice as the B operand of two n8 tiles (keys 0-7, 8-15), V slice through .trans (see flash_fwd_mma_sm80.cu)
    const u32 k_off = (u32)((lane & 7) + ((lane >> 4) << 3)) * ROWB;
    const int k_chunk = (lane >> 3) & 1;
    const u32 v_off = (u32)(lane & 15) * ROWB;
    const int v_chunk = lane >> 4;

    // [init] Alg. 1 line 5: m = −inf, l = 0, O = 0 for rows gr (index 0) and gr + 8 (index 1)
    float o[NO][4];
#pragma unroll
    for (int k = 0; k < NO; ++k) o[k][0] = o[k][1] = o[k][2] = o[k][3] = 0.f;
    float m_i[2] = {neg_inf(), neg_inf()};
    float l_i[2] = {0.f, 0.f};
    FV_NOW(t_b);
    FV_EVENT(-1, FV_STAGE_LOAD_Q, t_a, t_b);

#pragma unroll 1
    for (int u = 0; u < n; ++u) {
        // [load_KV] Alg. 1 line 7: slice u + ST − 1 in flight, wait for slice u
        if (u + ST - 1 < n)
            load_slice<D, PAGED>(ring + ((u + ST - 1) % ST) * STAGE, K, V, block_table, max_pages, page_size, b, g,
                                 H_kv, Nk, (j0 + u + ST - 1) * Bc + KW * warp, lane);
        cp_async_commit();
        cp_async_wait<ST - 1>();
        __syncwarp();                                  // every lane's copies of slice u are visible
        FV_NOW(t_a);
        FV_EVENT(u, FV_STAGE_LOAD_KV, t_b, t_a);
        const u32 sK = ring + (u % ST) * STAGE, sV = sK + KW * ROWB;
        const int c0 = (j0 + u) * Bc + KW * warp;      // first key of the slice

        // [compute_S] Alg. 1 line 8: S = Q_i K_sliceᵀ, 16 rows x 16 keys (raw scores, fp32)
        float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int ks = 0; ks < KQ; ++ks) {
            u32 kb[4];
            ldsm_x4(kb, sK + k_off + (((2 * ks + k_chunk) ^ x7) << 4));
            mma16816<DT>(sc[0], qf[ks], kb[0], kb[1]);
            mma16816<DT>(sc[1], qf[ks], kb[2], kb[3]);
        }
        // [mask_S] Alg. 1 line 8: keys past Nk and (causal, bottom-right) keys after the row's last
        // visible one; sc[n][e] is row gr + 8(e / 2), key c0 + 8n + 2tq + e % 2
        if (c0 + KW > Nk || (causal && c0 + KW > Nk - Nq + 1)) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int i = (r0 + gr + 8 * hf) % Nq;
                const int lim = causal ? min(Nk, i + Nk - Nq + 1) : Nk;     // first hidden key
#pragma unroll
                for (int k = 0; k < 2; ++k)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (c0 + 8 * k + 2 * tq + e >= lim) sc[k][2 * hf + e] = neg_inf();
            }
        }
        FV_NOW(t_b);
        FV_EVENT(u, FV_STAGE_COMPUTE_S, t_a, t_b);

        // [update_ml] Alg. 1 line 9: m_new = max(m, rowmax S), P = 2^(S·scale_log2 − m_new·scale_log2),
        // alpha = 2^((m − m_new)·scale_log2), l = alpha·l + rowsum P (this lane's columns; summed at the end)
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = fmaxf(m_i[hf], fmaxf(fmaxf(sc[0][2 * hf], sc[0][2 * hf + 1]), fmaxf(sc[1][2 * hf], sc[1][2 * hf + 1])));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));     // the 4 lanes of a row
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == neg_inf() ? 0.f : mx * scale_log2; // nothing visible yet: no NaN
            alpha[hf] = ex2(m_i[hf] * scale_log2 - ms);               // 0 while m = −inf
            m_i[hf] = mx;
            float sum = 0.f;
#pragma unroll
            for (int k = 0; k < 2; ++k)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = ex2(fmaf(sc[k][2 * hf + e], scale_log2, -ms));
                    sc[k][2 * hf + e] = p;
                    sum += p;
                }
            l_i[hf] = alpha[hf] * l_i[hf] + sum;
        }
        FV_NOW(t_a);
        FV_EVENT(u, FV_STAGE_UPDATE_ML, t_b, t_a);

        // [accumulate_O] Alg. 1 line 10: O = diag(alpha) O + P V_slice; P's C fragments are the A
        // fragment of the one k16 step (flash_fwd_mma_sm80.cu, convert_P)
#pragma unroll
        for (int k = 0; k < NO; ++k) {
            o[k][0] *= alpha[0]; o[k][1] *= alpha[0];
            o[k][2] *= alpha[1]; o[k][3] *= alpha[1];
        }
        const u32 pf[4] = {pack2<DT>(sc[0][0], sc[0][1]), pack2<DT>(sc[0][2], sc[0][3]),
                           pack2<DT>(sc[1][0], sc[1][1]), pack2<DT>(sc[1][2], sc[1][3])};
#pragma unroll
        for (int dp = 0; dp < NO / 2; ++dp) {
            u32 vb[4];
            ldsm_x4_trans(vb, sV + v_off + (((2 * dp + v_chunk) ^ x7) << 4));
            mma16816<DT>(o[2 * dp], pf, vb[0], vb[1]);
            mma16816<DT>(o[2 * dp + 1], pf, vb[2], vb[3]);
        }
        __syncwarp();                                  // stage u % ST is refilled at step u + 1
        FV_NOW(t_b);
        FV_EVENT(u, FV_STAGE_ACCUMULATE_O, t_a, t_b);
    }
    cp_async_wait<0>();

    // [merge] Flash-Decoding step 3 inside the block: the four warps' (m, l, O) of the same rows,
    // through shared memory (the rings are free once every warp has left its loop)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        l_i[hf] += __shfl_xor_sync(0xffffffffu, l_i[hf], 1);
        l_i[hf] += __shfl_xor_sync(0xffffffffu, l_i[hf], 2);
    }
    __syncthreads();
    FV_NOW(t_a);
    float* Ow = reinterpret_cast<float*>(smem + RM2 * ROWB);           // [NW][RM2][D]
    float* mw = Ow + NW * RM2 * D;                                     // [NW][RM2] raw max
    float* lw = mw + NW * RM2;                                         // [NW][RM2]
    float* aw = lw + NW * RM2;                                         // [NW][RM2] weight of warp w's O
    float* Lr = aw + NW * RM2;                                         // [RM2] lse
#pragma unroll
    for (int k = 0; k < NO; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) Ow[(warp * RM2 + gr + 8 * (e >> 1)) * D + 8 * k + 2 * tq + (e & 1)] = o[k][e];
    if (tq == 0) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            mw[warp * RM2 + gr + 8 * hf] = m_i[hf];
            lw[warp * RM2 + gr + 8 * hf] = l_i[hf];
        }
    }
    __syncthreads();
    if (t < RM2) {                                     // row t: M = max_w m_w, L = Σ_w 2^((m_w − M)·scale_log2) l_w
        float M = neg_inf();
#pragma unroll
        for (int w = 0; w < NW; ++w) M = fmaxf(M, mw[w * RM2 + t]);
        const float Ms = M == neg_inf() ? 0.f : M * scale_log2;
        float a[NW], L = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            a[w] = ex2(mw[w * RM2 + t] * scale_log2 - Ms);             // a warp that saw nothing: 0
            L += a[w] * lw[w * RM2 + t];
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) aw[w * RM2 + t] = a[w] * inv;
        Lr[t] = L > 0.f ? (Ms + __log2f(L)) * LN2 : neg_inf();       // natural log; no key seen: −inf
    }
    __syncthreads();

    // [write_partial] Flash-Decoding step 2: O_s = Σ_w a_w O_w / L and lse_s; with one split, O and lse
    for (int idx = t; idx < R * D; idx += NT) {
        const int r = idx / D, col = idx % D;
        float x = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) x = fmaf(aw[w * RM2 + r], Ow[(w * RM2 + r) * D + col], x);
        const long long row = wk.row(r);
        if (S == 1) {
            O[row * D + col] = from_f32<DT>(x);
            if (col == 0) lse[row] = Lr[r];
        } else {
            O_part[(row * S + s) * D + col] = x;
            if (col == 0) lse_part[row * S + s] = Lr[r];
        }
    }
    FV_NOW(t_b);
    FV_EVENT(-1, FV_STAGE_WRITE_O, t_a, t_b);                          // write_partial when S > 1
    FV_TRACE_END(s, blockIdx.y, b, n);
}

// [merge] Flash-Decoding step 3: O = Σ_s e^(lse_s − lse) O_s, lse = log Σ_s e^(lse_s): one block of
// D threads per query row (B·H·Nq blocks), thread t its column; the splits' lse are read by all
template <int DT, int D>
__global__ void __launch_bounds__(D) flash_decode_merge(const float* __restrict__ O_part,
                                                        const float* __restrict__ lse_part, u16* __restrict__ O,
                                                        float* __restrict__ lse, int S)
{
    const long long row = blockIdx.x;
    const int t = threadIdx.x;
    float M = neg_inf();
    for (int s = 0; s < S; ++s) M = fmaxf(M, lse_part[row * S + s]);
    if (M == neg_inf()) {                                              // no split saw a key
        O[row * D + t] = from_f32<DT>(0.f);
        if (t == 0) lse[row] = neg_inf();
        return;
    }
    float l = 0.f, o = 0.f;
    for (int s = 0; s < S; ++s) {
        const float w = ex2((lse_part[row * S + s] - M) * LOG2E);      // e^(lse_s − M); an empty split: 0
        l += w;
        o = fmaf(w, O_part[(row * S + s) * D + t], o);
    }
    O[row * D + t] = from_f32<DT>(o / l);
    if (t == 0) lse[row] = M + __logf(l);
}

}  // namespace fvdec

#ifdef FLASHVIZ_PTX_CHECK
// Only for the CPU build check (`make ptx`): instantiate every supported (DT, D, PAGED, ROWS) by
// taking the kernels' addresses.
#define FVDEC_INST(DT, D, P)                                                                              \
    (const void*)&fvdec::flash_decode<DT, D, P, 1>, (const void*)&fvdec::flash_decode<DT, D, P, 2>,       \
        (const void*)&fvdec::flash_decode<DT, D, P, 4>, (const void*)&fvdec::flash_decode<DT, D, P, 8>,   \
        (const void*)&fvdec::flash_decode<DT, D, P, 16>, (const void*)&fvdec::flash_decode<DT, D, P, 32>,
#define FVDEC_INST_D(DT, D) FVDEC_INST(DT, D, false) FVDEC_INST(DT, D, true) (const void*)&fvdec::flash_decode_merge<DT, D>, \
    (const void*)&fvdec::flash_decode_mma<DT, D, false>, (const void*)&fvdec::flash_decode_mma<DT, D, true>,
__attribute__((used)) static const void* const fvdec_ptx_check[] = {
    FVDEC_INST_D(0, 64) FVDEC_INST_D(0, 128) FVDEC_INST_D(1, 64) FVDEC_INST_D(1, 128)
};
#endif
