"""AMX-AVX512's row instructions: one tile row into the 64 bytes of a zmm register.

Each function takes the 64 storage bytes of the selected row, the tile's
colsb and the row_chunk in bytes, and returns the 16 dwords of the zmm
result as uint32 bit patterns (docs/semantics.md section 9). Every
conversion is done on integers, so neither MXCSR's rounding mode nor its
FTZ/DAZ bits can reach it: Intel's text says the instructions round as if
MXCSR.RC were RNE and raise no SIMD exception.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import numpy.typing as npt

from ..table.numerics import Numerics

#: bytes of the zmm result and its dword lanes
ZMM_BYTES = 64
LANES = ZMM_BYTES // 4


def decode_selector(row: int, imm: bool) -> tuple[int, int]:
    """``(row_index, row_chunk in bytes)`` of a GPR selector (r32[15:0], r32[31:16] * 64) or an imm8
    (imm8[5:0], imm8[7:6] * 64)."""
    if imm:
        return row & 0x3F, (row >> 6) * ZMM_BYTES
    return row & 0xFFFF, (row >> 16) * ZMM_BYTES


def _dwords(row_bytes: np.ndarray, colsb: int, chunk: int) -> list[int | None]:
    """The source dword of each lane, None where Intel's text zeroes it (past colsb/4)."""
    words = row_bytes.view("<u4")
    first = chunk // 4
    return [int(words[first + i]) if first + i < colsb // 4 else None for i in range(LANES)]


def _lanes(values: list[int | None]) -> npt.NDArray[np.uint32]:
    return np.array([0 if v is None else v for v in values], dtype=np.uint32)


def _round_shift(m: int, shift: int) -> int:
    """``m / 2**shift`` rounded to nearest, ties to even (``shift >= 1``)."""
    q, r = m >> shift, m & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    return q + (r > half or (r == half and q & 1))


def int32_to_fp32(x: int) -> int:
    """A signed int32 (given as its 32-bit pattern) as fp32 bits, rounded to nearest even."""
    sign = x >> 31
    m = (x ^ 0xFFFFFFFF) + 1 & 0xFFFFFFFF if sign else x  # magnitude; -2**31 is 2**31 here
    if m == 0:
        return 0
    e = m.bit_length() - 1
    if e > 23:
        m = _round_shift(m, e - 23)
        if m >> 24:  # the rounding carried into a new binade
            m >>= 1
            e += 1
    else:
        m <<= 23 - e
    return sign << 31 | (e + 127) << 23 | (m & 0x7FFFFF)


def fp32_to_bf16(x: int, rule: str = "ieee") -> int:
    """fp32 bits -> bf16 bits, round to nearest even; ``rule`` as ``Numerics.row_bf16``."""
    if (x & 0x7F800000) == 0x7F800000 and x & 0x7FFFFF:
        return (x >> 16) | 0x0040  # quieted, the low 16 payload bits dropped
    if rule == "vcvtneps2bf16" and (x & 0x7F800000) == 0:
        return (x >> 16) & 0x8000
    # Same exponent range: rounding the magnitude's low 16 bits is the whole conversion, carries
    # into the exponent included (0x7F7FFFFF and above become infinity).
    return (x + 0x7FFF + ((x >> 16) & 1)) >> 16


def fp32_to_fp16(x: int, rule: str = "ieee") -> int:
    """fp32 bits -> fp16 bits, round to nearest even; ``rule`` as ``Numerics.row_fp16``."""
    sign = (x >> 16) & 0x8000
    exponent, mantissa = (x >> 23) & 0xFF, x & 0x7FFFFF
    if exponent == 0xFF:
        return sign | 0x7C00 | ((0x200 | mantissa >> 13) if mantissa else 0)
    if exponent == 0 and (mantissa == 0 or rule == "daz_ftz"):
        return sign
    # value = m * 2**scale exactly
    m, scale = (mantissa, -149) if exponent == 0 else (mantissa | 0x800000, exponent - 150)
    e = scale + m.bit_length() - 1  # floor(log2(value))
    quantum = max(e, -14) - 10  # fp16's spacing at this magnitude (2**-24 across the denormals)
    q = _round_shift(m, quantum - scale)
    if rule == "daz_ftz" and e < -14 and not (e == -15 and _round_shift(m, e - 10 - scale) == 2048):
        return sign  # tiny after rounding: below 2**-14 at 11 bits with an unbounded exponent
    code = ((quantum + 24) << 10) + q  # denormal codes run straight on into the normal ones
    return sign | min(code, 0x7C00)


def _convert(row_bytes: np.ndarray, colsb: int, chunk: int, convert: Callable[[int], int],
             high: bool) -> npt.NDArray[np.uint32]:
    return _lanes([None if v is None else convert(v) << (16 if high else 0) for v in _dwords(row_bytes, colsb, chunk)])


def tcvtrowd2ps(row_bytes: np.ndarray, colsb: int, chunk: int, numerics: Numerics) -> np.ndarray:
    """TCVTROWD2PS: each int32 dword as fp32 (RNE); lanes past colsb/4 are 0."""
    return _lanes([None if v is None else int32_to_fp32(v) for v in _dwords(row_bytes, colsb, chunk)])


def tcvtrowps2bf16h(row_bytes: np.ndarray, colsb: int, chunk: int, numerics: Numerics) -> np.ndarray:
    """TCVTROWPS2BF16H: each fp32 dword as bf16 in bits 31:16, bits 15:0 zero."""
    return _convert(row_bytes, colsb, chunk, lambda v: fp32_to_bf16(v, numerics.row_bf16), True)


def tcvtrowps2bf16l(row_bytes: np.ndarray, colsb: int, chunk: int, numerics: Numerics) -> np.ndarray:
    """TCVTROWPS2BF16L: each fp32 dword as bf16 in bits 15:0, bits 31:16 zero."""
    return _convert(row_bytes, colsb, chunk, lambda v: fp32_to_bf16(v, numerics.row_bf16), False)


def tcvtrowps2phh(row_bytes: np.ndarray, colsb: int, chunk: int, numerics: Numerics) -> np.ndarray:
    """TCVTROWPS2PHH: each fp32 dword as fp16 in bits 31:16, bits 15:0 zero."""
    return _convert(row_bytes, colsb, chunk, lambda v: fp32_to_fp16(v, numerics.row_fp16), True)


def tcvtrowps2phl(row_bytes: np.ndarray, colsb: int, chunk: int, numerics: Numerics) -> np.ndarray:
    """TCVTROWPS2PHL: each fp32 dword as fp16 in bits 15:0, bits 31:16 zero."""
    return _convert(row_bytes, colsb, chunk, lambda v: fp32_to_fp16(v, numerics.row_fp16), False)


def tilemovrow(row_bytes: np.ndarray, colsb: int, chunk: int, numerics: Numerics) -> np.ndarray:
    """TILEMOVROW: the raw bytes at row_chunk; bytes past colsb are 0 (byte granularity)."""
    out = np.zeros(ZMM_BYTES, dtype=np.uint8)
    if chunk < colsb:
        n = colsb - chunk  # colsb <= 64, so only chunk 0 gets here
        out[:n] = row_bytes[chunk : chunk + n]
    return out.view("<u4").astype(np.uint32)


#: lower-case mnemonic -> its function
COMPUTE = {f.__name__: f for f in (tcvtrowd2ps, tcvtrowps2bf16h, tcvtrowps2bf16l, tcvtrowps2phh, tcvtrowps2phl,
                                   tilemovrow)}
