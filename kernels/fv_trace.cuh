// fv_trace.cuh: the GPU timeline switch (issue 12). Compiled in only with -DFLASHVIZ_TRACE=1;
// without it every macro below expands to nothing, so the normal build's code is unchanged.
//
// A traced kernel takes two more parameters (FV_TRACE_PARAMS): a device buffer of u64 words and
// jmax, the most key tiles any block visits. Thread block `cta` (blockIdx.x + gridDim.x·(blockIdx.y
// + gridDim.y·blockIdx.z)) owns the record rec = buf + cta·stride, stride = FV_HEAD + groups +
// FV_NSTAGE·groups·(jmax + 1), where groups = the kernel's warpgroups (tensor cores) or warps (teaching).
// A kernel whose blocks walk a list of tiles (flash_fwd_fa3.cu) keeps one record per tile L instead
// (FV_TRACE_BEGIN_AT; its groups: the producer warpgroup, then the consumers; its header is written by
// the first consumer warpgroup's thread 0, so rec[1], rec[3] and rec[7] mark when *that* warpgroup
// finished the tile: the others may end later, which the decoder takes from their last steps):
//   rec[0] %globaltimer at the start (ns; one clock for all SMs, 32 ns steps on the H200)
//   rec[1] %globaltimer at the end       rec[2], rec[3] %clock64 at the start / end (this SM's cycles)
//   rec[4] %smid   rec[5] the block's work: i | h << 24 | b << 44 (query block, head, batch; the teaching
//   kernel records its b·H + h as h and 0 as b)   rec[6] key tiles visited
//   rec[7] FV_MAGIC once the block finished
//   rec[FV_HEAD + g] the %clock64 of group g's writer when it started (its base)
// then, for group g, tile row r = j + 1 (r = 0: block-level steps, j = -1) and stage s, one word at
// FV_HEAD + groups + (g·(jmax + 1) + r)·FV_NSTAGE + s: the step's start and end in cycles after the
// group's base, (end << 32) | start (0: the step did not happen). One store per step, from one thread
// per group (v1 wrote two absolute words per step and cost up to 15 %: benchmarks/NOTES.md).
#pragma once

// FV_CLOCK_EVERY_THREAD: whether every thread of a group reads the clock for a step (true) or its
// writer alone (false, the default: Rec::now). A kernel may define it, before it includes this file,
// as a constant expression of its own template parameters (the hooks expand inside its body).
#ifndef FV_CLOCK_EVERY_THREAD
#define FV_CLOCK_EVERY_THREAD false
#endif

#define FV_STAGE_LOAD_Q 0
#define FV_STAGE_LOAD_KV 1
#define FV_STAGE_LOAD_K 2
#define FV_STAGE_LOAD_V 3
#define FV_STAGE_COMPUTE_S 4
#define FV_STAGE_UPDATE_ML 5
#define FV_STAGE_CONVERT_P 6
#define FV_STAGE_ACCUMULATE_O 7
#define FV_STAGE_WRITE_O 8
#define FV_NSTAGE 9
// the backward (flash_bwd.cu, FA2 Algorithm 2) numbers its own steps in the same nine slots; its
// blocks are key blocks j and its rows query blocks i (flashviz.records.timeline.BWD_STAGES)
#define FV_BSTAGE_LOAD_KV 0
#define FV_BSTAGE_LOAD_QI 1
#define FV_BSTAGE_RECOMPUTE_P 2
#define FV_BSTAGE_ACCUMULATE_DV 3
#define FV_BSTAGE_COMPUTE_DS 4
#define FV_BSTAGE_ACCUMULATE_DK 5
#define FV_BSTAGE_UPDATE_DQ 6
#define FV_BSTAGE_WRITE_DKDV 7
#define FV_HEAD 8
#define FV_MAGIC 0xF1A5400000000001ull

#if defined(FLASHVIZ_TRACE) && FLASHVIZ_TRACE

namespace fvtrace {

// volatile keeps the reads in program order in PTX; no "memory" clobber, so the compiler need not
// reload anything around them. ptxas, though, moves a clock read to where its value is first used
// (it sank fa3's first compute_S start past the whole Q K^T and its wait, under register pressure,
// and a clobber does not stop it: benchmarks/NOTES.md, timeline hooks): a step's start that has
// tensor-core work after it is stored at once (FV_STAMP32), which pins the read in place.
__device__ __forceinline__ unsigned long long clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ unsigned smid() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

struct Rec {
    unsigned long long* ev;    // this group's event words (row 0 = block-level)
    unsigned long long* rec;   // this block's record
    unsigned long long base;   // this writer's clock at the start
    bool writer, head;         // writes its group's events / the block's header
    __device__ __forceinline__ void event(int j, int stage, unsigned long long t0, unsigned long long t1) const {
        if (writer) ev[(j + 1) * FV_NSTAGE + stage] = ((t1 - base) << 32) | ((t0 - base) & 0xffffffffull);
    }
    // This writer's clock now (cycles; the other threads get 0, which no store uses). The read sits
    // behind a predicate only the writer holds, so ptxas keeps it on the vector datapath (CS2R, a
    // fixed-latency read) instead of the uniform one (S2UR, variable latency, which the next
    // instruction waits out): the hooks cost the consumer warps less (benchmarks/NOTES.md, timelines).
    // EVERY (FV_CLOCK_EVERY_THREAD, which a kernel may set): every thread reads the clock, the form
    // before that change, for builds where the predicate costs more than it saves.
    template <bool EVERY = false>
    __device__ __forceinline__ unsigned long long now() const {
        if constexpr (EVERY) {
            unsigned long long t = clock();
            return t;
        } else {
            unsigned long long t;
            asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\tmov.u64 %0, 0;\n\t@p mov.u64 %0, %%clock64;\n\t}"
                         : "=l"(t)
                         : "r"((unsigned)writer));
            return t;
        }
    }
    // cycles since this writer's start, as 32 bits (enough for 2 s)
    template <bool EVERY = false>
    __device__ __forceinline__ unsigned since() const { return (unsigned)(now<EVERY>() - base); }
    __device__ __forceinline__ void event32(int j, int stage, unsigned t0, unsigned t1) const {
        if (writer) ev[(j + 1) * FV_NSTAGE + stage] = ((unsigned long long)t1 << 32) | t0;
    }
    // the start alone, stored at once (the end overwrites the word): pins the clock read before what follows
    __device__ __forceinline__ void stamp32(int j, int stage, unsigned t0) const {
        if (writer) ev[(j + 1) * FV_NSTAGE + stage] = t0;
    }
    // the writer alone, already inside `if (writer)`: one row pointer, no per-store predicate
    __device__ __forceinline__ unsigned long long* row(int j) const { return ev + (j + 1) * FV_NSTAGE; }
    __device__ __forceinline__ void end(int i, int h, int b, int tiles) const {
        if (head) {
            rec[3] = clock();
            rec[1] = gtimer();
            rec[5] = (unsigned long long)i | ((unsigned long long)h << 24) | ((unsigned long long)b << 44);
            rec[6] = (unsigned long long)tiles;
            rec[7] = FV_MAGIC;
        }
    }
};

// record `at` of the buffer: the block's (begin) or the tile's (begin_at, one record per tile of work)
__device__ __forceinline__ Rec begin_at(unsigned long long* buf, unsigned long long at, int jmax, int groups, int group,
                                        bool writer, bool head) {
    unsigned long long* rec = buf + at * (FV_HEAD + groups + (unsigned long long)FV_NSTAGE * groups * (jmax + 1));
    Rec r{rec + FV_HEAD + groups + (unsigned long long)group * FV_NSTAGE * (jmax + 1), rec, clock(), writer, head};
    if (head) {
        rec[0] = gtimer();
        rec[2] = clock();
        rec[4] = smid();
    }
    if (writer) rec[FV_HEAD + group] = r.base;
    return r;
}

__device__ __forceinline__ Rec begin(unsigned long long* buf, int jmax, int groups, int group, bool writer, bool head) {
    const unsigned long long cta = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    return begin_at(buf, cta, jmax, groups, group, writer, head);
}

}  // namespace fvtrace

#define FV_TRACE_PARAMS , unsigned long long* __restrict__ fv_trace, int fv_jmax
#define FV_TRACE_TYPES , unsigned long long*, int
#define FV_TRACE_BEGIN(groups, group, writer, head) \
    const fvtrace::Rec fv_rec = fvtrace::begin(fv_trace, fv_jmax, groups, group, writer, head)
#define FV_TRACE_BEGIN_AT(at, groups, group, writer, head) \
    const fvtrace::Rec fv_rec = fvtrace::begin_at(fv_trace, at, fv_jmax, groups, group, writer, head)
#define FV_DECL(var) unsigned long long var = 0
#define FV_NOW(var) var = fv_rec.now<FV_CLOCK_EVERY_THREAD>()
#define FV_EVENT(j, stage, t0, t1) fv_rec.event(j, stage, t0, t1)
#define FV_TRACE_END(i, h, b, tiles) fv_rec.end(i, h, b, tiles)
// deferred form: 32-bit cycle offsets kept in registers, stored later where the warp waits anyway
#define FV_DECL32(var) unsigned var = 0
#define FV_NOW32(var) var = fv_rec.since<FV_CLOCK_EVERY_THREAD>()
#define FV_SET(dst, src) dst = src
#define FV_EVENT32(j, stage, t0, t1) fv_rec.event32(j, stage, t0, t1)
#define FV_STAMP32(j, stage, t0) fv_rec.stamp32(j, stage, t0)
// a step that ends now: t1 = the time now, and the event (j, stage) from t0 to t1
#define FV_STEP32(t1, j, stage, t0) \
    do {                            \
        FV_NOW32(t1);               \
        FV_EVENT32(j, stage, t0, t1); \
    } while (0)
// a tile's steps stored in one branch taken by the writer thread only (the other warps skip the
// address arithmetic): FV_WRITER_BLOCK({ unsigned long long* r = FV_ROW(j); r[FV_STAGE_X] = FV_PACK(a, b); })
#define FV_WRITER_BLOCK(body) if (fv_rec.writer) body
#define FV_ROW(j) fv_rec.row(j)
#define FV_PACK(t0, t1) (((unsigned long long)(t1) << 32) | (t0))
// The scoped step hook: one line holds a step's clock reads and its store, and the statement that
// follows it (one statement or a { block }) is the step's code.
//   FV_SCOPE(j, stage, t0, t1) stmt         t0 = now; stmt; t1 = now; step (j, stage) from t0 to t1
//   FV_SCOPE_STAMP(j, stage, t0, t1) stmt   the same, and t0 stored at once (FV_STAMP32: pins the read
//                                            before the tensor-core work that follows)
//   FV_SCOPE_FROM(j, stage, t0, t1) stmt    a step that began at an earlier mark t0: stmt; t1 = now; step
//   FV_SPAN(t0, t1) stmt                    t0 = now; stmt; t1 = now (the step is stored later, where
//                                            the warp waits anyway: FV_EVENT32, FV_WRITER_BLOCK)
//   FV_UNTIL(t1) stmt                       stmt; t1 = now
// t0 and t1 are the kernel's marks (FV_MARKS: later hooks start or end other steps at the same reads).
// Each is a loop of one pass: its init reads the start, its increment the end. An object whose
// constructor and destructor read the clock (an if-statement with an initializer) does the same
// work, but its extra object reorders the traced build's registers in ptxas's input; this form
// compiles to the very PTX of the hand-placed FV_NOW32 / FV_STEP32 it replaces. So: no `break` or
// `continue` inside the step's statement (they would leave the hook's loop, not the kernel's).
// Without FLASHVIZ_TRACE each of them is nothing and the statement is all that is left.
// FV_MARKS(a, b, ...): unsigned a = 0, b = 0, ... (up to 16 marks; spelled out by the preprocessor:
// zeroing them through a variadic function moved one mov in the traced build's PTX)
#define FV_MARKS(...) unsigned FV_MARKS_N_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)(__VA_ARGS__)
#define FV_MARKS_N_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, n, ...) FV_MARKS_##n##_
#define FV_MARKS_1_(a) a = 0
#define FV_MARKS_2_(a, ...) a = 0, FV_MARKS_1_(__VA_ARGS__)
#define FV_MARKS_3_(a, ...) a = 0, FV_MARKS_2_(__VA_ARGS__)
#define FV_MARKS_4_(a, ...) a = 0, FV_MARKS_3_(__VA_ARGS__)
#define FV_MARKS_5_(a, ...) a = 0, FV_MARKS_4_(__VA_ARGS__)
#define FV_MARKS_6_(a, ...) a = 0, FV_MARKS_5_(__VA_ARGS__)
#define FV_MARKS_7_(a, ...) a = 0, FV_MARKS_6_(__VA_ARGS__)
#define FV_MARKS_8_(a, ...) a = 0, FV_MARKS_7_(__VA_ARGS__)
#define FV_MARKS_9_(a, ...) a = 0, FV_MARKS_8_(__VA_ARGS__)
#define FV_MARKS_10_(a, ...) a = 0, FV_MARKS_9_(__VA_ARGS__)
#define FV_MARKS_11_(a, ...) a = 0, FV_MARKS_10_(__VA_ARGS__)
#define FV_MARKS_12_(a, ...) a = 0, FV_MARKS_11_(__VA_ARGS__)
#define FV_MARKS_13_(a, ...) a = 0, FV_MARKS_12_(__VA_ARGS__)
#define FV_MARKS_14_(a, ...) a = 0, FV_MARKS_13_(__VA_ARGS__)
#define FV_MARKS_15_(a, ...) a = 0, FV_MARKS_14_(__VA_ARGS__)
#define FV_MARKS_16_(a, ...) a = 0, FV_MARKS_15_(__VA_ARGS__)
#define FV_SCOPE_LOOP_(begin, end) for (bool fv_once = ((begin), true); fv_once; fv_once = false, (end))
#define FV_SCOPE_END_(j, stage, t0, t1) (FV_NOW32(t1), FV_EVENT32(j, stage, t0, t1))
#define FV_SCOPE(j, stage, t0, t1) FV_SCOPE_LOOP_(FV_NOW32(t0), FV_SCOPE_END_(j, stage, t0, t1))
#define FV_SCOPE_STAMP(j, stage, t0, t1) FV_SCOPE_LOOP_((FV_NOW32(t0), FV_STAMP32(j, stage, t0)), FV_SCOPE_END_(j, stage, t0, t1))
#define FV_SCOPE_FROM(j, stage, t0, t1) FV_SCOPE_LOOP_((void)0, FV_SCOPE_END_(j, stage, t0, t1))
#define FV_SPAN(t0, t1) FV_SCOPE_LOOP_(FV_NOW32(t0), FV_NOW32(t1))
#define FV_UNTIL(t1) FV_SCOPE_LOOP_((void)0, FV_NOW32(t1))

#else

#define FV_TRACE_PARAMS
#define FV_TRACE_TYPES
#define FV_TRACE_BEGIN(groups, group, writer, head)
#define FV_TRACE_BEGIN_AT(at, groups, group, writer, head)
#define FV_DECL(var)
#define FV_NOW(var)
#define FV_EVENT(j, stage, t0, t1)
#define FV_TRACE_END(i, h, b, tiles)
#define FV_DECL32(var)
#define FV_NOW32(var)
#define FV_SET(dst, src)
#define FV_EVENT32(j, stage, t0, t1)
#define FV_STAMP32(j, stage, t0)
#define FV_STEP32(t1, j, stage, t0)
#define FV_WRITER_BLOCK(body) ((void)0);   // a whole statement: never guard what follows it
#define FV_MARKS(...)
#define FV_SCOPE(j, stage, t0, t1)         // the statement that follows stays, unguarded
#define FV_SCOPE_STAMP(j, stage, t0, t1)
#define FV_SCOPE_FROM(j, stage, t0, t1)
#define FV_SPAN(t0, t1)
#define FV_UNTIL(t1)

#endif

// Block order (issue 12's lesson: which query blocks start first). Compiled in only with
// -DFLASHVIZ_BLOCK_ORDER=1 or 2; otherwise FV_BLOCK_ORDER is a whole empty statement and the kernel
// keeps its own order (causal: i = Tr - 1 - blockIdx.x, the long rows of each head first).
// The hardware hands out thread blocks roughly in the order of cta = x + X·(y + Y·z).
//   1 "ascending":     i = blockIdx.x (causal: the short rows of each head first)
//   2 "longest_first": the host launches the grid with its axes turned, (X, Y, Z) = (heads, batch, Tr)
//                      (the teaching kernel: (b·H + h, 1, Tr)), so the query blocks vary slowest:
//                      i = Tr - 1 - blockIdx.z, the longest rows of every head before any shorter row.
//                      No division: the build keeps the kernel's registers (and so its occupancy).
#if defined(FLASHVIZ_BLOCK_ORDER) && FLASHVIZ_BLOCK_ORDER == 1
#define FV_BLOCK_ORDER(fv_i, fv_h, fv_b) do { fv_i = (int)blockIdx.x; } while (0)
#elif defined(FLASHVIZ_BLOCK_ORDER) && FLASHVIZ_BLOCK_ORDER == 2
#define FV_BLOCK_ORDER(fv_i, fv_h, fv_b) do { \
        fv_i = (int)(gridDim.z - 1 - blockIdx.z); \
        fv_h = (int)blockIdx.x; \
        fv_b = (int)blockIdx.y; \
    } while (0)
#elif defined(FLASHVIZ_BLOCK_ORDER) && FLASHVIZ_BLOCK_ORDER != 0
#error "FLASHVIZ_BLOCK_ORDER must be 0, 1 (ascending) or 2 (longest_first)"
#else
#define FV_BLOCK_ORDER(fv_i, fv_h, fv_b) ((void)0)
#endif
