"""bfloat16 conversions, and the operand layouts under the names they have always had here.

bf16 values travel as uint16 bit patterns (``ml_dtypes.bfloat16`` arrays are
accepted wherever bits are, without a copy). The interleaved layouts live in
:mod:`pyamx.layout`; ``pack_pairs``/``unpack_pairs`` (the bf16/fp16 layout)
and ``pack_quads``/``unpack_quads`` (the int8 one) stay importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._fpenv import default_fpenv
from .._validate import bf16_bits, bf16_view, dtype_name, require_array
from .layout import pack_pairs, pack_quads, unpack_pairs, unpack_quads

if TYPE_CHECKING:
    import numpy.typing as npt

    from .._types import ArrayInput

__all__ = ["from_float32", "to_float32", "widen_bits", "pack_pairs", "unpack_pairs", "pack_quads", "unpack_quads"]


@default_fpenv
def from_float32(x: ArrayInput | float) -> npt.NDArray[np.uint16]:
    """Floats -> bf16 bits (uint16), each correctly rounded once: to nearest, ties to even.

    float32 input is rounded from its bits; float64 input (Python floats
    included) is rounded directly from its own bits, never through float32,
    which would round twice (``1 + 2**-8 + 2**-40`` must give 0x3F81, not
    the tie's even neighbour 0x3F80); float16 and integers exactly
    representable in float64 are widened exactly first. Overflow gives
    infinity; values below bf16's smallest denormal (2**-133) round like any
    value (to zero or that denormal). A NaN stays a NaN of the same sign,
    quieted, keeping the top 7 bits of its significand (the quiet bit and
    the next 6 payload bits), for float32 and float64 alike. Scalars and 0-d
    input give a 0-d array. No step depends on the caller's MXCSR.

    uint16, int16 and ``ml_dtypes.bfloat16`` are refused: pyamx reads those
    dtypes as bf16 bits everywhere, so rounding them as integers
    (``from_float32(from_float32(x))``) would be a silent mistake.
    """
    array = _float_input(x)
    shape = array.shape
    flat = array.reshape(-1)  # 1-d: the same integer dtypes on numpy 1.x and 2.x (no value-based casting)
    if flat.dtype == np.float64:
        out = _round_float64(flat.view(np.uint64))
    else:
        out = _round_float32(flat.view(np.uint32))
    return out.reshape(shape)


#: the dtypes pyamx reads as bf16 bits (pyamx._validate): values already converted, never integers to round
_BITS_DTYPES = ("uint16", "int16", "bfloat16")


def _float_input(x) -> np.ndarray:
    array = require_array(x, "x", "from_float32")
    if dtype_name(array.dtype) in _BITS_DTYPES:
        raise TypeError(
            f"from_float32: x has dtype {array.dtype}, which pyamx reads as bf16 bits (already converted); "
            "decode bits with pyamx.bf16.to_float32, or cast integers to float64 first"
        )
    kind, size = array.dtype.kind, array.dtype.itemsize
    if kind == "f" and size in (4, 8):
        # the rounding reads the values' bits as native integers: big-endian input is swapped first
        return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))
    if kind == "f" and size == 2:
        return array.astype(np.float32)  # exact
    if kind in "iu":
        wide = array.astype(np.float64)
        if not np.array_equal(wide.astype(array.dtype), array) or (array.size and np.abs(wide).max() > 2.0**53):
            raise ValueError("from_float32: integers beyond 2**53 cannot be converted exactly; round them first")
        return wide
    raise TypeError(
        f"from_float32 takes float16/float32/float64 (or integer) values, not {array.dtype}"
        + (" (longdouble would be rounded twice; convert it to float64 yourself)" if kind == "f" else "")
    )


def _round_float32(bits: np.ndarray) -> np.ndarray:
    nan = ((bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & ((bits & np.uint32(0x007FFFFF)) != 0)
    tie_to_even = np.uint64(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)).astype(np.uint64)
    rounded = ((bits.astype(np.uint64) + tie_to_even) >> np.uint64(16)).astype(np.uint16)
    quiet = ((bits >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def _round_float64(bits: np.ndarray) -> np.ndarray:
    """float64 bits -> bf16 bits, RNE, on integers only."""
    u64 = np.uint64
    sign = ((bits >> u64(48)) & u64(0x8000)).astype(np.uint16)
    biased = ((bits >> u64(52)) & u64(0x7FF)).astype(np.int64)
    mantissa = bits & u64((1 << 52) - 1)
    special = biased == 0x7FF
    nan = special & (mantissa != 0)
    # The significand as an integer with an unbounded exponent: value = significand * 2**(e - 52).
    significand = np.where(biased == 0, mantissa, mantissa | u64(1 << 52))
    e = np.where(biased == 0, -1022, biased - 1023)
    # bf16 keeps 8 significant bits down to 2**-126, then a fixed 2**-133 step (denormals).
    shift = np.clip(45 + np.maximum(-126 - e, 0), 45, 60).astype(np.uint64)
    kept = significand >> shift
    rest = significand & ((u64(1) << shift) - u64(1))
    half = u64(1) << (shift - u64(1))
    kept = kept + ((rest > half) | ((rest == half) & ((kept & u64(1)) == u64(1)))).astype(np.uint64)
    normal = e >= -126
    # A normal kept value is 1xxxxxxx (or 100000000 after a carry, which moves into the exponent).
    exponent_field = np.where(normal, e + 127, 0).astype(np.int64)
    magnitude = np.where(normal, (exponent_field << 7) + kept.astype(np.int64) - 128, kept.astype(np.int64))
    magnitude = np.minimum(magnitude, 0x7F80)  # overflow: infinity
    payload = ((mantissa >> u64(45)) | u64(0x40)).astype(np.int64)
    magnitude = np.where(special, np.where(nan, 0x7F80 | payload, 0x7F80), magnitude)
    return (sign | magnitude.astype(np.uint16)).astype(np.uint16)


def to_float32(bits: ArrayInput) -> npt.NDArray[np.float32]:
    """bf16 bits (uint16/int16 or ml_dtypes.bfloat16) -> float32, exactly."""
    return _widen(bf16_bits(bits, "bits", "to_float32")).view(np.float32)


def widen_bits(bits: ArrayInput) -> npt.NDArray[np.uint32]:
    """bf16 bits (uint16/int16 or ml_dtypes.bfloat16) -> fp32 bits: the top half (exact, payload kept)."""
    return _widen(bf16_view(bits, "bits", "widen_bits"))


def _widen(bits: np.ndarray) -> npt.NDArray[np.uint32]:
    return bits.astype(np.uint32) << np.uint32(16)
