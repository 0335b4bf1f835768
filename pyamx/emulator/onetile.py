"""One float dot-product instruction (sdm or straight structure) on ordinary data, in a few numpy calls.

The numpy engine's general tiers (pyamx/emulator/dot.py) prepare every
operand for any schedule; for one instruction that preparation costs more
than the arithmetic. Here the operands are scanned on their 16-bit patterns
and, when they are ordinary (the conditions below), the instruction is

    sdm:       lanes = +0 + P[0] + P[1] + ... + P[K-1]    (float32, in that order)
               result = C + (lanes[even] + lanes[odd])
    straight:  result = C + P[0][even] + P[0][odd] + P[1][even] + ...

with P[k] the float32 products of dword k. Anything else returns None and
the caller runs the general tiers, which hold every rule of Numerics.

Why these float32 operations give the model's bits (docs/semantics.md, default
structure "sdm": per output two fp32 lanes from +0, one fma32 per dword,
then add32(C, add32(even, odd)); RNE, DAZ, FTZ after rounding, x86 NaNs).

Conditions, read from the bit patterns (E: the fp32 biased exponent field of
a value widened to fp32; P: significand width, 8 for bf16, 11 for fp16):

  (a) a and b: no infinity, no NaN; bf16 also no denormal (fp16 denormals
      are honoured by the model and are normal fp32 numbers once widened);
  (b) over the non-zero values: Ea_min + Eb_min >= 126 + Pa + Pb, and
      Ea_max + Eb_max <= 370 (always true for fp16: 103 <= E <= 142);
  (c) C: no infinity, no NaN, and every non-zero |C| has 24 <= Ec <= 253,
      i.e. 2**-103 <= |C| < 2**127 (so no denormal either).

Proof, with Q = 2**(Ea_min + Eb_min - 252 - Pa - Pb) >= 2**-126 (by (b)):

  1. Every value x of a or b is a multiple of 2**(Ex - 126 - P) with at most
     P significant bits, so every product is 0 or a multiple of Q with at
     most Pa + Pb <= 22 bits and 2**-126 <= Q <= |p| < 2**(Ea + Eb - 252)
     <= 2**118: an fp32 number. float32 multiplication is exact.
  2. Lanes are multiples of Q (induction: +0 is; a sum of two multiples of Q
     is one; rounding it either keeps it or moves it to a multiple of its
     ulp, a power of two above Q). So a non-zero lane, and its exact sum
     before rounding, is >= Q >= 2**-126 in magnitude: nothing is ever tiny,
     FTZ and DAZ never act, tininess never matters. The model's fma32 is
     then round(p + lane) with p exact: float32 addition (RNE, the caller
     runs this under the default floating-point environment).
  3. |lane| <= 16 * 2**118 * (1 + 2**-23)**16 < 2**123: no overflow, so no
     infinity and no NaN ever arises (no inf * 0, no inf - inf).
  4. Zero signs: a lane starts at +0 and IEEE addition gives -0 only for
     -0 + -0, so a lane is never -0; +0 + P[0] is what fma32(a, b, +0)
     gives, also for a -0 product. even + odd is never -0 either.
  5. even + odd: multiples of Q, below 2**124: exact float32 addition, not
     tiny, finite.
  6. C + t: C is a multiple of its ulp 2**(Ec - 150) >= 2**-126 by (c), t a
     multiple of Q, so C + t is 0 or at least 2**-126: never tiny. dest DAZ
     has nothing to flush (no denormal C). |C + t| < 2**127 + 2**124 rounds
     to a finite value. An exact zero is +0 (t is never -0), as add32 gives.
  7. The "straight" structure (one accumulator from C; per dword the even,
     then the odd product, each an fma32): by (c) C is a multiple of
     2**-126 and every product one of Q, a power of two >= 2**-126, so
     every accumulator value is a multiple of 2**-126 (the induction of 2):
     never tiny, and |acc| < 2**127 + 32 * 2**118 stays finite. With exact
     products each fma32 is one float32 addition, zero signs included (the
     exact product's sign is float32's). The chain -0 + C + P[0] + P[1] + ...
     starts with -0 + C, which is C for every C (-0 + -0 = -0,
     -0 + +0 = +0).

So every open point of Numerics except the structure (tininess, dest_daz,
input_daz, nan) is moot under the conditions, and no floating-point
exception other than inexact is raised (no np.errstate needed).
tests/emulator/test_onetile.py holds this against tests/reference.py on random and
adversarial data, and checks that every case outside the conditions is
sent to the general tiers.
"""

from __future__ import annotations

from typing import Callable, Tuple, Union

import numpy as np
import numpy.typing as npt

#: (Emin, Emax) of bf16 operands over their non-zero values; () when all are zero
Exponents = Union[Tuple[int, int], Tuple[()]]
Float32s = npt.NDArray[np.float32]

_U16_MAGNITUDE = np.uint16(0x7FFF)
_U32_MAGNITUDE = np.uint32(0x7FFFFFFF)
_ONE16, _ONE32 = np.uint16(1), np.uint32(1)
_BF16_INF = 0x7F80  # bf16 magnitudes >= this are infinities or NaNs
_BF16_MIN_NORMAL = 0x0080
_FP16_INF = 0x7C00
_C_MIN = 24 << 23  # smallest allowed non-zero |C| bits: 2**-103, condition (c)
_C_LIMIT = 254 << 23  # |C| bits must stay below: 2**127
_ZERO32 = np.float32(0.0)
_NEGATIVE_ZERO32 = np.float32(-0.0)
_WIDEN = np.uint32(16)


def _bf16_exponents(bits: np.ndarray) -> Exponents | None:
    """(Emin, Emax) over the non-zero values, () when all are zero, None outside condition (a)."""
    magnitude = np.bitwise_and(bits, _U16_MAGNITUDE)
    largest = int(magnitude.max())
    if largest >= _BF16_INF:
        return None
    smallest = int(np.subtract(magnitude, _ONE16).min()) + 1  # zeros wrap to 0xFFFF: ignored
    if smallest > 0xFFFF:
        return ()
    if smallest < _BF16_MIN_NORMAL:
        return None  # a denormal: input DAZ (or its absence) decides, the general tiers apply it
    return smallest >> 7, largest >> 7


def _fp16_finite(bits: np.ndarray) -> bool:
    return int(np.bitwise_and(bits, _U16_MAGNITUDE).max()) < _FP16_INF


def _c_ordinary(c_bits: np.ndarray) -> bool:
    """Condition (c) on C's fp32 bits."""
    magnitude = np.bitwise_and(c_bits, _U32_MAGNITUDE)
    if int(magnitude.max()) >= _C_LIMIT:
        return False
    return int(np.subtract(magnitude, _ONE32).min()) + 1 >= _C_MIN  # zeros wrap: ignored


def bf16_exponents_fit(range_a: Exponents | None, range_b: Exponents | None) -> bool:
    """Condition (b) for bf16 operands (Pa + Pb = 16); ranges as :func:`_bf16_exponents` gives them."""
    if range_a is None or range_b is None:
        return False
    if not range_a or not range_b:
        return True  # every product is a zero
    return range_a[0] + range_b[0] >= 126 + 16 and range_a[1] + range_b[1] <= 370


def _chain(rows: Float32s, initial: np.float32) -> Float32s:
    """initial + R[0] + R[1] + ... per column of the C-contiguous (R, W) float32 ``rows``, in that order."""
    count, width = rows.shape
    if _sequential_reduce(count, width, initial):
        return _ordered_reduce(rows, initial)
    out: Float32s = np.add(rows[0], initial)
    for r in range(1, count):
        np.add(out, rows[r], out=out)
    return out


# np.add.reduce over the outer axis of a C-contiguous (R, W) array adds row after row into the
# output (numpy sums pairwise only along the fast axis, as np.sum's documentation says), one
# ufunc call instead of R. That is numpy's implementation, not a promise, so each (R, W, initial)
# is checked once against the explicit chain on data where any other order, grouping or start
# shows (all -0, ties a different grouping would break, random signs and exponents) before it
# is used.

_REDUCE_OK: dict[tuple[int, int, bool], bool] = {}


def _sequential_reduce(count: int, width: int, initial: np.float32) -> bool:
    key = (count, width, bool(np.signbit(initial)))
    ok = _REDUCE_OK.get(key)
    if ok is None:
        ok = _REDUCE_OK[key] = _probe_reduce(count, width, initial)
    return ok


def _ordered_reduce(rows: Float32s, initial: np.float32) -> Float32s:
    # numpy 2.5's stubs take no numpy scalar as initial (its runtime does, and a Python float would
    # not keep the float32 value's type); unused-ignore: numpy < 2.5's accept it
    total: Float32s = np.add.reduce(rows, axis=0, initial=initial)  # type: ignore[call-overload, unused-ignore]
    return total


def _probe_reduce(count: int, width: int, initial: np.float32,
                  reduce: Callable[[Float32s, np.float32], Float32s] = _ordered_reduce) -> bool:
    """Whether ``reduce(rows, initial)`` of (count, width) float32 rows is the explicit chain (tests pass others)."""
    rng = np.random.default_rng(count * 1000 + width)
    # all -0: the sum is +0 from +0 and -0 from -0, so another start shows
    trials = [np.full((count, width), -0.0, dtype=np.float32)]
    ties = np.full((count, width), 2.0**-24, dtype=np.float32)
    ties[0] = 1.0  # 1 + 2**-24 ties to 1 every step; any earlier grouping of the small ones does not
    trials.append(ties)
    for _ in range(8):
        trials.append((rng.choice((-1.0, 1.0), (count, width)) * np.exp2(rng.integers(-30, 30, (count, width)))
                       * rng.uniform(1, 2, (count, width))).astype(np.float32))
    for data in trials:
        want = np.add(data[0], initial)
        for r in range(1, count):
            np.add(want, data[r], out=want)
        got = reduce(np.ascontiguousarray(data), initial)
        if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            return False
    return True


def _widened(fp16: bool, a: np.ndarray, b: np.ndarray, m: int, n: int, kd: int) -> Float32s | None:
    """(2K, M + N) float32 values, row 2k + l = lane l of dword k (a's, then b's), or None (conditions (a), (b))."""
    # One buffer for both operands: one scan and one widening serve a and b.
    lanes = np.empty((kd, 2, m + n), dtype=np.uint16)
    lanes[:, :, :m] = a.reshape(m, kd, 2).transpose(1, 2, 0)
    lanes[:, :, m:] = b.reshape(kd, n, 2).transpose(0, 2, 1)
    ab = lanes.reshape(2 * kd, m + n)
    if fp16:
        if not _fp16_finite(ab):
            return None
        return ab.view(np.float16).astype(np.float32)  # every fp16 number is an fp32 number: exact
    both = _bf16_exponents(ab)  # one scan of both: the joint range implies condition (b)...
    if not bf16_exponents_fit(both, both) and not bf16_exponents_fit(_bf16_exponents(ab[:, :m]),
                                                                     _bf16_exponents(ab[:, m:])):
        return None  # ...and only where it does not are the two read apart
    widened: Float32s = np.left_shift(ab, _WIDEN, dtype=np.uint32).view(np.float32)  # bf16: the top half of fp32
    return widened


def one_tile(structure: str, fp16: bool, c_bits: np.ndarray, a: np.ndarray, b: np.ndarray, m: int, n: int,
             kd: int) -> npt.NDArray[np.uint32] | None:
    """The instruction's (M, N) uint32 result bits, or None when the operands need the general tiers.

    ``structure``: ``"sdm"`` or ``"straight"``. ``c_bits`` (M, N) uint32,
    ``a`` (M, 2K) and ``b`` (K, 2N) uint16 bits (b pair-interleaved), K =
    ``kd`` <= 16. Runs under the default floating-point environment (the
    caller's job: Engine._numpy_dot).
    """
    if not _c_ordinary(c_bits):
        return None
    wide = _widened(fp16, a, b, m, n, kd)
    if wide is None:
        return None
    if structure == "straight":  # C, then per dword the even and the odd product (step 7)
        rows = np.empty((2 * kd + 1, m, n), dtype=np.float32)
        rows[0] = c_bits.view(np.float32)
        np.multiply(wide[:, :m, None], wide[:, None, m:], out=rows[1:])  # exact (step 1)
        return _chain(rows.reshape(2 * kd + 1, m * n), _NEGATIVE_ZERO32).reshape(m, n).view(np.uint32)
    products = np.multiply(wide[:, :m, None], wide[:, None, m:])  # (2K, M, N): exact (step 1)
    lanes = _chain(products.reshape(kd, 2 * m * n), _ZERO32).reshape(2, m, n)  # from +0 (step 4)
    total: Float32s = np.add(c_bits.view(np.float32), np.add(lanes[0], lanes[1]))
    return total.view(np.uint32)


def sdm_tile(fp16: bool, c_bits: np.ndarray, a: np.ndarray, b: np.ndarray, m: int, n: int,
             kd: int) -> npt.NDArray[np.uint32] | None:
    """:func:`one_tile` of the default structure."""
    return one_tile("sdm", fp16, c_bits, a, b, m, n, kd)
