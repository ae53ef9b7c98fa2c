"""Launch limits of the teaching kernel ``kernels/flash_fwd.cu``, checkable without a GPU.

The kernel is a template ``flash_fwd<Br, Bc, D>`` with 256 threads (16 x 16); each thread
owns Br/16 rows and Bc/16 columns of S_ij and D/16 columns of O_i, so Br, Bc and d must be
multiples of 16 from the sets below. Its shared memory (float32, rows padded by 4 floats):

    Q_i [Br][d+4] + K_j [Bc][d+4] + V_j transposed [d][Bc+4] + P_ij [Br][Bc+4]
"""

from __future__ import annotations

from ...checks import check_member
from ...mma_limits import H200_SMEM_OPTIN

SUPPORTED_BR = (16, 32, 64, 128)
SUPPORTED_BC = (16, 32, 64, 128)
SUPPORTED_D = (32, 64, 128)
PAD = 4                      #: floats of padding per shared-memory row (bank conflicts)
THREADS = 256                #: threads per block, as 16 x 16


def check_sizes(Br, Bc, d) -> tuple[int, int, int]:
    """Validate the template parameters; return them as ints.

    Raises TypeError for non-integers, ValueError (listing the supported values) for Br or
    Bc not in {16, 32, 64, 128} or d not in {32, 64, 128}.
    """
    return (check_member(Br, "Br", SUPPORTED_BR), check_member(Bc, "Bc", SUPPORTED_BC),
            check_member(d, "d", SUPPORTED_D))


def smem_bytes(Br: int, Bc: int, d: int) -> int:
    """Dynamic shared memory of one block of ``flash_fwd<Br, Bc, d>``, in bytes.

    (Br·(d+4) + Bc·(d+4) + d·(Bc+4) + Br·(Bc+4)) · 4. Example: 64, 64, 64 -> 69,632;
    128, 128, 128 -> 270,336. Raises like ``check_sizes`` for unsupported values.
    """
    Br, Bc, d = check_sizes(Br, Bc, d)
    return (Br * (d + PAD) + Bc * (d + PAD) + d * (Bc + PAD) + Br * (Bc + PAD)) * 4


def check_launch(Br: int, Bc: int, d: int, device_limit: int = H200_SMEM_OPTIN) -> int:
    """Check that ``flash_fwd<Br, Bc, d>`` fits the device; return its shared memory in bytes.

    device_limit: the device's opt-in shared memory per block in bytes
    (cudaDevAttrMaxSharedMemoryPerBlockOptin; 232,448 on an H100/H200).
    Raises ValueError like "Br=128, Bc=128, d=128 needs 270,336 bytes of shared memory; this
    device limit is 232,448 per block (opt-in)", and as ``check_sizes`` for unsupported values.
    """
    Br, Bc, d = check_sizes(Br, Bc, d)
    need = smem_bytes(Br, Bc, d)
    if need > int(device_limit):
        raise ValueError(f"Br={Br}, Bc={Bc}, d={d} needs {need:,} bytes of shared memory; the device limit is "
                         f"{int(device_limit):,} per block (opt-in). Use smaller Br or Bc.")
    return need


def supported_blocks(d: int, device_limit: int = H200_SMEM_OPTIN) -> list[tuple[int, int]]:
    """All (Br, Bc) pairs the kernel supports for head dimension ``d`` that fit ``device_limit``
    bytes of shared memory per block, smallest first. Raises ValueError for an unsupported d."""
    d = check_member(d, "d", SUPPORTED_D)
    return [(Br, Bc) for Br in SUPPORTED_BR for Bc in SUPPORTED_BC if smem_bytes(Br, Bc, d) <= device_limit]


# --- the backward teaching kernel, kernels/flash_bwd.cu --------------------------------------------
#
# Three kernels (flash_bwd_preprocess<D>, flash_bwd<Br, Bc, D>, flash_bwd_dq<Br, Bc, D>), 256 threads
# each, the same 16 x 16 thread layout as the forward. flash_bwd keeps K_j, V_j [Bc][d+4], Q_i, dO_i
# [Br][d+4], P_ij, dS_ij [Br][Bc+4] and L_i, D_i [Br] in shared memory; flash_bwd_dq the same less P_ij.

BWD_SUPPORTED_BR = (16, 32, 64, 128)
BWD_SUPPORTED_BC = (16, 32, 64, 128)
BWD_SUPPORTED_D = (16, 32, 64, 128)


def check_bwd_sizes(Br, Bc, d) -> tuple[int, int, int]:
    """Validate the backward kernel's template parameters; return them as ints.

    Raises TypeError for non-integers, ValueError (listing the supported values) for Br or Bc not
    in {16, 32, 64, 128} or d not in {16, 32, 64, 128}.
    """
    kernel = "backward teaching kernel"
    return (check_member(Br, "Br", BWD_SUPPORTED_BR, kernel), check_member(Bc, "Bc", BWD_SUPPORTED_BC, kernel),
            check_member(d, "d", BWD_SUPPORTED_D, kernel))


def bwd_smem_bytes(Br: int, Bc: int, d: int) -> int:
    """Dynamic shared memory of one block of ``flash_bwd<Br, Bc, d>`` (the larger of the two
    tiled backward kernels), in bytes:

        (2·Bc·(d+4) + 2·Br·(d+4) + 2·Br·(Bc+4) + 2·Br) · 4

    Example: 64, 64, 64 -> 104,960; 64, 64, 128 -> 170,496. Raises like ``check_bwd_sizes``."""
    Br, Bc, d = check_bwd_sizes(Br, Bc, d)
    return (2 * Bc * (d + PAD) + 2 * Br * (d + PAD) + 2 * Br * (Bc + PAD) + 2 * Br) * 4


def bwd_dq_smem_bytes(Br: int, Bc: int, d: int) -> int:
    """Dynamic shared memory of one block of ``flash_bwd_dq<Br, Bc, d>`` (the deterministic dQ pass),
    in bytes: ``bwd_smem_bytes`` less the P_ij tile, Br·(Bc+4)·4."""
    Br, Bc, d = check_bwd_sizes(Br, Bc, d)
    return bwd_smem_bytes(Br, Bc, d) - Br * (Bc + PAD) * 4


def check_bwd_launch(Br: int, Bc: int, d: int, device_limit: int = H200_SMEM_OPTIN) -> int:
    """Check that the backward kernels for (Br, Bc, d) fit the device; return ``bwd_smem_bytes``.

    device_limit: the device's opt-in shared memory per block in bytes (232,448 on an H100/H200).
    Raises ValueError like "the backward kernel with Br=64, Bc=128, d=128 needs 270,848 bytes of
    shared memory; the device limit is 232,448 per block (opt-in)", and as ``check_bwd_sizes``.
    """
    Br, Bc, d = check_bwd_sizes(Br, Bc, d)
    need = bwd_smem_bytes(Br, Bc, d)
    if need > int(device_limit):
        raise ValueError(f"the backward kernel with Br={Br}, Bc={Bc}, d={d} needs {need:,} bytes of shared memory; "
                         f"the device limit is {int(device_limit):,} per block (opt-in). Use smaller Br or Bc.")
    return need


def bwd_supported_blocks(d: int, device_limit: int = H200_SMEM_OPTIN) -> list[tuple[int, int]]:
    """All (Br, Bc) pairs the backward kernel supports for head dimension ``d`` within
    ``device_limit`` bytes of shared memory per block. Raises ValueError for an unsupported d."""
    d = check_member(d, "d", BWD_SUPPORTED_D, "backward teaching kernel")
    return [(Br, Bc) for Br in BWD_SUPPORTED_BR for Bc in BWD_SUPPORTED_BC if bwd_smem_bytes(Br, Bc, d) <= device_limit]
