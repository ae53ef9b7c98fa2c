"""Launch limits of the tensor-core kernels, checkable without a GPU (no CuPy: the records,
the views and the runner in ``flashviz.gpu`` all read this one table).

Two kernels compute the same FlashAttention-2 forward in fp16 / bf16 with fp32 accumulators:

* ``kernels/flash_fwd_mma.cu`` — ``flash_fwd_mma<DT, Br, Bc, d, causal>``, Hopper only
  (sm_90a): warpgroup MMA (``wgmma.mma_async``), Br/64 warpgroups of 128 threads.
* ``kernels/flash_fwd_mma_sm80.cu`` — ``flash_fwd_mma_sm80<DT, Br, Bc, d, causal>``, any
  GPU from Ampere on (sm_80+): ``mma.sync.m16n8k16`` + ``ldmatrix``, Br/16 warps.

Both keep Q_i plus two stages each of K_j and V_j in shared memory (2 bytes an element):

    wgmma:    1024 + 2·(Br·d + 4·Bc·d) bytes   (1024: slack to align tiles to 1 KiB)
    mma.sync: 2·(Br·d + 4·Bc·d) bytes

A third, ``kernels/flash_fwd_fa3.cu`` — ``flash_fwd_fa3<DT, Br, Bc, d, causal>``, Hopper only —
is FlashAttention-3: a producer warpgroup loads K_j, V_j with TMA into a ring of ``fa3_stages(d)``
slots (mbarriers), Br/64 consumer warpgroups compute. Br in {128, 192}, Bc in {64, 128, 176};
(Br/64 + 1)·128 threads; 1024 + 2·(Br·d + 2·stages·Bc·d) + 8·(2 + 4·stages) bytes.

A kernel has two spellings: its variant, the argument every function takes ("wgmma" |
"mma.sync", the instruction it is built on), and its implementation name, the prefix of its
keys in benchmark records ("wgmma" | "mmasync": ``mmasync_call_ms``). ``impl_name(variant)``
maps one to the other; ``IMPL_NAMES`` is the one place that defines it.
"""

from __future__ import annotations

from .checks import check_member

H200_SMEM_OPTIN = 232_448    #: bytes of shared memory one block may opt in to on an H100/H200
DEFAULT_SMEM = 49_152        #: bytes a kernel may use without opting in

VARIANTS = ("wgmma", "mma.sync")                #: the FlashAttention-2 kernels (chapter 7, the panel)
ALL_VARIANTS = VARIANTS + ("fa3",)              #: every kernel the runner can launch
#: variant -> (kernel file under kernels/, kernel template name)
KERNEL_FILES = {"wgmma": ("flash_fwd_mma.cu", "flash_fwd_mma"),
                "mma.sync": ("flash_fwd_mma_sm80.cu", "flash_fwd_mma_sm80"),
                "fa3": ("flash_fwd_fa3.cu", "flash_fwd_fa3")}
#: the other kernels' names in records (a timelines record's "kernel_sources": record_timelines.py) -> their
#: kernels/ file; with KERNEL_FILES, how flashviz.records.provenance finds the file a record's name means
RECORD_KERNEL_FILES = {"teaching": "flash_fwd.cu", "decode": "flash_decode.cu", "bwd_teaching": "flash_bwd.cu",
                       "bwd_mma": "flash_bwd_mma.cu", "bwd_wgmma": "flash_bwd_wgmma.cu"}
#: variant -> implementation name: the prefix of its keys in benchmark records
#: ("mmasync_call_ms"; the recorded JSON files and outside checks read these keys)
IMPL_NAMES = {"wgmma": "wgmma", "mma.sync": "mmasync", "fa3": "fa3"}
BENCH_N = (512, 1024, 2048, 4096, 8192, 16384)   #: the benchmark's sequence lengths (B·N = 16k tokens)
MMA_BR = (64, 128)
MMA_BC = (32, 64, 128)
MMA_D = (64, 128)
FA3_BR = (128, 192)
FA3_BC = (64, 128, 176)
#: variant -> (supported Br, supported Bc)
BLOCK_CHOICES = {"wgmma": (MMA_BR, MMA_BC), "mma.sync": (MMA_BR, MMA_BC), "fa3": (FA3_BR, FA3_BC)}
DTYPES = ("float16", "bfloat16")

#: (Br, Bc) used when the caller gives none, by (variant, d, causal). Chosen from the block
#: sweep in benchmarks/results (see benchmarks/NOTES.md).
DEFAULT_BLOCKS = {
    ("wgmma", 64, False): (128, 64), ("wgmma", 64, True): (64, 128),
    ("wgmma", 128, False): (128, 64), ("wgmma", 128, True): (128, 128),
    ("mma.sync", 64, False): (128, 64), ("mma.sync", 64, True): (64, 64),
    ("mma.sync", 128, False): (64, 64), ("mma.sync", 128, True): (64, 64),
    ("fa3", 64, False): (192, 128), ("fa3", 64, True): (192, 128),
    ("fa3", 128, False): (128, 128), ("fa3", 128, True): (128, 128),
}


#: (d, causal) -> the fewest keys Nk from which the runner picks fa3 over wgmma on Hopper: where the
#: recorded benchmark (mma-h200-2026-12-01.json, public call) has fa3 slower at small N (d = 64
#: causal: 0.79x wgmma at N = 512, 0.88x at 1024, 1.11x at 2048); elsewhere fa3 from N = 1
FA3_FROM_NK = {(64, True): 2048}


def check_variant(variant) -> str:
    """Validate a kernel variant name ("wgmma", "mma.sync" or "fa3"); raises ValueError/TypeError."""
    if not isinstance(variant, str):
        raise TypeError(f"variant must be one of {', '.join(ALL_VARIANTS)}; got {variant!r}")
    if variant not in ALL_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(ALL_VARIANTS)}; got {variant!r}")
    return variant


def impl_name(variant) -> str:
    """The implementation name of a variant in benchmark records: "wgmma" -> "wgmma",
    "mma.sync" -> "mmasync" (keys such as ``mmasync_call_ms``). Raises like ``check_variant``."""
    return IMPL_NAMES[check_variant(variant)]


def check_mma_sizes(Br, Bc, d, variant: str = "wgmma") -> tuple[int, int, int]:
    """Validate (Br, Bc, d) for a tensor-core kernel; return them as ints.

    Raises TypeError for non-integers, ValueError listing the supported values otherwise
    (wgmma, mma.sync: Br in {64, 128}, Bc in {32, 64, 128}; fa3: Br in {128, 192}, Bc in
    {64, 128, 176}; d in {64, 128}).
    """
    brs, bcs = BLOCK_CHOICES[check_variant(variant)]
    k = f"{variant} kernel"
    return (check_member(Br, "Br", brs, k), check_member(Bc, "Bc", bcs, k), check_member(d, "d", MMA_D, k))


def fa3_stages(d: int) -> int:
    """Slots in the FlashAttention-3 kernel's K and V rings (kernels/flash_fwd_fa3.cu, Config):
    2 for d = 128, 3 for d = 64."""
    return 2 if int(d) == 128 else 3


def mma_threads(Br: int, variant: str = "wgmma") -> int:
    """Threads per block: 2·Br for the FlashAttention-2 kernels (wgmma: Br/64 warpgroups of
    128; mma.sync: Br/16 warps of 32); (Br/64 + 1)·128 for fa3 (a producer warpgroup and Br/64
    consumer warpgroups)."""
    if check_variant(variant) == "fa3":
        return (int(Br) // 64 + 1) * 128
    return 2 * int(Br)


def mma_smem_bytes(Br: int, Bc: int, d: int, variant: str = "wgmma") -> int:
    """Dynamic shared memory of one block of the tensor-core kernel, in bytes.

    wgmma: 1024 + 2·(Br·d + 4·Bc·d); mma.sync: 2·(Br·d + 4·Bc·d); fa3: 1024 + 2·(Br·d +
    2·stages·Bc·d) + 8·(2 + 4·stages) (Q_i, the K and V rings, the mbarriers).
    Example: wgmma 128, 128, 128 -> 164,864; mma.sync 128, 64, 64 -> 49,152;
    fa3 128, 128, 128 -> 164,944. Raises like ``check_mma_sizes`` / ``check_variant``.
    """
    Br, Bc, d = check_mma_sizes(Br, Bc, d, variant)
    if variant == "fa3":
        st = fa3_stages(d)
        return 1024 + 2 * (Br * d + 2 * st * Bc * d) + 8 * (2 + 4 * st)
    return (1024 if variant == "wgmma" else 0) + 2 * (Br * d + 4 * Bc * d)


def check_mma_launch(Br: int, Bc: int, d: int, variant: str = "wgmma",
                     device_limit: int = H200_SMEM_OPTIN) -> int:
    """Check a tensor-core configuration fits the device; return its shared memory in bytes.

    device_limit: opt-in shared memory per block in bytes (232,448 on an H100/H200).
    Raises ValueError "... needs N bytes of shared memory; the device limit is M per block"
    when it does not fit, and as ``check_mma_sizes`` for unsupported values.
    """
    need = mma_smem_bytes(Br, Bc, d, variant)
    if need > int(device_limit):
        raise ValueError(f"{variant} kernel Br={Br}, Bc={Bc}, d={d} needs {need:,} bytes of shared memory; "
                         f"the device limit is {int(device_limit):,} per block (opt-in). Use a smaller Bc or Br.")
    return need


def mma_blocks(d: int, variant: str = "wgmma", device_limit: int = H200_SMEM_OPTIN) -> list[tuple[int, int]]:
    """Every (Br, Bc) the tensor-core kernel supports for head dimension d that fits
    ``device_limit`` bytes of shared memory, smallest first. Raises ValueError for an
    unsupported d or variant."""
    d = check_member(d, "d", MMA_D)
    brs, bcs = BLOCK_CHOICES[check_variant(variant)]
    return [(Br, Bc) for Br in brs for Bc in bcs
            if mma_smem_bytes(Br, Bc, d, variant) <= int(device_limit)]


def default_blocks(d: int, causal: bool = False, variant: str = "wgmma") -> tuple[int, int]:
    """The (Br, Bc) the runner uses when none is given (measured best on an H200)."""
    d = check_member(d, "d", MMA_D)
    return DEFAULT_BLOCKS[(check_variant(variant), d, bool(causal))]
