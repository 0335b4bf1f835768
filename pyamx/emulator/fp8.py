"""The arithmetic of the AMX-FP8 dot products (TDPBF8PS, TDPBHF8PS, TDPHBF8PS, TDPHF8PS): the numpy engine.

docs/semantics.md ("AMX-FP8") states the model; the options are the ``fp8_*``
fields of :class:`~pyamx.emulator.numerics.Numerics`.

Exact sum (the default). Every fp8 value is an integer multiple of its
format's smallest denormal, so ``value * 2**scale`` is an integer image:
below 2**32 for BF8 (scale 16) and below 2**18 for HF8 (scale 9). A product
of images is below 2**64, too wide for int64 sums; split each image into
16-bit halves (``x = hi * 2**16 + lo``, both halves carrying x's sign) and
the sum over one instruction's <= 64 values is three matrix products of
halves. Each partial product is below 2**32 and each sum below 2**39, so
float64 matrix products are exact whatever order the BLAS adds in. The
three sums are then carried into two int64 limbs (``S = H * 2**32 + L``),
added once in float64 with the error kept (TwoSum) and folded into the last
bit (round to odd), which makes the final float32 conversion a correct
single RNE rounding of S (53 >= 24 + 2 bits).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..table import isa
from ..table.numerics import Numerics

#: dwords per instruction: the K block of the matmul schedule
BLOCK_DWORDS = 16
DEFAULT_NAN = np.uint32(0xFFC00000)
#: per code of a format (256 each): signed integer image, class, fp32 value, quieted fp32 NaN bits
DecodeTable = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.float32], npt.NDArray[np.uint32]]
_MIN_NORMAL32 = np.float32(2.0**-126)
_FINITE, _POS_INF, _NEG_INF, _NAN = 0, 1, 2, 3


def scale_bits(fmt: isa.Format) -> int:
    """log2 of 1 / (the smallest denormal of ``fmt``): the shift that makes every value an integer."""
    return fmt.bias + fmt.mantissa - 1


def _decode_table(fmt: isa.Format, input_daz: bool) -> DecodeTable:
    """(signed integer image, class, fp32 value, quieted fp32 NaN bits) of each of the 256 codes.

    ``input_daz`` flushes BF8 denormals only: Bochs widens fp8 to fp16 under
    DAZ, where HF8 denormals are fp16 normals and survive.
    """
    image = np.zeros(256, dtype=np.int64)
    kind = np.zeros(256, dtype=np.uint8)
    nan_bits = np.zeros(256, dtype=np.uint32)
    m, e_max = fmt.mantissa, (1 << fmt.exponent) - 1
    flush = input_daz and fmt.specials == "inf-nan"
    for code in range(256):
        negative, e, f = code >> 7, (code >> m) & e_max, code & ((1 << m) - 1)
        if e == e_max and (fmt.specials == "inf-nan" or f == (1 << m) - 1):
            if fmt.specials == "inf-nan" and f == 0:
                kind[code] = _NEG_INF if negative else _POS_INF
            else:
                kind[code] = _NAN
                # fp8 -> fp32 keeps the fraction's top bits (as fp8 -> fp16 -> fp32 does), then quiets
                nan_bits[code] = (negative << 31) | 0x7FC00000 | (f << (23 - m))
            continue
        magnitude = f if e == 0 else (f | (1 << m)) << (e - 1)
        if e == 0 and flush:
            magnitude = 0
        image[code] = -magnitude if negative else magnitude
    value = np.where(kind == _FINITE, image * 2.0 ** -scale_bits(fmt), 0.0)
    value = np.where(kind == _POS_INF, np.inf, np.where(kind == _NEG_INF, -np.inf, value))
    value = np.where(kind == _NAN, np.nan, value).astype(np.float32)
    # a flushed negative denormal is -0, whose sign matters to the rounded model's products
    negative_zero = (np.arange(256) >= 128) & (image == 0) & (kind == _FINITE)
    value = np.where(negative_zero, np.float32(-0.0), value).astype(np.float32)
    return image, kind, value, nan_bits


_TABLES: dict[tuple[str, bool], DecodeTable] = {}


def _table(fmt: isa.Format, input_daz: bool) -> DecodeTable:
    key = (fmt.name, input_daz)
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = _decode_table(fmt, input_daz)
    return table


def _halves(image: np.ndarray) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """image = hi * 2**16 + lo with |hi|, |lo| < 2**16 and both of image's sign, as float64."""
    magnitude = np.abs(image)
    sign = np.sign(image)
    return (sign * (magnitude >> 16)).astype(np.float64), (sign * (magnitude & 0xFFFF)).astype(np.float64)


def _exact_sum(a_image: np.ndarray, b_image: np.ndarray, scale: int) -> np.ndarray:
    """float32 of sum_j a[m, j] * b[j, n] * 2**-scale, rounded once (RNE); +0 for an exact zero.

    a_image (M, J), b_image (J, N) signed integer images with J <= 64.
    """
    a_hi, a_lo = _halves(a_image)
    b_hi, b_lo = _halves(b_image)
    high = (a_hi @ b_hi).astype(np.int64)
    middle = (a_hi @ b_lo + a_lo @ b_hi).astype(np.int64)
    low_total = (middle << 16) + (a_lo @ b_lo).astype(np.int64)
    limb_high = high + (low_total >> 32)  # floor division: limb_low stays in [0, 2**32)
    limb_low = low_total & 0xFFFFFFFF
    x = limb_high.astype(np.float64) * 2.0**32  # |limb_high| < 2**39: exact
    y = limb_low.astype(np.float64)
    s = x + y
    b_virtual = s - x
    error = (x - (s - b_virtual)) + (y - b_virtual)  # TwoSum: s + error == x + y exactly
    s_bits = s.view(np.uint64)
    needs_odd = (error != 0) & ((s_bits & np.uint64(1)) == 0)
    if needs_odd.any():
        outward = np.signbit(error) == np.signbit(s)
        s_bits = np.where(needs_odd, np.where(outward, s_bits + np.uint64(1), s_bits - np.uint64(1)), s_bits)
        s = s_bits.view(np.float64)
    rounded: npt.NDArray[np.float32] = (s * 2.0**-scale).astype(np.float32)
    return rounded


def _pairwise_sum(a_value: np.ndarray, b_value: np.ndarray) -> np.ndarray:
    """Bochs' rounded model: per dword (p0 + p1) and (p2 + p3) in fp32, into even and odd fp32
    accumulators, then even + odd. a_value (M, K, 4), b_value (K, N, 4) float32.

    Products of fp8 values are exact in fp32, and every sum is a multiple of
    2**-32, never tiny, so the model's FTZ of the accumulators never acts.
    """
    m, k_count = a_value.shape[:2]
    n = b_value.shape[1]
    even = np.zeros((m, n), dtype=np.float32)
    odd = np.zeros((m, n), dtype=np.float32)
    for k in range(k_count):
        p = a_value[:, None, k, :] * b_value[None, k, :, :]
        even = even + (p[..., 0] + p[..., 1])
        odd = odd + (p[..., 2] + p[..., 3])
    return even + odd


def _indicator(mask: np.ndarray) -> np.ndarray:
    return mask.astype(np.float64)


def _specials(a_kind: np.ndarray, a_zero: np.ndarray, a_neg: np.ndarray, b_kind: np.ndarray, b_zero: np.ndarray,
              b_neg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(invalid, +inf product present, -inf product present) per output element, (M, N) bool each.

    a_* are (M, J), b_* (J, N) per operand value: the counts are 0/1 matrix products.
    """
    a_inf, b_inf = a_kind == _POS_INF, b_kind == _POS_INF
    a_minf, b_minf = a_kind == _NEG_INF, b_kind == _NEG_INF
    a_any_inf, b_any_inf = a_inf | a_minf, b_inf | b_minf
    a_fin_pos, a_fin_neg = (a_kind == _FINITE) & ~a_zero & ~a_neg, (a_kind == _FINITE) & ~a_zero & a_neg
    b_fin_pos, b_fin_neg = (b_kind == _FINITE) & ~b_zero & ~b_neg, (b_kind == _FINITE) & ~b_zero & b_neg
    i = _indicator
    inf_times_zero = i(a_any_inf) @ i(b_zero) + i(a_zero) @ i(b_any_inf)
    b_pos, b_neg_all = b_inf | b_fin_pos, b_minf | b_fin_neg  # positive / negative non-zero, non-NaN
    pos_inf = i(a_inf) @ i(b_pos) + i(a_fin_pos) @ i(b_inf) + i(a_minf) @ i(b_neg_all) + i(a_fin_neg) @ i(b_minf)
    neg_inf = i(a_inf) @ i(b_neg_all) + i(a_fin_pos) @ i(b_minf) + i(a_minf) @ i(b_pos) + i(a_fin_neg) @ i(b_inf)
    return inf_times_zero > 0, pos_inf > 0, neg_inf > 0


def _flush(x: np.ndarray) -> np.ndarray:
    """Denormals to the zero of their sign (0/1 mask product keeps signs, infinities and NaNs)."""
    flushed: np.ndarray = np.multiply(x, np.abs(x) >= _MIN_NORMAL32)
    return flushed


def block(insn: isa.Instruction, c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    """One instruction: c (M, N) fp32 bits, a (M, K, 4) and b (K, N, 4) fp8 codes, K <= 16 -> (M, N) fp32 bits.

    Runs under the default floating-point environment (the caller's job:
    pyamx._fpenv.default_fpenv), so float32 adds are IEEE RNE without FTZ/DAZ.
    """
    a_fmt, b_fmt = insn.src_formats
    daz = numerics.fp8_input_daz
    a_image, a_kind, a_value, a_nan = _table(a_fmt, daz)
    b_image, b_kind, b_value, b_nan = _table(b_fmt, daz)
    m, k_count, lanes = a.shape
    n = b.shape[1]
    a_flat = a.reshape(m, k_count * lanes)  # value j = 4k + i pairs with b's (k, n, i)
    b_flat = np.transpose(b, (0, 2, 1)).reshape(k_count * lanes, n)
    ak, bk = a_kind[a_flat], b_kind[b_flat]
    a_has_nan, b_has_nan = (ak == _NAN).any(axis=1), (bk == _NAN).any(axis=0)
    operand_nan = a_has_nan[:, None] | b_has_nan[None, :]
    c_value = c.view(np.float32)
    if numerics.fp8_c_daz:
        c_value = _flush(c_value)
    with np.errstate(invalid="ignore", over="ignore"):
        if numerics.fp8_accum == "exact_ksum":
            t = _exact_sum(a_image[a_flat], b_image[b_flat], scale_bits(a_fmt) + scale_bits(b_fmt))
            if (ak == _POS_INF).any() or (ak == _NEG_INF).any() or (bk == _POS_INF).any() or (bk == _NEG_INF).any():
                ai, bi = a_image[a_flat], b_image[b_flat]
                invalid, pos_inf, neg_inf = _specials(ak, (ai == 0) & (ak == _FINITE), ai < 0,
                                                      bk, (bi == 0) & (bk == _FINITE), bi < 0)
                invalid |= pos_inf & neg_inf
                t = np.where(pos_inf, np.float32(np.inf), np.where(neg_inf, np.float32(-np.inf), t))
            else:
                invalid = np.zeros((m, n), dtype=bool)
            result = c_value + t
            # GCC's reference: a NaN C gives the default NaN too, whatever t is
            nan_result = operand_nan | invalid | np.isnan(c_value) | np.isnan(result)
        else:
            t = _pairwise_sum(a_value[a], b_value[b])
            result = c_value + t
            nan_result = np.isnan(result)
    if numerics.fp8_ftz:
        result = _flush(result)
    bits = result.view(np.uint32)
    if nan_result.any():
        bits = np.where(nan_result, DEFAULT_NAN, bits)
        if numerics.fp8_nan == "propagate":
            bits = _propagate(bits, nan_result, c, a_flat, b_flat, ak, bk, a_nan, b_nan)
    out: npt.NDArray[np.uint32] = np.ascontiguousarray(bits, dtype=np.uint32)
    return out


def _propagate(bits: np.ndarray, nan_result: np.ndarray, c: np.ndarray, a_flat: np.ndarray, b_flat: np.ndarray,
               a_kind: np.ndarray, b_kind: np.ndarray, a_nan: np.ndarray, b_nan: np.ndarray) -> np.ndarray:
    """The "propagate" NaN rule on the NaN results: the first NaN operand value (k, then lane, A's
    before B's), else C when it is a NaN, quieted; an invalid operation alone keeps the default NaN."""
    out: np.ndarray = bits.copy()
    for m, n in zip(*np.nonzero(nan_result)):
        chosen = None
        for j in range(a_flat.shape[1]):
            if a_kind[m, j] == _NAN:
                chosen = a_nan[a_flat[m, j]]
            elif b_kind[j, n] == _NAN:
                chosen = b_nan[b_flat[j, n]]
            if chosen is not None:
                break
        if chosen is None and (int(c[m, n]) & 0x7FFFFFFF) > 0x7F800000:
            chosen = int(c[m, n]) | 0x00400000
        if chosen is not None:
            out[m, n] = chosen
    return out


def dot(insn: isa.Instruction, c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    """The matmul schedule: c (M, N) fp32 bits, a (M, K, 4), b (K, N, 4) fp8 codes, any K.

    K runs in blocks of 16 dwords in increasing order, each block one
    instruction whose C is the previous block's result.
    """
    c = np.ascontiguousarray(c, dtype=np.uint32)
    for k0 in range(0, a.shape[1], BLOCK_DWORDS):
        c = block(insn, c, a[:, k0:k0 + BLOCK_DWORDS], b[k0:k0 + BLOCK_DWORDS], numerics)
    return c
