// fv_tma.cuh: Hopper's asynchronous machinery for warp-specialised kernels (sm_90 / sm_90a):
// the tensor memory accelerator (TMA: cp.async.bulk.tensor), transaction-counting mbarriers,
// named barriers and setmaxnreg. Used by kernels/flash_fwd_fa3.cu.
//
// PTX ISA 8.x references: mbarrier (9.7.13.15), cp.async.bulk.tensor (9.7.9.25.5.1),
// bar.sync / bar.arrive (9.7.13.1), setmaxnreg (9.7.17.1), prefetch.tensormap (9.7.9.15).
//
// A TMA copy is described by a tensor map (CUtensorMap, 128 opaque bytes) that the host builds
// with the driver's cuTensorMapEncodeTiled (flashviz/gpu/tensorcore/tma.py) and passes *by value*
// as a `const __grid_constant__` kernel parameter; the copy names the map's address, the box's
// coordinates (elements, innermost first) and an mbarrier in shared memory. The copy engine
// writes the box into shared memory (already swizzled, zero-filled where the box leaves the
// tensor) and then counts its bytes off the barrier's expected transaction count.
#pragma once

#include "fv_ptx.cuh"

namespace fvtma {

using namespace fvptx;

// The 128 bytes of a CUtensorMap; the driver requires 64-byte alignment.
struct __align__(64) TensorMap {
    unsigned long long v[16];
};

// mbarrier (a 64-bit word in shared memory): `count` arrivals complete a phase, plus, for a
// phase that expects them, the transaction bytes of the copies that signal it.
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Make the initialised barriers visible to the copy engine (the async proxy) and other threads.
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of copies still to land in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Wait until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so a
// wait for parity 1 (the phase "before" it) returns at once: the producer's first pass over an
// empty ring does not wait.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// TMA: copy the box at element coordinates (c0 innermost, c1, c2, c3) of a 4-d tensor map into
// shared memory at dst; the copy's bytes complete on mbarrier bar.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void prefetch_tensormap(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Bulk reduction shared -> global (cp.reduce.async.bulk, PTX ISA 8.0, sm_90): the copy engine
// adds `bytes` (a multiple of 16; both addresses 16-byte aligned) of fp32 values at shared address
// src into global memory at dst, element by element and atomically against other such adds
// (the order of adds from different blocks is not fixed). Grouped per thread by bulk_commit; the
// issuing thread waits with bulk_wait_read<N> (its shared source may be overwritten: at most N
// newest groups still reading) or bulk_wait<N> (the adds themselves done).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Named barriers 1..15 (0 is __syncthreads): bar_sync waits until `count` threads (a multiple of
// 32) have reached barrier `id` by bar_sync or bar_arrive; bar_arrive counts itself and goes on.
__device__ __forceinline__ void bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// setmaxnreg (sm_90a): a warpgroup gives registers back (dec) or takes them (inc); R is a
// multiple of 8 in [24, 256]. Takes effect only when the kernel has a register cap at entry
// (__launch_bounds__(threads, 1)) and each role is one branch of an if/else (else ptxas says C7508).
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

}  // namespace fvtma
