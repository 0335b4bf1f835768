"""The compiled engines' AMX-FP8 path (csrc/engine_fp8.c) against the numpy engine and tests/reference_fp8.py.

Every compiled engine that runs here must give the numpy engine's bits, and
both must give the exact-rational reference's bits, as uint32 patterns: on
random codes (all 256 of each format), adversarial blocks (NaN, infinities,
zeros of both signs, denormals, ties, cancellation, exponent spans too wide
for the double accumulator), odd shapes, several thread counts and a
caller's MXCSR with FTZ/DAZ and a directed rounding mode.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import pyamx
import reference_fp8 as ref
from pyamx.emulator import engine as _engine
from pyamx.table import isa
from test_engine import HAS_MXCSR, NOT_A_TEST_BUILD, TEST_BUILD, run_under_mxcsr

FP8_ROWS = [insn for insn in isa.DOTS if insn.group == "fp8"]
NAMES = [insn.name for insn in FP8_ROWS]
COMPILED = list(_engine._KINDS)
SEED = 20261204


@pytest.fixture(params=[*COMPILED, "avx512-double"])
def engine(request):
    """Each compiled engine; "avx512-double" is avx512 with its int16 (VNNI) path switched off, so
    that both of its paths meet every case (a test build's hook)."""
    if request.param != "avx512-double":
        yield request.param
        return
    if not TEST_BUILD:
        pytest.skip(NOT_A_TEST_BUILD)
    lib = _compiled("avx512")._lib
    was = lib.pyamx_engine_fp8_int_path(0)
    try:
        yield "avx512"
    finally:
        lib.pyamx_engine_fp8_int_path(was)


def _code_of(fmt, value):
    """The fp8 code of an exactly representable value, found with the reference's decoder."""
    for code in range(128):
        decoded = ref.decode_fp8(code, fmt)
        if decoded[0] == "num" and decoded[1] == Fraction(value):
            return code
    raise ValueError(f"{value} is not a {fmt} value")


def _compiled(name):
    ok, reason = _engine._compiled_status(name)
    if not ok:
        pytest.skip(f"the {name} engine cannot run here: {reason}")
    return _engine.resolve(name)


def _numpy_dot(op, c, a, b_vnni, kd):
    return np.asarray(_engine.resolve("numpy", op=op).dot(op, c, a, b_vnni, kd)).view(np.uint32)


def _vnni(b_rowmajor):
    """(K, N) codes, K a multiple of 4 -> (K/4, 4N) quad-interleaved as the instructions take them."""
    k, n = b_rowmajor.shape
    return np.ascontiguousarray(b_rowmajor.reshape(k // 4, 4, n).transpose(0, 2, 1)).reshape(k // 4, 4 * n)


def _reference_dot(op, c, a, b_rowmajor):
    """The schedule from tests/reference_fp8.py: blocks of 64 values, C chained."""
    a_fmt, b_fmt = ref.formats(op)
    return np.array(ref.matmul(c.tolist(), a.tolist(), b_rowmajor.tolist(), a_fmt, b_fmt), np.uint32)


def _c_bits(rng, shape):
    c = (rng.standard_normal(shape) * 2.0 ** rng.integers(-30, 30, shape)).astype(np.float32).view(np.uint32)
    pool = np.array([0, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC12345, 0xFF800001,
                     0x7F7FFFFF], np.uint32)
    return np.where(rng.random(shape) < 0.2, rng.choice(pool, shape), c).astype(np.uint32)


def _finite(codes, fmt):
    special = (codes & 0x7C) == 0x7C if fmt == "bf8" else (codes & 0x7F) == 0x7F
    return np.where(special, np.uint8(0), codes).astype(np.uint8)


def _operands(kind, rng, op, m, n, k):
    """(A (M, K), B (K, N)) codes of one adversarial kind."""
    a_fmt, b_fmt = ref.formats(op)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(0, 256, (k, n), dtype=np.uint8)
    if kind == "all_codes":
        a.flat[:256 * (a.size // 256)] = np.tile(np.arange(256, dtype=np.uint8), a.size // 256)
        return a, b
    a, b = _finite(a, a_fmt), _finite(b, b_fmt)
    if kind == "finite":
        return a, b
    big_a, big_b = (0x7B if a_fmt == "bf8" else 0x7E), (0x7B if b_fmt == "bf8" else 0x7E)  # the largest finite
    if kind == "wide_span":  # largest and smallest magnitudes in one block: the double sum could round
        a[:, 0::7] = big_a
        a[:, 1::7] = 0x01  # the smallest denormal
        b[0::5, :] = big_b
        b[1::5, :] = 0x01
        b[2::5, :] = 0x81
        return a, b
    if kind == "cancel":  # x * y and -x * y in the same block, a tiny remainder left over (k even)
        a[:, 1::2] = a[:, 0::2] ^ 0x80
        b[1::2, :] = b[0::2, :]
        a[:, 4], b[4, :] = big_a, big_b
        a[:, -1], b[-1, :] = 0x01, 0x01
        return a, b
    if kind == "zeros":
        return np.where(rng.random(a.shape) < 0.7, rng.choice(np.array([0, 0x80], np.uint8), a.shape), a), \
            np.where(rng.random(b.shape) < 0.7, rng.choice(np.array([0, 0x80], np.uint8), b.shape), b)
    raise ValueError(kind)


def _special_sprinkle(rng, a, b, op):
    """A few NaN and infinity codes (where the format has them) among finite ones."""
    a_fmt, b_fmt = ref.formats(op)
    a_special = [0x7C, 0xFC, 0x7D, 0xFF] if a_fmt == "bf8" else [0x7F, 0xFF]
    b_special = [0x7C, 0xFC, 0x7E] if b_fmt == "bf8" else [0x7F]
    a = np.where(rng.random(a.shape) < 0.02, rng.choice(np.array(a_special, np.uint8), a.shape), a).astype(np.uint8)
    b = np.where(rng.random(b.shape) < 0.02, rng.choice(np.array(b_special, np.uint8), b.shape), b).astype(np.uint8)
    return a, b


KINDS = ["all_codes", "finite", "wide_span", "cancel", "zeros", "specials"]


@pytest.mark.parametrize("op", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_compiled_equals_numpy_and_the_reference(engine, op, kind):
    eng = _compiled(engine)
    rng = np.random.default_rng([SEED, NAMES.index(op), KINDS.index(kind)])
    m, n, k = 3, 5, 132  # three blocks, the last a partial one
    a, b = _operands("finite" if kind == "specials" else kind, rng, op, m, n, k)
    if kind == "specials":
        a, b = _special_sprinkle(rng, a, b, op)
    c = _c_bits(rng, (m, n))
    want = _reference_dot(op, c, a, b)
    got = np.asarray(eng.dot(op, c, a, _vnni(b), k // 4)).view(np.uint32)
    np.testing.assert_array_equal(_numpy_dot(op, c, a, _vnni(b), k // 4), want)
    np.testing.assert_array_equal(got, want)


def _power_of_two(fmt, e):
    """The code of 2**e (a normal number of fmt), from the format's definition."""
    bias, mbits = (15, 2) if fmt == "bf8" else (7, 3)
    return (e + bias) << mbits


@pytest.mark.parametrize("op", NAMES)
def test_ties_and_exact_zero_signs(engine, op):
    """Hand-built sums: 2**16 + 2**-8 lies halfway between fp32 neighbours with an even lower one (rounds
    down), 2**16 + 3 * 2**-8 halfway with an odd lower one (rounds up); -0 products sum to +0."""
    eng = _compiled(engine)
    a_fmt, b_fmt = ref.formats(op)
    big_a, tiny_a = _power_of_two(a_fmt, 8), _power_of_two(a_fmt, -4)
    big_b, tiny_b = _power_of_two(b_fmt, 8), _power_of_two(b_fmt, -4)
    a = np.zeros((2, 64), np.uint8)
    a[0, :4] = [big_a, tiny_a, tiny_a, tiny_a]
    a[1, :2] = [0x80, 0x80]
    b = np.zeros((64, 2), np.uint8)
    b[:4, 0] = [big_b, tiny_b, 0, 0]
    b[:4, 1] = [big_b, tiny_b, tiny_b, tiny_b]
    c = np.array([[0, 0x80000000], [0x80000000, 0x00000001]], np.uint32)
    want = _reference_dot(op, c, a, b)
    # worked by hand: 2**16 is 0x47800000, its ulp 2**-7; +0 from -0 + (+0); the denormal C unchanged
    np.testing.assert_array_equal(want, np.array([[0x47800000, 0x47800002], [0, 1]], np.uint32))
    np.testing.assert_array_equal(np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32), want)
    np.testing.assert_array_equal(_numpy_dot(op, c, a, _vnni(b), 16), want)


@pytest.mark.parametrize("op", NAMES)
def test_cancellation_beyond_the_double_span_keeps_the_remainder(engine, op):
    """huge * huge + tiny * tiny - huge * huge: a double accumulator would lose the tiny product (the
    exponent span is far over 53 bits); the exact sum is the tiny product alone."""
    eng = _compiled(engine)
    a_fmt, b_fmt = ref.formats(op)
    big_a = 0x7B if a_fmt == "bf8" else 0x7E
    big_b = 0x7B if b_fmt == "bf8" else 0x7E
    a = np.zeros((1, 64), np.uint8)
    b = np.zeros((64, 1), np.uint8)
    a[0, :3] = [big_a, 0x01, big_a | 0x80]
    b[:3, 0] = [big_b, 0x01, big_b]
    c = np.zeros((1, 1), np.uint32)
    want = _reference_dot(op, c, a, b)
    assert want[0, 0] not in (0, 0x80000000)  # the remainder: a test that a lossy sum fails
    np.testing.assert_array_equal(np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32), want)


@pytest.mark.parametrize("op", NAMES)
def test_a_tie_decided_by_a_product_53_bits_below(engine, op):
    """61 largest products sum to S; a product of half S's fp32 ulp makes a tie, and the smallest
    product (its sign against the parity of S) decides it. With a BF8 side the tiny product lies over
    53 bits below S: a double accumulator drops it and rounds the tie the other way."""
    eng = _compiled(engine)
    a_fmt, b_fmt = ref.formats(op)
    big_a, big_b = (0x7B if a_fmt == "bf8" else 0x7E), (0x7B if b_fmt == "bf8" else 0x7E)
    value = lambda code, fmt: ref.decode_fp8(int(code), fmt)[1]  # noqa: E731
    s = 61 * value(big_a, a_fmt) * value(big_b, b_fmt)
    e = s.numerator.bit_length() - s.denominator.bit_length()
    e = e - 1 if Fraction(2) ** e > s else e
    half = e - 24  # log2 of half an fp32 ulp of s
    odd = (s / Fraction(2) ** (e - 23)) % 2 == 1
    a = np.zeros((1, 64), np.uint8)
    b = np.zeros((64, 1), np.uint8)
    a[0, :61], b[:61, 0] = big_a, big_b
    a[0, 61], b[61, 0] = _power_of_two(a_fmt, half // 2), _power_of_two(b_fmt, half - half // 2)
    a[0, 62], b[62, 0] = (0x81 if odd else 0x01), 0x01  # toward the even neighbour's opposite
    c = np.zeros((1, 1), np.uint32)
    want = _reference_dot(op, c, a, b)
    lossy = np.float32(sum(float(value(x, a_fmt)) * float(value(y, b_fmt)) for x, y in zip(a[0], b[:, 0])))
    if "bf8" in (a_fmt, b_fmt):
        assert lossy.view(np.uint32) != want[0, 0]  # the case a double accumulator gets wrong
    np.testing.assert_array_equal(np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32), want)
    np.testing.assert_array_equal(_numpy_dot(op, c, a, _vnni(b), 16), want)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 29, 3), (9, 25, 65), (17, 49, 200), (33, 3, 257)])
def test_matmul_odd_shapes_match_the_numpy_engine(engine, shape):
    """pyamx.matmul's row-major route (K padded inside C) on shapes off every panel and block size."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="fp8 operands by their dtypes need ml_dtypes")

    _compiled(engine)
    m, n, k = shape
    rng = np.random.default_rng([SEED, m, n, k])
    a = rng.integers(0, 256, (m, k), dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    b = rng.integers(0, 256, (k, n), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    c = _c_bits(rng, (m, n)).view(np.float32)
    got = pyamx.matmul(a, b, c, backend="emulator", engine=engine)
    want = pyamx.matmul(a, b, c, backend="emulator", engine="numpy")
    assert got.engine == engine and want.engine == "numpy"
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
    if m * n * k <= 2000:
        ref_bits = np.array(ref.matmul(np.asarray(c).view(np.uint32).tolist(), a.view(np.uint8).tolist(),
                                       b.view(np.uint8).tolist(), "bf8", "hf8"), np.uint32)
        np.testing.assert_array_equal(np.asarray(got).view(np.uint32), ref_bits)


def test_thread_counts_agree(engine):
    eng = _compiled(engine)
    rng = np.random.default_rng(SEED + 1)
    m, n, k = 67, 301, 512
    op = NAMES[0]
    a, b = _operands("finite", rng, op, m, n, k)
    a, b = _special_sprinkle(rng, a, b, op)
    a[5, :64] = 0x01
    a[5, 3] = 0x7B  # a wide span in one row: the integer path among the threads
    c = _c_bits(rng, (m, n))
    want = _numpy_dot(op, c, a, _vnni(b), k // 4)
    for threads in (1, 2, 3, 7):
        got = np.asarray(eng.dot(op, c, a, _vnni(b), k // 4, threads=threads)).view(np.uint32)
        np.testing.assert_array_equal(got, want, err_msg=f"threads={threads}")


@pytest.mark.parametrize("mxcsr", [0x1F80, 0x9FC0, 0x3F80, 0x5F80, 0x1F80 | 0x3F])
def test_the_callers_mxcsr_changes_nothing_and_is_restored(engine, mxcsr):
    """FTZ|DAZ, round toward zero / down, sticky flags set: the same bits, and MXCSR as it was."""
    eng = _compiled(engine)
    if not HAS_MXCSR:
        pytest.skip("no MXCSR off x86-64")
    ffi, lib = eng._ffi, eng._lib
    rng = np.random.default_rng(SEED + 2)
    op = NAMES[1]
    m, n, k = 6, 30, 128
    a, b = _operands("finite", rng, op, m, n, k)
    a[:, ::9] = 0x01  # denormal operands and tiny sums: DAZ/FTZ would flush them
    c = _c_bits(rng, (m, n))
    c[0, :] = 0x00000001
    want = _numpy_dot(op, c, a, _vnni(b), k // 4)
    out = np.zeros((m, n), np.uint32)
    call = _engine.call_descriptor(ffi, lib, eng._kind, isa.get(op).op_id, a, k, b, n, c, n, out, n, m, n, k, 2,
                                   rows_of_b=True)
    rc, after = run_under_mxcsr(lib, call, mxcsr)
    assert rc == lib.PYAMX_ENGINE_OK
    assert after == mxcsr
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("op", NAMES)
def test_auto_picks_a_compiled_engine_for_the_default_numerics_only(op):
    best = next((name for name in COMPILED if _engine._compiled_status(name)[0]), None)
    if best is None:
        pytest.skip("no compiled engine runs here")
    assert _engine.resolve("auto", op=op).name == best
    wide = pyamx.Numerics(fp8_accum="bochs_pairwise")
    assert _engine.resolve("auto", wide, op=op).name == "numpy"
    with pytest.raises(ValueError, match="implements only the default"):
        _engine.resolve(best, wide, op=op)


def test_entry_refuses_bad_arguments(engine):
    eng = _compiled(engine)
    ffi, lib = eng._ffi, eng._lib
    a = np.zeros((1, 4), np.uint8)
    b = np.zeros((4, 1), np.uint8)
    out = np.full(1, 0xDEADBEEF, np.uint32)

    def call(**fields):
        described = _engine.call_descriptor(ffi, lib, eng._kind, FP8_ROWS[0].op_id, a, 4, b, 1, None, 1, out, 1,
                                            1, 1, 4, 1, rows_of_b=True)
        for name, value in fields.items():
            setattr(described.struct, name, value)
        return lib.pyamx_engine_run(described.struct)

    for bad in (dict(k=0), dict(threads=0), dict(lda_bytes=3), dict(ldb_bytes=0), dict(k=(1 << 30) + 1)):
        assert call(**bad) == lib.PYAMX_ENGINE_E_ARG, bad
    assert out[0] == 0xDEADBEEF
    assert call() == lib.PYAMX_ENGINE_OK


@pytest.mark.parametrize("op", NAMES)
@pytest.mark.parametrize("over", [False, True])
def test_int32_sum_bound(engine, op, over):
    """Blocks whose integer sums come near 2^31: 63 values 112 and one 2^-8 in A (images 28672 and 1
    above A's lowest bit), B's column 56 or 128 with one 2^-4 (images 896 or 2048). The first bound
    is under 2^31 (the int16 path may run), the second over it, where an int32 sum would wrap."""
    eng = _compiled(engine)
    a_fmt, b_fmt = ref.formats(op)
    a = np.zeros((8, 64), np.uint8)
    a[:, :63] = _code_of(a_fmt, 112)
    a[:, 63] = _code_of(a_fmt, Fraction(1, 256))
    a[1::2, :63] |= 0x80  # negative rows too
    b = np.zeros((64, 24), np.uint8)
    b[:63, :] = _code_of(b_fmt, 128 if over else 56)
    b[63, :] = _code_of(b_fmt, Fraction(1, 16))
    c = np.zeros((8, 24), np.uint32)
    want = _reference_dot(op, c[:2, :2], a[:2], b[:, :2])
    got = np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32)
    np.testing.assert_array_equal(got[:2, :2], want)
    np.testing.assert_array_equal(got, _numpy_dot(op, c, a, _vnni(b), 16))


@pytest.mark.skipif(not TEST_BUILD, reason=NOT_A_TEST_BUILD)
def test_int_path_hook_reports_and_restores():
    lib = _compiled("avx512")._lib
    was = lib.pyamx_engine_fp8_int_path(-1)
    assert lib.pyamx_engine_fp8_int_path(0) == was
    assert lib.pyamx_engine_fp8_int_path(-1) == 0
    assert lib.pyamx_engine_fp8_int_path(was) == 0
    assert lib.pyamx_engine_fp8_int_path(-1) == was


def _narrow(rng, shape, fmt):
    """Random normal numbers of fmt with biased exponents 5..8 and both signs: spans of a few bits."""
    mbits = 2 if fmt == "bf8" else 3
    codes = (rng.integers(5, 9, shape) << mbits) | rng.integers(0, 1 << mbits, shape) | (rng.integers(0, 2, shape) << 7)
    return codes.astype(np.uint8)


@pytest.mark.parametrize("op", NAMES)
def test_rows_left_out_of_the_int16_tile(engine, op):
    """One 8 x 24 tile whose rows mostly suit the int16 path and a few do not (a NaN, an infinity
    against a zero, a 30-bit span), with -0 and NaN accumulators on them: the left-out rows keep
    the exact answer and the sign of zero."""
    eng = _compiled(engine)
    a_fmt, b_fmt = ref.formats(op)
    rng = np.random.default_rng([SEED, 9, NAMES.index(op)])
    a, b = _narrow(rng, (8, 64), a_fmt), _narrow(rng, (64, 24), b_fmt)
    a[2, 7] = 0x7F  # NaN in either format
    a[4, 1] = 0x7C if a_fmt == "bf8" else 0x7F
    b[1, 3] = 0
    a[6, 0], a[6, 1] = _code_of(a_fmt, 2 ** (7 if a_fmt == "bf8" else 6)), 0x01  # a wide span
    a[6, 2] = a[6, 0] | 0x80
    c = _c_bits(rng, (8, 24))
    c[[2, 4, 6], :4] = 0x80000000
    c[6, 4] = 0x7FC00001
    want = _reference_dot(op, c, a, b)
    np.testing.assert_array_equal(np.asarray(eng.dot(op, c, a, _vnni(b), 16)).view(np.uint32), want)
    np.testing.assert_array_equal(_numpy_dot(op, c, a, _vnni(b), 16), want)
