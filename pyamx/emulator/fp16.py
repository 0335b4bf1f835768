"""fp16 operands as fp32 bit patterns, exactly (bf16's widening is pyamx.table.bf16.widen_bits).

Its own module because both numpy dot paths widen fp16: the instructions
(instructions.py) and the engine's matmul (dot.py), which instructions.py
itself builds on.
"""

from __future__ import annotations

import numpy as np

from .. import _convert
from .._fpenv import default_fpenv


def widen_fp16_bits(bits: np.ndarray) -> np.ndarray:
    """fp16 bits -> fp32 bits, exactly: denormals become normal fp32, NaN payloads move up 13 bits."""
    widened = _convert.widen(bits, "fp16")  # C (csrc/convert.c); None without the extension
    return widen_fp16_bits_numpy(bits) if widened is None else widened


@default_fpenv
def widen_fp16_bits_numpy(bits: np.ndarray) -> np.ndarray:
    """:func:`widen_fp16_bits` in numpy: the fallback, and the tests' reference for the C code."""
    bits = bits.astype(np.uint32)
    sign = (bits & 0x8000) << 16
    exponent = (bits >> 10) & 0x1F
    mantissa = bits & 0x3FF
    normal = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13)
    special = sign | np.uint32(0x7F800000) | (mantissa << 13)
    # A denormal is mantissa * 2**-24: exact as a float32 product.
    denormal = sign | (mantissa.astype(np.float32) * np.float32(2.0**-24)).view(np.uint32)
    return np.where(exponent == 31, special, np.where(exponent == 0, denormal, normal)).astype(np.uint32)
