"""A slow scalar reference for the AMX-FP8 dot products, written from docs/semantics.md ("AMX-FP8").

Exact rational arithmetic (fractions) and explicit roundings. It shares no
code with pyamx (nor with tests/reference.py): it decodes the fp8 and fp32
bit patterns itself from the format definitions (E5M2 bias 15 with
infinities; E4M3 bias 7, no infinity, S.1111.111 the only NaN), rounds
itself and applies the special-value rules itself.

Values are tuples: ("nan", fp32 bits of the quieted NaN) | ("inf", negative) | ("num", Fraction, negative).
"""

from __future__ import annotations

from fractions import Fraction

from reference import _floor_log2  # floor(log2(x)) in integer arithmetic, shared by the references

DEFAULT_NAN = 0xFFC00000
FP32_MAX = Fraction(2**24 - 1) * Fraction(2) ** 104


def decode_fp8(code: int, fmt: str, daz: bool = False):
    """One fp8 code as a value. ``daz`` flushes BF8 denormals (the Bochs option; HF8 ones stay)."""
    negative = bool(code & 0x80)
    if fmt == "bf8":
        exponent, fraction, bias, mbits = (code >> 2) & 0x1F, code & 3, 15, 2
        if exponent == 0x1F:
            if fraction == 0:
                return ("inf", negative)
            return ("nan", (0x80000000 if negative else 0) | 0x7FC00000 | (fraction << 21))
    elif fmt == "hf8":
        exponent, fraction, bias, mbits = (code >> 3) & 0xF, code & 7, 7, 3
        if exponent == 0xF and fraction == 7:
            return ("nan", (0x80000000 if negative else 0) | 0x7FC00000 | (fraction << 20))
    else:
        raise ValueError(fmt)
    if exponent == 0:
        if daz and fmt == "bf8":
            return ("num", Fraction(0), negative)
        magnitude = Fraction(fraction, 2 ** mbits) * Fraction(2) ** (1 - bias)
    else:
        magnitude = (1 + Fraction(fraction, 2 ** mbits)) * Fraction(2) ** (exponent - bias)
    return ("num", -magnitude if negative else magnitude, negative)


def decode_fp32(bits: int, daz: bool = False):
    negative = bool(bits >> 31)
    exponent, fraction = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0xFF:
        return ("nan", bits | 0x00400000) if fraction else ("inf", negative)
    if exponent == 0:
        magnitude = Fraction(0) if daz else Fraction(fraction) * Fraction(2) ** -149
    else:
        magnitude = Fraction(fraction + 2**23) * Fraction(2) ** (exponent - 150)
    return ("num", -magnitude if negative else magnitude, negative)


def round_fp32(x: Fraction, zero_negative: bool = False, ftz: bool = False) -> int:
    """x to fp32 bits: nearest even, gradual underflow (denormals kept unless ``ftz``), overflow to infinity."""
    if x == 0:
        return 0x80000000 if zero_negative else 0
    sign = 0x80000000 if x < 0 else 0
    m = abs(x)
    # the quantum: 2**(e - 23) for 2**e <= m < 2**(e+1), never below the denormal quantum 2**-149
    e = _floor_log2(m)
    quantum = Fraction(2) ** max(e - 23, -149)
    q, r = divmod(m / quantum, 1)
    q = int(q)
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and q % 2 == 1):
        q += 1
    value = q * quantum
    if value > FP32_MAX:
        return sign | 0x7F800000
    if value < Fraction(2) ** -126:
        if ftz:
            return sign
        return sign | int(value / Fraction(2) ** -149)
    e = _floor_log2(value)
    significand = value / Fraction(2) ** (e - 23)
    return sign | ((e + 127) << 23) | (int(significand) - 2**23)



def _ieee_add(x, y):
    """x + y of two values, exactly (a value), with IEEE's special and zero-sign rules (RNE)."""
    if x[0] == "nan" or y[0] == "nan":
        return ("nan", DEFAULT_NAN)
    if x[0] == "inf" and y[0] == "inf":
        return x if x[1] == y[1] else ("nan", DEFAULT_NAN)
    if x[0] == "inf":
        return x
    if y[0] == "inf":
        return y
    s = x[1] + y[1]
    if s == 0:
        return ("num", Fraction(0), x[2] and y[2])  # -0 only from -0 + -0 under RNE
    return ("num", s, s < 0)


def _round_value(v, ftz: bool = False):
    """A value rounded to fp32, returned as a value again (bits decoded back)."""
    if v[0] != "num":
        return v
    return decode_fp32(round_fp32(v[1], v[2], ftz))


def _multiply(a, b):
    if a[0] == "nan" or b[0] == "nan":
        return ("nan", DEFAULT_NAN)
    if a[0] == "inf" or b[0] == "inf":
        other = b if a[0] == "inf" else a
        if other[0] == "num" and other[1] == 0:
            return ("nan", DEFAULT_NAN)  # inf * 0
        return ("inf", a_neg(a) != a_neg(b))
    return ("num", a[1] * b[1], a[2] != b[2])


def a_neg(v) -> bool:
    return v[1] if v[0] == "inf" else v[2]


def _bits(v) -> int:
    if v[0] == "nan":
        return DEFAULT_NAN
    if v[0] == "inf":
        return 0xFF800000 if v[1] else 0x7F800000
    return round_fp32(v[1], v[2])


def element(c_bits: int, a_codes, b_codes, a_fmt: str, b_fmt: str, *, accum="exact_ksum", input_daz=False,
            c_daz=False, ftz=False, nan="default") -> int:
    """One output element of one instruction: fp32 bits of C plus the dot product of the fp8 codes
    ``a_codes[j]`` and ``b_codes[j]`` (j = 4k + lane, in K order)."""
    a_values = [decode_fp8(x, a_fmt, input_daz) for x in a_codes]
    b_values = [decode_fp8(x, b_fmt, input_daz) for x in b_codes]
    c = decode_fp32(c_bits, c_daz)
    if accum == "exact_ksum":
        result = _exact_ksum(c, a_values, b_values)
    else:
        result = _bochs_pairwise(c, a_values, b_values)
    if result[0] == "nan":
        if nan == "propagate":
            for x, y in zip(a_values, b_values):
                if x[0] == "nan":
                    return x[1]
                if y[0] == "nan":
                    return y[1]
            if c[0] == "nan":
                return c[1]
        return DEFAULT_NAN
    if result[0] == "inf":
        return _bits(result)
    return round_fp32(result[1], result[2], ftz)


def _exact_ksum(c, a_values, b_values):
    """docs/semantics.md steps 2-4: specials, one rounding of the exact sum, one IEEE add."""
    if any(v[0] == "nan" for v in a_values + b_values):
        return ("nan", DEFAULT_NAN)
    products = [_multiply(x, y) for x, y in zip(a_values, b_values)]
    if any(p[0] == "nan" for p in products):
        return ("nan", DEFAULT_NAN)  # inf * 0
    infinities = {p[1] for p in products if p[0] == "inf"}
    if len(infinities) == 2:
        return ("nan", DEFAULT_NAN)  # +inf and -inf in one sum
    if c[0] == "nan":
        return ("nan", DEFAULT_NAN)
    if infinities:
        t = ("inf", infinities.pop())
    else:
        total = sum((p[1] for p in products), Fraction(0))
        t = decode_fp32(round_fp32(total))  # +0 for an exact zero
    return _ieee_add(c, t)


def _bochs_pairwise(c, a_values, b_values):
    """Bochs: fp32 products, (p0 + p1) and (p2 + p3) rounded, even and odd fp32 accumulators, then C +."""
    even = odd = ("num", Fraction(0), False)
    for k in range(0, len(a_values), 4):
        p = [_round_value(_multiply(a_values[k + i], b_values[k + i])) for i in range(4)]
        even = _round_value(_ieee_add(even, _round_value(_ieee_add(p[0], p[1]))))
        odd = _round_value(_ieee_add(odd, _round_value(_ieee_add(p[2], p[3]))))
    return _ieee_add(c, _round_value(_ieee_add(even, odd)))


def formats(mnemonic: str):
    """(A format, B format) read off the mnemonic: the letters between TDP and F8PS, B = BF8, H = HF8,
    one letter naming both (TDPBF8PS, TDPBHF8PS, TDPHBF8PS, TDPHF8PS)."""
    name = mnemonic.lower()
    if not (name.startswith("tdp") and name.endswith("f8ps")):
        raise ValueError(mnemonic)
    letters = [{"b": "bf8", "h": "hf8"}[x] for x in name[3:-4]]
    return (letters[0], letters[-1])


def dot(c, a, b, a_fmt: str, b_fmt: str, **options):
    """A whole instruction: c (M, N) fp32 bits, a (M, 4K) codes, b (K, 4N) quad-interleaved codes -> (M, N) bits."""
    m, n = len(c), len(c[0])
    k = len(b)
    out = [[0] * n for _ in range(m)]
    for i in range(m):
        for j in range(n):
            b_column = [int(b[kk][4 * j + lane]) for kk in range(k) for lane in range(4)]
            out[i][j] = element(int(c[i][j]), [int(x) for x in a[i][: 4 * k]], b_column, a_fmt, b_fmt, **options)
    return out


def matmul(c, a_rowmajor, b_rowmajor, a_fmt: str, b_fmt: str, **options):
    """docs/matmul.md's schedule: K padded to whole dwords (A with -0 = 0x80, B with 0), blocks of
    16 dwords in increasing order, each block one instruction whose C is the previous result."""
    m, kk = len(a_rowmajor), len(a_rowmajor[0])
    n = len(b_rowmajor[0])
    width = -(-kk // 4) * 4
    a = [list(map(int, row)) + [0x80] * (width - kk) for row in a_rowmajor]
    b = [list(map(int, row)) for row in b_rowmajor] + [[0] * n for _ in range(width - kk)]
    out = [[int(x) for x in row] for row in c]
    for start in range(0, width, 64):
        stop = min(start + 64, width)
        for i in range(m):
            for j in range(n):
                out[i][j] = element(out[i][j], a[i][start:stop], [b[r][j] for r in range(start, stop)], a_fmt, b_fmt,
                                    **options)
    return out
