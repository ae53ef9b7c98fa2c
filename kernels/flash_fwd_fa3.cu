// flash_fwd_fa3.cu: FlashAttention-3 forward on Hopper (sm_90a), fp16 / bf16.
//
// The same function as kernels/flash_fwd_mma.cu (FlashAttention-2 on the tensor cores) and
// flashviz/tiled.py, organised the way FlashAttention-3 organises it for Hopper (Shah, Bikshandi,
// Zhang, Thakkar, Ramani, Dao 2024, sections 3.1-3.2, Algorithms 1-2):
//
//  * warp specialisation. Warpgroup 0 is the *producer*: one of its threads issues TMA copies
//    (cp.async.bulk.tensor) of Q_i once and of K_j, V_j into a ring of STAGES shared-memory
//    slots; full/empty mbarriers hand each slot to the consumers and back. Warpgroups 1..Br/64
//    are *consumers*: each owns 64 query rows and runs the matrix products (wgmma) and the online
//    softmax. `setmaxnreg` moves registers from the producer (which needs few) to the consumers.
//  * ping-pong (FEAT bit 0): the consumers take turns issuing their matrix products, passed on
//    with named barriers, so one warpgroup's softmax runs while another's products occupy the
//    tensor cores.
//  * intra-warpgroup overlap (FEAT bit 1): each step issues S_ij = Q_i K_jᵀ of the next tile and
//    O_i += P V of the previous tile together, waits only for S_ij, and runs its softmax while
//    P V is still on the tensor cores.
//
// Names (the paper's): Q_i (Br x d) in shared memory, K_j, V_j (Bc x d) in the ring; S_ij,
// P_ij, O_i in registers (fp32; P_ij converted to fp16/bf16 and fed to the tensor cores as the A
// operand); m_i, l_i the running row max (raw scores) and row sum; alpha = exp(scale·(m_old −
// m_new)); lse_i = scale·m_i + log l_i (natural log, fp32).
//
// Partitioning: a tile of work is one (query block i, head h, batch b); (Br/64 + 1) warpgroups a
// thread block. Block c walks the tiles c, c + gridDim.x, ... of one list (causal: the longest
// query blocks of every head first, the order chapter 7 measured 1.16-1.24x faster; otherwise one
// head's query blocks side by side, for L2). The runner launches one block per tile (the
// hardware hands blocks to SMs as they free up) or, persistent, one block per SM; then the rings
// run on across tiles and the producer loads the next tile's Q_i and K_j while the consumers
// write this tile's O_i (flashviz/gpu/tensorcore/fa3.py, PERSISTENT).
// Key tiles are visited from the last to the first, as FlashAttention-3 does: the tiles that
// need a mask (the partial last tile, the causal diagonal) come first, the rest run unmasked.
//
// Per key tile (step names of flashviz/steps.py, lines of FlashAttention-2 Algorithm 1):
//   producer: wait slot empty; TMA K_j, V_j into it                      load_KV       line 7
//   consumer: wait K_j; [turn] S_ij = Q_i K_jᵀ (wgmma SS) and            compute_S     line 8
//             O_i += P V of the previous tile (wgmma RS); [pass the turn] accumulate_O line 10
//             wait S_ij, free K_j's slot; mask (edge tiles only)         mask_S        line 8
//             m_i, P_ij, l_i                                             update_ml     line 9
//             wait P V, free V's slot; O_i = diag(alpha) O_i              accumulate_O  line 10
//             P_ij to fp16/bf16 in registers                             convert_P     line 10
// The consumer's part is written once (Consumer::step): the first key tile issues S_ij alone, and a
// last step the last P V alone. Then O_i / l_i, lse_i to HBM (write_O, lines 12-15).
//
// Shared memory (1024-byte aligned tiles, 128-byte swizzle, d/64 column blocks of [rows][64]
// each, as the TMA writes them with CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads them; see
// fv_wgmma.cuh): Q_i, STAGES slots of K_j, STAGES of V_j, then the mbarriers:
//   1024 + 2·(Br·d + 2·STAGES·Bc·d) + 8·(2 + 4·STAGES) bytes.
//
// Inputs: three tensor maps over (d, N, H, B) views of Q, K, V (element strides of the
// sequence, head and batch axes, 16-byte multiples; built by flashviz/gpu/tensorcore/tma.py);
// the copy engine zero-fills rows past N. O: BHSD with element strides; lse: (B, H, Nq)
// contiguous. Causal masking is bottom-right aligned: query r sees key c iff c <= r + Nk − Nq.
// A row that sees no key writes O = 0 and lse = −inf; NaN inputs give NaN rows.

#include "fv_ptx.cuh"   // u16/u32/u64, neg_inf, smem_addr, ex2, pack2
#include "fv_wgmma.cuh" // fence_regs, wgmma fence/wait (the products themselves: fv_attn.cuh)
#include "fv_tma.cuh"   // TensorMap, mbarriers, TMA copies, named barriers, setmaxnreg
#include "fv_attn.cuh"  // the steps: issue_S, mask_S, RowStats, convert_P, issue_PV
#include "fv_pipeline.cuh" // the TMA rings (Ring, load_tile_tma) and the consumers' turns (PingPong)
#include "fv_trace.cuh" // the timeline switch: FV_* expand to nothing unless -DFLASHVIZ_TRACE=1

// FA3_FEAT (bit 0: ping-pong between consumer warpgroups; bit 1: intra-warpgroup overlap) and
// FA3_STAGES (slots in the K and V rings) override the measured choices of Config below; the
// benchmarks define them to time each step in one run (benchmarks/probe_fa3.py).
//
// FA3_DYNAMIC (an experiment, off unless defined to 1; benchmarks/ab_fa3.py builds it): the
// persistent grid's dynamic tile scheduler, as FlashAttention-3's. Given `tile_counter` (int32,
// tile_counter[0] zeroed before the launch, then one slot a block), block c takes tile c first and
// then the tile gridDim.x + atomicAdd(tile_counter, 1): whichever block is free takes the next
// tile of the list (causal: the longest first), so causal tiles of unequal length balance as the
// hardware's block scheduler balances them, while the rings run on across a block's tiles as in
// the static persistent grid. The producer hands each tile index (and −1 at the end) to the
// consumers with Q_i's slot: written to the block's slot between the wait for the slot to be empty
// and the arrive on its full barrier, read by the consumers after their wait (Ring::wait_empty,
// expect, hand_over). Without a counter (nullptr) the build walks the static list.
#if defined(FA3_DYNAMIC) && FA3_DYNAMIC
#define FA3_DYN 1
#else
#define FA3_DYN 0
#endif

namespace fvfa3 {

// The kernel's fixed choices for a (Br, Bc, d): consumer warpgroups, ring depth, registers.
template <int Br, int Bc, int D>
struct Config {
    static constexpr int NWG = Br / 64;                    // consumer warpgroups (64 query rows each)
    static constexpr int THREADS = (NWG + 1) * 128;        // + the producer warpgroup
    static constexpr int TILE_KV = Bc * D * 2;             // bytes of one K_j or V_j slot
#ifdef FA3_STAGES
    static constexpr int STAGES = FA3_STAGES;
#else
    static constexpr int STAGES = D == 128 ? 2 : 3;        // slots in the K and V rings
#endif
    // registers a thread after setmaxnreg: 65,536 per SM shared by one block
    static constexpr int REG_PRODUCER = NWG == 2 ? 24 : 32;
    static constexpr int REG_CONSUMER = NWG == 2 ? 240 : 160;
#ifdef FA3_FEAT
    static constexpr int FEAT = FA3_FEAT;
#else
    // ping-pong only: with two or three consumer warpgroups taking turns, a warpgroup's softmax
    // already runs while the others' products keep the tensor cores busy; the intra-warpgroup
    // overlap measured no faster on top of it on the H200 (benchmarks/NOTES.md, fa3 v4)
    static constexpr int FEAT = 1;
#endif
    static constexpr bool PINGPONG = (FEAT & 1) != 0;
    static constexpr bool INTRA = (FEAT & 2) != 0;
};

}  // namespace fvfa3

#if FA3_DYN
// The dynamic scheduler's message: a tile index in global memory, ordered by Q_i's mbarriers
// (their arrive releases and their wait acquires at CTA scope).
__device__ __forceinline__ void st_relaxed_cta(int* p, int v) {
    asm volatile("st.relaxed.cta.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_relaxed_cta(const int* p) {
    int v;
    asm volatile("ld.relaxed.cta.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
#endif

// The work list of a persistent block: tile L (of Tr·H·B) -> (query block i, head h, batch b).
// Causal: the longest query blocks of every head first (i descending, then h, b); otherwise the
// query blocks of one head next to each other (they read the same K, V: L2 hits).
template <bool CAUSAL>
__device__ __forceinline__ void tile_coords(int L, int Tr, int H, int B, int& i, int& h, int& b) {
    if (CAUSAL) {
        const int hb = L % (H * B);
        i = Tr - 1 - L / (H * B);
        h = hb % H;
        b = hb / H;
    } else {
        const int hb = L / Tr;
        i = L % Tr;
        h = hb % H;
        b = hb / H;
    }
}

namespace fvfa3 {

using namespace fvattn;

// Tile L of the work list and the key tiles its query block visits (both roles walk the list).
struct Tile {
    int i, h, b, Tc;
};
template <int Br, int Bc, bool CAUSAL>
__device__ __forceinline__ Tile tile_at(int L, int Tr, int H, int B, int Nq, int Nk) {
    Tile w;
    tile_coords<CAUSAL>(L, Tr, H, B, w.i, w.h, w.b);
    w.Tc = key_tiles<Br, Bc, CAUSAL>(w.i, Nq, Nk);
    return w;
}

// Which products a consumer step issues, fixed at compile time: S_ij of its key tile (S) and
// O_i += P V of the previous tile (PV). Both in the loop; S only for the first key tile (no P yet),
// PV only after the last.
template <bool S, bool PV>
struct Step {};

// The traced build's share of a consumer step (kernels/fv_trace.cuh): the tile's record and the
// marks (FV_MARKS in the kernel) a step reads and moves, by reference and under the kernel's names,
// so that the hooks in Consumer::step are the kernel's. Nothing in a normal build. They come first
// in Consumer: placed after the other members, they renumbered the traced build's PTX registers.
#if defined(FLASHVIZ_TRACE) && FLASHVIZ_TRACE
#define FA3_STEP_MARKS const fvtrace::Rec& fv_rec; unsigned &t_k0, &t_k1, &t_v1, &t_s0, &t_s1, &t_ml, &t_o1, &t_cv;
#define FA3_STEP_MARKS_OF fv_rec, t_k0, t_k1, t_v1, t_s0, t_s1, t_ml, t_o1, t_cv,
#else
#define FA3_STEP_MARKS
#define FA3_STEP_MARKS_OF
#endif

// One consumer warpgroup on one tile of work (query block i): what its key-tile steps read, and the
// accumulators they write, by reference, under the kernel's names.
template <int DT, int Br, int Bc, int D, bool CAUSAL>
struct Consumer {
    using C = Config<Br, Bc, D>;
    enum : int { NS = Bc / 2, NO = D / 2 };       // accumulators a thread (an enum: no object in the cubin)
    FA3_STEP_MARKS
    const Ring<1, Br * D * 2>& Qr;
    const Ring<C::STAGES, C::TILE_KV>& Kr, &Vr;
    const PingPong<C::NWG, C::PINGPONG>& turn;
    const typename Ring<1, Br * D * 2>::Use Qi;   // Q_i's slot: free after the tile's last S_ij
    const int Tc, it;                             // key tiles j = Tc-1 down to 0; the K/V rings' use for j = Tc-1
    const u32 sQw;                                // this warpgroup's 64 rows of Q_i
    const int lane, t4, row0, row1, first_row, shift, Nk;
    const float scale_log2;
    float (&s)[NS];                               // S_ij, then P_ij (fp32)
    float (&o)[NO];                               // O_i
    u32 (&p)[Bc / 16][4];                         // P of the previous tile (fp16/bf16), the A operand of P V
    RowStats& stats;                              // m_i, l_i

    // Step t (0..Tc) of the loop over key tiles, Alg. 1 lines 7-10 written once: S_ij of key tile
    // j = Tc - 1 - t (steps t < Tc) issued in the same turn as O_i += P V of the previous tile j + 1
    // (steps t > 0), then the softmax of S_ij while P V runs. Step<S, PV> leaves out at compile time
    // what the first step (t = 0: no P yet) and the last (t = Tc: the last P V) do not have, and the
    // kernel's three calls compile to the very PTX of the three phases it once wrote out
    // (benchmarks/NOTES.md, FlashAttention-3, v8). Two spellings are for the compiler, which simplifies
    // this function before it inlines it: t comes by reference (by value, t == Tc - 1 came out as
    // Tc - 1 == t, a swapped compare in the SASS), and the mask's two tests are computed before its
    // branch (behind ||, the loads of first_row and shift kept a branch the written-out phases did not
    // have, which moved instructions of the traced build).
    template <bool S, bool PV>
    __device__ __forceinline__ void step(Step<S, PV>, const int& t) const {
        const int j = Tc - 1 - t;
        const auto Kj = Kr.use(it + t), Vj1 = Vr.use(it + t - 1);  // K_j, and V_{j+1} (the previous tile)
        if constexpr (S) {
            FV_SPAN(t_k0, t_k1) Kr.wait_full(Kj);           // K_j landed
        }
        if (!S) FV_NOW32(t_k1);
        if constexpr (PV) {
            FV_UNTIL(t_v1) Vr.wait_full(Vj1);               // V of the previous tile landed
        }
        if (S && (!PV || !C::INTRA || t == 1)) FV_EVENT32(j, FV_STAGE_LOAD_K, t_k0, t_k1);  // (overlap: waited below)
        if (PV) FV_EVENT32(j + 1, FV_STAGE_LOAD_V, t_k1, t_v1);
        turn.wait();
        FV_SCOPE((S ? j : j + 1), (S ? FV_STAGE_COMPUTE_S : FV_STAGE_ACCUMULATE_O), t_s0, (S ? t_s1 : t_o1)) {
            if (S && !PV) FV_STAMP32(j, FV_STAGE_COMPUTE_S, t_s0);  // the tile's first product
            if constexpr (S) fence_regs<NS>(s);
            if constexpr (PV) fence_regs<NO>(o);
            wgmma_fence();
            // [compute_S] Alg. 1 line 8: S_ij = Q_i K_jᵀ, and [accumulate_O] line 10 of the
            // previous tile: O_i += P V, both on the tensor cores at once.
            if constexpr (S) issue_S<DT, Br, Bc, D>(s, sQw, Kr.tile(Kj));
            if constexpr (PV) issue_PV<DT, Bc, D>(o, p, Vr.tile(Vj1));
            if constexpr (S) turn.pass();
            else turn.pass_last();                          // the tile's last turn
            if constexpr (C::INTRA && S && PV) {
                wgmma_wait<1>();                            // S_ij done; P V may still run
                fence_regs<NS>(s);
            } else {
                wgmma_wait<0>();
                if constexpr (S) fence_regs<NS>(s);
                if constexpr (PV) fence_regs<NO>(o);
            }
        }
        if constexpr (!S) {                                 // the last P V is done
            if (lane == 0) Vr.release(Vj1);
            return;
        }
        if (PV) FV_SET(t_o1, t_s1);                         // without the overlap P V is done too
        if (lane == 0) {
            Kr.release(Kj);                                 // K_j's slot is free
            if (t == Tc - 1) Qr.release(Qi);                // the last S_ij: Q_i's buffer too
        }
        // [mask_S] Alg. 1 line 8: edge tiles only (they come first).
        const int c0 = j * Bc;
        const bool past_Nk = c0 + Bc > Nk, past_diagonal = CAUSAL && c0 + Bc - 1 > first_row + shift;
        if (past_Nk || past_diagonal)
            mask_S<Bc, CAUSAL>(s, c0, Nk, row0 + shift, row1 + shift, t4);
        // [update_ml] Alg. 1 line 9: m_i, P_ij, l_i.
        Rows rowsum;
        const Rows alpha = stats.update<Bc>(s, scale_log2, rowsum);
        FV_STEP32(t_ml, j, FV_STAGE_UPDATE_ML, t_s1);
        if constexpr (C::INTRA && PV) {
            // Keep the exponentials above the wait. ptxas schedules WARPGROUP.DEPBAR like an
            // instruction without inputs and hoists it to the top of its basic block, before
            // the softmax (NOTES.md: wgmma v3, fa3 v1); the fence pins the exponentials in
            // PTX order and the wait for the next K tile (a real loop) starts a new block.
            fence_regs<NS>(s);
            FV_NOW32(t_k0);
            if (t + 1 < Tc) Kr.wait_full(Kr.use(it + t + 1));
            FV_NOW32(t_k1);
            if (t + 1 < Tc) FV_EVENT32(j - 1, FV_STAGE_LOAD_K, t_k0, t_k1);  // the next tile's K
            wgmma_wait<0>();                                // the previous P V is done
            fence_regs<NO>(o);
            FV_NOW32(t_o1);
        }
        if constexpr (PV) {
            FV_EVENT32(j + 1, FV_STAGE_ACCUMULATE_O, t_s0, t_o1);  // the previous tile's P V
            if (lane == 0) Vr.release(Vj1);                 // its V slot is free
            // [accumulate_O] Alg. 1 line 10: O_i = diag(alpha) O_i (after line 9's l_i = alpha l_i +
            // rowsum, which waited here with alpha).
            stats.add(alpha, rowsum);
            RowStats::rescale<D>(o, alpha);
        } else {
            stats.l_i = rowsum;                             // the first tile: l_i was 0
        }
        // [convert_P] Alg. 1 line 10: P_ij to fp16/bf16 in registers.
        convert_P<DT, Bc>(p, s);
        FV_STEP32(t_cv, j, FV_STAGE_CONVERT_P, (C::INTRA && PV) ? t_o1 : t_ml);
    }
};

}  // namespace fvfa3

template <int DT, int Br, int Bc, int D, bool CAUSAL>
__global__ void __launch_bounds__((Br / 64 + 1) * 128, 1)
flash_fwd_fa3(const __grid_constant__ fvtma::TensorMap tmQ, const __grid_constant__ fvtma::TensorMap tmK,
              const __grid_constant__ fvtma::TensorMap tmV, u16* __restrict__ O, float* __restrict__ lse,
              int Nq, int Nk, int H, int B, long long sOb, long long sOh, long long sOs, float scale_log2,
              int* __restrict__ tile_counter FV_TRACE_PARAMS)
{
    static_assert(Br == 128 || Br == 192, "Br must be 128 or 192 (two or three consumer warpgroups)");
    static_assert(Bc == 64 || Bc == 128 || Bc == 176, "Bc must be 64, 128 or 176");
    static_assert(D == 64 || D == 128, "d must be 64 or 128");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace fvfa3;
    using namespace fvattn;
    using C = Config<Br, Bc, D>;
    constexpr int NWG = C::NWG, ST = C::STAGES, TILE_KV = C::TILE_KV;
    constexpr int NS = Bc / 2;          // S_ij accumulators a thread (m64 x Bc over 128 threads)
    constexpr int NO = D / 2;           // O_i accumulators a thread

    // Shared memory: Q_i, the K ring, the V ring, then the mbarriers: Q's full and empty, then
    // full K[ST], full V[ST], empty K[ST], empty V[ST] (8 bytes each).
    extern __shared__ unsigned char smem_raw[];
    const u32 sQ = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 sK = sQ + Br * D * 2;
    const u32 sV = sK + ST * TILE_KV;
    const u32 bars = sV + ST * TILE_KV;
    const u32 fullK = bars + 16, fullV = fullK + 8 * ST, emptyK = fullV + 8 * ST, emptyV = emptyK + 8 * ST;
    const Ring<1, Br * D * 2> Qr{sQ, bars, bars + 8};      // Q_i: one slot, used once a tile
    const Ring<ST, TILE_KV> Kr{sK, fullK, emptyK};
    const Ring<ST, TILE_KV> Vr{sV, fullV, emptyV};

    const int tid = threadIdx.x;
    const int wg = tid >> 7;                     // 0: producer; 1..NWG: consumers
    const int Tr = (Nq + Br - 1) / Br;
    const int n_tiles = Tr * H * B;
    const int shift = Nk - Nq;                   // bottom-right causal alignment
#if FA3_DYN
    const bool dynamic = tile_counter != nullptr;            // a counter: the dynamic schedule
    int* const sched = dynamic ? tile_counter + 1 + blockIdx.x : nullptr;   // this block's message slot
#endif

    if (tid == 0) {
        mbar_init(Qr.full, 1);                   // the producer's arrive + Q_i's bytes
        mbar_init(Qr.empty, NWG * 4);            // one arrive per consumer warp: Q_i no longer read
#pragma unroll
        for (int s = 0; s < ST; ++s) {
            mbar_init(fullK + 8 * s, 1);
            mbar_init(fullV + 8 * s, 1);
            mbar_init(emptyK + 8 * s, NWG * 4);
            mbar_init(emptyV + 8 * s, NWG * 4);
        }
        fence_mbar_init();
    }
    __syncthreads();

    // Persistent: one block per SM walks the tiles blockIdx.x, blockIdx.x + gridDim.x, ...; the
    // rings' use counters (it for K and V, qn for Q) run on across tiles, so the producer loads
    // the next tile's Q_i and K_j while the consumers finish this one.
    if (wg == 0) {
        // ---------------- producer warpgroup ----------------
        setmaxnreg_dec<C::REG_PRODUCER>();
        if (tid == 0) {
            prefetch_tensormap(&tmQ);
            prefetch_tensormap(&tmK);
            prefetch_tensormap(&tmV);
            int it = 0, qn = 0;
#if FA3_DYN
            // the tile after block c's first: gridDim.x + the counter's old value (dynamic), else the
            // static list's next; past the list, −1 goes to the consumers and the producer stops
            for (int L = blockIdx.x;; L = dynamic ? (int)gridDim.x + atomicAdd(tile_counter, 1) : L + (int)gridDim.x) {
                if (L >= n_tiles) {
                    if (dynamic) {
                        const auto Qe = Qr.use(qn);
                        Qr.wait_empty(Qe);
                        st_relaxed_cta(sched, -1);
                        Qr.hand_over(Qe);
                    }
                    break;
                }
#else
            for (int L = blockIdx.x; L < n_tiles; L += gridDim.x) {
#endif
                const auto [i_blk, h, b, Tc] = tile_at<Br, Bc, CAUSAL>(L, Tr, H, B, Nq, Nk);
#if FA3_DYN
                if (Tc == 0 && dynamic) {            // nothing to load; the consumers still write the tile
                    const auto Qe = Qr.use(qn++);
                    Qr.wait_empty(Qe);
                    st_relaxed_cta(sched, L);
                    Qr.hand_over(Qe);
                }
#endif
                if (Tc == 0) continue;
                // timeline (traced build only): one record per tile L; the producer is group 0, its
                // steps run from waiting for the slot to the copy issued (it never sees a copy land)
                FV_TRACE_BEGIN_AT(L, NWG + 1, 0, true, false);
                FV_MARKS(t_a, t_b);
                FV_NOW32(t_a);
                // [load_Q] Alg. 1 line 4: Q_i from HBM to SRAM once (rows past Nq arrive as zeros),
                // when the consumers no longer read the previous tile's.
                const auto Qi = Qr.use(qn);
#if FA3_DYN
                if (dynamic) {                        // the tile index rides with Q_i
                    Qr.wait_empty(Qi);
                    st_relaxed_cta(sched, L);
                    Qr.expect(Qi);
                } else
#endif
                Qr.acquire(Qi);
                load_tile_tma<Br, D>(Qr.tile(Qi), &tmQ, Qr.full_bar(Qi), i_blk * Br, h, b);
                ++qn;
                FV_STEP32(t_b, -1, FV_STAGE_LOAD_Q, t_a);
                // [load_KV] Alg. 1 line 7: K_j, V_j into the rings, last tile first.
                for (int t = 0; t < Tc; ++t, ++it) {
                    const int j = Tc - 1 - t;
                    const auto Kj = Kr.use(it), Vj = Vr.use(it);
                    FV_NOW32(t_a);
                    Kr.acquire(Kj);
                    load_tile_tma<Bc, D>(Kr.tile(Kj), &tmK, Kr.full_bar(Kj), j * Bc, h, b);
                    FV_STEP32(t_b, j, FV_STAGE_LOAD_K, t_a);
                    Vr.acquire(Vj);
                    load_tile_tma<Bc, D>(Vr.tile(Vj), &tmV, Vr.full_bar(Vj), j * Bc, h, b);
                    FV_STEP32(t_a, j, FV_STAGE_LOAD_V, t_b);
                }
            }
        }
    } else {
        // ---------------- consumer warpgroups ----------------
        setmaxnreg_inc<C::REG_CONSUMER>();
        const int w = wg - 1;                        // rows [64 w, 64 w + 64) of the block
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;      // this thread's rows g, g+8; columns 8n + 2 t4, +1
        const u32 sQw = sQ + w * (64 * 128);
        const auto turn = PingPong<NWG, C::PINGPONG>::of(w);
        int it = 0, qn = 0;

#if FA3_DYN
        for (int L = blockIdx.x;; L += gridDim.x) {
            if (dynamic) {
                Qr.wait_full(Qr.use(qn));                // the producer's next tile index, with Q_i
                L = ld_relaxed_cta(sched);
                __syncwarp();                            // every lane has read it before lane 0 can hand
                if (L < 0) break;                        // the slot back (Tc == 0) and the next one land
            } else if (L >= n_tiles) {
                break;
            }
#else
        for (int L = blockIdx.x; L < n_tiles; L += gridDim.x) {
#endif
            const auto [i_blk, h, b, Tc] = tile_at<Br, Bc, CAUSAL>(L, Tr, H, B, Nq, Nk);   // key tiles j = Tc-1 down to 0
            const int r0 = i_blk * Br;
            const int row0 = r0 + w * 64 + warp * 16 + g, row1 = row0 + 8;   // global query rows
            const int first_row = r0 + w * 64;       // this warpgroup's first row: tiles past its
                                                     // last visible key need the causal mask
            // timeline (traced build only): consumer warpgroup w is group w + 1, its thread 0 the
            // writer; the first consumer thread writes the tile's header. A consumer's load_Q /
            // load_K / load_V is its wait for the copy to land; compute_S and accumulate_O run from
            // the products' issue (after its turn) to their completion.
            FV_TRACE_BEGIN_AT(L, NWG + 1, wg, (tid & 127) == 0, tid == 128);
            FV_MARKS(t_k0, t_k1, t_v1, t_s0, t_s1, t_ml, t_o1, t_cv, t_w0, t_w1);

            // [init] Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf (registers).
            float o[NO];
#pragma unroll
            for (int x = 0; x < NO; ++x) o[x] = 0.f;
            RowStats stats;
            stats.init();
            float s[NS];
            u32 p[Bc / 16][4];

            if (Tc > 0) {
                const auto Qi = Qr.use(qn);
                Qr.wait_full(Qi);
                ++qn;
                FV_STEP32(t_k0, -1, FV_STAGE_LOAD_Q, 0u);
                turn.open();

                // The loop over key tiles (Alg. 1 lines 7-10), one tile a step (Consumer::step, above the
                // kernel): S_ij of the first key tile alone, then S_ij of each next one with P V of the one
                // before, then the last P V alone.
                const Consumer<DT, Br, Bc, D, CAUSAL> cw{FA3_STEP_MARKS_OF Qr, Kr, Vr, turn, Qi, Tc, it, sQw, lane, t4,
                                                        row0, row1, first_row, shift, Nk, scale_log2, s, o, p, stats};
                cw.step(Step<true, false>{}, 0);                      // the first key tile: S_ij only
                for (int t = 1; t < Tc; ++t) cw.step(Step<true, true>{}, t);
                cw.step(Step<false, true>{}, Tc);                     // the last tile's P V only
                it += Tc;
            }
#if FA3_DYN
            else if (dynamic) {                              // a tile without keys: Q_i's slot back at once
                if (lane == 0) Qr.release(Qr.use(qn));
                ++qn;
            }
#endif

            // [write_O] Alg. 1 lines 12-15: O = O_i / l_i; lse_i = scale·m_i + log l_i, to HBM once
            // (while the producer already loads the next tile's Q_i and K_j).
            FV_SCOPE(-1, FV_STAGE_WRITE_O, t_w0, t_w1) {
                stats.write_O<DT, D>(O, lse, b, h, H, sOb, sOh, sOs, Nq, row0, row1, t4, o, scale_log2);
            }
            FV_TRACE_END(i_blk, h, b, Tc);
        }
    }
#else
    __trap();  // wgmma and setmaxnreg need sm_90a: compile with -arch=sm_90a (NVRTC) / compute_90a (nvcc)
#endif
}

#ifdef FLASHVIZ_PTX_CHECK
// Every (dtype, Br, Bc, d, causal) the runner may launch (FV_ATTN_INST: kernels/fv_attn.cuh).
#define FV_INST_BC(DT, BR) FV_ATTN_INST(flash_fwd_fa3, DT, BR, 64) FV_ATTN_INST(flash_fwd_fa3, DT, BR, 128) FV_ATTN_INST(flash_fwd_fa3, DT, BR, 176)
__attribute__((used)) static const void* const fv_ptx_check[] = {FV_INST_BC(0, 128) FV_INST_BC(0, 192) FV_INST_BC(1, 128) FV_INST_BC(1, 192)};
#endif
