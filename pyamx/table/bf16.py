"""bfloat16 conversions, and the operand layouts under the names they have always had here.

bf16 values travel as uint16 bit patterns (``ml_dtypes.bfloat16`` arrays are
accepted wherever bits are, without a copy). The interleaved layouts live in
:mod:`pyamx.table.layout`; ``pack_pairs``/``unpack_pairs`` (the bf16/fp16 layout)
and ``pack_quads``/``unpack_quads`` (the int8 one) stay importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import _convert
from .._fpenv import default_fpenv
from .._validate import bf16_view, dtype_name, require_array
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
    return _convert.round_floats(_float_input(x), "bf16")


#: the dtypes pyamx reads as bf16 bits (pyamx._validate): values already converted, never integers to round
_BITS_DTYPES = ("uint16", "int16", "bfloat16")


def _float_input(x: object) -> np.ndarray:
    array = require_array(x, "x", "from_float32")
    if dtype_name(array.dtype) in _BITS_DTYPES:
        raise TypeError(
            f"from_float32: x has dtype {array.dtype}, which pyamx reads as bf16 bits (already converted); "
            "decode bits with pyamx.table.bf16.to_float32, or cast integers to float64 first"
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


def to_float32(bits: ArrayInput) -> npt.NDArray[np.float32]:
    """bf16 bits (uint16/int16 or ml_dtypes.bfloat16) -> float32, exactly."""
    return _widen(bf16_view(bits, "bits", "to_float32")).view(np.float32)


def widen_bits(bits: ArrayInput) -> npt.NDArray[np.uint32]:
    """bf16 bits (uint16/int16 or ml_dtypes.bfloat16) -> fp32 bits: the top half (exact, payload kept)."""
    return _widen(bf16_view(bits, "bits", "widen_bits"))


def _widen(bits: np.ndarray) -> npt.NDArray[np.uint32]:
    widened = _convert.widen(bits, "bf16")  # C; None without the extension
    return _widen_numpy(bits) if widened is None else widened


def _widen_numpy(bits: np.ndarray) -> npt.NDArray[np.uint32]:
    widened: npt.NDArray[np.uint32] = bits.astype(np.uint32) << np.uint32(16)
    return widened
