"""fp32 arithmetic on raw bit patterns, vectorized, with the AMX rules.

Every function takes and returns uint32 arrays (numpy broadcasting applies)
so NaN payloads and zero signs survive untouched. numpy's float arithmetic
follows the calling thread's floating-point environment (on x86 the MXCSR
rounding mode, FTZ and DAZ), so the engine runs inside
:func:`default_fp_env`, which sets IEEE defaults and restores the caller's.

Why float64 gives exact fp32 results: the product of two fp32 values (24-bit
significands) has at most 48 significant bits and an exponent inside float64's
range, so it is exact. The sum ``p + acc`` is computed as float64 plus its
exact error (TwoSum); folding the error into the last bit ("round to odd")
makes the later rounding to 24 bits correct, because 53 >= 24 + 2. The
final rounding scales tiny values into the normal range first, so FTZ can
look at the result rounded with an unbounded exponent (x86 detects tininess
after rounding).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from .. import _fpenv

SIGN = np.uint32(0x80000000)
EXPONENT = np.uint32(0x7F800000)
MANTISSA = np.uint32(0x007FFFFF)
QUIET_BIT = np.uint32(0x00400000)
X86_DEFAULT_NAN = np.uint32(0xFFC00000)
CANONICAL_NAN = np.uint32(0x7FC00000)
MIN_NORMAL = 2.0**-126
# Scaling by 2**192 moves every value that can reach the FTZ decision (down
# to 2**-298, products of two bf16 denormals) into fp32's normal range.
_TINY_SCALE = 2.0**192


#: the caller's MXCSR (a -ffast-math library sets FTZ/DAZ on load, a user may set round toward
#: zero) must not leak into the float32/float64 steps: the AMX rules (FTZ, DAZ, RNE) are applied
#: explicitly by this module, under IEEE defaults that pyamx._fpenv sets and restores.
default_fp_env = _fpenv.default_environment


def daz32(values: npt.ArrayLike) -> np.ndarray:
    """fp32 bits with denormals replaced by the zero of their sign."""
    bits = np.asarray(values, dtype=np.uint32)
    flushed: np.ndarray = np.where((bits & EXPONENT) == 0, bits & SIGN, bits)
    return flushed


def is_nan(values: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    bits = np.asarray(values, dtype=np.uint32)
    nan: npt.NDArray[np.bool_] = (bits & ~SIGN) > EXPONENT
    return nan


def to_float64(values: npt.ArrayLike, daz: bool) -> npt.NDArray[np.float64]:
    """The value of fp32 bit patterns as float64; denormals become signed zeros under DAZ."""
    bits = np.asarray(values, dtype=np.uint32)
    if daz:
        bits = np.where((bits & EXPONENT) == 0, bits & SIGN, bits)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens quietly; its bits are kept elsewhere
        return bits.view(np.float32).astype(np.float64)


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(x + y) and the exact error e (x + y == s + e); e = 0 where s is not finite."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = x + y
        y_virtual = s - x
        x_virtual = s - y_virtual
        e = (x - x_virtual) + (y - y_virtual)
    return s, np.where(np.isfinite(s), e, 0.0)


def round_to_fp32(s: np.ndarray, e: np.ndarray, tininess: str) -> np.ndarray:
    """Round the exact value ``s + e`` (float64 pair) to fp32 bits under RNE and FTZ."""
    bits: npt.NDArray[np.uint32] = np.ascontiguousarray(round_to_fp32_values(s, e, tininess)).view(np.uint32)
    return bits


def round_to_fp32_values(s: np.ndarray, e: np.ndarray | None, tininess: str) -> np.ndarray:
    """As round_to_fp32, returning float32 values (NaNs come out as whatever float64 had)."""
    s = np.asarray(s, dtype=np.float64)
    s_bits = s.view(np.uint64)
    # Round to odd: a lost error forces the last bit on, so the true value is
    # never mistaken for a tie by the second rounding. (e None: s is exact or
    # its rounding is innocuous, see add_short_values.)
    needs_odd = False if e is None else (e != 0) & ((s_bits & np.uint64(1)) == 0)
    if np.any(needs_odd):
        assert e is not None  # needs_odd is False without an error term
        away_from_zero = np.signbit(e) == np.signbit(s)
        s_bits = np.where(needs_odd, np.where(away_from_zero, s_bits + np.uint64(1), s_bits - np.uint64(1)), s_bits)
        s = s_bits.view(np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        rounded = s.astype(np.float32)
    tiny_range = np.abs(s) < MIN_NORMAL
    if tiny_range.any():
        if tininess == "after":
            scaled = (np.where(tiny_range, s, 0.0) * _TINY_SCALE).astype(np.float32)
            reaches_min_normal = np.abs(scaled) >= np.float32(MIN_NORMAL * _TINY_SCALE)
        else:
            reaches_min_normal = np.zeros_like(tiny_range)
        flushed = np.where(reaches_min_normal, np.copysign(MIN_NORMAL, s), np.copysign(0.0, s)).astype(np.float32)
        rounded = np.where(tiny_range, flushed, rounded)
    return rounded


def add_values(x: np.ndarray, y: np.ndarray, tininess: str) -> np.ndarray:
    """fp32 ``x + y`` on float64 values that are exact fp32 numbers (no DAZ, NaNs as float64 makes them)."""
    return round_to_fp32_values(*_two_sum(x, y), tininess).astype(np.float64)


# When is one float64 addition followed by one rounding to fp32 the correctly
# rounded fp32 sum? When both addends have at most 24 significant bits (fp32
# numbers, and products of two bf16 (16 bits) or two fp16 (22 bits) values),
# whatever their exponents (inside float64's normal range, which holds every
# such value and product here: |x| >= 2**-266). Proof: let |u| >= |v| > 0,
# 2**e <= |u| < 2**(e+1), ulp = 2**(e-23) (u is a multiple of it).
#  - |v| >= 2**(e-28): v's lowest bit is >= 2**(e-28-23), so u + v is a
#    multiple of 2**(e-51) below 2**(e+2) in magnitude: at most 53 bits, and
#    float64 adds it exactly. One rounding.
#  - |v| < 2**(e-28) = ulp/32: u + v lies within ulp/32 of u, while the
#    nearest rounding boundaries (midpoints) are at least ulp/4 from u (ulp/4
#    below a power of two). So u + v rounds to u; fl64(u + v) lies between u
#    and u + v (u is a float64 and rounding is monotone), so it rounds to u
#    too. The roundings agree with an unbounded exponent as well, so the
#    tininess (FTZ) decision is the same.
# It fails for wider addends: u = 1, v = 2**-24 * (1 + 2**-47) (a 48-bit
# product of two fp32 values) rounds up exactly, but fl64 drops 2**-71 and
# leaves a tie that rounds to even (tests/emulator/test_matmul_engine.py shows both).
# Generic fp32 products therefore keep the exact TwoSum path above.


def add_short_values(x: np.ndarray, y: np.ndarray, tininess: str) -> np.ndarray:
    """fp32 ``x + y`` for float64 values of at most 24 significant bits each: one float64 add, one rounding."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = x + y
    return round_to_fp32_values(s, None, tininess).astype(np.float64)


def select_nan(result: np.ndarray, operands: Sequence[npt.ArrayLike], rule: str) -> np.ndarray:
    """Replace NaN results by the NaN that ``rule`` prescribes (see Numerics.nan)."""
    result_nan = is_nan(result)
    if not result_nan.any():
        return result
    if rule == "default":
        return np.where(result_nan, X86_DEFAULT_NAN, result).astype(np.uint32)
    if rule == "canonical":
        return np.where(result_nan, CANONICAL_NAN, result).astype(np.uint32)
    chosen: np.ndarray | np.uint32 = X86_DEFAULT_NAN  # invalid operation: no NaN operand
    for operand in reversed(operands):  # the first NaN operand wins
        operand = np.asarray(operand, dtype=np.uint32)
        chosen = np.where(is_nan(operand), operand | QUIET_BIT, chosen)
    return np.where(result_nan, chosen, result).astype(np.uint32)


def fma32(a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike, *, tininess: str = "after", nan: str = "x86",
          daz_ab: bool = True, daz_c: bool = True,
          acc_first: bool = False) -> np.ndarray:
    """fp32 ``a * b + c`` with one rounding; operands in NaN priority order a, b, c (c, a, b with ``acc_first``)."""
    with np.errstate(invalid="ignore"):  # inf * 0 is resolved by select_nan
        p = to_float64(a, daz_ab) * to_float64(b, daz_ab)  # exact, see module docstring
    s, e = _two_sum(p, to_float64(c, daz_c))
    return select_nan(round_to_fp32(s, e, tininess), (c, a, b) if acc_first else (a, b, c), nan)


def add32(x: npt.ArrayLike, y: npt.ArrayLike, *, tininess: str = "after", nan: str = "x86", daz_x: bool = True,
          daz_y: bool = True) -> np.ndarray:
    """fp32 ``x + y``; NaN priority x, y."""
    s, e = _two_sum(to_float64(x, daz_x), to_float64(y, daz_y))
    return select_nan(round_to_fp32(s, e, tininess), (x, y), nan)


def _round_integer_to_fp32(total: int, exponent: int, tininess: str) -> int:
    """fp32 bits of ``total * 2**exponent`` (total != 0), RNE with FTZ."""
    sign = 0x80000000 if total < 0 else 0
    magnitude = abs(total)
    if tininess == "before" and magnitude.bit_length() - 1 + exponent < -126:
        return sign
    drop = magnitude.bit_length() - 24
    if drop > 0:
        kept, rest = magnitude >> drop, magnitude & ((1 << drop) - 1)
        half = 1 << (drop - 1)
        if rest > half or (rest == half and kept & 1):
            kept += 1
        magnitude, exponent = kept, exponent + drop
    top = magnitude.bit_length() - 1 + exponent  # exponent of the leading bit
    if top < -126:
        return sign
    if top > 127:
        return sign | 0x7F800000
    value = np.float32(np.ldexp(float(magnitude), exponent))  # exact: 24 bits, normal range
    return sign | int(value.view(np.uint32))


_round_integer_ufunc = np.frompyfunc(_round_integer_to_fp32, 3, 1)


def exact_sum(terms: Iterable[npt.ArrayLike], *, tininess: str, nan: str,
              nan_operands: Sequence[npt.ArrayLike]) -> np.ndarray:
    """Sum float64 arrays ``terms`` (each value exact) with a single fp32 rounding.

    Used by the "fused_pair" and "wide" structures. Finite sums run in Python
    integers (a sum of fp32-range products spans ~560 bits); infinities and
    NaNs take float64's answer, whose special-value rules are IEEE's. An exact
    zero is -0 only when every term is -0, as a chain of IEEE additions gives.
    """
    terms = np.broadcast_arrays(*[np.asarray(t, dtype=np.float64) for t in terms])
    stack = np.stack(terms)
    finite = np.isfinite(stack).all(axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        special = stack.sum(axis=0).astype(np.float32).view(np.uint32)
    mantissas, exponents = np.frexp(np.where(np.isfinite(stack), stack, 0.0))
    integers = (mantissas * 2.0**53).astype(np.int64).astype(object)
    base = -1200  # below every exponent a product of fp32 values can have
    shifts = (exponents.astype(np.int64) - 53 - base).astype(object)
    total = (integers * (2 ** shifts)).sum(axis=0)
    nonzero = finite & (total != 0)
    # an array in, an array out: numpy types a frompyfunc ufunc's call as possibly returning a scalar
    rounded = _round_integer_ufunc(np.where(nonzero, total, 1), base,  # type: ignore[union-attr]
                                   tininess).astype(np.uint64)
    result = np.where(
        nonzero,
        rounded.astype(np.uint32),
        special,
    )
    all_negative_zero = np.signbit(stack).all(axis=0)
    exact_zero = finite & (total == 0)
    result = np.where(exact_zero, np.where(all_negative_zero, SIGN, np.uint32(0)), result).astype(np.uint32)
    return select_nan(result, nan_operands, nan)
