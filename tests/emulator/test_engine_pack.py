"""pyamx.matmul's compiled path: row-major operands packed and widened inside C.

``Engine.matmul`` (C: ``pyamx_engine_run`` with B's rows as they are) takes A and B as ordinary
row-major matrices, pads K to whole dwords, widens bf16/fp16 with SIMD
(VCVTPH2PS/F16C for fp16, with inf/NaN lanes rebuilt from their bits) and
starts C from +0 when none is given. Every result here is compared as
uint32 bits with the numpy engine, which packs in Python (padding,
interleaving) and computes independently; the fp16 widening is also checked
against numpy's own float16 -> float32 conversion.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyamx
from pyamx.table import bf16
from pyamx.emulator import engine as eng

from test_engine import HAS_MXCSR, MXCSR_CASES, _compiled_engine, run_under_mxcsr

COMPILED = ("avx512", "avx2", "portable")
INT8_DTYPES = ((np.int8, np.int8), (np.int8, np.uint8), (np.uint8, np.int8), (np.uint8, np.uint8))


# The portable engine is the slowest by far; CI's slow leg runs it here once, and its exactness
# tests run on every commit in tests/emulator/test_engine.py.
@pytest.fixture(params=[*COMPILED[:-1], pytest.param(COMPILED[-1], marks=pytest.mark.slow)])
def compiled(request) -> eng.Engine:
    return _compiled_engine(request.param)


def bits(x) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def _specials(group: str) -> np.ndarray:
    """Zeros, infinities, NaN payloads (quiet and signalling), denormals, extremes, as 16-bit patterns."""
    if group == "bf16":
        v = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0xFFA5, 0x0001, 0x807F, 0x0040, 0x0080,
             0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x0100, 0x7F00]
    else:
        v = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x7C01, 0xFD55, 0x0001, 0x83FF, 0x0200, 0x0400,
             0x8400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x0800, 0x7800]
    return np.array(v, dtype=np.uint16)


def operand(rng, group: str, shape, adversarial: bool) -> np.ndarray:
    """A bf16 (uint16 bits), float16 or 8-bit operand; adversarial: a third of it special values."""
    if group == "int8":
        raise AssertionError("use int8_operand")
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(4)
    raw = bf16.from_float32(x) if group == "bf16" else x.astype(np.float16).view(np.uint16)
    if adversarial:
        pick = rng.random(shape) < 0.33
        raw = np.where(pick, rng.choice(_specials(group), shape), raw).astype(np.uint16)
    return raw if group == "bf16" else raw.view(np.float16)


def accumulator(rng, shape, adversarial: bool) -> np.ndarray:
    c = rng.standard_normal(shape).astype(np.float32)
    if adversarial:
        special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFF812345, 0x00000001, 0x80400000,
                            0x00800000], dtype=np.uint32)
        c = np.where(rng.random(shape) < 0.3, rng.choice(special, shape), c.view(np.uint32)).astype(np.uint32)
        c = c.view(np.float32)
    return c


def both(a, b, c, name, threads):
    got = pyamx.matmul(a, b, c, backend="emulator", engine=name, threads=threads)
    want = pyamx.matmul(a, b, c, backend="emulator", engine="numpy")
    assert got.engine == name and want.engine == "numpy"
    return bits(got), bits(want)


# ---- widening ---------------------------------------------------------------------


@pytest.mark.parametrize("side", ("a", "b"))
def test_every_fp16_pattern_widens_exactly(compiled, side):
    """All 65536 fp16 patterns times 1.0 (K = 1: the padded odd lane adds -0 * +0)."""
    patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    one = np.ones((1, 1), dtype=np.float16)
    if side == "a":
        out = bits(pyamx.matmul(patterns.reshape(-1, 1), one, backend="emulator", engine=compiled.name)).ravel()
    else:
        out = bits(pyamx.matmul(one, patterns.reshape(1, -1), backend="emulator", engine=compiled.name)).ravel()
    raw = patterns.view(np.uint16).astype(np.uint32)
    nan = (raw & 0x7FFF) > 0x7C00
    finite_nonzero = ((raw & 0x7C00) != 0x7C00) & ((raw & 0x7FFF) != 0)
    # numpy's own conversion is exact, fp16 subnormals included (they are fp32 normals: never flushed)
    expected = patterns.astype(np.float32).view(np.uint32)
    assert np.array_equal(out[finite_nonzero], expected[finite_nonzero])
    zeros = (raw & 0x7FFF) == 0
    assert (out[zeros] == 0).all()  # +0 + (+-0 * 1) ... every lane sum of zeros is +0 under RNE
    inf = (raw & 0x7FFF) == 0x7C00
    assert np.array_equal(out[inf], np.where(raw[inf] & 0x8000, 0xFF800000, 0x7F800000).astype(np.uint32))
    # a NaN operand comes out quieted with its payload (x86 rule), not as the default NaN
    quiet = ((raw & 0x8000) << 16) | 0x7FC00000 | ((raw & 0x3FF) << 13)
    assert np.array_equal(out[nan], quiet[nan])


@pytest.mark.parametrize("group", ("bf16", "fp16"))
@pytest.mark.parametrize("threads", (1, 2))
def test_every_16_bit_pattern_in_products_equals_the_numpy_engine(compiled, group, threads):
    """Every pattern appears in A (and, transposed, in B) next to random and special values."""
    rng = np.random.default_rng(11)
    patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    if group == "fp16":
        patterns = patterns.view(np.float16)
    a = patterns.reshape(2048, 32)
    b = operand(rng, group, (32, 7), adversarial=True)
    got, want = both(a, b, None, compiled.name, threads)
    assert np.array_equal(got, want)
    got, want = both(operand(rng, group, (5, 31), True), patterns[: 31 * 2048].reshape(31, 2048), None,
                     compiled.name, threads)
    assert np.array_equal(got, want)


# ---- shapes, padding, threads -----------------------------------------------------

SMALL_SHAPES = [(1, 1, 1), (1, 2, 1), (2, 3, 5), (7, 1, 13), (6, 33, 32), (13, 31, 33), (17, 64, 1), (31, 65, 29),
                (37, 70, 41), (70, 67, 70), (64, 97, 3)]
# large enough for several threads: column split, and a narrow B that splits rows
THREAD_SHAPES = [(130, 301, 97), pytest.param(400, 999, 40, marks=pytest.mark.slow), (97, 515, 131)]


@pytest.mark.parametrize("group", ("bf16", "fp16"))
@pytest.mark.parametrize("m,k,n", SMALL_SHAPES)
def test_odd_float_shapes_equal_the_numpy_engine(compiled, group, m, k, n):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a, b = operand(rng, group, (m, k), True), operand(rng, group, (k, n), True)
    c = accumulator(rng, (m, n), True)
    for cc in (None, c):
        got, want = both(a, b, cc, compiled.name, 3)
        assert np.array_equal(got, want), (m, k, n, cc is None)


@pytest.mark.parametrize("dtypes", INT8_DTYPES, ids=lambda d: f"{d[0].__name__}-{d[1].__name__}")
@pytest.mark.parametrize("m,k,n", SMALL_SHAPES + [(5, 129, 7), (3, 250, 66)])
def test_odd_int8_shapes_equal_the_numpy_engine(compiled, dtypes, m, k, n):
    rng = np.random.default_rng(m * 31 + k * 7 + n)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8).view(dtypes[0])
    b = rng.integers(0, 256, (k, n)).astype(np.uint8).view(dtypes[1])
    c = rng.integers(-2**31, 2**31, (m, n), dtype=np.int64).astype(np.int32)
    for cc in (None, c):
        got = pyamx.matmul(a, b, cc, backend="emulator", engine=compiled.name)
        want = pyamx.matmul(a, b, cc, backend="emulator", engine="numpy")
        assert np.array_equal(bits(got), bits(want)), (m, k, n)
    exact = a.astype(np.int64) @ b.astype(np.int64) + c
    assert np.array_equal(bits(got), bits(exact.astype(np.uint64).astype(np.uint32)))  # 32-bit wrap


@pytest.mark.parametrize("group", ("bf16", "fp16", "int8"))
@pytest.mark.parametrize("m,k,n", THREAD_SHAPES)
def test_thread_counts_one_to_five_give_identical_bits(compiled, group, m, k, n):
    rng = np.random.default_rng(3)
    if group == "int8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(0, 256, (k, n)).astype(np.uint8)
        c = None
    else:
        a, b = operand(rng, group, (m, k), True), operand(rng, group, (k, n), True)
        c = accumulator(rng, (m, n), True)
    want = bits(pyamx.matmul(a, b, c, backend="emulator", engine="numpy"))
    for threads in range(1, 6):
        got = bits(pyamx.matmul(a, b, c, backend="emulator", engine=compiled.name, threads=threads))
        assert np.array_equal(got, want), threads


def test_no_accumulator_is_plus_zero(compiled):
    """c=None starts every element at +0, not at the first block's lane sum.

    -2^-126 * 0.5 is tiny: FTZ makes both lanes -0, so the lane sum is -0; C = +0 + -0 = +0,
    while an explicit -0 accumulator keeps -0.
    """
    a = np.array([[0x8080, 0x8080]], dtype=np.uint16)  # -2^-126 twice
    b = np.array([[0x3F00], [0x3F00]], dtype=np.uint16)  # 0.5 twice
    for name in (compiled.name, "numpy"):
        assert bits(pyamx.matmul(a, b, backend="emulator", engine=name))[0, 0] == 0
        minus = np.array([[-0.0]], dtype=np.float32)
        assert bits(pyamx.matmul(a, b, minus, backend="emulator", engine=name))[0, 0] == 0x80000000


def test_strided_and_transposed_operands_equal_contiguous_ones(compiled):
    rng = np.random.default_rng(8)
    a_full = operand(rng, "bf16", (40, 90), True)
    b_full = operand(rng, "bf16", (90, 70), True)
    a, b = a_full[::2, 1::2], np.asfortranarray(b_full[::2, ::2])
    got = bits(pyamx.matmul(a, b, backend="emulator", engine=compiled.name))
    want = bits(pyamx.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), backend="emulator",
                             engine=compiled.name))
    assert np.array_equal(got, want)
    assert np.array_equal(got, bits(pyamx.matmul(a, b, backend="emulator", engine="numpy")))


def test_inputs_are_not_modified(compiled):
    rng = np.random.default_rng(9)
    a, b, c = operand(rng, "fp16", (9, 21), True), operand(rng, "fp16", (21, 11), True), accumulator(rng, (9, 11), True)
    copies = [x.copy() for x in (a, b, c)]
    pyamx.matmul(a, b, c, backend="emulator", engine=compiled.name)
    for x, y in zip((a, b, c), copies):
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


# ---- floating-point environment -----------------------------------------------------


@pytest.mark.skipif(not HAS_MXCSR, reason="x86-64 MXCSR only")
@pytest.mark.parametrize("case", sorted(MXCSR_CASES))
@pytest.mark.parametrize("group", ("bf16", "fp16"))
def test_caller_mxcsr_changes_no_bit_of_matmul_and_is_restored(compiled, case, group):
    ffi, lib = eng._lib()
    mxcsr = MXCSR_CASES[case]
    rng = np.random.default_rng(21)
    m, k, n = 200, 65, 257  # several threads' work, odd K (padding), a partial panel
    a, b = operand(rng, group, (m, k), True), operand(rng, group, (k, n), True)
    want = bits(pyamx.matmul(a, b, backend="emulator", engine="numpy"))
    op = lib.PYAMX_OP_TDPBF16PS if group == "bf16" else lib.PYAMX_OP_TDPFP16PS
    a16, b16 = a.view(np.uint16), b.view(np.uint16)
    for threads in (1, 2):
        out = np.empty((m, n), dtype=np.uint32)
        call = eng.call_descriptor(ffi, lib, compiled._kind, op, a16, 2 * k, b16, 2 * n, None, n, out, n, m, n, k,
                                   threads, rows_of_b=True)
        rc, after = run_under_mxcsr(lib, call, mxcsr)
        assert rc == 0
        assert after == mxcsr, f"the engine left MXCSR {after:#06x}, the caller had {mxcsr:#06x}"
        assert np.array_equal(out, want), (case, threads)


# ---- the C entry point ----------------------------------------------------------


def test_c_matmul_entry_refuses_bad_arguments(compiled):
    ffi, lib = eng._lib()
    raw = np.zeros(64, dtype=np.uint16)
    a, b = raw[:32].reshape(4, 8), raw[32:].reshape(8, 4)
    c = np.zeros((4, 4), dtype=np.uint32)
    out = np.zeros((4, 4), dtype=np.uint32)
    odd = np.zeros(80, dtype=np.uint8)[1:65]  # a float operand at an odd address

    def call(op=lib.PYAMX_OP_TDPBF16PS, a_buf=None, lda=16, ldb=8, c_buf=c, ldc=4, out_buf=out, m=4, n=4, k=8):
        described = eng.call_descriptor(ffi, lib, compiled._kind, op, a if a_buf is None else a_buf, lda, b, ldb,
                                        c_buf, ldc, out_buf, 4, m, n, k, 1, rows_of_b=True)
        return lib.pyamx_engine_run(described.struct)

    assert call() == lib.PYAMX_ENGINE_OK
    assert call(c_buf=None, ldc=0) == lib.PYAMX_ENGINE_OK  # no C: ldc_in is not used
    for bad in (dict(op=lib.PYAMX_OP_TILELOADD), dict(lda=15), dict(lda=14), dict(ldb=6), dict(ldc=3),
                dict(m=0), dict(k=0), dict(n=-1), dict(out_buf=c), dict(a_buf=odd)):
        assert call(**bad) == lib.PYAMX_ENGINE_E_ARG, bad
    # int8 takes 1-byte values: any stride >= k, any address
    assert call(op=lib.PYAMX_OP_TDPBSSD, a_buf=odd, lda=15, k=8, ldb=8) == lib.PYAMX_ENGINE_OK


@pytest.mark.slow
def test_concurrent_calls_with_helper_threads_give_the_same_bits(compiled):
    """Python threads calling at once (GIL released): each call's helpers, shared state and the
    kept packing buffer (one caller gets it, the others allocate) must not mix up results."""
    import threading

    rng = np.random.default_rng(31)
    jobs = []
    for i in range(6):
        m, k, n = 90 + 7 * i, 200 + 13 * i, 70 + 11 * i
        a, b = operand(rng, "bf16", (m, k), True), operand(rng, "bf16", (k, n), True)
        jobs.append((a, b, bits(pyamx.matmul(a, b, backend="emulator", engine="numpy"))))
    failures = []

    def work(index):
        a, b, want = jobs[index]
        for threads in (2, 3, 5, 1, 4):
            got = bits(pyamx.matmul(a, b, backend="emulator", engine=compiled.name, threads=threads))
            if not np.array_equal(got, want):
                failures.append((index, threads))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []
