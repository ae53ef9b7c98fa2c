// fv_pipeline.cuh: the warp-specialised pipeline of the Hopper attention kernels (sm_90a): tiles
// copied by TMA into rings of shared-memory slots that mbarriers hand between a producer warpgroup
// and the consumer warpgroups, and the consumers' turns at the tensor cores (FlashAttention-3,
// Shah et al. 2024, sections 3.1-3.2). Used by kernels/flash_fwd_fa3.cu beside the steps of
// kernels/fv_attn.cuh; PTX ISA references in fv_tma.cuh.
//
//   load_tile_tma   load_Q / load_KV (Alg. 1 lines 4, 7): one tile (ROWS x d) by TMA, d/64 boxes
//   Ring            a ring of slots: a use k of it names its slot and the barrier phase to wait for
//                   (and, for a message beside a slot, its acquire in two halves and a hand-over)
//   PingPong        the consumers' turns over named barriers whose ids have names (NamedBarrier)
#pragma once

#include "fv_ptx.cuh"
#include "fv_tma.cuh"

namespace fvattn {

using namespace fvptx;
using namespace fvtma;

// One tile of ROWS x D elements, rows [row, row + ROWS) of head h, batch b, by
// TMA into shared memory at dst: D/64 boxes of [ROWS][64] (the 128-byte swizzle's column blocks),
// their bytes counted off mbarrier bar. Rows past the tensor's end arrive as zeros.
template <int ROWS, int D>
__device__ __forceinline__ void load_tile_tma(u32 dst, const TensorMap* map, u32 bar, int row, int h, int b) {
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) tma_load_4d(dst + cb * (ROWS * 128), map, bar, cb * 64, row, h, b);
}

// A ring of ST slots of TILE bytes in shared memory (from `tiles`), each with a "full" mbarrier
// (the producer's copy landed) and an "empty" one (every consumer warp is done with it): ST
// barriers of 8 bytes each from `full` and from `empty`. Use k = 0, 1, 2, ... of the ring takes
// slot k mod ST in pass k / ST and waits for the barrier phase of that pass: the slot and the
// parity are computed here and nowhere else. A fresh barrier is in phase 0, so the producer's
// first pass (waiting for the phase "before" it) does not wait.
template <int ST, int TILE>
struct Ring {
    u32 tiles, full, empty;

    // use k of the ring (its slot is worked out once, where the use is named)
    struct Use {
        int k, slot;
    };
    __device__ __forceinline__ Use use(int k) const { return Use{k, k % ST}; }
    __device__ __forceinline__ u32 parity(Use u) const { return (u.k / ST) & 1; }
    // shared address of the use's tile, and of its full barrier (the copies signal it)
    __device__ __forceinline__ u32 tile(Use u) const { return tiles + u.slot * TILE; }
    __device__ __forceinline__ u32 full_bar(Use u) const { return full + 8 * u.slot; }

    // producer: wait until the use's slot is empty, then arrive on its full barrier announcing
    // the TILE bytes its copies will bring
    __device__ __forceinline__ void acquire(Use u) const {
        mbar_wait(empty + 8 * u.slot, parity(u) ^ 1);
        mbar_arrive_expect_tx(full_bar(u), TILE);
    }
    // producer, acquire in two halves, for a message written between them that the consumers read
    // once the slot is full (the arrive releases it, their wait acquires it): flash_fwd_fa3.cu's
    // dynamic scheduler hands its tile index over with Q_i's slot this way
    __device__ __forceinline__ void wait_empty(Use u) const { mbar_wait(empty + 8 * u.slot, parity(u) ^ 1); }
    __device__ __forceinline__ void expect(Use u) const { mbar_arrive_expect_tx(full_bar(u), TILE); }
    // producer: hand an empty slot over with no copy into it (the message alone)
    __device__ __forceinline__ void hand_over(Use u) const { mbar_arrive(full_bar(u)); }
    // consumer: wait until the use's tile has landed
    __device__ __forceinline__ void wait_full(Use u) const { mbar_wait(full_bar(u), parity(u)); }
    // consumer: this warp is done with the use's tile (one lane a warp arrives)
    __device__ __forceinline__ void release(Use u) const { mbar_arrive(empty + 8 * u.slot); }
};

// Named barriers (bar.sync / bar.arrive ids; 0 is __syncthreads): consumer warpgroup w's turn at
// the tensor cores is barrier TURN_0 + w.
enum NamedBarrier : int { SYNC_ALL = 0, TURN_0 = 1 };

// Ping-pong (FlashAttention-3 section 3.1): NWG consumer warpgroups take turns issuing their
// products; a warpgroup waits for its turn, issues, and passes the turn on without waiting, so one
// warpgroup's softmax runs while the next one's products occupy the tensor cores. ON = false
// compiles every call to nothing (the consumers in lock-step).
template <int NWG, bool ON>
struct PingPong {
    static constexpr int THREADS = 256;     // the warpgroup that waits and the one that arrives
    int w, mine, next;                      // this consumer warpgroup; its turn's barrier, the next one's

    __device__ __forceinline__ static PingPong of(int w) { return PingPong{w, TURN_0 + w, TURN_0 + (w + 1) % NWG}; }
    // the first turn goes to warpgroup 0: the last warpgroup arrives on its barrier
    __device__ __forceinline__ void open() const {
        if (ON && w == NWG - 1) bar_arrive(TURN_0, THREADS);
    }
    __device__ __forceinline__ void wait() const {
        if (ON) bar_sync(mine, THREADS);
    }
    __device__ __forceinline__ void pass() const {
        if (ON) bar_arrive(next, THREADS);
    }
    // a tile's last turn: the last warpgroup passes it to nobody (every barrier stays balanced)
    __device__ __forceinline__ void pass_last() const {
        if (ON && w != NWG - 1) bar_arrive(next, THREADS);
    }
};

}  // namespace fvattn
