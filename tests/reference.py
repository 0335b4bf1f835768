"""A slow scalar reference for the AMX dot products, written from docs/semantics.md.

Exact rational arithmetic (fractions) with one explicit rounding per fma32
and add32. It shares no code with pyamx: it decodes bit patterns itself,
rounds itself and applies the NaN, DAZ, FTZ and zero-sign rules itself, so
agreement with the emulator is evidence, not a tautology.

Values are tuples: ("nan", bits) | ("inf", negative) | ("num", Fraction, negative)
where ``negative`` carries the sign of zeros too.
"""

from __future__ import annotations

from fractions import Fraction

DEFAULT_NAN = 0xFFC00000
MIN_NORMAL = Fraction(1, 2**126)


def decode32(bits: int, daz: bool):
    negative = bool(bits >> 31)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    if exponent == 0xFF:
        return ("nan", bits) if mantissa else ("inf", negative)
    if exponent == 0:
        if daz or mantissa == 0:
            return ("num", Fraction(0), negative)
        magnitude = Fraction(mantissa, 2**149)
    else:
        magnitude = _times_pow2(mantissa + 2**23, exponent - 150)
    return ("num", -magnitude if negative else magnitude, negative)


def _times_pow2(integer: int, e: int) -> Fraction:
    """integer * 2**e, exactly (shifts: Fraction powers are the slow part of this module)."""
    return Fraction(integer << e) if e >= 0 else Fraction(integer, 1 << -e)


def decode_bf16(bits: int, daz: bool):
    return decode32(bits << 16, daz)


def decode_fp16(bits: int):
    """fp16 -> the same value as an fp32 tuple; denormals are kept (never DAZ)."""
    negative = bool(bits >> 15)
    exponent = (bits >> 10) & 0x1F
    mantissa = bits & 0x3FF
    if exponent == 0x1F:
        return ("nan", ((bits & 0x8000) << 16) | 0x7F800000 | (mantissa << 13)) if mantissa else ("inf", negative)
    if exponent == 0:
        magnitude = Fraction(mantissa, 2**24)
    else:
        magnitude = _times_pow2(mantissa + 2**10, exponent - 25)
    return ("num", -magnitude if negative else magnitude, negative)


def _floor_log2(x: Fraction) -> int:
    """floor(log2(x)) of a positive x, in integer arithmetic."""
    p, q = x.numerator, x.denominator
    e = p.bit_length() - q.bit_length()
    # 2**e <= p/q  <=>  p << -e >= q (e < 0)  or  p >= q << e (e >= 0); else one less
    return e if (p << max(0, -e)) >= (q << max(0, e)) else e - 1


def encode(value, tininess: str = "after") -> int:
    """Round a value tuple to fp32 bits: RNE, FTZ with the given tininess, overflow to infinity."""
    kind = value[0]
    if kind == "nan":
        return value[1]
    if kind == "inf":
        return 0xFF800000 if value[1] else 0x7F800000
    x, negative = value[1], value[2]
    sign = 0x80000000 if negative else 0
    if x == 0:
        return sign
    magnitude = abs(x)
    if tininess == "before" and magnitude < MIN_NORMAL:
        return sign
    e = _floor_log2(magnitude) - 23  # scale so the significand has 24 integer bits
    num, den = magnitude.numerator, magnitude.denominator  # scaled = num / den = magnitude / 2**e
    if e >= 0:
        den <<= e
    else:
        num <<= -e
    q, remainder = divmod(num, den)  # remainder / den is the fraction below the last kept bit
    if 2 * remainder > den or (2 * remainder == den and q % 2 == 1):
        q += 1
    if q == 2**24:
        q, e = 2**23, e + 1
    top = e + 23
    if top < -126:  # tiny after rounding: flush
        return sign
    if top > 127:
        return sign | 0x7F800000
    return sign | ((top + 127) << 23) | (q - 2**23)


def _negative(x: Fraction, zero_negative: bool) -> bool:
    return zero_negative if x == 0 else x < 0


def multiply(a, b):
    if a[0] == "nan" or b[0] == "nan":
        raise AssertionError("NaNs are picked before arithmetic")
    negative = _sign(a) != _sign(b)
    if a[0] == "inf" or b[0] == "inf":
        other = b if a[0] == "inf" else a
        if other[0] == "num" and other[1] == 0:
            return None  # invalid: inf * 0
        return ("inf", negative)
    return ("num", a[1] * b[1], negative)


def _sign(v) -> bool:
    return v[1] if v[0] == "inf" else v[2]


def add(x, y):
    if x is None or y is None:
        return None
    if x[0] == "inf" and y[0] == "inf":
        return x if x[1] == y[1] else None  # inf - inf is invalid
    if x[0] == "inf":
        return x
    if y[0] == "inf":
        return y
    total = x[1] + y[1]
    if total == 0:
        # IEEE 754 under round to nearest: -0 only for (-0) + (-0).
        negative = x[1] == 0 and y[1] == 0 and x[2] and y[2]
        return ("num", Fraction(0), negative)
    return ("num", total, total < 0)


def _first_nan(operands):
    for op in operands:
        if op[0] == "nan":
            return op[1] | 0x00400000
    return None


def fma32(a, b, c, tininess="after"):
    nan = _first_nan((a, b, c))
    if nan is not None:
        return nan
    result = add(multiply(a, b), c)
    return DEFAULT_NAN if result is None else encode(result, tininess)


def add32(x, y, tininess="after"):
    nan = _first_nan((x, y))
    if nan is not None:
        return nan
    result = add(x, y)
    return DEFAULT_NAN if result is None else encode(result, tininess)


def single_rounding(factors, addend, tininess):
    """fp32 bits of sum(factors[2i] * factors[2i+1]) + addend, exact, rounded once."""
    nan = _first_nan(list(factors) + [addend])
    if nan is not None:
        return nan
    total = ("num", Fraction(0), True)  # -0 is the identity that keeps "all -0 gives -0"
    for i in range(0, len(factors), 2):
        total = add(total, multiply(factors[i], factors[i + 1]))
    total = add(total, addend)
    return DEFAULT_NAN if total is None else encode(total, tininess)


def dot_float(c_bits, a_values, b_values, *, structure="sdm", dest_daz=True, tininess="after"):
    """c_bits: M x N fp32 bits; a_values: M x 2K decoded; b_values: K x 2N decoded (pair-interleaved).

    Returns M x N fp32 bits computed element by element, straight from the
    pseudo-code of docs/semantics.md section 2 (sdm) or the intrinsics guide (straight).
    """
    m_count, n_count, k_count = len(c_bits), len(c_bits[0]), len(b_values)
    out = []
    for m in range(m_count):
        row = []
        for n in range(n_count):
            c = decode32(c_bits[m][n], dest_daz)
            if structure == "sdm":
                even = odd = ("num", Fraction(0), False)
                for k in range(k_count):
                    even = decode32(fma32(a_values[m][2 * k], b_values[k][2 * n], even, tininess), True)
                    odd = decode32(fma32(a_values[m][2 * k + 1], b_values[k][2 * n + 1], odd, tininess), True)
                t = decode32(add32(even, odd, tininess), True)
                row.append(add32(c, t, tininess))
            elif structure == "straight":
                acc = c
                for k in range(k_count):
                    for lane in (0, 1):
                        bits = fma32(a_values[m][2 * k + lane], b_values[k][2 * n + lane], acc, tininess)
                        acc = decode32(bits, True)
                row.append(bits)
            elif structure == "fused_pair":
                bits = c_bits[m][n]
                acc = c
                for k in range(k_count):
                    pair = [a_values[m][2 * k], b_values[k][2 * n], a_values[m][2 * k + 1], b_values[k][2 * n + 1]]
                    bits = single_rounding(pair, acc, tininess)
                    acc = decode32(bits, True)
                row.append(bits)
            elif structure == "wide":
                operands = []
                for k in range(k_count):
                    operands += [a_values[m][2 * k], b_values[k][2 * n], a_values[m][2 * k + 1], b_values[k][2 * n + 1]]
                row.append(single_rounding(operands, c, tininess))
            else:
                raise ValueError(structure)
        out.append(row)
    return out


def tdpbf16ps(c_bits, a_bits, b_bits, *, structure="sdm", input_daz=True, dest_daz=True, tininess="after"):
    """Lists (or arrays) of ints in, M x N list of fp32 bit ints out."""
    a_values = [[decode_bf16(int(x), input_daz) for x in row] for row in a_bits]
    b_values = [[decode_bf16(int(x), input_daz) for x in row] for row in b_bits]
    c = [[int(x) for x in row] for row in c_bits]
    return dot_float(c, a_values, b_values, structure=structure, dest_daz=dest_daz, tininess=tininess)


def tdpfp16ps(c_bits, a_bits, b_bits):
    a_values = [[decode_fp16(int(x)) for x in row] for row in a_bits]
    b_values = [[decode_fp16(int(x)) for x in row] for row in b_bits]
    c = [[int(x) for x in row] for row in c_bits]
    return dot_float(c, a_values, b_values)


def int8_signedness(mnemonic: str):
    """``(tsrc1 signed, tsrc2 signed)`` of TDPB[SU][SU]D, read off the mnemonic as docs/semantics.md
    section 4 defines it (first letter: tsrc1, second: tsrc2; S signed, U unsigned).

    The tests' one statement of signedness that does not come from pyamx.table.isa: tests that hold the
    code to this reference must not take the expectation from the table under test.
    """
    name = mnemonic.lower()
    if not (len(name) == 7 and name.startswith("tdpb") and name.endswith("d") and set(name[4:6]) <= {"s", "u"}):
        raise ValueError(f"{mnemonic!r} is not TDPB[SU][SU]D")
    return name[4] == "s", name[5] == "s"


def tdpb_int8(signed_a: bool, signed_b: bool, c_words, a_bytes, b_bytes):
    """M x N int32 results of the byte dot products, wrapped to 32 bits."""

    def extend(byte: int, signed: bool) -> int:
        byte = int(byte) & 0xFF
        return byte - 256 if signed and byte >= 128 else byte

    out = []
    for m in range(len(c_words)):
        row = []
        for n in range(len(c_words[0])):
            total = int(c_words[m][n])
            for k in range(len(b_bytes)):
                for q in range(4):
                    total += extend(a_bytes[m][4 * k + q], signed_a) * extend(b_bytes[k][4 * n + q], signed_b)
            total &= 0xFFFFFFFF
            row.append(total - 2**32 if total >= 2**31 else total)
        out.append(row)
    return out


# -- AMX-COMPLEX, straight from the SDM's TCMMIMFP16PS/TCMMRLFP16PS pseudo-code ---------------
#
# Written from the pseudo-code itself, not from the TDPFP16PS identity pyamx computes them by:
# s1e/s1o are A's real/imaginary fp16 (RL negates the imaginary one as fp16 bits, before
# conversion), s2e/s2o B's, and every step is fma32(acc, x, y) whose NaN priority is the order
# written: acc, x, y.


def _fma_acc_first(acc, x, y, tininess):
    nan = _first_nan((acc, x, y))
    if nan is not None:
        return nan
    result = add(multiply(x, y), acc)
    return DEFAULT_NAN if result is None else encode(result, tininess)


def _single_rounding_acc_first(acc, factors, tininess):
    nan = _first_nan([acc] + list(factors))
    if nan is not None:
        return nan
    return single_rounding(factors, acc, tininess)


def tcmm(imaginary: bool, c_bits, a_words, b_words, *, structure="sdm", dest_daz=True, tininess="after",
         nan="x86"):
    """TCMMIMFP16PS (``imaginary``) or TCMMRLFP16PS: c_bits M x N fp32 bits, a_words M x K and
    b_words K x N complex dwords (imaginary << 16 | real). Returns M x N fp32 bit ints.

    structure "sdm" is the SDM's; "straight" (pyamx's option: one accumulator from C, per k the
    product with b's real part, then the one with its imaginary part), "fused_pair" (per k both
    products and the accumulator, one rounding) and "wide" (C and every product, one rounding)
    are pyamx's alternatives, their NaN priority the accumulator first. ``nan`` other than x86
    replaces every NaN result by one constant.
    """
    def operands(aw, bw):
        re_a, im_a = aw & 0xFFFF, aw >> 16
        re_b, im_b = bw & 0xFFFF, bw >> 16
        s2e, s2o = decode_fp16(re_b), decode_fp16(im_b)
        if imaginary:
            return decode_fp16(im_a), s2e, decode_fp16(re_a), s2o
        return decode_fp16(re_a), s2e, decode_fp16(im_a ^ 0x8000), s2o  # "-" is for imaginary*imaginary

    out = []
    for m in range(len(c_bits)):
        row = []
        for n in range(len(c_bits[0])):
            c = decode32(int(c_bits[m][n]), dest_daz)
            steps = [operands(int(a_words[m][k]), int(b_words[k][n])) for k in range(len(b_words))]
            if structure == "sdm":
                temp_e = temp_o = ("num", Fraction(0), False)
                for s1e, s2e, s1o, s2o in steps:
                    temp_e = decode32(_fma_acc_first(temp_e, s1e, s2e, tininess), True)
                    temp_o = decode32(_fma_acc_first(temp_o, s1o, s2o, tininess), True)
                tmp = decode32(add32(temp_e, temp_o, tininess), True)
                bits = add32(c, tmp, tininess)
            elif structure == "straight":
                acc, bits = c, None
                for s1e, s2e, s1o, s2o in steps:
                    for x, y in ((s1e, s2e), (s1o, s2o)):
                        bits = _fma_acc_first(acc, x, y, tininess)
                        acc = decode32(bits, True)
            elif structure == "fused_pair":
                acc = c
                for step in steps:
                    bits = _single_rounding_acc_first(acc, step, tininess)
                    acc = decode32(bits, True)
            elif structure == "wide":
                bits = _single_rounding_acc_first(c, [v for step in steps for v in step], tininess)
            else:
                raise ValueError(structure)
            if nan != "x86" and (bits & 0x7FFFFFFF) > 0x7F800000:
                bits = DEFAULT_NAN if nan == "default" else 0x7FC00000
            row.append(bits)
        out.append(row)
    return out
