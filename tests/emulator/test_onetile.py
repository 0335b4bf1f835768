"""The numpy engine's one-instruction path (pyamx/emulator/onetile.py) against the Fraction reference.

Each step of the proof in onetile.py is exercised here: products at the
exponent limits, lanes that round on ties, exact cancellation to +0, -0
operands, C at the bounds of condition (c), results landing exactly on
2**-126; and every case outside the conditions must be handed to the
general tiers (sdm_tile returns None) and still match the reference through
the public API. Compared as uint32.
"""

from __future__ import annotations


import numpy as np
import pytest

import pyamx
import reference
from mxcsr import caller_mxcsr, library
from pyamx.table import bf16
from pyamx.emulator import engine as _engine
from pyamx.emulator import instructions, onetile
from pyamx.tools.testing import _bf16, _fp32

SEED = 20261202


STRUCTURES = ("sdm", "straight")


def _reference(fp16, c, a, b, structure="sdm"):
    if fp16:
        assert structure == "sdm"  # the reference's fp16 entry runs the default model
        return np.asarray(reference.tdpfp16ps(c, a, b), dtype=np.uint64).astype(np.uint32)
    return np.asarray(reference.tdpbf16ps(c, a, b, structure=structure), dtype=np.uint64).astype(np.uint32)


def _fast(fp16, c, a, b, structure="sdm"):
    m, n = c.shape
    return onetile.one_tile(structure, fp16, np.ascontiguousarray(c, dtype=np.uint32), a, b, m, n, b.shape[0])


def _public(fp16, c, a, b, structure="sdm"):
    if structure != "sdm":
        return np.asarray(pyamx.emulator.tdpbf16ps(c, a, b, numerics=structure, engine="numpy")).view(np.uint32)
    fn = pyamx.tdpfp16ps if fp16 else pyamx.tdpbf16ps
    return np.asarray(fn(c, a, b, backend="emulator", engine="numpy")).view(np.uint32)


def _check(fp16, c, a, b, *, fast: bool):
    """The public numpy-engine result equals the reference for each structure the path runs
    (fp16: the default one); ``fast`` says whether onetile must take it."""
    for structure in STRUCTURES[:1] if fp16 else STRUCTURES:
        want = _reference(fp16, c, a, b, structure)
        got_fast = _fast(fp16, c, a, b, structure)
        if fast:
            assert got_fast is not None, "ordinary operands must take the one-instruction path"
            np.testing.assert_array_equal(got_fast.view(np.uint32), want, err_msg=structure)
        else:
            assert got_fast is None, "operands outside the proof's conditions must go to the general tiers"
        np.testing.assert_array_equal(_public(fp16, c, a, b, structure), want, err_msg=structure)


def _bf(values):
    return bf16.from_float32(np.asarray(values, dtype=np.float32))


def _f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


# -- ordinary data: the path is taken and exact ----------------------------------------------


@pytest.mark.parametrize("trial", range(12))
def test_bf16_random_shapes_take_the_path_and_match(trial):
    rng = np.random.default_rng([SEED, trial])
    m, k, n = (int(x) for x in rng.integers(1, 17, 3))
    if trial == 0:
        m = k = n = 16
    lo, hi = (71, 150) if trial % 2 else (120, 134)  # wide ranges still inside condition (b)
    a, b = _bf16(rng, (m, 2 * k), lo, hi), _bf16(rng, (k, 2 * n), lo, hi)
    c = _fp32(rng, (m, n), 24, 200)
    _check(False, c, a, b, fast=True)


@pytest.mark.parametrize("trial", range(8))
def test_fp16_every_finite_class_takes_the_path_and_matches(trial):
    rng = np.random.default_rng([SEED, 100 + trial])
    m, k, n = (int(x) for x in rng.integers(1, 17, 3))
    # any finite fp16 pattern: denormals, zeros of both signs, the largest values
    a = rng.integers(0, 0x7C00, (m, 2 * k), dtype=np.uint16) | (rng.integers(0, 2, (m, 2 * k), dtype=np.uint16) << 15)
    b = rng.integers(0, 0x7C00, (k, 2 * n), dtype=np.uint16) | (rng.integers(0, 2, (k, 2 * n), dtype=np.uint16) << 15)
    if trial % 2:
        a[rng.random(a.shape) < 0.5] &= 0x83FF  # many denormals and zeros
    c = _fp32(rng, (m, n), 24, 253)
    _check(True, c, a, b, fast=True)


def test_ties_round_to_even_in_the_lanes():
    # lane 0: 1 + 2**-24 is a tie (stays 1), then + 2**-24 again (still 1); lane 1: 1 + 3*2**-24 rounds up
    a = _bf([[1.0, 1.0, 2.0**-24, 3 * 2.0**-24, 2.0**-24, 0.0]])
    b = _bf([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    c = _f32_bits([[0.0]])
    _check(False, c, a, b, fast=True)
    # the closing additions tie too: even + odd = 1 + 2**-24, and C + t
    a = _bf([[1.0, 2.0**-24]])
    b = _bf([[1.0, 1.0]])
    _check(False, _f32_bits([[2.0**-23]]), a, b, fast=True)
    _check(False, _f32_bits([[-1.0]]), a, b, fast=True)


def test_exact_cancellation_and_zero_signs():
    # -0 products, lanes cancelling to exactly zero, C = -0: every zero comes out as the model says
    a = _bf([[-0.0, 3.0, 1.5, -1.5], [0.0, -0.0, -2.0, 2.0]])
    b = _bf([[5.0, -0.0], [1.0, 1.0]])
    for c in ([[-0.0], [-0.0]], [[0.0], [-0.0]], [[-1.5], [1.5]]):
        _check(False, _f32_bits(c), a, b, fast=True)
    # every product -0: the lanes still start at +0, so C = -0 gives +0
    a = _bf([[-0.0, -0.0]])
    b = _bf([[1.0, 1.0]])
    _check(False, _f32_bits([[-0.0]]), a, b, fast=True)
    # a or b all zeros: only C matters
    _check(False, _f32_bits([[-0.0, 2.0**-103]]), _bf([[0.0, -0.0]]), _bf([[7.0, -2.0, 1.0, 3.0]]), fast=True)


def test_exponent_sums_at_the_bounds_of_condition_b():
    # Ea_min + Eb_min = 142 exactly (products near 2**-110, quantum 2**-126)
    a = np.array([[(71 << 7) | 0x7F, (71 << 7) | 0x01]], dtype=np.uint16)
    b = np.array([[(71 << 7) | 0x55, 0x8000 | (71 << 7) | 0x7F]], dtype=np.uint16)
    _check(False, _f32_bits([[0.0]]), a, b, fast=True)
    # one exponent lower: outside, the general tiers decide
    a_low = a.copy()
    a_low[0, 0] = (70 << 7) | 0x7F
    _check(False, _f32_bits([[0.0]]), a_low, b, fast=False)
    # Ea_max + Eb_max = 370: sixteen same-sign products of nearly 2**118 per lane, no overflow
    big = np.full((16, 32), (185 << 7) | 0x7F, dtype=np.uint16)
    _check(False, np.zeros((16, 16), dtype=np.uint32), big, big.copy(), fast=True)
    # and C as large as condition (c) allows on top
    c = np.full((16, 16), (253 << 23) | 0x7FFFFF, dtype=np.uint32)
    _check(False, c, big, big.copy(), fast=True)
    # 371: outside
    bigger = big.copy()
    bigger[0, 0] = (186 << 7)
    _check(False, np.zeros((16, 16), dtype=np.uint32), bigger, big, fast=False)


def test_results_landing_on_the_smallest_normal():
    # C = 2**-103 + 2**-126, t = -2**-103: the result is exactly 2**-126, normal (not flushed)
    a = _bf([[2.0**-52, 0.0]])
    b = _bf([[-(2.0**-51), 1.0]])
    c = np.array([[(24 << 23) | 1]], dtype=np.uint32)
    assert float(c.view(np.float32)[0, 0]) == 2.0**-103 + 2.0**-126
    _check(False, c, a, b, fast=True)
    np.testing.assert_array_equal(_public(False, c, a, b), [[0x00800000]])
    # and C - t cancelling exactly: +0
    _check(False, np.array([[24 << 23]], dtype=np.uint32), a, b, fast=True)


# -- outside the conditions: handed to the general tiers, still exact ------------------------


_REJECTED_BF16 = {
    "a +inf": (0x7F80, None, None),
    "a NaN payload": (0x7FA1, None, None),
    "b -NaN": (None, 0xFFC3, None),
    "b -inf": (None, 0xFF80, None),
    "a denormal": (0x0041, None, None),
    "b -denormal": (None, 0x8001, None),
    "c NaN": (None, None, 0x7F812345),
    "c -inf": (None, None, 0xFF800000),
    "c denormal": (None, None, 0x00000001),
    "c below 2**-103": (None, None, (23 << 23) | 0x7FFFFF),
    "c at 2**127": (None, None, 254 << 23),
}


@pytest.mark.parametrize("case", list(_REJECTED_BF16))
def test_bf16_operands_outside_the_conditions_go_to_the_general_tiers(case):
    rng = np.random.default_rng([SEED, 7, list(_REJECTED_BF16).index(case)])
    a_bits, b_bits, c_bits = _REJECTED_BF16[case]
    a, b, c = _bf16(rng, (4, 6), 120, 134), _bf16(rng, (3, 10), 120, 134), _fp32(rng, (4, 5), 120, 134)
    if a_bits is not None:
        a[1, 2] = a_bits
    if b_bits is not None:
        b[2, 3] = b_bits
    if c_bits is not None:
        c[3, 4] = c_bits
    _check(False, c, a, b, fast=False)


@pytest.mark.parametrize("bits", [0x7C00, 0xFC00, 0x7C01, 0xFE00, 0x7FFF])
def test_fp16_infinities_and_nans_go_to_the_general_tiers(bits):
    rng = np.random.default_rng([SEED, 8, bits])
    a = rng.integers(0, 0x7C00, (3, 4), dtype=np.uint16)
    b = rng.integers(0, 0x7C00, (2, 6), dtype=np.uint16)
    a[1, 1] = bits
    _check(True, _fp32(rng, (3, 3), 100, 140), a, b, fast=False)


def test_products_beyond_one_instruction_are_not_taken():
    # the engine gives onetile only K <= 16 dwords and at most 16 x 16 outputs (matmul's larger
    # blocks keep the general tiers, whose temporaries are bounded): the result is the same either way
    rng = np.random.default_rng([SEED, 9])
    a, b = _bf16(rng, (3, 40), 120, 134), _bf16(rng, (20, 4), 120, 134)
    c = _fp32(rng, (3, 2), 120, 134)
    got = _engine.resolve("numpy").dot("tdpbf16ps", c, a, b, 20).view(np.uint32)
    first_block = _reference(False, c, a[:, :32], b[:16])
    np.testing.assert_array_equal(got, _reference(False, first_block, a[:, 32:], b[16:]))


# -- the steps the proof leans on ----------------------------------------------------------------


def test_fp16_to_float32_conversion_is_exact_for_every_finite_pattern():
    bits = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    finite = (bits & 0x7FFF) < 0x7C00
    got = bits[finite].view(np.float16).astype(np.float32).view(np.uint32)
    # independent decode: sign, then mantissa * 2**(e - 25) (denormals: e = 1), exact as Fractions would say
    b = bits[finite].astype(np.int64)
    e, mant = (b >> 10) & 0x1F, b & 0x3FF
    value = np.where(e == 0, mant, mant | 0x400) * np.exp2(np.where(e == 0, 1, e) - 25.0)
    want = np.where(b >> 15 == 1, -value, value).astype(np.float32).view(np.uint32)  # float64 -> exact fp32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, instructions.widen_fp16_bits(bits[finite]))


def test_bf16_widening_by_shift_is_the_top_half():
    bits = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    got = np.left_shift(bits.T, onetile._WIDEN, dtype=np.uint32)
    np.testing.assert_array_equal(got, bits.T.astype(np.uint32) * 65536)


# -- the caller's floating-point environment ----------------------------------------------------


@pytest.mark.parametrize("value", [0x1F80 | 0x6000, 0x1F80 | 0x2000, 0x1F80 | 0x8040, 0x1F80 | 0xE040])
def test_the_path_ignores_the_callers_mxcsr(value):
    lib = library()
    rng = np.random.default_rng([SEED, 10])
    cases = []
    for fp16 in (False, True):
        for _ in range(4):
            m, k, n = (int(x) for x in rng.integers(1, 17, 3))
            if fp16:
                a = rng.integers(0, 0x7C00, (m, 2 * k), dtype=np.uint16)
                b = rng.integers(0, 0x7C00, (k, 2 * n), dtype=np.uint16) | np.uint16(0x8000)
            else:
                a, b = _bf16(rng, (m, 2 * k), 100, 150), _bf16(rng, (k, 2 * n), 100, 150)
            cases.append((fp16, _fp32(rng, (m, n), 24, 200), a, b))
    for fp16, c, a, b in cases:
        assert _fast(fp16, c, a, b) is not None
        want = _reference(fp16, c, a, b)
        with caller_mxcsr(value):
            got = _public(fp16, c, a, b)
            assert lib.pyamx_get_mxcsr() & ~0x3F == value
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("options", [dict(tininess="before"), dict(dest_daz=False), dict(input_daz=False),
                                     dict(nan="canonical", tininess="before", dest_daz=False, input_daz=False)])
def test_the_other_sdm_options_are_moot_under_the_conditions(options):
    # the path runs for every Numerics with the sdm structure; its proof says no option but the
    # structure can act on such operands, so the reference with each option must agree
    numerics = pyamx.Numerics(**options)
    rng = np.random.default_rng([SEED, 11, len(options)])
    for _ in range(4):
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        a, b = _bf16(rng, (m, 2 * k), 71, 150), _bf16(rng, (k, 2 * n), 71, 150)
        c = _fp32(rng, (m, n), 24, 253)
        assert _fast(False, c, a, b) is not None
        ref_options = {key: value for key, value in options.items() if key != "nan"}
        want = np.asarray(reference.tdpbf16ps(c, a, b, **ref_options), dtype=np.uint64).astype(np.uint32)
        got = pyamx.emulator.tdpbf16ps(c, a, b, numerics=numerics, engine="numpy").view(np.uint32)
        np.testing.assert_array_equal(got, want)
