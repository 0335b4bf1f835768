"""A slow reference for AMX-AVX512's row instructions, written from Intel's pseudo-code.

The selection loop is the pseudo-code's (row_index / row_chunk from the GPR
or imm8, a lane zero when ``i + row_chunk/4 >= colsb/4``, bytes for
TILEMOVROW), the conversions are exact rational arithmetic (Fraction) with
one explicit round-to-nearest-even onto each format's grid. It shares no code
with pyamx, which converts by integer shifts, so agreement is evidence.
"""

from __future__ import annotations

from fractions import Fraction

from reference import _floor_log2  # floor(log2(x)) in integer arithmetic, shared by the references

# (exponent bits, mantissa bits) of each target format
FP32, BF16, FP16 = (8, 23), (8, 7), (5, 10)


def fp32_value(bits: int, daz: bool = False):
    """("nan", mantissa) | ("inf", sign) | (Fraction magnitude, sign) of an fp32 bit pattern."""
    sign = bits >> 31
    exponent, mantissa = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0xFF:
        return ("nan", mantissa, sign) if mantissa else ("inf", 0, sign)
    if exponent == 0:
        return (Fraction(0) if daz else Fraction(mantissa, 2**149)), 0, sign
    return Fraction(mantissa + 2**23) * Fraction(2) ** (exponent - 150), 0, sign



def _nearest_even(x: Fraction) -> int:
    n = x.numerator // x.denominator
    rest = x - n
    return n + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1))


def round_to(magnitude: Fraction, sign: int, fmt, ftz: bool = False) -> int:
    """The bit pattern of sign * magnitude rounded to nearest even onto ``fmt``'s grid (denormals
    included), infinity past the largest finite value; ``ftz``: a result tiny after rounding (below
    the smallest normal when rounded with an unbounded exponent) is a zero of its sign."""
    e_bits, m_bits = fmt
    bias = 2 ** (e_bits - 1) - 1
    width = 1 + e_bits + m_bits
    sign_bit = sign << (width - 1)
    if magnitude == 0:
        return sign_bit
    e = _floor_log2(magnitude)
    emin = 1 - bias
    if ftz:
        unbounded = _nearest_even(magnitude / Fraction(2) ** (e - m_bits)) * Fraction(2) ** (e - m_bits)
        if unbounded < Fraction(2) ** emin:
            return sign_bit
    step = Fraction(2) ** (max(e, emin) - m_bits)
    rounded = _nearest_even(magnitude / step) * step
    if rounded >= Fraction(2) ** (bias + 1):
        return sign_bit | ((2**e_bits - 1) << m_bits)
    if rounded < Fraction(2) ** emin:
        return sign_bit | int(rounded / Fraction(2) ** (emin - m_bits))
    e = _floor_log2(rounded)
    fraction = rounded / Fraction(2) ** e - 1
    return sign_bit | ((e + bias) << m_bits) | int(fraction * 2**m_bits)


def int32_to_fp32(word: int) -> int:
    value = word - 2**32 if word >= 2**31 else word
    return round_to(Fraction(abs(value)), int(value < 0), FP32)


def fp32_to_bf16(bits: int, rule: str) -> int:
    value, mantissa, sign = fp32_value(bits, daz=(rule == "vcvtneps2bf16"))
    if value == "nan":  # quiet, the top 7 payload bits kept
        return sign << 15 | 0x7F80 | 0x40 | (mantissa >> 16)
    if value == "inf":
        return sign << 15 | 0x7F80
    return round_to(value, sign, BF16)


def fp32_to_fp16(bits: int, rule: str) -> int:
    value, mantissa, sign = fp32_value(bits, daz=(rule == "daz_ftz"))
    if value == "nan":  # quiet, the top 9 payload bits kept
        return sign << 15 | 0x7C00 | 0x200 | (mantissa >> 13)
    if value == "inf":
        return sign << 15 | 0x7C00
    return round_to(value, sign, FP16, ftz=(rule == "daz_ftz"))


def select(selector: int, imm: bool):
    """(row_index, row_chunk in bytes) as the pseudo-code computes them."""
    if imm:
        return selector & 0x3F, (selector >> 6) * 64
    return selector & 0xFFFF, ((selector >> 16) & 0xFFFF) * 64


def row_instruction(mnemonic: str, storage, rows: int, colsb: int, selector: int, imm: bool, *,
                    row_index="storage", row_bf16="ieee", row_fp16="ieee"):
    """The 16 result dwords, or the string "#UD". ``storage``: 16 lists of 64 tile bytes."""
    index, chunk = select(selector, imm)
    if row_index == "bochs":
        index %= 16
    if row_index in ("zero", "bochs") and index >= rows:
        return [0] * 16
    if (row_index == "ud" and index >= rows) or index >= 16:
        return "#UD"
    row = storage[index]
    if mnemonic == "TILEMOVROW":
        data = [0 if chunk + i >= colsb else row[chunk + i] for i in range(64)]
        return [data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 | data[4 * i + 3] << 24 for i in range(16)]
    out = []
    for i in range(16):
        if i + chunk // 4 >= colsb // 4:
            out.append(0)
            continue
        at = chunk + 4 * i
        word = row[at] | row[at + 1] << 8 | row[at + 2] << 16 | row[at + 3] << 24
        if mnemonic == "TCVTROWD2PS":
            out.append(int32_to_fp32(word))
        elif mnemonic.startswith("TCVTROWPS2BF16"):
            half = fp32_to_bf16(word, row_bf16)
            out.append(half << 16 if mnemonic.endswith("H") else half)
        else:
            half = fp32_to_fp16(word, row_fp16)
            out.append(half << 16 if mnemonic.endswith("H") else half)
    return out
