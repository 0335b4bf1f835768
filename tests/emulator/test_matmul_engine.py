"""The numpy engine's exactness arguments, each checked before the engine relies on it.

pyamx/emulator/dot.py runs ordinary data in plain float32 ufuncs (the fast
tier) after an exponent pre-scan; these tests check the facts that proof
uses, the pre-scan's boundaries, that the three tiers give the same bits,
and that the caller's floating-point environment does not leak in.
"""

from __future__ import annotations

import ctypes
import importlib
import ctypes.util
import platform
import sys

import numpy as np
import pytest

import pyamx
import reference
from pyamx import _fpenv, emulator
from pyamx.table import bf16
from pyamx.emulator import dot, fp32
from pyamx.emulator.numerics import Numerics

SEED = 20261211


def _bf16_from_fields(sign, exponent, mantissa):
    return ((np.asarray(sign, np.uint16) << 15) | (np.asarray(exponent, np.uint16) << 7) | np.asarray(mantissa, np.uint16)).astype(np.uint16)


@pytest.mark.parametrize("e_sum", [100, 120, 127, 128, 129, 141, 142, 200, 379, 380, 381, 382])
def test_bf16_product_is_exact_in_float32_exactly_inside_the_normal_range(e_sum):
    """Every pair of 8-bit significands at exponent fields summing to ``e_sum``: products in [2**(e_sum-254), 2**(e_sum-252))."""
    mantissas = np.arange(128, dtype=np.uint16)
    ea = min(e_sum - 1, 254)
    eb = e_sum - ea
    a = bf16.to_float32(_bf16_from_fields(0, ea, mantissas))[:, None]
    b = bf16.to_float32(_bf16_from_fields(0, eb, mantissas))[None, :]
    with np.errstate(over="ignore", under="ignore"):
        single = (a * b).astype(np.float64)
    exact = a.astype(np.float64) * b.astype(np.float64)
    in_range = (exact >= 2.0**-126) & (exact < 2.0**128)
    assert (single[in_range] == exact[in_range]).all()
    # outside it a float32 product is a denormal (tiny: FTZ acts in the model), loses bits, or overflows
    if e_sum in (100, 382):
        assert (single != exact).any()
    # all of which the pre-scan keeps away: its conditions on the exponent fields
    assert dot.fast_eligible(np.array([ea << 23], np.uint32), np.array([eb << 23], np.uint32), 8) == (
        e_sum >= 142 and e_sum <= 380)


def test_fp16_products_are_always_exact_in_float32():
    """Every fp16 significand at the extreme exponents (denormals included): the fast tier needs no scan for fp16."""
    mantissas = np.arange(1024, dtype=np.uint16)
    smallest = mantissas  # denormals: mantissa * 2**-24
    largest = (np.uint16(30) << 10) | mantissas  # up to 65504
    for x in (smallest, largest):
        for y in (smallest, largest):
            xv = x.view(np.float16).astype(np.float32)[:, None]
            yv = y.view(np.float16).astype(np.float32)[None, :]
            assert ((xv * yv).astype(np.float64) == xv.astype(np.float64) * yv.astype(np.float64)).all()
    widened = emulator.instructions.widen_fp16_bits(np.concatenate([smallest, largest])[1:])
    assert dot.fast_eligible(widened, widened, 11)


def _plan(a, b, numerics=Numerics(), input_daz=True):
    """The engine's plan for bf16 a (M, K), b (K, N), padded and packed as pyamx.matmul packs them."""
    p = importlib.import_module("pyamx._matmul").plan(a, b)  # the module, not pyamx.matmul the function
    a32 = bf16.widen_bits(p.a).reshape(p.m, p.k_dwords, 2)
    b32 = bf16.widen_bits(p.b_vnni).reshape(p.k_dwords, p.n, 2)
    return dot._FloatPlan(a32, b32, numerics, input_daz, 8)


def _reference_matmul(a, b, c):
    """Through the one-instruction reference: pack, then chain K blocks of 32 values."""
    m, k = a.shape
    out = c.copy()
    for k0 in range(0, k, 32):
        a_blk = a[:, k0 : k0 + 32]
        b_blk = b[k0 : k0 + 32]
        if a_blk.shape[1] % 2:
            a_blk = np.concatenate([a_blk, np.full((m, 1), 0x8000, np.uint16)], axis=1)
        out = np.array(reference.tdpbf16ps(out, a_blk, bf16.pack_pairs(b_blk, pad=True)), dtype=np.uint64).astype(np.uint32)
    return out


@pytest.mark.parametrize("low_field", [63, 64, 65, 70, 71, 72, 80])
def test_prescan_boundary_near_underflow(low_field):
    """Products and cancelling lane sums near 2**-126 on both sides of Ea_min + Eb_min = 142."""
    rng = np.random.default_rng([SEED, low_field])
    m, k, n = 5, 40, 4
    a = _bf16_from_fields(rng.integers(0, 2, (m, k)), rng.integers(low_field, low_field + 4, (m, k)), rng.integers(0, 128, (m, k)))
    b = _bf16_from_fields(rng.integers(0, 2, (k, n)), rng.integers(low_field, low_field + 4, (k, n)), rng.integers(0, 128, (k, n)))
    b[1::2] = b[0:-1:2] ^ np.uint16(0x8000)  # cancellation between consecutive k
    c = rng.choice(np.array([0, 0x80000000, 0x00800000, 0x80000001, 0x01000000], np.uint32), (m, n))
    assert _plan(a, b).tier == ("fast" if 2 * low_field >= 142 else "values")
    got = pyamx.matmul(a, b, c, backend="emulator", engine="numpy").view(np.uint32)
    np.testing.assert_array_equal(got, _reference_matmul(a, b, c))


@pytest.mark.parametrize("high_field", [186, 189, 190, 191, 192])
def test_prescan_boundary_near_overflow(high_field):
    """Products near 2**128 on both sides of Ea_max + Eb_max = 380, opposite signs meeting in a lane."""
    rng = np.random.default_rng([SEED, high_field])
    m, k, n = 4, 34, 3
    a = _bf16_from_fields(rng.integers(0, 2, (m, k)), rng.integers(high_field - 3, high_field + 1, (m, k)), rng.integers(0, 128, (m, k)))
    b = _bf16_from_fields(rng.integers(0, 2, (k, n)), rng.integers(high_field - 3, high_field + 1, (k, n)), rng.integers(0, 128, (k, n)))
    a[:, 0], b[0] = _bf16_from_fields(0, high_field, 127), _bf16_from_fields(0, high_field, 127)
    c = rng.choice(np.array([0x7F7FFFFF, 0xFF7FFFFF, 0, 0x7F000000], np.uint32), (m, n))
    assert _plan(a, b).tier == ("fast" if 2 * high_field <= 380 else "values")
    got = pyamx.matmul(a, b, c, backend="emulator", engine="numpy").view(np.uint32)
    np.testing.assert_array_equal(got, _reference_matmul(a, b, c))


@pytest.mark.parametrize("structure", ["sdm", "straight"])
@pytest.mark.parametrize("data", ["normal", "specials", "nan_c", "nan_ab", "big_k"])
def test_the_three_tiers_give_the_same_bits(data, structure):
    rng = np.random.default_rng([SEED, len(data)])
    m, k, n = (9, 300, 7) if data == "big_k" else (11, 45, 13)
    a = bf16.from_float32(rng.standard_normal((m, k)).astype(np.float32))
    b = bf16.from_float32(rng.standard_normal((k, n)).astype(np.float32))
    c = rng.standard_normal((m, n)).astype(np.float32).view(np.uint32)
    if data in ("specials", "nan_c", "nan_ab"):
        pool = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001], np.uint16)
        a = np.where(rng.random((m, k)) < 0.1, rng.choice(pool, (m, k)), a).astype(np.uint16)
        b = np.where(rng.random((k, n)) < 0.1, rng.choice(pool, (k, n)), b).astype(np.uint16)
    if data == "nan_c":
        c[::3, ::2] = np.array([0x7F800001, 0xFFC12345], np.uint32)[0]
    if data == "nan_ab":
        a[2, 7], b[5, 3] = 0x7F81, 0xFFC3
    plan = _plan(a, b, Numerics(structure=structure))
    assert plan.tier == "fast"
    k_dwords = plan.a.shape[1]
    rows = slice(None)
    fast = plan.run_rows(c, rows)
    values = plan._schedule(c, plan.a_clean, plan.b_clean, "values")
    bits = plan._schedule(c, plan.a, plan.b, "bits")
    if data != "nan_ab":
        np.testing.assert_array_equal(values, bits)
        np.testing.assert_array_equal(plan._schedule(c, plan.a_clean, plan.b_clean, "fast", rows), bits)
    np.testing.assert_array_equal(fast, bits)
    assert k_dwords == -(-k // 2)


@pytest.mark.parametrize("structure", ["sdm", "straight"])
@pytest.mark.parametrize("rule", ["x86", "default", "canonical"])
def test_nan_rules_on_the_fast_tier_match_the_reference(rule, structure):
    """C NaNs (payloads kept under x86) and invalid operations, on data the fast tier takes."""
    rng = np.random.default_rng([SEED, len(rule)])
    m, k, n = 4, 6, 5
    a = bf16.from_float32(rng.standard_normal((m, k)).astype(np.float32))
    b = bf16.from_float32(rng.standard_normal((k, n)).astype(np.float32))
    a[0, 0], b[0, 1] = 0x7F80, 0  # inf * 0 in (0, 1)
    a[1, 2], a[1, 4], b[2, 2], b[4, 2] = 0x7F80, 0x7F80, 0x3F80, 0xBF80  # inf - inf across the lanes
    c = rng.standard_normal((m, n)).astype(np.float32).view(np.uint32)
    c[3, 0], c[3, 1], c[0, 1] = 0x7F800001, 0xFFC12345, 0x7FA00000  # signalling/quiet NaN, and NaN + invalid
    numerics = Numerics(nan=rule, structure=structure)
    assert _plan(a, b, numerics).tier == "fast"
    got = pyamx.matmul(a, b, c, backend="emulator", engine="numpy", numerics=numerics).view(np.uint32)
    want = np.array(reference.tdpbf16ps(c, a, bf16.pack_pairs(b), structure=structure), dtype=np.uint64).astype(np.uint32)
    if rule != "x86":
        nan = ((want & 0x7FFFFFFF) > 0x7F800000)
        want = np.where(nan, np.uint32(0xFFC00000 if rule == "default" else 0x7FC00000), want)
    np.testing.assert_array_equal(got, want)


# -- the caller's floating-point environment ----------------------------------------------------

_X86_LINUX = sys.platform.startswith("linux") and platform.machine() == "x86_64"


def _libm():
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    lib.fegetenv.argtypes = lib.fesetenv.argtypes = [ctypes.c_void_p]
    return lib


def _mxcsr(lib) -> int:
    env = ctypes.create_string_buffer(32)  # glibc x86-64 fenv_t: x87 environment, then mxcsr at byte 28
    lib.fegetenv(env)
    return int.from_bytes(env.raw[28:32], "little")


def _set_mxcsr(lib, value: int) -> None:
    env = ctypes.create_string_buffer(32)
    lib.fegetenv(env)
    env[28:32] = value.to_bytes(4, "little")
    lib.fesetenv(env)


@pytest.mark.skipif(not _X86_LINUX, reason="sets MXCSR through glibc's x86-64 fenv_t layout")
@pytest.mark.parametrize("mxcsr", [0x9FC0 | 0x6000, 0x1F80 | 0x8040, 0x1F80 | 0x2000, 0x1F80 | 0x4000],
                         ids=["ftz_daz_toward_zero", "ftz_daz", "round_down", "round_up"])
def test_results_do_not_depend_on_the_callers_mxcsr(mxcsr):
    rng = np.random.default_rng(SEED)
    a = bf16.from_float32(rng.standard_normal((20, 70)).astype(np.float32))
    b = bf16.from_float32(rng.standard_normal((70, 18)).astype(np.float32))
    a_tiny = bf16.from_float32(rng.standard_normal((20, 70)).astype(np.float32) * np.float32(2.0**-64))
    c = rng.standard_normal((20, 18)).astype(np.float32)
    c_denormal = (rng.integers(1, 1 << 23, (20, 18)) | (rng.integers(0, 2, (20, 18)) << 31)).astype(np.uint32)
    # C = -2**-127 (denormal, used as is) plus t = 2**-125: DAZ in MXCSR would drop C
    a_min, b_min = np.array([[0x2000, 0x0000, 0x3F80]], np.uint16), np.array([[0x2080], [0x0000], [0x0000]], np.uint16)
    c_min = np.array([[0x80400000]], np.uint32)
    numpy = dict(backend="emulator", engine="numpy")
    cases = [
        lambda: pyamx.matmul(a_min, b_min, c_min, **numpy, numerics=Numerics(dest_daz=False)),
        lambda: pyamx.matmul(a, b, c, **numpy),  # fast tier
        lambda: pyamx.matmul(a_tiny, b * np.uint16(1), c, **numpy),  # values tier
        lambda: pyamx.matmul(a, b, c_denormal, **numpy, numerics=Numerics(dest_daz=False)),
        lambda: pyamx.matmul(a, b, c, **numpy, threads=2),
        lambda: emulator.tdpbf16ps(c[:16, :16], a[:16, :32], bf16.pack_pairs(b[:32, :16]), engine="numpy"),
        lambda: pyamx.matmul(a.view(np.float16), b.view(np.float16), c, **numpy),
        lambda: pyamx.matmul(a, b, c, backend="emulator"),  # auto: a compiled engine where built
    ]
    want = [np.asarray(case()).view(np.uint32).copy() for case in cases]
    assert int(want[0][0, 0]) == 0x00C00000
    lib = _libm()
    before = _mxcsr(lib)
    try:
        _set_mxcsr(lib, mxcsr)
        assert _mxcsr(lib) & 0xFFC0 == mxcsr & 0xFFC0
        got = [np.asarray(case()).view(np.uint32).copy() for case in cases]
        after = _mxcsr(lib)
    finally:
        _set_mxcsr(lib, before)
    assert after & 0xFFC0 == mxcsr & 0xFFC0, "the caller's MXCSR was not restored"
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"case {i} changed under MXCSR {mxcsr:#x}")


def test_the_environment_guard_is_active_where_results_are_claimed_independent():
    if _X86_LINUX:
        assert _fpenv.guarded()


# -- one float64 addition, one rounding: when it is the correctly rounded fp32 sum -------------


def _exact_fp32_sum(u: float, v: float, tininess="after") -> int:
    from fractions import Fraction

    total = Fraction(u) + Fraction(v)
    negative = total < 0 or (total == 0 and np.signbit(u) and np.signbit(v))
    return reference.encode(("num", total, negative), tininess)


def _short_sum_bits(u, v, tininess="after"):
    return np.asarray(fp32.add_short_values(np.array([u]), np.array([v]), tininess)).astype(np.float32).view(np.uint32)[0]


@pytest.mark.parametrize("tininess", ["after", "before"])
def test_one_float64_add_rounds_correctly_for_24_bit_addends(tininess):
    """Random 24-bit addends at every exponent gap around the 29-bit threshold of the proof, ties included."""
    rng = np.random.default_rng([SEED, len(tininess)])
    checked = 0
    for gap in list(range(20, 36)) + [0, 1, 60]:
        for _ in range(60):
            e = int(rng.integers(-140, 120))
            u = float(np.ldexp(float(rng.integers(2**23, 2**24)), e - 23)) * (1 if rng.random() < 0.5 else -1)
            bits = int(rng.integers(1, 25))
            v = float(np.ldexp(float(rng.integers(2 ** (bits - 1), 2**bits)), e - gap - bits + 1))
            v *= 1 if rng.random() < 0.5 else -1
            if rng.random() < 0.3:  # exactly half an ulp of u (a tie), or just off it
                v = float(np.copysign(np.ldexp(1.0, e - 24), v)) * (1 + float(rng.choice([0, 2**-23, -(2**-23)])))
            assert int(_short_sum_bits(u, v, tininess)) == _exact_fp32_sum(u, v, tininess), (u, v)
            checked += 1
    assert checked > 1000


def test_one_float64_add_is_not_enough_for_wider_addends():
    """Why generic fp32 products (48 bits) keep TwoSum: the double rounding makes a false tie."""
    u, v = 1.0, 2.0**-24 * (1 + 2.0**-47)
    assert _exact_fp32_sum(u, v) == 0x3F800001  # above the tie: rounds up
    assert int(_short_sum_bits(u, v)) == 0x3F800000  # fl64 drops 2**-71, the tie goes to even
    two_sum = fp32.add_values(np.array([u]), np.array([v]), "after").astype(np.float32).view(np.uint32)[0]
    assert int(two_sum) == 0x3F800001


def test_straight_fast_tier_needs_a_coarse_c():
    """straight starts its accumulator at C: a C below 2**-103 (quantum below 2**-126) sends the chunk to the values tier."""
    rng = np.random.default_rng([SEED, 103])
    a = bf16.from_float32(rng.standard_normal((4, 10)).astype(np.float32))
    b = bf16.from_float32(rng.standard_normal((10, 3)).astype(np.float32))
    numerics = Numerics(structure="straight", dest_daz=False)
    for c_bits, fits in ((0x3F800000, True), (0x0C000000, True), (0x0B800000, False), (0x00000001, False)):
        c = np.full((4, 3), c_bits, np.uint32)
        assert dot._straight_c_fits(c, numerics) == fits
        c[0, 0] = 0xBF812345  # a cancellation partner in one element
        got = pyamx.matmul(a, b, c, backend="emulator", engine="numpy", numerics=numerics).view(np.uint32)
        want = np.array(reference.tdpbf16ps(c, a, bf16.pack_pairs(b), structure="straight", dest_daz=False),
                        dtype=np.uint64).astype(np.uint32)
        np.testing.assert_array_equal(got, want)


def test_fast_tier_refuses_operands_whose_products_need_more_than_24_bits():
    """Generic fp32 operands (48-bit products) go to the TwoSum tier; bf16/fp16 widths are read from the data."""
    rng = np.random.default_rng([SEED, 48])
    a = rng.standard_normal((5, 6, 2)).astype(np.float32).view(np.uint32)
    b = rng.standard_normal((6, 4, 2)).astype(np.float32).view(np.uint32)
    c = rng.standard_normal((5, 4)).astype(np.float32).view(np.uint32)
    plan = dot._FloatPlan(a, b, Numerics(), True, 24)
    assert plan.tier == "values" and not plan.short
    np.testing.assert_array_equal(plan.run_rows(c, slice(None)), plan._schedule(c, a, b, "bits"))
    assert dot.significand_width(a & np.uint32(0xFFFF0000)) == 8
    assert dot.significand_width(a & np.uint32(0xFFFFE000)) == 11
    assert dot.significand_width(a) == 24
    bf = a & np.uint32(0xFFFF0000)
    assert dot._FloatPlan(bf, b & np.uint32(0xFFFF0000), Numerics(), True, 24).tier == "fast"
    assert dot._FloatPlan(bf, b & np.uint32(0xFFFFE000), Numerics(), True, 24).tier == "fast"  # 8 + 11 bits
    assert dot._FloatPlan(bf, b, Numerics(), True, 24).tier == "values"  # 8 + 24 bits
