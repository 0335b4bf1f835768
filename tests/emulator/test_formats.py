"""bf16 helpers, fp16/int8 dot products against the reference, and operand validation."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import reference
import pyamx
from pyamx.table import bf16, isa
from pyamx import emulator


def _bits32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _bf16_scalar(bits32: int) -> int:
    """float32 bits -> bf16 bits by the textbook rule, one value at a time."""
    if (bits32 & 0x7F800000) == 0x7F800000 and bits32 & 0x7FFFFF:
        return (bits32 >> 16) | 0x40
    upper, lower = bits32 >> 16, bits32 & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return upper


def test_from_float32_rounds_to_nearest_even_everywhere():
    rng = np.random.default_rng(3)
    bits = np.concatenate([
        rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32),
        np.array([0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x00008000,
                  0x00018000, 0x80000000, 0x7F800000, 0x7F800001, 0xFFBFFFFF, 0x7FC00000], np.uint32),
    ])
    got = bf16.from_float32(bits.view(np.float32))
    want = np.array([_bf16_scalar(int(b)) for b in bits], np.uint16)
    assert np.array_equal(got, want)
    assert bf16.from_float32(np.float32(3.4e38)) == 0x7F80  # overflow to infinity
    assert bf16.from_float32(np.array([0x7F800001], np.uint32).view(np.float32))[0] == 0x7FC0  # sNaN quieted


def test_from_float32_agrees_with_ml_dtypes_on_numbers():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is an optional interchange format")
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2**32, 50000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[~np.isnan(x)]
    assert np.array_equal(bf16.from_float32(x), x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_round_trips():
    every_bf16 = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    widened = bf16.to_float32(every_bf16)
    assert np.array_equal(widened.view(np.uint32) >> 16, every_bf16)  # exact, NaN payloads kept
    numbers = every_bf16[~np.isnan(widened)]
    assert np.array_equal(bf16.from_float32(bf16.to_float32(numbers)), numbers)
    rng = np.random.default_rng(5)
    for rows, n in ((2, 1), (16, 3), (32, 16)):
        b = rng.integers(0, 2**16, (rows, n), dtype=np.uint16)
        packed = bf16.pack_pairs(b)
        assert packed.shape == (rows // 2, 2 * n)
        assert packed[0, 1] == b[1, 0] and (n == 1 or packed[0, 2] == b[0, 1])
        assert np.array_equal(bf16.unpack_pairs(packed), b)
        q = rng.integers(0, 256, (rows * 2, n), dtype=np.uint8)
        assert np.array_equal(bf16.unpack_quads(bf16.pack_quads(q)), q)
    with pytest.raises(ValueError, match="multiple of 2"):
        bf16.pack_pairs(np.zeros((3, 2), np.uint16))
    assert bf16.pack_pairs(np.ones((3, 2), np.uint16), pad=True)[1].tolist() == [1, 0, 1, 0]


def test_packed_product_is_the_matrix_product():
    """pack_pairs + tdpbf16ps computes C + A @ B for exactly representable small integers."""
    rng = np.random.default_rng(6)
    a = rng.integers(-8, 8, (5, 6)).astype(np.float32)
    b = rng.integers(-8, 8, (6, 7)).astype(np.float32)
    c = rng.integers(-8, 8, (5, 7)).astype(np.float32)
    got = pyamx.tdpbf16ps(c, bf16.from_float32(a), bf16.pack_pairs(bf16.from_float32(b)))
    assert np.array_equal(got, c + a.astype(np.float64) @ b)


def test_ml_dtypes_bfloat16_operands_are_accepted():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is an optional interchange format")
    a = np.ones((2, 4), ml_dtypes.bfloat16)
    b = np.ones((2, 6), ml_dtypes.bfloat16)
    assert pyamx.tdpbf16ps(np.zeros((2, 3), np.float32), a, b).tolist() == [[4.0] * 3] * 2


def test_fp16_dot_product_matches_reference():
    rng = np.random.default_rng(7)
    specials = np.array(isa.FORMATS["fp16"].special_values, np.uint16)  # denormals, infinities, NaNs, zeros, max
    for m, k, n in ((1, 1, 1), (16, 16, 16), (3, 7, 5), (16, 1, 16), (1, 16, 1)):
        a = rng.integers(0, 2**16, (m, 2 * k), dtype=np.uint16)
        b = rng.integers(0, 2**16, (k, 2 * n), dtype=np.uint16)
        a = np.where(rng.random(a.shape) < 0.3, rng.choice(specials, a.shape), a)
        b = np.where(rng.random(b.shape) < 0.3, rng.choice(specials, b.shape), b)
        c = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
        got = emulator.tdpfp16ps(c, a, b).view(np.uint32)
        want = np.array(reference.tdpfp16ps(c, a, b), np.uint64).astype(np.uint32)
        assert np.array_equal(got, want), (m, k, n)


def test_fp16_denormals_are_honoured():
    a = np.array([[0x0001, 0]], np.uint16)  # 2**-24
    b = np.array([[0x3C00, 0]], np.uint16)  # 1.0
    assert emulator.tdpfp16ps(np.zeros((1, 1), np.float32), a, b)[0, 0] == 2.0**-24
    assert emulator.tdpfp16ps(np.zeros((1, 1), np.float32), a.view(np.float16), b.view(np.float16))[0, 0] == 2.0**-24


@pytest.mark.parametrize("mnemonic", [i.name for i in isa.DOTS if i.group == "int8"])
def test_int8_dot_products_match_reference_including_wraparound_and_extremes(mnemonic):
    # signedness from the reference, not from pyamx.table.isa: the code's table is what is under test
    signs = reference.int8_signedness(mnemonic)
    rng = np.random.default_rng(8)
    for m, k, n in ((1, 1, 1), (16, 16, 16), (4, 9, 13)):
        a = rng.integers(0, 256, (m, 4 * k), dtype=np.uint8)
        b = rng.integers(0, 256, (k, 4 * n), dtype=np.uint8)
        c = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
        c[0, 0] = 2**31 - 1  # wrap-around is exercised
        got = getattr(pyamx, mnemonic)(c, a.view(np.int8) if m % 2 else a, b)
        assert np.array_equal(got, np.array(reference.tdpb_int8(*map(bool, signs), c, a, b), np.int32)), (m, k, n)
    extreme = np.full((1, 64), 0x80, np.uint8)
    total = getattr(pyamx, mnemonic)(np.zeros((16, 16), np.int32)[:1, :16], extreme, np.full((16, 64), 0x80, np.uint8))
    per = (-128 if signs[0] else 128) * (-128 if signs[1] else 128) * 64
    assert total[0, 0] == per


# ---- validation -------------------------------------------------------------


def _ok():
    return np.zeros((2, 3), np.float32), np.zeros((2, 4), np.uint16), np.zeros((2, 6), np.uint16)


@pytest.mark.parametrize(
    "change, error, words",
    [
        (lambda c, a, b: (c.tolist(), a, b), TypeError, "c has dtype float64"),  # converted, then judged
        (lambda c, a, b: (None, a, b), TypeError, "c must be an array"),
        (lambda c, a, b: (c.astype(np.float64), a, b), TypeError, "c has dtype float64"),
        (lambda c, a, b: (c, a.astype(np.float32), b), TypeError, "a has dtype float32.*from_float32"),
        (lambda c, a, b: (c, a, b.astype(np.int32)), TypeError, "b has dtype int32"),
        (lambda c, a, b: (c[None], a, b), ValueError, "c must be 2-D"),
        (lambda c, a, b: (c, a[:, :3], b), ValueError, "a has 3 columns"),
        (lambda c, a, b: (c, a, b[:, :5]), ValueError, "b has 5 columns"),
        (lambda c, a, b: (c, a[:1], b), ValueError, "a has 1 rows but c has M=2"),
        (lambda c, a, b: (c, a, b[:1]), ValueError, "b has 1 rows but a has K=2"),
        (lambda c, a, b: (c[:, :2], a, b), ValueError, "b has N=3"),
        (lambda c, a, b: (np.zeros((17, 3), np.float32), np.zeros((17, 4), np.uint16), b), ValueError, "M=17"),
        (lambda c, a, b: (c, np.zeros((2, 34), np.uint16), np.zeros((17, 6), np.uint16)), ValueError, "K=17"),
        (lambda c, a, b: (np.zeros((2, 0), np.float32), a, np.zeros((2, 0), np.uint16)), ValueError, "N=0"),
    ],
)
def test_bad_operands_are_named(change, error, words):
    c, a, b = change(*_ok())
    with pytest.raises(error, match=words):
        pyamx.tdpbf16ps(c, a, b)
    with pytest.raises(error, match=words):
        emulator.tdpbf16ps(c, a, b)


def test_inputs_are_never_modified_and_results_are_new():
    c, a, b = _ok()
    c[:] = 1.5
    a[:] = 0x3F80
    b[:] = 0x3F80
    saved = [x.copy() for x in (c, a, b)]
    result = pyamx.tdpbf16ps(c, a, b)
    assert all(np.array_equal(x, y) for x, y in zip((c, a, b), saved))
    assert result.dtype == np.float32 and result.shape == (2, 3) and not np.shares_memory(result, c)
    assert result.tolist() == [[5.5] * 3] * 2
    uint_c = pyamx.tdpbf16ps(c.view(np.uint32), a, b)
    assert np.array_equal(uint_c, result)


def test_numerics_objects_are_validated():
    with pytest.raises(ValueError, match="structure"):
        emulator.Numerics(structure="fast")
    with pytest.raises(ValueError, match="presets"):
        emulator.tdpbf16ps(*_ok(), numerics="nope")
    assert emulator.Numerics(tininess="before").name == "sdm+tininess='before'"
    assert emulator.PRESETS["straight"].name == "straight"
    assert math.isclose(float(emulator.tdpbf16ps(*_ok(), numerics=emulator.Numerics(nan="default"))[0, 0]), 0.0)


def test_big_endian_operands_give_the_same_bits():
    rng = np.random.default_rng(9)
    c = rng.standard_normal((3, 4)).astype(np.float32)
    a = bf16.from_float32(rng.standard_normal((3, 6)).astype(np.float32))
    b = bf16.from_float32(rng.standard_normal((3, 8)).astype(np.float32))
    want = pyamx.tdpbf16ps(c, a, b)
    got = pyamx.tdpbf16ps(c.astype(">f4"), a.astype(">u2"), b.astype(">u2"))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert bf16.to_float32(np.array([0x3F80], ">u2"))[0] == 1.0
    ci = np.ones((1, 1), ">i4")
    assert pyamx.tdpbssd(ci, np.ones((1, 4), np.int8), np.ones((1, 4), np.int8))[0, 0] == 5


def test_the_layouts_live_in_pyamx_layout_and_bf16_keeps_its_names():
    from pyamx.table import layout

    assert "layout" in pyamx.__all__ and pyamx.table.layout is layout
    for name in ("pack_pairs", "unpack_pairs", "pack_quads", "unpack_quads"):
        assert getattr(bf16, name) is getattr(layout, name), name  # the old names stay working aliases
    q = np.arange(24, dtype=np.uint8).reshape(6, 4)
    packed = layout.pack_quads(q, pad=True)  # 6 rows -> 8 (two zero rows), K = 2
    assert packed.shape == (2, 16)
    assert packed[0, :4].tolist() == [0, 4, 8, 12]  # column 0 of rows 0..3: one dword
    assert packed[1, :4].tolist() == [16, 20, 0, 0]
    np.testing.assert_array_equal(layout.unpack_quads(packed)[:6], q)
    with pytest.raises(ValueError, match="pack_quads: the row count 6 is not a multiple of 4"):
        layout.pack_quads(q)
