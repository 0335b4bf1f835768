"""The avx512 fp8 engine's int16 tiles (csrc/engine_fp8.c) at their edges, against the numpy engine and
tests/reference_fp8.py (exact rationals), as uint32 bit patterns.

The int16 path runs 8 x 48 register tiles over pairs of 24-column panels (a last odd panel alone), sums
rows it leaves out as two int16 rows where it can (the split rows, an exact int64 combination) and
packs doubles only where a double kernel reads them. These tests put every M residue mod 8 and N residue
mod 24 and 48 next to left-out rows, blocks where only one panel of a pair can take the int16 path,
split rows at the int32 bound from either side and thread counts that split the panel pairs.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest

import reference_fp8 as ref
from test_fp8_engine import NAMES, SEED, _c_bits, _code_of, _compiled, _numpy_dot, _reference_dot, _vnni
from test_fp8_engine import engine  # noqa: F401  (the fixture: each compiled engine, avx512 also without int16)
from test_engine import NOT_A_TEST_BUILD, TEST_BUILD


@pytest.fixture(params=["split", "no-split"])
def split(request):
    """The avx512 split rows on (the default) and off, where the left-out rows take doubles instead
    (off: a test build's hook)."""
    if request.param == "no-split" and not TEST_BUILD:
        pytest.skip(NOT_A_TEST_BUILD)
    lib = _compiled("avx512")._lib
    if not TEST_BUILD:  # the product's own setting: split rows on
        yield request.param
        return
    was = lib.pyamx_engine_fp8_split_path(int(request.param == "split"))
    try:
        yield request.param
    finally:
        lib.pyamx_engine_fp8_split_path(was)


def _narrow(rng, shape, fmt, low=5, high=9):
    """Normal numbers of fmt with biased exponents low..high-1, both signs: int16 material."""
    mbits = 2 if fmt == "bf8" else 3
    codes = (rng.integers(low, high, shape) << mbits) | rng.integers(0, 1 << mbits, shape)
    return (codes | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def _nan(fmt):
    return 0x7D if fmt == "bf8" else 0x7F


def _tile_operands(rng, op, m, n, k):
    """Narrow A and B with, per block, a few rows that the int16 tile leaves out (a tiny value: a wide
    span, splittable; a NaN), one column of the second panel too wide for int16 in block 1 (its pair
    then runs panel by panel) and one all-left-out row panel in block 0."""
    a_fmt, b_fmt = ref.formats(op)
    a, b = _narrow(rng, (m, k), a_fmt), _narrow(rng, (k, n), b_fmt)
    for blk in range(k // 64):
        rows = rng.choice(m, size=min(m, 3), replace=False)
        a[rows[0], 64 * blk + 5] = 0x01  # the smallest denormal: a span over 15 bits
        if len(rows) > 1:
            a[rows[1], 64 * blk + 9] = _nan(a_fmt)
        if len(rows) > 2:
            a[rows[2], 64 * blk + 1] = 0x81
            a[rows[2], 64 * blk + 2] = _code_of(a_fmt, 2 ** (7 if a_fmt == "bf8" else 6))
    if n > 24 and k > 64:
        col = min(n - 1, 30)
        b[64:128, col] = 0x01
        b[70, col] = _code_of(b_fmt, 2 ** 7 if b_fmt == "bf8" else 2 ** 6)
    if m >= 16:
        a[8:16, 3] = _nan(a_fmt)
    return a, b


@pytest.mark.parametrize("m", [1, 7, 9, 17])
@pytest.mark.parametrize("n", [1, 23, 24, 25, 47, 48, 49, 71, 72, 73, 97, 121])
def test_panel_pairs_at_every_edge(engine, m, n):  # noqa: F811
    eng = _compiled(engine)
    op = NAMES[0] if n % 2 else NAMES[1]
    rng = np.random.default_rng([SEED, 21, m, n])
    k = 192
    a, b = _tile_operands(rng, op, m, n, k)
    c = _c_bits(rng, (m, n))
    got = np.asarray(eng.dot(op, c, a, _vnni(b), k // 4)).view(np.uint32)
    np.testing.assert_array_equal(got, _numpy_dot(op, c, a, _vnni(b), k // 4))


@functools.lru_cache(maxsize=None)
def _pair_case(op):
    """(C, A, B, the reference's result) of test_panel_pairs_against_the_reference, computed once per op."""
    rng = np.random.default_rng([SEED, 22, NAMES.index(op)])
    m, n, k = 9, 56, 128
    a, b = _tile_operands(rng, op, m, n, k)
    c = _c_bits(rng, (m, n))
    c[:, :3] = 0x80000000
    return c, a, b, _reference_dot(op, c, a, b)


@pytest.mark.parametrize("op", NAMES)
def test_panel_pairs_against_the_reference(engine, op):  # noqa: F811
    """A pair and a lone panel partly outside N (56 columns: panels of 24, 24 and 8), rows of the
    int16 tile, left-out and split rows, and a row panel all left out in one block."""
    eng = _compiled(engine)
    c, a, b, want = _pair_case(op)
    got = np.asarray(eng.dot(op, c, a, _vnni(b), a.shape[1] // 4)).view(np.uint32)
    np.testing.assert_array_equal(got, want)


def _split_rows(op, bound):
    """8 rows of one block for one 8 x 48 pair, each an edge of the split rows (docs/engine.md):
    0 narrow (in the tile); 1 one tiny value (split, the parts 2^d apart); 2 the largest and the
    smallest magnitude with both signs (split, d at its largest); 3 values of over 15 bits above the
    split (cannot split: doubles); 4 a NaN; 5 the low part's int32 bound (61 values of 28672 units,
    one of 1, one big); 6 (BF8 only) the high part's bound (62 of 28672 units of the high part's own
    lowest bit, one of 1, one tiny below). B: 63 rows of ``bound`` (56: both bounds hold, 128: both
    fail, each column's largest |b'| 896 or 2048) and one 2^-4."""
    a_fmt, b_fmt = ref.formats(op)
    scale = 16 if a_fmt == "bf8" else 9
    a = np.full((8, 64), _code_of(a_fmt, 1), np.uint8)
    a[:, 1::3] |= 0x80
    a[1, 10] = 0x01
    biggest = 0x7B if a_fmt == "bf8" else 0x7E
    a[2, :4] = [biggest, 0x01, biggest | 0x80, 0x81]
    a[3, :3] = [biggest, _code_of(a_fmt, Fraction(2 ** 15, 2 ** scale)), 0x01]  # high part 2^15 .. top
    a[3, 3:] = 0
    a[4, 7] = _nan(a_fmt)
    a[5, :61] = _code_of(a_fmt, Fraction(28672, 2 ** scale))
    a[5, 61], a[5, 62], a[5, 63] = 0x01, biggest, 0
    if a_fmt == "bf8":
        a[6, :62] = _code_of(a_fmt, Fraction(28672 * 2 ** 15, 2 ** scale))
        a[6, 62], a[6, 63] = _code_of(a_fmt, Fraction(2 ** 15, 2 ** scale)), 0x01
    b = np.zeros((64, 48), np.uint8)
    b[:63, :] = _code_of(b_fmt, bound)
    b[:63, 1::2] |= 0x80
    b[63, :] = _code_of(b_fmt, Fraction(1, 16))
    return a, b


@functools.lru_cache(maxsize=None)
def _split_case(op, bound):
    a, b = _split_rows(op, bound)
    rng = np.random.default_rng([SEED, 23, NAMES.index(op), bound])
    c = _c_bits(rng, (8, 48))
    c[:, :2] = 0x80000000
    return c, a, b, _reference_dot(op, c, a, b)


@pytest.mark.parametrize("op", NAMES)
@pytest.mark.parametrize("bound", [56, 128])
def test_split_rows(op, bound, split):
    eng = _compiled("avx512")
    c, a, b, want = _split_case(op, bound)
    got = np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [24 * 5, 24 * 6 - 5])
def test_thread_counts_split_on_panel_pairs(engine, n):  # noqa: F811
    eng = _compiled(engine)
    op = NAMES[0]
    rng = np.random.default_rng([SEED, 24, n])
    m, k = 160, 1024  # enough work for 5 threads (engine_fp8.c F8_MIN_WORK_PER_THREAD)
    a, b = _tile_operands(rng, op, m, n, k)
    c = _c_bits(rng, (m, n))
    want = _numpy_dot(op, c, a, _vnni(b), k // 4)
    for threads in (1, 2, 3, 5):
        got = np.asarray(eng.dot(op, c, a, _vnni(b), k // 4, threads=threads)).view(np.uint32)
        np.testing.assert_array_equal(got, want, err_msg=f"threads={threads}")


def _finite_codes(fmt):
    return [code for code in range(256) if ref.decode_fp8(code, fmt)[0] == "num"]


@pytest.mark.parametrize("op", NAMES)
def test_every_code_pair_on_the_int16_tiles(engine, op):  # noqa: F811
    """Row i holds 64 copies of the i-th finite code of A's format, column j 64 copies of B's j-th:
    every block is int16 material (one value per row and column), the images reach 2^32 (BF8's
    largest), and each result is round_fp32(64 x a x b), exact in float64 before that one rounding."""
    eng = _compiled(engine)
    a_fmt, b_fmt = ref.formats(op)
    a_codes, b_codes = _finite_codes(a_fmt), _finite_codes(b_fmt)
    a = np.repeat(np.array(a_codes, np.uint8)[:, None], 64, axis=1)
    b = np.repeat(np.array(b_codes, np.uint8)[None, :], 64, axis=0)
    a_val = np.array([float(ref.decode_fp8(x, a_fmt)[1]) for x in a_codes])
    b_val = np.array([float(ref.decode_fp8(x, b_fmt)[1]) for x in b_codes])
    want = (64.0 * np.outer(a_val, b_val)).astype(np.float32)  # 64ab: <= 14 bits, exact in float64
    want = np.where(want == 0, np.float32(0), want).view(np.uint32)  # an exact zero sum is +0
    c = np.zeros((len(a_codes), len(b_codes)), np.uint32)
    got = np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32)
    np.testing.assert_array_equal(got, want)
