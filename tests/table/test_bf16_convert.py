"""bf16.from_float32: one correct rounding from float32 and float64, on every numpy from the declared floor."""

from __future__ import annotations

import bisect
from fractions import Fraction

import numpy as np
import pytest

from pyamx.table import bf16

# Every finite non-negative bf16 value, exactly, in order of its bits (which is the order of the values).
_POSITIVE = [Fraction(float(v)) for v in (np.arange(0x7F80, dtype=np.uint32) << 16).view(np.float32)]
_MAX = _POSITIVE[-1]
_OVERFLOW = _MAX + (_MAX - _POSITIVE[-2]) / 2  # from here on (ties included: 0x7F7F is odd) -> infinity


def _reference(x: float) -> int:
    """RNE to bf16 by exhaustive search over the exact values: independent of pyamx's bit tricks."""
    sign = 0x8000 if np.signbit(x) else 0
    if np.isnan(x):
        raise AssertionError("NaNs are checked separately")
    value = abs(Fraction(x)) if np.isfinite(x) else None
    if value is None or value >= _OVERFLOW:
        return sign | 0x7F80
    i = bisect.bisect_left(_POSITIVE, value)
    if i < len(_POSITIVE) and _POSITIVE[i] == value:
        return sign | i
    lo, hi = i - 1, i
    if hi == len(_POSITIVE):  # between the largest finite value and the overflow threshold
        return sign | lo
    below, above = value - _POSITIVE[lo], _POSITIVE[hi] - value
    pick = lo if below < above else hi if above < below else (lo if lo % 2 == 0 else hi)
    return sign | pick


def _adversarial_float64(rng, count):
    """Ties, one ulp around ties, denormals, the overflow edge, and random exponents."""
    base = (rng.integers(0, 0x7F80, count).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    ulp = np.spacing(base.astype(np.float32)).astype(np.float64) * 2**16  # one bf16 step (roughly; exact below)
    tie = base + ulp / 2
    nudges = rng.choice([-1, 0, 1], count) * np.spacing(tie)
    randoms = np.ldexp(rng.random(count) + 1.0, rng.integers(-140, 130, count))
    edges = np.array([float(_OVERFLOW), float(_OVERFLOW) - 2.0**75, float(_MAX), 2.0**-133, 2.0**-134,
                      2.0**-134 * (1 + 2**-40), 3 * 2.0**-135, 2.0**-126 - 2.0**-134, 2.0**-1074, 1e308, 0.0])
    values = np.concatenate([tie + nudges, randoms, edges])
    signs = rng.choice([-1.0, 1.0], values.size)
    return values * signs


def test_double_rounding_example_from_the_issue():
    assert int(bf16.from_float32(1 + 2**-8 + 2**-40)) == 0x3F81
    assert int(bf16.from_float32(np.float64(1 + 2**-8))) == 0x3F80  # the exact tie goes to even


def test_float64_rounds_once_like_the_exact_reference():
    values = _adversarial_float64(np.random.default_rng(2026), 1500)
    got = bf16.from_float32(values)
    assert got.dtype == np.uint16
    for x, bits in zip(values, got):
        assert int(bits) == _reference(float(x)), f"{float(x)!r}: got {int(bits):04x}, want {_reference(float(x)):04x}"


def test_float32_rounds_like_the_exact_reference():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    bits = bits[((bits >> 23) & 0xFF) != 0xFF]  # finite
    values = bits.view(np.float32)
    for x, got in zip(values, bf16.from_float32(values)):
        assert int(got) == _reference(float(x))


def test_float64_and_float32_agree_where_the_values_are_the_same():
    rng = np.random.default_rng(1)
    f32 = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        f64 = f32.astype(np.float64)  # exact, NaN payloads included (quieted)
    np.testing.assert_array_equal(bf16.from_float32(f64), bf16.from_float32(f32))


def test_nan_rule_keeps_sign_and_top_payload_bits_quieted():
    f64 = np.array([0x7FF0_0000_0000_0001, 0xFFF8_0000_0000_0000, 0x7FF4_0000_0000_0000,
                    0x7FFF_FFFF_FFFF_FFFF, 0xFFF0_2000_0000_0000], dtype=np.uint64).view(np.float64)
    assert [hex(int(b)) for b in bf16.from_float32(f64)] == ["0x7fc0", "0xffc0", "0x7fe0", "0x7fff", "0xffc1"]


@pytest.mark.parametrize("value", [1.5, np.float32(1.5), np.float64(1.5), np.array(1.5), np.array(1.5, np.float32),
                                   np.float16(1.5), 3])
def test_scalars_and_zero_d_arrays(value):
    out = bf16.from_float32(value)
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.uint16
    assert int(out) == 0x3FC0 if value != 3 else int(out) == 0x4040


def test_lists_keep_their_shape():
    out = bf16.from_float32([[1.0, -2.0], [0.5, float("inf")]])
    assert out.shape == (2, 2) and [hex(int(v)) for v in out.ravel()] == ["0x3f80", "0xc000", "0x3f00", "0x7f80"]


@pytest.mark.parametrize("bad, error", [(np.array([1 + 1j]), TypeError), (np.array(["1"]), TypeError),
                                        (np.array([2**60 + 1]), ValueError)])
def test_inputs_that_cannot_be_rounded_once_are_refused(bad, error):
    with pytest.raises(error):
        bf16.from_float32(bad)


# -- the one operand rule (pyamx._validate.require_array) ----------------------------------


class _Unconvertible:
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Got unsupported ScalarType BFloat16")  # what torch says for a bf16 tensor


@pytest.mark.parametrize("dtype", [np.uint16, np.int16, ">u2"])
def test_bf16_bits_are_not_rounded_again_as_integers(dtype):
    bits = bf16.from_float32(np.array([1.0, 2.0], np.float32)).astype(dtype)
    with pytest.raises(TypeError, match=r"from_float32: x has dtype .*bf16 bits.*to_float32"):
        bf16.from_float32(bits)


def test_ml_dtypes_bfloat16_is_not_rounded_again():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="from_float32: x has dtype bfloat16"):
        bf16.from_float32(np.ones(2, ml_dtypes.bfloat16))


@pytest.mark.parametrize("fn, words", [
    (bf16.from_float32, "from_float32: x"), (bf16.to_float32, "to_float32: bits"),
    (bf16.widen_bits, "widen_bits: bits"), (bf16.pack_pairs, "pack_pairs: b"), (bf16.unpack_pairs, "unpack_pairs"),
])
def test_a_failing_array_conversion_is_reported_by_the_function_with_the_recipe(fn, words):
    with pytest.raises(TypeError, match=words + r".*view\(torch.int16\)"):
        fn(_Unconvertible())


def test_widen_bits_checks_its_operand_like_to_float32():
    bits = bf16.from_float32(np.array([1.5, -0.25, np.inf], np.float32))
    want = bf16.widen_bits(bits)
    assert want.dtype == np.uint32 and np.array_equal(want.view(np.float32), [1.5, -0.25, np.inf])
    np.testing.assert_array_equal(bf16.widen_bits(bits.view(np.int16)), want)
    np.testing.assert_array_equal(bf16.widen_bits(bits.astype(">u2")), want)
    for bad in (bits.astype(np.float32), bits.astype(np.uint32), [16256, 16384]):
        with pytest.raises(TypeError, match="widen_bits: bits has dtype"):
            bf16.widen_bits(bad)


@pytest.mark.parametrize("dtype", [">f4", ">f8"])
def test_big_endian_floats_round_like_native_ones(dtype):
    values = np.array([1.0, -2.5, 1 + 2**-8 + 2**-20, 3.4e38, np.nan], np.float64)
    native = bf16.from_float32(values.astype("=" + dtype[1:]))
    np.testing.assert_array_equal(bf16.from_float32(values.astype(dtype)), native)
