// flash_fwd_mma.cu: FlashAttention-2 forward on Hopper tensor cores (sm_90a), fp16 / bf16.
//
// The same algorithm as kernels/flash_fwd.cu and flashviz/tiled.py (FlashAttention-2,
// Dao 2023, Algorithm 1), at full speed: the two matrix products of each tile run on the
// tensor cores with Hopper's warpgroup MMA (`wgmma.mma_async`, PTX ISA 8.0, sm_90a), the
// K_j / V_j tiles stream into shared memory with `cp.async` two stages deep, and the
// online softmax runs in registers between the two products.
//
// Names (the paper's):
//   Q_i (Br x d), K_j, V_j (Bc x d)   tiles in shared memory (SRAM)
//   S_ij = Q_i K_jᵀ                    fp32 accumulators in registers (never leave the SM)
//   m_i, l_i                           running row max (raw scores) and running row sum
//   P_ij = exp(scale·S_ij − scale·m_i) converted to fp16/bf16 *in registers* and fed
//                                      straight back to the tensor cores as the A operand
//   O_i                                fp32 accumulators in registers, rescaled by
//   alpha = exp(scale·(m_old − m_new)) when the row max grows; O = O_i / l_i at the end
//   lse_i = scale·m_i + log l_i        natural-log log-sum-exp, fp32 (for the backward pass)
//
// Partitioning (FlashAttention-2): one thread block per (query block i, head h, batch b):
// grid (Tr, H, B). Br/64 warpgroups of 128 threads; warpgroup w owns query rows
// [64w, 64w+64) of the block and computes its own S and O with m64nNk16 wgmma; every
// warpgroup reads the same K_j and V_j tiles from shared memory.
//
// Per key tile j (step names of flashviz/steps.py, lines of FlashAttention-2 Algorithm 1):
//   wait K_j; barrier; prefetch K_{j+1} (cp.async)                    load_KV       line 7
//   S_ij = Q_i K_jᵀ   wgmma SS: A = Q_i, B = K_j, both from SRAM        compute_S     line 8
//   mask S_ij (edge tiles only)                                       mask_S        line 8
//   m_i, P_ij, l_i   registers, 4 lanes per row reduce with shfl      update_ml     line 9
//   O_i = diag(alpha) O_i                                             accumulate_O  line 10
//   P_ij to fp16/bf16 in registers: the A operand of the next product convert_P     line 10
//   wait V_j; barrier; prefetch V_{j+1}                               load_KV       line 7
//   O_i += P_ij V_j   wgmma RS: A = P_ij from registers, B = V_j       accumulate_O  line 10
// then O_i / l_i and lse_i are written (write_O, lines 12-15). Each of these blocks opens with a
// tag, "// [step] Alg. 1 line k: ...", which chapter 7 cuts the code at.
//
// Shared-memory layout. Each tile is stored as d/64 column blocks of [rows][64] elements:
// 128-byte rows, in the "128-byte swizzle" wgmma reads: the 16-byte chunk c of row r sits at
// chunk position c XOR (r mod 8), so the eight rows of a 1024-byte atom spread over all 32
// banks. Tiles start on 1024-byte boundaries. Descriptors (PTX "matrix descriptor"):
// start address, leading / stride byte offsets, swizzle mode 1 (128 B).
//   Q_i, K_j (K-major operands): stride byte offset 1024 = eight 128-byte rows;
//     the k16 slice kk starts at column block kk/4, byte 32·(kk mod 4) of the row.
//   V_j (the B operand of P V is N-major, "transposed"): one wgmma per 64 columns of d
//     (n64), the k16 slice kk starts 16 rows (2048 bytes) further; offsets 1024.
// Dynamic shared memory: 1024 (alignment slack) + 2·(Br·d + 4·Bc·d) bytes
//   (Q_i, two stages of K_j, two of V_j; 2 bytes an element).
//
// Inputs: BHSD layout with element strides (batch, head, sequence), the last stride 1;
// rows 16-byte aligned (the runner checks). Partial tiles: cp.async zero-fills rows past
// N; key columns c >= Nk are masked to -inf. Causal masking is bottom-right aligned as in
// flashviz.masking: query row r sees key c iff c <= r + Nk - Nq; key tiles wholly beyond the
// block's last visible column are skipped, and only tiles that cross the boundary are
// masked. A row that sees no key writes O = 0 and lse = -inf.
//
// Header-free on purpose: NVRTC from the pip CUDA wheels has no <mma.h> / <cuda_fp16.h>,
// so fp16/bf16 values travel as 16-bit integers and conversions are inline PTX.
// Compile for sm_90a (wgmma is an arch-specific instruction): NVRTC -arch=sm_90a, or
// nvcc -gencode=arch=compute_90a,code=sm_90a. On other targets the kernel body compiles
// to a trap.

// The timeline hooks (-DFLASHVIZ_TRACE=1) read the clock in every thread at d = 128: there the
// writer-only read made the traced build spill, and it cost 15.6 % against 9.6 % for this form
// (benchmarks/results/probe-trace-clock-h100-80gb-hbm3-2026-12-06.json; benchmarks/NOTES.md).
#define FV_CLOCK_EVERY_THREAD (D == 128)
#include "fv_ptx.cuh"   // u16/u32/u64, neg_inf, smem_addr, cp.async, ex2, pack2
#include "fv_wgmma.cuh" // fence_regs, the wgmma fence and wait (the products themselves: fv_attn.cuh)
#include "fv_attn.cuh"  // the steps: issue_S, mask_S, RowStats, convert_P, issue_PV
#include "fv_trace.cuh" // the timeline switch: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1


// Blocks per SM asked of the compiler: two for Br = 128, Bc = 64, d = 128 (it then caps the
// registers at 128, spilling a few dozen bytes, and two blocks of 8 warps hide more latency
// than one: 419 vs 351 TFLOP/s at N = 4096 on the H200); one elsewhere (more registers).
template <int Br, int Bc, int D>
struct MinBlocks {
    static constexpr int value = (Br == 128 && Bc == 64 && D == 128) ? 2 : 1;
};

template <int DT, int Br, int Bc, int D, bool CAUSAL>
__global__ void __launch_bounds__(Br * 2, (MinBlocks<Br, Bc, D>::value))
flash_fwd_mma(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
              u16* __restrict__ O, float* __restrict__ lse,
              int Nq, int Nk, int H,
              long long sQb, long long sQh, long long sQs,
              long long sKb, long long sKh, long long sKs,
              long long sVb, long long sVh, long long sVs,
              long long sOb, long long sOh, long long sOs,
              float scale_log2 FV_TRACE_PARAMS)
{
    static_assert(Br % 64 == 0 && Br <= 192, "Br must be 64, 128 or 192 (one warpgroup per 64 rows)");
    static_assert(Bc == 32 || Bc == 64 || Bc == 128, "Bc must be 32, 64 or 128");
    static_assert(D == 64 || D == 128, "d must be 64 or 128");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fvmma;
    using namespace fvattn;
    constexpr int NT = Br * 2;          // threads: Br/64 warpgroups of 128
    constexpr int TILE_Q = Br * D * 2;  // bytes of Q_i
    constexpr int TILE_KV = Bc * D * 2; // bytes of one K_j or V_j stage
    constexpr int NS = Bc / 2;          // S_ij accumulators a thread (m64 x Bc over 128 threads)
    constexpr int NO = D / 2;           // O_i accumulators a thread

    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 sQ = base;
    const u32 sK = sQ + TILE_Q;             // two stages
    const u32 sV = sK + 2 * TILE_KV;        // two stages

    const int tid = threadIdx.x;
    const int wg = tid >> 7;                 // warpgroup: rows [64 wg, 64 wg + 64) of the block
    const int warp = (tid >> 5) & 3;         // warp in the warpgroup: 16 of those rows
    const int lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;   // this thread's rows g, g+8; columns 8i + 2t, +1
    int b = blockIdx.z, h = blockIdx.y;
    int i_blk = CAUSAL ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;  // causal: long rows first
    FV_BLOCK_ORDER(i_blk, h, b);             // the lesson's other orders (fv_trace.cuh); nothing by default
    const int r0 = i_blk * Br;
    // timeline (traced builds only): one writer per warpgroup, thread 0 writes the block's header
    // Times are kept in registers (32-bit cycle offsets) and a tile's steps are stored together
    // while the warp waits for its P_ij V_j product: storing each step where it ends cost up to 15 %.
    FV_TRACE_BEGIN(Br / 64, wg, (tid & 127) == 0, tid == 0);
    // t_k_issue / t_v_issue: K_{j+1} / V_{j+1} copies issued; t_k_prev / t_v_prev: K_j / V_j's (a step earlier)
    FV_MARKS(t_q, t_k_issue, t_v_issue, t_k_prev, t_v_prev, t_kland, t_s0, t_s1);
    FV_MARKS(t_ml, t_cv, t_vland, t_o0, t_o0p, t_o1, t_w0, t_w1);
    FV_NOW32(t_q);

    const u16* Qp = Q + b * sQb + h * sQh;
    const u16* Kp = K + b * sKb + h * sKh;
    const u16* Vp = V + b * sVb + h * sVh;

    // Key tiles this query block sees: all of them, or (causal) up to its last visible column.
    const int Tc = key_tiles<Br, Bc, CAUSAL>(i_blk, Nq, Nk);

    // [load_Q] Alg. 1 line 4: Q_i from HBM to SRAM, once (cp.async; rows past Nq are zero-filled).
    load_tile_sw128<Br, D, NT>(sQ, Qp, sQs, r0, Nq, tid);
    // [load_KV] Alg. 1 line 7: the first stage, K_0 and V_0, starts before the loop.
    FV_NOW32(t_k_issue);
    if (Tc > 0) load_tile_sw128<Bc, D, NT>(sK, Kp, sKs, 0, Nk, tid);
    cp_async_commit();                                   // group: Q_i, K_0
    FV_NOW32(t_v_issue);
    if (Tc > 0) load_tile_sw128<Bc, D, NT>(sV, Vp, sVs, 0, Nk, tid);
    cp_async_commit();                                   // group: V_0

    // [init] Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf (on chip, in registers).
    float o[NO];                                         // O_i (unnormalised), fp32
#pragma unroll
    for (int x = 0; x < NO; ++x) o[x] = 0.f;
    RowStats stats;                                      // m_i, l_i of rows g, g+8
    stats.init();
    const int row0 = r0 + wg * 64 + warp * 16 + g;       // global query rows of this thread
    const int row1 = row0 + 8;
    const int shift = Nk - Nq;                           // bottom-right causal alignment

    // [load_KV] Alg. 1 line 7: for j = 1 .. Tc (line 6): wait until K_j (and Q_i) landed, then
    // prefetch K_{j+1} into the other stage while this step computes.
    for (int j = 0; j < Tc; ++j) {
        const int st = j & 1;
        const u32 sKj = sK + st * TILE_KV, sVj = sV + st * TILE_KV;
        cp_async_wait<1>();                              // K_j (and Q_i) landed
        fence_proxy_async();
        __syncthreads();
        FV_NOW32(t_kland);
        FV_SET(t_k_prev, t_k_issue);
        FV_NOW32(t_k_issue);
        if (j + 1 < Tc) load_tile_sw128<Bc, D, NT>(sK + (st ^ 1) * TILE_KV, Kp, sKs, (j + 1) * Bc, Nk, tid);
        cp_async_commit();

        // [compute_S] Alg. 1 line 8: S_ij = Q_i K_jᵀ on the tensor cores (fp32 accumulate), d/16
        // k-slices.
        float s[NS];
        FV_SPAN(t_s0, t_s1) {
            fence_regs<NS>(s);
            wgmma_fence();
            issue_S<DT, Br, Bc, D>(s, sQ + wg * (64 * 128), sKj);
            wgmma_wait0();
            fence_regs<NS>(s);
        }

        // [mask_S] Alg. 1 line 8: key columns past Nk, and (causal) columns past the row's last
        // visible key, are -inf; only an edge tile pays for the comparisons.
        const int c0 = j * Bc;
        const bool edge = (c0 + Bc > Nk) || (CAUSAL && c0 + Bc - 1 > r0 + shift);
        if (edge) mask_S<Bc, CAUSAL>(s, c0, Nk, row0 + shift, row1 + shift, t);

        // [update_ml] Alg. 1 line 9, the online softmax (exp2 domain): m_new = max(m_i, rowmax S_ij);
        // alpha = exp(m_i - m_new); P_ij = exp(S_ij - m_new); l_i = alpha·l_i + rowsum P_ij.
        Rows rowsum;
        const Rows alpha = stats.update<Bc>(s, scale_log2, rowsum);
        stats.add(alpha, rowsum);
        // [accumulate_O] Alg. 1 line 10 (first half): O_i = diag(alpha) O_i.
        RowStats::rescale<D>(o, alpha);
        FV_NOW32(t_ml);                                   // mask, m_i, P_ij, l_i and O_i rescaled
        // [convert_P] Alg. 1 line 10: P_ij to fp16/bf16 in registers, the A operand of the next
        // product: the accumulator layout of two adjacent n8 column groups is exactly the register
        // layout of one 64 x 16 A slice.
        u32 p[Bc / 16][4];
        convert_P<DT, Bc>(p, s);

        FV_NOW32(t_cv);
        // [load_KV] Alg. 1 line 7: wait until V_j landed, then prefetch V_{j+1} into the other stage.
        cp_async_wait<1>();                              // V_j landed
        fence_proxy_async();
        __syncthreads();
        FV_NOW32(t_vland);
        FV_SET(t_v_prev, t_v_issue);
        FV_NOW32(t_v_issue);
        if (j + 1 < Tc) load_tile_sw128<Bc, D, NT>(sV + (st ^ 1) * TILE_KV, Vp, sVs, (j + 1) * Bc, Nk, tid);
        cp_async_commit();

        // [accumulate_O] Alg. 1 line 10 (second half): O_i += P_ij V_j on the tensor cores (issue_PV).
        FV_SET(t_o0p, t_o0);                             // the previous tile's product started
        FV_NOW32(t_o0);
        fence_regs<NO>(o);
        wgmma_fence();
        issue_PV<DT, Bc, D>(o, p, sVj);
        FV_WRITER_BLOCK({   // while P_ij V_j runs, the writer stores this tile's steps (and the last product)
            unsigned long long* r = FV_ROW(j);
            r[FV_STAGE_LOAD_K] = FV_PACK(t_k_prev, t_kland);   // issued (prologue / step j-1) .. landed
            r[FV_STAGE_COMPUTE_S] = FV_PACK(t_s0, t_s1);       // issued .. complete
            r[FV_STAGE_UPDATE_ML] = FV_PACK(t_s1, t_ml);
            r[FV_STAGE_CONVERT_P] = FV_PACK(t_ml, t_cv);
            r[FV_STAGE_LOAD_V] = FV_PACK(t_v_prev, t_vland);   // issued (prologue / step j-1) .. landed
            if (j == 0) FV_ROW(-1)[FV_STAGE_LOAD_Q] = FV_PACK(t_q, t_kland);
            if (j > 0) FV_ROW(j - 1)[FV_STAGE_ACCUMULATE_O] = FV_PACK(t_o0p, t_o1);
        })
        wgmma_wait0();
        fence_regs<NO>(o);
        FV_NOW32(t_o1);
    }
    if (Tc > 0) FV_EVENT32(Tc - 1, FV_STAGE_ACCUMULATE_O, t_o0, t_o1);
    cp_async_wait<0>();
    FV_NOW32(t_w0);
    FV_WRITER_BLOCK({ if (Tc == 0) FV_ROW(-1)[FV_STAGE_LOAD_Q] = FV_PACK(t_q, t_w0); })  // no key: Q_i landed here

    // [write_O] Alg. 1 lines 12-15: O = O_i / l_i; lse_i = scale·m_i + log l_i (natural log), written
    // to HBM once.
    FV_SCOPE_FROM(-1, FV_STAGE_WRITE_O, t_w0, t_w1) {
        stats.write_O<DT, D>(O, lse, b, h, H, sOb, sOh, sOs, Nq, row0, row1, t, o, scale_log2);
    }
    FV_TRACE_END(i_blk, h, b, Tc);
#else
    __trap();  // wgmma needs sm_90a: compile with -arch=sm_90a (NVRTC) / compute_90a (nvcc)
#endif
}

#ifdef FLASHVIZ_PTX_CHECK
// Every (dtype, Br, Bc, d, causal) the runner may launch (FV_ATTN_INST: kernels/fv_attn.cuh).
#define FV_INST_BC(DT, BR) FV_ATTN_INST(flash_fwd_mma, DT, BR, 32) FV_ATTN_INST(flash_fwd_mma, DT, BR, 64) FV_ATTN_INST(flash_fwd_mma, DT, BR, 128)
__attribute__((used)) static const void* const fv_ptx_check[] = {FV_INST_BC(0, 64) FV_INST_BC(0, 128) FV_INST_BC(1, 64) FV_INST_BC(1, 128)};
#endif
