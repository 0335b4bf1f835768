"""bfloat16 conversions and the pair-interleaved ("VNNI") operand layout.

bf16 values travel as uint16 bit patterns (``ml_dtypes.bfloat16`` arrays are
accepted wherever bits are, without a copy).
"""

from __future__ import annotations

import numpy as np

from ._validate import bf16_bits


def from_float32(x) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even.

    Overflow gives infinity; a NaN stays a NaN of the same sign, quieted,
    keeping the top 6 payload bits; float32 denormals round like any value.
    """
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0)
    tie_to_even = np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    rounded = ((bits.astype(np.uint64) + tie_to_even) >> 16).astype(np.uint16)
    return np.where(nan, ((bits >> 16) | np.uint32(0x0040)).astype(np.uint16), rounded)


def to_float32(bits) -> np.ndarray:
    """bf16 bits (or ml_dtypes.bfloat16) -> float32, exactly."""
    return widen_bits(bf16_bits(np.asarray(bits), "bits")).view(np.float32)


def widen_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bits -> fp32 bits: the 16 bits become the top half (exact, payload kept)."""
    return bits.astype(np.uint32) << 16


def _pack(matrix, group: int, pad: bool, name: str) -> np.ndarray:
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"{name} expects a 2-D (rows, N) matrix, got shape {matrix.shape}")
    rows, n = matrix.shape
    if rows % group:
        if not pad:
            raise ValueError(
                f"{name}: the row count {rows} is not a multiple of {group}; pass pad=True to append zero rows"
            )
        matrix = np.concatenate([matrix, np.zeros((group - rows % group, n), dtype=matrix.dtype)])
    k = matrix.shape[0] // group
    return np.ascontiguousarray(matrix.reshape(k, group, n).transpose(0, 2, 1).reshape(k, group * n))


def _unpack(packed, group: int, name: str) -> np.ndarray:
    packed = np.asarray(packed)
    if packed.ndim != 2 or packed.shape[1] % group:
        raise ValueError(f"{name} expects a 2-D (K, {group}*N) matrix, got shape {packed.shape}")
    k, width = packed.shape
    return np.ascontiguousarray(packed.reshape(k, width // group, group).transpose(0, 2, 1).reshape(k * group, width // group))


def pack_pairs(b, *, pad: bool = False) -> np.ndarray:
    """An ordinary (2K, N) matrix -> the (K, 2N) pair-interleaved layout of tsrc2.

    Row k of the result holds (b[2k][n], b[2k+1][n]) for every column n. Any
    dtype is moved as is; ``pad=True`` appends a zero row to an odd row count.
    """
    return _pack(b, 2, pad, "pack_pairs")


def unpack_pairs(packed) -> np.ndarray:
    """The (K, 2N) pair-interleaved layout -> the ordinary (2K, N) matrix."""
    return _unpack(packed, 2, "unpack_pairs")


def pack_quads(b, *, pad: bool = False) -> np.ndarray:
    """A (4K, N) byte matrix -> the (K, 4N) quad-interleaved layout of the int8 dot products."""
    return _pack(b, 4, pad, "pack_quads")


def unpack_quads(packed) -> np.ndarray:
    """The (K, 4N) quad-interleaved layout -> the ordinary (4K, N) matrix."""
    return _unpack(packed, 4, "unpack_quads")
