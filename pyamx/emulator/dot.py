"""The arithmetic of the tile dot products, on whole operand matrices: the numpy engine.

Inputs are already widened to fp32 bit patterns and split into lanes:
``a`` is (M, K, L) and ``b`` is (K, N, L), where L is the number of values a
dword holds (2 for bf16/fp16, 4 for int8). The loop over k is the
instruction's own sequential order; every step is vectorized over the whole
M x N output, so a matmul pays Python overhead per k step, never per tile
or per element.

Three tiers compute the same bits (tests/emulator/test_emulator_exact.py and
tests/emulator/test_matmul_engine.py hold each against tests/reference.py):

1. ``fast``: the sdm and straight structures in plain float32 ufuncs, where the operands
   are proven to keep every product and every lane step away from the
   places where float32 arithmetic and the AMX rules differ (see
   :func:`fast_eligible`). This is what ordinary data runs.
2. ``values``: sdm and straight in float64, for data that can underflow or
   overflow a product but holds no NaN operand: one float64 add and one
   rounding per step for bf16/fp16 products (fp32.add_short_values), an
   exact error term (TwoSum, round to odd) for wider ones.
3. ``bits``: every structure, step by step on bit patterns with the full
   NaN rules of Numerics.nan, for the rows and columns that hold a NaN.
"""

from __future__ import annotations



import numpy as np
import numpy.typing as npt

from ..table import isa
from . import fp32
from ..table.numerics import Numerics
from .onetile import one_tile

#: (smallest, largest) fp32 exponent field of an operand's finite non-zero values, and their
#: significand width (:func:`_scan`)
Range = tuple[int, int, int]
#: float32 values
Float32s = npt.NDArray[np.float32]

#: dwords per dot-product instruction (tmul_maxk): the K block of the matmul schedule
BLOCK_DWORDS = 16
#: outputs of one instruction (16 x 16): the most onetile.one_tile is given (its products are K x 2 x M x N)
_ONE_TILE = 256
_FP8_OPS = {insn.name: insn for insn in isa.DOTS if insn.group == "fp8"}
_FLOAT_OPS = tuple(insn.name for insn in isa.DOTS if insn.is_float and insn.name not in _FP8_OPS)
_ONE_TILE_STRUCTURES = ("sdm", "straight")

#: output elements per row chunk: bounds the temporaries of one step (a few MiB)
#: and is the unit of work handed to threads
CHUNK_ELEMENTS = 1 << 15

_MIN_NORMAL32 = np.float32(fp32.MIN_NORMAL)
_MIN_NORMAL_BITS = np.uint32(0x00800000)


# -- the fast tier: why float32 ufuncs give the AMX bits -----------------------------
#
# Write every finite non-zero input value (bf16 or fp16 widened to fp32, after
# DAZ where it applies) as x = X * 2**q(x) with X an integer below 2**P, P the
# significand width of its operand (Pa, Pb: 8 for bf16, 11 for fp16, read from
# the data by significand_width). With E the fp32 biased exponent field (E = 1
# for an fp32 denormal), q(x) >= E - 126 - P and |x| < 2**(E - 126).
#
# Claim: if  Pa + Pb <= 24,  Ea_min + Eb_min >= 126 + Pa + Pb  and
# Ea_max + Eb_max <= 380  over the finite non-zero values of a and b, then for
# the sdm lanes
#     fma32(a, b, lane)  ==  float32(float32(a) * float32(b) + lane)
# as numpy computes it in the default floating-point environment (RNE, no
# FTZ/DAZ), bit for bit, zero signs and infinities included; and NaN results
# are exactly the invalid operations (inf * 0, inf - inf).
#
# Proof. Let Q = 2**(Ea_min + Eb_min - 252 - Pa - Pb) >= 2**-126.
# (1) Every product p = a*b is a multiple of Q (product of multiples of
#     2**q(a) and 2**q(b)) with at most Pa + Pb <= 24 significant bits, and
#     |p| < 2**(Ea + Eb - 252) <= 2**128; so p = 0 or 2**-126 <= Q <= |p| <
#     2**128, and a 24-bit value in that range is an fp32 number: float32
#     multiplication is exact, with IEEE's zero sign (the sign of fma's
#     product).
# (2) Every lane value is a multiple of Q, by induction: lanes start at +0;
#     the exact sum s of two multiples of Q is one, and rounding s to 24 bits
#     either keeps it or moves it to a multiple of ulp(s) > Q, a power of two.
#     So a non-zero s has |s| >= Q >= 2**-126: no step is ever tiny, the FTZ
#     and tininess rules never act, and gradual underflow never occurs.
# (3) With p exact, fma32(a, b, lane) = round(p + lane) = float32 addition,
#     correctly rounded by IEEE 754 (overflow to infinity under RNE, +0 for
#     an exact zero sum of opposite signs, -0 + -0 = -0), as the model says.
# (4) Infinite inputs: float32 gives inf products and inf - inf = NaN, the
#     same special cases; a NaN lane stays NaN. Without NaN inputs every NaN
#     result is an invalid operation's, whose bits Numerics.nan decides.
# fp16 needs no scan: |x| <= 65504 < 2**16 and q(x) >= -24 for every fp16
# value, so the conditions always hold (E >= 103, E <= 142).
# The two closing additions (even + odd, then C + t) add two fp32 numbers: a
# tiny exact sum of multiples of 2**-149 below 2**-126 is representable, so
# float32 gives it exactly and both tininess rules flush it to the zero of
# its sign; everything else is IEEE's correctly rounded sum.


def _scan(bits: np.ndarray, daz: bool) -> tuple[np.ndarray, np.ndarray | None, Range | None]:
    """One pass over fp32 operand bits: (clean bits, NaN mask or None, range or None).

    Clean bits have denormals as signed zeros (under ``daz``) and NaNs as +0;
    the range is (min, max) of the fp32 exponent field over the finite
    non-zero clean values, denormals counted as 1 (see the proof above), and
    the significand width (see significand_width) of the clean values.
    Ordinary data costs four numpy calls: the extremes say whether a NaN, a
    denormal or an infinity is there at all.
    """
    magnitude = bits & ~fp32.SIGN
    largest = int(magnitude.max())
    nan_mask = None
    if largest > fp32.EXPONENT:
        nan_mask = magnitude > fp32.EXPONENT
        bits = np.where(nan_mask, np.uint32(0), bits)
        magnitude = np.where(nan_mask, np.uint32(0), magnitude)
    # zeros wrap to 0xFFFFFFFF, so the minimum is a non-zero value's where there is one
    smallest = int((magnitude - np.uint32(1)).min()) + 1
    if daz and smallest < _MIN_NORMAL_BITS:
        tiny = magnitude < _MIN_NORMAL_BITS
        bits = np.where(tiny, bits & fp32.SIGN, bits)
        magnitude = np.where(tiny, np.uint32(0), magnitude)
        smallest = int((magnitude - np.uint32(1)).min()) + 1
    if smallest >= fp32.EXPONENT:  # only zeros and infinities
        return bits, nan_mask, None
    if largest >= fp32.EXPONENT:  # an infinity (or a NaN, now zero): the largest finite value instead
        largest = int(np.where(magnitude < fp32.EXPONENT, magnitude, np.uint32(0)).max())
    return bits, nan_mask, (max(smallest >> 23, 1), largest >> 23, _width(_or_of(magnitude)))


def _or_of(words: np.ndarray) -> int:
    """Every bit set in any of ``words``. keepdims: the one form of ufunc.reduce whose result every
    numpy version's stubs type as an array (numpy 2.5's have no overload for a plain reduce to a scalar)."""
    return int(np.bitwise_or.reduce(words, axis=None, keepdims=True).item())


def _width(low_bits: int) -> int:
    return 8 if not low_bits & 0xFFFF else 11 if not low_bits & 0x1FFF else 24


def significand_width(bits: np.ndarray) -> int:
    """P such that every value has at most P significant bits: 8 (bf16), 11 (fp16) or 24.

    Read from the data: widened bf16 has its low 16 fp32 bits zero and
    widened fp16 its low 13; a normal then has P bits and is a multiple of
    2**(E - 126 - P), a denormal (E counted as 1) fewer bits and a multiple
    of 2**(-125 - P).
    """
    return _width(_or_of(bits & ~fp32.SIGN))


def fast_eligible_ranges(range_a: Range | None, range_b: Range | None, product_bits: int) -> bool:
    """The claim's conditions: products of at most 24 bits, and the exponent ranges of a and b.

    ``product_bits`` is Pa + Pb (2P in the proof above); a range of None
    means no finite non-zero value.
    """
    if product_bits > 24:
        return False  # e.g. fp32 x fp32: a product is not exact in float32
    if range_a is None or range_b is None:
        return True  # every product is a zero, an infinity or invalid
    return range_a[0] + range_b[0] >= 126 + product_bits and range_a[1] + range_b[1] <= 380


def fast_eligible(a_bits: np.ndarray, b_bits: np.ndarray, significand_bits: int) -> bool:
    """Whether the claim above holds for these (DAZ'd, NaN-free) fp32 bit operands of ``significand_bits`` bits."""
    return fast_eligible_ranges(_scan(a_bits, False)[2], _scan(b_bits, False)[2], 2 * significand_bits)


def _flush(x: np.ndarray) -> np.ndarray:
    """float32 values with denormals replaced by the zero of their sign (FTZ of an exact tiny result, or DAZ).

    Multiplying by the 0/1 mask keeps every sign (a denormal times 0 is a
    zero of its sign) and leaves infinities (mask 1) and NaNs (still NaN;
    their bits are chosen later from the operands) alone.
    """
    flushed: np.ndarray = np.multiply(x, np.abs(x) >= _MIN_NORMAL32)
    return flushed


def _close_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float32 x + y of two fp32 numbers, with a tiny exact result flushed to its signed zero."""
    return _flush(np.add(x, y))


def _fast_sdm_block(c_bits: np.ndarray, a_fast: Float32s, b_fast: Float32s, numerics: Numerics) -> np.ndarray:
    """One instruction (sdm) on the fast tier: a_fast (K, 2, M), b_fast (K, 2, N) float32 values."""
    k_count, _, m = a_fast.shape
    n = b_fast.shape[2]
    c_value = c_bits.view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, inf - inf, overflow: the model's own results
        if numerics.dest_daz:
            c_value = _flush(c_value)
        lanes = _fast_lanes(a_fast, b_fast, k_count, m, n)
        # lanes are multiples of Q >= 2**-126 (proof above), so even + odd is never tiny
        total = _close_sum(c_value, lanes[0] + lanes[1])
    return _nan_free_result(total.view(np.uint32), c_bits, numerics.nan)


def _fast_lanes(a_fast: Float32s, b_fast: Float32s, k_count: int, m: int, n: int) -> Float32s:
    """The even and odd lanes (2, M, N) of one instruction: one float32 multiply and add per step."""
    if k_count * m * n <= 8192:
        # small (one tile): every product in one call, then the lane chains;
        # +0 is added first because the lanes start at +0 (fma(a, b, +0) of a
        # -0 product is +0)
        products = np.multiply(a_fast[:, :, :, None], b_fast[:, :, None, :])
        lanes: Float32s = products[0] + np.float32(0)
        for k in range(1, k_count):
            lanes += products[k]
    else:
        lanes = np.zeros((2, m, n), dtype=np.float32)
        step = np.empty((2, m, n), dtype=np.float32)
        for k in range(k_count):
            np.multiply(a_fast[k, :, :, None], b_fast[k, :, None, :], out=step)
            np.add(lanes, step, out=lanes)
    return lanes


# The straight structure (one accumulator from C through every product) on the
# fast tier: the claim's proof holds with the accumulator in place of the
# lanes once C itself is a multiple of Q as well, i.e. (C's quantum being
# 2**(Ec - 150)) when every finite non-zero C has Ec >= 24 after DAZ: every
# block's result is then again such a multiple (step (2) of the proof), so
# checking the first C covers every later block.


def _straight_c_fits(c_bits: np.ndarray, numerics: Numerics) -> bool:
    c_range = _scan(c_bits, numerics.dest_daz)[2]
    return c_range is None or c_range[0] >= 24


def _fast_straight_block(c_bits: np.ndarray, a_fast: Float32s, b_fast: Float32s, numerics: Numerics) -> np.ndarray:
    """One instruction (straight) on the fast tier: per k the even, then the odd product into one accumulator."""
    c_value = c_bits.view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        acc = _flush(c_value) if numerics.dest_daz else c_value.copy()
        k_count, _, m = a_fast.shape
        if k_count * m * acc.shape[1] <= 8192:  # small: every product in one call
            products = np.multiply(a_fast[:, :, :, None], b_fast[:, :, None, :])
            for k in range(k_count):
                acc += products[k, 0]
                acc += products[k, 1]
        else:
            step = np.empty_like(acc)
            for k in range(k_count):
                for lane in (0, 1):
                    np.multiply(a_fast[k, lane, :, None], b_fast[k, lane, None, :], out=step)
                    np.add(acc, step, out=acc)
    return _nan_free_result(acc.view(np.uint32), c_bits, numerics.nan)


def _nan_free_result(bits: np.ndarray, c_bits: np.ndarray, rule: str) -> np.ndarray:
    """NaN results of a block whose a and b hold no NaN: C's (quieted) where C is a NaN, else invalid's.

    sdm: C is the first operand of the closing add32(C, t); straight: C is the
    accumulator of the first fma and then every later one. Any other NaN
    comes from an invalid operation (inf * 0, inf - inf) and propagates as
    the default NaN.
    """
    if not np.isnan(bits.view(np.float32)).any():
        return bits
    result_nan = fp32.is_nan(bits)
    chosen: np.ndarray | np.uint32
    if rule == "x86":
        chosen = np.where(fp32.is_nan(c_bits), c_bits | fp32.QUIET_BIT, fp32.X86_DEFAULT_NAN)
    else:
        chosen = fp32.X86_DEFAULT_NAN if rule == "default" else fp32.CANONICAL_NAN
    result: np.ndarray = np.where(result_nan, chosen, bits).astype(np.uint32)
    return result


# -- the values and bits tiers ----------------------------------------------------------


def _values_block(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics, input_daz: bool,
                  short: bool = False) -> np.ndarray:
    """sdm and straight on float64 values: the same roundings; a and b hold no NaN.

    Without NaN operands in a and b the only NaN a step can make is C's or an
    invalid operation's, and from then on every step propagates it, so NaN
    bits need no tracking until the end (see _nan_free_result).
    """
    tininess = numerics.tininess
    # short: products of bf16/fp16 values have <= 22 bits, so one float64 add
    # and one rounding is exact (fp32.add_short_values); else TwoSum
    add = fp32.add_short_values if short else fp32.add_values
    a64 = fp32.to_float64(a, input_daz)  # (M, K, 2)
    b64 = fp32.to_float64(b, input_daz)  # (K, N, 2)
    with np.errstate(invalid="ignore", over="ignore"):
        c_value = fp32.to_float64(c, numerics.dest_daz)
        if numerics.structure == "sdm":
            lanes = np.zeros(c.shape + (2,))
            for k in range(a.shape[1]):
                lanes = add(a64[:, None, k, :] * b64[None, k, :, :], lanes, tininess)
            result = add(c_value, add(lanes[..., 0], lanes[..., 1], tininess), tininess)
        else:
            result = c_value
            for k in range(a.shape[1]):
                for lane in (0, 1):
                    result = add(a64[:, None, k, lane] * b64[None, k, :, lane], result, tininess)
    with np.errstate(invalid="ignore"):
        bits = result.astype(np.float32).view(np.uint32)
    return _nan_free_result(bits, c, numerics.nan)


def _bits_block(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics, input_daz: bool,
               acc_first: bool = False) -> np.ndarray:
    """Every structure step by step on bit patterns, with the full NaN rules (the slowest tier).

    ``acc_first``: the accumulator is the first NaN operand of every step (the complex rows,
    complex_rows.py), not the last.
    """
    tininess, nan = numerics.tininess, numerics.nan
    a_mk = a[:, None, :, :]  # (M, 1, K, 2): broadcast against b over n
    b_kn = np.transpose(b, (1, 0, 2))[None]  # (1, N, K, 2): broadcast against a over m
    k_count = a.shape[1]
    structure = numerics.structure
    if structure == "sdm":
        lanes = np.zeros(c.shape + (2,), dtype=np.uint32)  # even, odd accumulators start at +0
        for k in range(k_count):
            lanes = fp32.fma32(a_mk[:, :, k, :], b_kn[:, :, k, :], lanes, daz_ab=input_daz, acc_first=acc_first,
                               tininess=tininess, nan=nan)
        pair_sum = fp32.add32(lanes[..., 0], lanes[..., 1], tininess=tininess, nan=nan)
        return fp32.add32(c, pair_sum, daz_x=numerics.dest_daz, tininess=tininess, nan=nan)
    if structure == "straight":
        acc = c
        for k in range(k_count):
            for lane in (0, 1):
                acc = fp32.fma32(
                    a_mk[:, :, k, lane], b_kn[:, :, k, lane], acc, daz_ab=input_daz, daz_c=numerics.dest_daz,
                    acc_first=acc_first, tininess=tininess, nan=nan
                )
        return acc
    if structure == "fused_pair":
        acc = c
        for k in range(k_count):
            operands = (a_mk[:, :, k, 0], b_kn[:, :, k, 0], a_mk[:, :, k, 1], b_kn[:, :, k, 1])
            terms = _products(operands, input_daz) + [fp32.to_float64(acc, numerics.dest_daz)]
            order: tuple[np.ndarray, ...] = (acc,) + operands if acc_first else operands + (acc,)
            acc = fp32.exact_sum(terms, nan_operands=order, tininess=tininess, nan=nan)
        return acc
    if structure == "wide":
        every: list[np.ndarray] = []
        for k in range(k_count):
            every += [a_mk[:, :, k, 0], b_kn[:, :, k, 0], a_mk[:, :, k, 1], b_kn[:, :, k, 1]]
        terms = _products(tuple(every), input_daz) + [fp32.to_float64(c, numerics.dest_daz)]
        order = (c,) + tuple(every) if acc_first else tuple(every) + (c,)
        return fp32.exact_sum(terms, nan_operands=order, tininess=tininess, nan=nan)
    raise AssertionError(structure)  # Numerics validates the name


def _products(operands: tuple[np.ndarray, ...], input_daz: bool) -> list[np.ndarray]:
    """Exact float64 products of consecutive (a, b) operand pairs."""
    with np.errstate(invalid="ignore"):  # inf * 0 is resolved by select_nan
        return [
            fp32.to_float64(operands[i], input_daz) * fp32.to_float64(operands[i + 1], input_daz)
            for i in range(0, len(operands), 2)
        ]


# -- one schedule, many instructions ----------------------------------------------------


class _FloatPlan:
    """The operands of a float schedule prepared once: NaN rows/columns found, tier chosen.

    For sdm and straight, the rows of ``a`` and columns of ``b`` that hold a
    NaN go to the bits tier (a NaN input only reaches its own row or column
    of the output); everything else runs on a NaN-free copy in the fast or
    values tier. The other structures run on the bits tier throughout.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, numerics: Numerics, input_daz: bool, significand_bits: int,
                 acc_first: bool = False) -> None:
        self.a, self.b, self.numerics, self.input_daz = a, b, numerics, input_daz
        # NaN-free operands never meet a NaN accumulator together with a NaN a or b, so only
        # the bits tier needs to know the complex rows' NaN priority
        self.acc_first = acc_first
        self.short = False
        self.split = numerics.structure in ("sdm", "straight")
        self.fast: tuple[Float32s, Float32s] | None = None
        if not self.split:
            return
        self.a_clean, a_nan, range_a = _scan(a, input_daz)
        self.b_clean, b_nan, range_b = _scan(b, input_daz)
        self.any_nan_rows, self.any_nan_cols = a_nan is not None, b_nan is not None
        # a 3-D mask reduced over two axes: an array (numpy < 2.5 types any(axis=...) as possibly a
        # scalar; asarray, a no-op here, says it is an array to every version's stubs)
        self.nan_rows = (np.asarray(a_nan.any(axis=(1, 2)), dtype=np.bool_) if a_nan is not None
                         else np.zeros(a.shape[0], dtype=bool))
        self.nan_cols = (np.asarray(b_nan.any(axis=(0, 2)), dtype=np.bool_) if b_nan is not None
                         else np.zeros(b.shape[1], dtype=bool))
        # a range's third item is its operand's significand width; an operand without finite
        # non-zero values makes every product a zero, an infinity or invalid (width 0)
        width_a = 0 if range_a is None else min(significand_bits, range_a[2])
        width_b = 0 if range_b is None else min(significand_bits, range_b[2])
        product_bits = width_a + width_b
        self.short = product_bits <= 24  # one float64 add and one rounding suffice (fp32.add_short_values)
        if fast_eligible_ranges(range_a, range_b, product_bits):
            # (K, 2, M) and (K, 2, N): each step reads two contiguous rows
            self.fast = (
                np.ascontiguousarray(self.a_clean.view(np.float32).transpose(1, 2, 0)),
                np.ascontiguousarray(self.b_clean.view(np.float32).transpose(0, 2, 1)),
            )

    @property
    def tier(self) -> str:
        """The tier of the NaN-free part: "fast", "values" or "bits"."""
        return "fast" if self.fast is not None else "values" if self.split else "bits"

    def run_rows(self, c: np.ndarray, rows: slice) -> np.ndarray:
        """The whole schedule (every K block in order) for output rows ``rows``."""
        if not self.split:
            return self._schedule(c, self.a[rows], self.b, "bits")
        tier = self.tier
        if tier == "fast" and self.numerics.structure == "straight" and not _straight_c_fits(c, self.numerics):
            tier = "values"
        out = self._schedule(c, self.a_clean[rows], self.b_clean, tier, rows)
        nan_rows = self.nan_rows[rows]
        if self.any_nan_rows and nan_rows.any():
            out[nan_rows] = self._schedule(c[nan_rows], self.a[rows][nan_rows], self.b, "bits")
        if self.any_nan_cols:
            keep, cols = ~nan_rows, self.nan_cols
            out[np.ix_(keep, cols)] = self._schedule(c[keep][:, cols], self.a[rows][keep], self.b[:, cols], "bits")
        return out

    def _schedule(self, c: np.ndarray, a: np.ndarray, b: np.ndarray, tier: str,
                  rows: slice | None = None) -> np.ndarray:
        k_count = a.shape[1]
        fast = self.fast
        for k0 in range(0, k_count, BLOCK_DWORDS):
            block = slice(k0, min(k0 + BLOCK_DWORDS, k_count))
            if tier == "fast":
                assert fast is not None  # the fast tier is chosen only where the operands were prepared for it
                fast_block = _fast_sdm_block if self.numerics.structure == "sdm" else _fast_straight_block
                c = fast_block(c, fast[0][block, :, rows], fast[1][block], self.numerics)
            elif tier == "values":
                c = _values_block(c, a[:, block], b[block], self.numerics, self.input_daz, self.short)
            else:
                c = _bits_block(c, a[:, block], b[block], self.numerics, self.input_daz, self.acc_first)
        return np.ascontiguousarray(c, dtype=np.uint32)


def float_dot(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics, input_daz: bool,
              significand_bits: int = 24, acc_first: bool = False) -> np.ndarray:
    """C (M, N) fp32 bits plus the dot products of a (M, K, 2) and b (K, N, 2), per ``numerics``.

    K may exceed one instruction's 16 dwords: K is then consumed in blocks of
    16 in increasing order, each block one instruction whose C is the previous
    block's result (the matmul schedule). ``significand_bits`` is the width
    of the input format (8 bf16, 11 fp16; 24, the default, is always safe).
    ``acc_first``: the complex rows' NaN priority (see _bits_block).
    """
    with fp32.default_fp_env():
        plan = _FloatPlan(a, b, numerics, input_daz, significand_bits, acc_first)
        return plan.run_rows(np.asarray(c, dtype=np.uint32), slice(None))


def float_matmul(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics, input_daz: bool,
                 significand_bits: int, threads: int = 1,
                 acc_first: bool = False) -> np.ndarray:
    """float_dot over row chunks, optionally on ``threads`` threads (numpy releases the GIL in ufuncs).

    Rows are independent, so the split changes nothing in the bits; the chunks
    only bound the size of each step's temporaries.
    """
    m, n = c.shape
    rows_per_chunk = max(1, CHUNK_ELEMENTS // max(n, 1))
    if threads > 1:
        rows_per_chunk = min(rows_per_chunk, -(-m // threads))
    chunks = [slice(r, min(r + rows_per_chunk, m)) for r in range(0, m, rows_per_chunk)]
    with fp32.default_fp_env():
        plan = _FloatPlan(a, b, numerics, input_daz, significand_bits, acc_first)
        if len(chunks) == 1:  # one tile's worth: no chunk bookkeeping
            return plan.run_rows(c, slice(None))
    out = np.empty((m, n), dtype=np.uint32)

    def run(rows: slice) -> None:
        with fp32.default_fp_env():  # per thread: each thread has its own MXCSR
            out[rows] = plan.run_rows(c[rows], rows)

    if threads > 1 and len(chunks) > 1:
        # Imported here, not at the top: concurrent.futures (and logging, which it loads) register
        # at-fork hooks, and a registration during a first use that a fork waits for would get
        # its after-fork half without its before-fork half (pyamx._first_use).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(threads, len(chunks))) as pool:
            list(pool.map(run, chunks))
    else:
        for rows in chunks:
            run(rows)
    return out


def _words(c_bits: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
    """C as 4-byte words of ``dtype``, by reinterpreting its bits (float32 C is never converted)."""
    c_bits = np.ascontiguousarray(c_bits)
    if c_bits.dtype.itemsize != 4:
        raise TypeError(f"engine_dot: c_bits must hold 4-byte words, got dtype {c_bits.dtype}")
    words: np.ndarray = c_bits.view(dtype)
    return words


def engine_dot(op_name: str, c_bits: np.ndarray, a: np.ndarray, b_vnni: np.ndarray, k_dwords: int, threads: int,
               numerics: Numerics) -> np.ndarray:
    """The engine contract on the numpy engine: the whole matmul schedule of instruction ``op_name``.

    a: (M, Kd*lanes) raw input bits, row-major; b_vnni: (Kd, N*lanes) in the
    instruction's interleaved layout; c_bits: (M, N) uint32 (float) or int32.
    For every output element K is consumed in blocks of 16 dwords in
    increasing order, each block one instruction whose C is the previous
    block's result. Returns (M, N) uint32 bits or int32.
    """
    m, n = c_bits.shape
    if op_name in _FP8_OPS:
        if a.shape != (m, 4 * k_dwords) or b_vnni.shape != (k_dwords, 4 * n):
            raise ValueError(f"engine_dot: shapes a {a.shape}, b {b_vnni.shape}, c {c_bits.shape} do not match Kd={k_dwords}")
        from . import fp8

        return fp8.dot(_FP8_OPS[op_name], _words(c_bits, np.uint32), a.view(np.uint8).reshape(m, k_dwords, 4),
                       b_vnni.view(np.uint8).reshape(k_dwords, n, 4), numerics)
    from .complex_rows import fp16_operand, is_complex

    acc_first = is_complex(op_name)
    if acc_first:  # TDPFP16PS on a transformed A, with the accumulator's NaN first (complex_rows.py)
        a = fp16_operand(op_name, a)
    if (k_dwords <= BLOCK_DWORDS and m * n <= _ONE_TILE and op_name in _FLOAT_OPS
            and numerics.structure in _ONE_TILE_STRUCTURES
            and a.shape == (m, 2 * k_dwords) and b_vnni.shape == (k_dwords, 2 * n)):
        # one instruction: ordinary operands take a few float32 ufuncs (onetile.py proves why)
        fp16 = isa.BY_NAME[op_name].group != "bf16"
        out = one_tile(numerics.structure, fp16, _words(c_bits, np.uint32), a.view(np.uint16), b_vnni.view(np.uint16),
                       m, n, k_dwords)
        if out is not None:
            return out
    from ..table.bf16 import widen_bits
    from .fp16 import widen_fp16_bits

    if op_name in _FLOAT_OPS:
        if a.shape != (m, 2 * k_dwords) or b_vnni.shape != (k_dwords, 2 * n):
            raise ValueError(f"engine_dot: shapes a {a.shape}, b {b_vnni.shape}, c {c_bits.shape} do not match Kd={k_dwords}")
        if isa.BY_NAME[op_name].group == "bf16":
            a32, b32, input_daz, precision = widen_bits(a), widen_bits(b_vnni), numerics.input_daz, 8
        else:
            a32, b32, input_daz, precision = widen_fp16_bits(a), widen_fp16_bits(b_vnni), False, 11
        return float_matmul(_words(c_bits, np.uint32), a32.reshape(m, k_dwords, 2),
                            b32.reshape(k_dwords, n, 2), numerics, input_daz, precision, threads, acc_first)
    signed = isa.BY_NAME[op_name].signed if op_name in isa.BY_NAME else None
    if signed is not None:
        if a.shape != (m, 4 * k_dwords) or b_vnni.shape != (k_dwords, 4 * n):
            raise ValueError(f"engine_dot: shapes a {a.shape}, b {b_vnni.shape}, c {c_bits.shape} do not match Kd={k_dwords}")
        signed_a, signed_b = signed
        a8 = a.view(np.int8 if signed_a else np.uint8).reshape(m, k_dwords, 4)
        b8 = b_vnni.view(np.int8 if signed_b else np.uint8).reshape(k_dwords, n, 4)
        return integer_dot(_words(c_bits, np.int32), a8, b8)
    raise ValueError(f"engine_dot: unknown instruction {op_name!r}")


def integer_dot(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C (M, N) int32 plus byte dot products of a (M, K, 4) and b (K, N, 4), wrapping mod 2**32.

    ``a`` and ``b`` hold already sign- or zero-extended values. Any K: the
    schedule's per-instruction wrap-around sums equal one sum mod 2**32 (the
    integers mod 2**32 are a ring, so order and grouping are irrelevant).
    The sum itself runs as one float64 matrix product, which is exact: every
    product has |a*b| <= 255**2 < 2**16, so every partial sum in any order is
    an integer of magnitude below K * 2**16 < 2**53 for K < 2**37 values, and
    float64 represents those exactly (no rounding, whatever the BLAS order,
    FMA use or rounding mode).
    """
    m, k, q = a.shape
    n = b.shape[1]
    if k * q >= 2**37:
        raise ValueError(f"K = {k * q} int8 values exceeds the exact float64 bound 2**37 of the numpy engine")
    a2 = a.reshape(m, k * q).astype(np.float64)
    b2 = np.ascontiguousarray(np.transpose(b, (0, 2, 1))).reshape(k * q, n).astype(np.float64)
    products = (a2 @ b2).astype(np.int64)
    total = (c.astype(np.int64) + products) & 0xFFFFFFFF
    wrapped: npt.NDArray[np.int32] = total.astype(np.uint32).view(np.int32)
    return wrapped
