"""The C conversions (csrc/convert.c, pyamx/_convert.py) give the bits of the numpy implementations.

The numpy code pyamx falls back to without its extension is the reference here: every bf16/fp16 code
widened, and float32/float64 rounded on every exponent with random fractions, exact ties of both
parities, denormals, zeros, infinities, NaNs of every payload class and the overflow edge; a large
array split over threads; strided, reversed, broadcast, big-endian and misaligned views; and under a
hostile MXCSR. tests/table/test_bf16_convert.py holds the public function to an exact reference of its own.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyamx
from pyamx import _convert
from pyamx.table import bf16
from pyamx.emulator.fp16 import widen_fp16_bits, widen_fp16_bits_numpy
from pyamx.table import bf16 as bf16_module
from mxcsr import DAZ, FTZ, ROUND_DOWN, ROUND_UP, RZ, caller_mxcsr

if _convert.library() is None:
    pytest.skip("the C extension pyamx._native is not built (python build.py)", allow_module_level=True)

ALL_CODES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _equal_bits(got: np.ndarray, want: np.ndarray, source: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bad = np.nonzero(got.reshape(-1) != want.reshape(-1))[0]
    if bad.size:
        i = bad[0]
        src = np.ascontiguousarray(source).reshape(-1)
        raise AssertionError(f"{bad.size} differ; first: source bits {src.view(f'u{src.itemsize}')[i]:#x} "
                             f"-> {got.reshape(-1)[i]:#x}, numpy gives {want.reshape(-1)[i]:#x}")


def _reference(values: np.ndarray, fmt: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if fmt == "bf16":
            return _convert.numpy_bf16_bits(values)
        return _convert.numpy_fp16_bits(values)


# -- the values: every class the rounding distinguishes ----------------------------------------


def float32_cases(rng) -> np.ndarray:
    """uint32 bits: every exponent with random fractions and both signs, ties at bit 16 (bf16) and
    bit 13 (fp16) of both parities and one ulp around them, zeros, infinities, NaNs, the edges."""
    exponents = np.repeat(np.arange(256, dtype=np.uint32), 64)
    fractions = rng.integers(0, 1 << 23, exponents.size, dtype=np.uint32)
    random = (exponents << 23) | fractions
    ties = []
    for bit in (16, 13):  # the rounding position of bf16 and of fp16 (denormal fp16 ties come from the exponents)
        above = rng.integers(0, 1 << (23 - bit), 2048, dtype=np.uint32) << (bit + 1)
        parity = rng.integers(0, 2, 2048, dtype=np.uint32) << bit
        exps = rng.integers(0, 255, 2048, dtype=np.uint32) << 23
        tie = exps | above | parity | (1 << (bit - 1))
        ties += [tie, tie - 1, tie + 1]
    # fp16 denormal results: exact ties k * 2**-24 + 2**-25, for every k, both parities
    k = np.arange(1, 1 << 10, dtype=np.float64)
    fp16_denormal_ties = ((k + 0.5) * 2.0**-24).astype(np.float32).view(np.uint32)
    nan_payloads = np.array([1, 0x1FFF, 0x2000, 0xFFFF, 0x10000, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF,
                             0x12345, 0x0F0000, 0x7FE000, 0x001FFF], dtype=np.uint32)
    edges = np.array([0, 0x7F800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7FC000, 0x477FE000, 0x477FEFFF,
                      0x477FF000, 0x47800000, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001, 0x32FFFFFF,
                      0x00000001, 0x00800000, 0x007FFFFF, 0x00400000, 0x3F800000], dtype=np.uint32)
    positive = np.concatenate([random, *ties, fp16_denormal_ties, 0x7F800000 | nan_payloads, edges])
    return np.concatenate([positive, positive | np.uint32(0x80000000)])


def float64_cases(rng) -> np.ndarray:
    """uint64 bits: every exponent with random fractions, ties at bit 45 (bf16) and 42 (fp16) of
    both parities, denormal-result ties of both formats, NaN payloads above and below both cuts."""
    u64 = np.uint64
    exponents = np.repeat(np.arange(2048, dtype=np.uint64), 16)
    random = (exponents << u64(52)) | rng.integers(0, 1 << 52, exponents.size, dtype=np.uint64)
    near = rng.integers(1023 - 160, 1023 + 160, 40000).astype(np.uint64)  # where bf16/fp16 results live
    near = (near << u64(52)) | rng.integers(0, 1 << 52, near.size, dtype=np.uint64)
    ties = []
    for bit in (45, 42):
        exps = rng.integers(1023 - 160, 1023 + 160, 4096).astype(np.uint64) << u64(52)
        above = rng.integers(0, 1 << (52 - bit - 1), 4096, dtype=np.uint64) << u64(bit + 1)
        parity = rng.integers(0, 2, 4096, dtype=np.uint64) << u64(bit)
        tie = exps | above | parity | u64(1 << (bit - 1))
        ties += [tie, tie - u64(1), tie + u64(1)]
    k = np.arange(0, 1 << 10, dtype=np.float64)
    denormal_ties = np.concatenate([(k + 0.5) * 2.0**-24, (k[:128] + 0.5) * 2.0**-133,
                                    (k + 0.5) * 2.0**-24 * (1 + 2.0**-40), (k[:128] + 0.5) * 2.0**-133 * (1 - 2.0**-40)])
    nan_payloads = np.array([1, (1 << 42) - 1, 1 << 42, (1 << 45) - 1, 1 << 45, 1 << 51, (1 << 51) + 1,
                             (1 << 52) - 1, 0x5555555555555, 0xAAAAAAAAAAAAA, 0x3FFFFFFFFFF], dtype=np.uint64)
    edges = np.array([1.0 + 2**-8 + 2**-40, 1.0 + 2**-11 + 2**-40, 65504.0, 65519.99, 65520.0, 65536.0,
                      3.3895313892515355e38, 3.4e38, 1e308, 2.0**-1074, 2.0**-1022, 2.0**-25, 2.0**-133,
                      2.0**-134, 0.0, np.inf])
    positive = np.concatenate([random, near, *ties, denormal_ties.view(np.uint64),
                               u64(0x7FF0000000000000) | nan_payloads, edges.view(np.uint64)])
    return np.concatenate([positive, positive | u64(1 << 63)])


# -- widening: every code ----------------------------------------------------------------------


def test_bf16_to_float32_every_code():
    want = ALL_CODES.astype(np.uint32) << np.uint32(16)
    _equal_bits(_convert.widen(ALL_CODES, "bf16"), want, ALL_CODES)
    _equal_bits(bf16.widen_bits(ALL_CODES), want, ALL_CODES)
    _equal_bits(bf16.to_float32(ALL_CODES).view(np.uint32), want, ALL_CODES)


def test_fp16_to_float32_every_code():
    want = widen_fp16_bits_numpy(ALL_CODES)
    _equal_bits(_convert.widen(ALL_CODES, "fp16"), want, ALL_CODES)
    _equal_bits(widen_fp16_bits(ALL_CODES), want, ALL_CODES)
    # and numpy's own float16 -> float32, exact, for the non-NaNs (its NaNs are quieted)
    finite = ~np.isnan(ALL_CODES.view(np.float16))
    with np.errstate(invalid="ignore"):
        numpy_wide = ALL_CODES.view(np.float16).astype(np.float32).view(np.uint32)
    _equal_bits(want[finite], numpy_wide[finite], ALL_CODES[finite])


# -- rounding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_float32_rounds_as_the_numpy_implementation(fmt):
    bits = float32_cases(np.random.default_rng(29))
    values = bits.view(np.float32)
    _equal_bits(_convert.to_bits(values, fmt), _reference(values, fmt), bits)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_float64_rounds_directly_as_the_numpy_implementation(fmt):
    bits = float64_cases(np.random.default_rng(30))
    values = bits.view(np.float64)
    _equal_bits(_convert.to_bits(values, fmt), _reference(values, fmt), bits)


def test_the_nan_rules():
    """bf16: quieted, top 7 fraction bits kept; fp16: top 10 kept, not quieted, 1 where none are left."""
    signalling = np.array([0x7F800001, 0xFF812345, 0x7FA00000], dtype=np.uint32).view(np.float32)
    assert list(_convert.to_bits(signalling, "bf16")) == [0x7FC0, 0xFFC1, 0x7FE0]
    assert list(_convert.to_bits(signalling, "fp16")) == [0x7C01, 0xFC09, 0x7D00]
    wide = np.array([0x7FF0000000000001, 0xFFF4000000000000], dtype=np.uint64).view(np.float64)
    assert list(_convert.to_bits(wide, "bf16")) == [0x7FC0, 0xFFE0]
    assert list(_convert.to_bits(wide, "fp16")) == [0x7C01, 0xFD00]


# -- threads, layouts, byte order, the environment ---------------------------------------------


def test_a_large_array_split_over_threads_gives_the_same_bits():
    loaded = _convert.library()
    size = loaded[1].pyamx_convert_parallel_min() * 2 + 77  # uneven: the last share is a different size
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 1 << 32, size, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    want = _reference(values, "bf16")
    for threads in (1, 2, 3):
        _equal_bits(_convert.to_bits(values, "bf16", threads=threads), want, bits)
    _equal_bits(_convert.to_bits(values, "fp16", threads=3), _reference(values, "fp16"), bits)
    halves = want[: size // 2 * 2].reshape(-1, 2)[:, 0]  # a strided source across the threads' shares
    _equal_bits(_convert.widen(halves, "bf16", threads=2), halves.astype(np.uint32) << np.uint32(16), halves)


def _views(base: np.ndarray) -> list:
    return [base.T, base[::3, ::2], base[::-1, 5:], base[:, ::-3].T, base[7], base[:, 9], base[2:5, 3:4],
            np.broadcast_to(base[0], (50, base.shape[1])), np.stack([base, base])[:, ::2, ::3],
            np.stack([base, base]).transpose(1, 0, 2), np.asfortranarray(base), base[:0], base[3:4, 4:5].reshape(())]


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_any_layout_is_read_in_place_with_the_same_bits(fmt):
    rng = np.random.default_rng(8)
    base32 = rng.integers(0, 1 << 32, (300, 257), dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        base64 = base32.astype(np.float64)  # exact, NaNs quieted
    for base in (base32, base64):
        for view in _views(base):
            for threads in (1, 2):
                got = _convert.to_bits(view, fmt, threads=threads)
                assert got.flags.c_contiguous
                _equal_bits(got, _reference(np.array(view, order="C"), fmt), view)
    codes = rng.integers(0, 1 << 16, (300, 257), dtype=np.uint64).astype(np.uint16)
    for view in _views(codes):
        want = (view.astype(np.uint32) << np.uint32(16)) if fmt == "bf16" else widen_fp16_bits_numpy(view)
        _equal_bits(_convert.widen(view, fmt, threads=2), want, view)


def test_big_endian_and_misaligned_input():
    rng = np.random.default_rng(9)
    values = rng.standard_normal(1001).astype(np.float32)
    want = _reference(values, "bf16")
    _equal_bits(bf16.from_float32(values.astype(">f4")), want, values)
    raw = np.zeros(values.nbytes + 1, np.uint8)
    raw[1:] = values.view(np.uint8)
    misaligned = np.frombuffer(raw.data, dtype=np.float32, offset=1)
    assert not misaligned.flags.aligned
    _equal_bits(_convert.to_bits(misaligned, "bf16"), want, values)
    _equal_bits(_convert.widen(want.astype(">u2"), "bf16"), want.astype(np.uint32) << np.uint32(16), want)
    _equal_bits(bf16.to_float32(want.view(np.int16).astype(">i2")).view(np.uint32),
                want.astype(np.uint32) << np.uint32(16), want)


def test_results_do_not_depend_on_the_callers_mxcsr():
    bits32 = float32_cases(np.random.default_rng(10))
    bits64 = float64_cases(np.random.default_rng(11))
    want = {fmt: (_reference(bits32.view(np.float32), fmt), _reference(bits64.view(np.float64), fmt))
            for fmt in ("bf16", "fp16")}
    wide_fp16 = widen_fp16_bits_numpy(ALL_CODES)
    # round toward zero, down (both with FTZ and DAZ), up; every exception masked
    for mxcsr in (RZ | FTZ | DAZ, ROUND_DOWN | FTZ | DAZ, ROUND_UP):
        with caller_mxcsr(mxcsr) as lib:  # skips where MXCSR cannot be set (not x86-64)
            got = {fmt: (_convert.to_bits(bits32.view(np.float32), fmt, threads=1),
                         _convert.to_bits(bits64.view(np.float64), fmt, threads=1)) for fmt in want}
            got_wide = _convert.widen(ALL_CODES, "fp16", threads=1)
            after = lib.pyamx_get_mxcsr()
        assert after == mxcsr
        for fmt in want:
            _equal_bits(got[fmt][0], want[fmt][0], bits32)
            _equal_bits(got[fmt][1], want[fmt][1], bits64)
        _equal_bits(got_wide, wide_fp16, ALL_CODES)


def test_without_the_extension_the_numpy_code_runs_with_the_same_bits(monkeypatch):
    values = float32_cases(np.random.default_rng(12)).view(np.float32)
    with_c = (bf16.from_float32(values), bf16.to_float32(ALL_CODES), widen_fp16_bits(ALL_CODES),
              _convert.round_floats(values, "fp16"))
    monkeypatch.setattr(_convert, "library", lambda: None)
    assert _convert.to_bits(values, "bf16") is None and _convert.widen(ALL_CODES, "bf16") is None
    with np.errstate(all="ignore"):
        without = (bf16.from_float32(values), bf16.to_float32(ALL_CODES), widen_fp16_bits(ALL_CODES),
                   _convert.round_floats(values, "fp16"))
    for got, want in zip(without, with_c):
        _equal_bits(got.view(np.uint32 if got.itemsize == 4 else np.uint16),
                    want.view(np.uint32 if want.itemsize == 4 else np.uint16), values)


def test_threads_follow_the_engines_variable(monkeypatch):
    from pyamx import _threads

    monkeypatch.setenv(_threads.ENV_VAR, "3")
    _threads.forget()  # the variable is read once and kept, as the engines keep it
    monkeypatch.setattr(_threads, "_kept", [])  # and forgotten again after the test
    assert _convert._threads(10, 100) == 1  # small work: the caller's thread, no environment read
    assert _convert._threads(100, 100) == 3
    monkeypatch.setenv(_threads.ENV_VAR, "zero")
    _threads.forget()
    with pytest.raises(pyamx.errors.EnvironmentVariableError):
        _convert._threads(100, 100)


@pytest.mark.parametrize("kind", ["bf16", "fp16"])
def test_matmul_rounds_float_operands_as_the_numpy_implementation(kind):
    rng = np.random.default_rng(13)
    a = rng.standard_normal((5, 40)) * 3  # float64: rounded directly
    b = rng.standard_normal((40, 6)).astype(np.float32).T.copy().T  # float32, a transposed layout
    a_bits, b_bits = _reference(a, kind), _reference(b, kind)
    if kind == "fp16":
        a_bits, b_bits = a_bits.view(np.float16), b_bits.view(np.float16)
    from_floats = pyamx.matmul(a, b, kind=kind, backend="emulator")
    from_bits = pyamx.matmul(a_bits, b_bits, backend="emulator")
    assert from_floats.rounded_to == kind
    np.testing.assert_array_equal(np.asarray(from_floats).view(np.uint32), np.asarray(from_bits).view(np.uint32))


def test_bad_requests_are_refused_by_the_c_side():
    ffi, lib = _convert.library()
    src = np.zeros(4, np.float32)
    out = np.zeros(4, np.uint16)
    call = lambda op, rows, cols, rs, cs, threads: lib.pyamx_convert(  # noqa: E731
        op, ffi.from_buffer(src), rows, cols, rs, cs, ffi.from_buffer(out), threads)
    assert call(lib.PYAMX_CONVERT_F32_TO_BF16, 1, 4, 0, 4, 1) == 0
    assert call(0, 1, 4, 0, 4, 1) == lib.PYAMX_E_ARG
    assert call(lib.PYAMX_CONVERT_F32_TO_BF16, -1, 4, 0, 4, 1) == lib.PYAMX_E_ARG
    assert call(lib.PYAMX_CONVERT_F32_TO_BF16, 1, 4, 0, 2, 1) == lib.PYAMX_E_ARG  # not a multiple of 4
    assert call(lib.PYAMX_CONVERT_F32_TO_BF16, 1, 4, 0, 4, 0) == lib.PYAMX_E_ARG
    assert call(lib.PYAMX_CONVERT_F32_TO_BF16, 1, 4, 0, 4, lib.PYAMX_MATMUL_MAX_THREADS) == 0  # the pool's size
    assert call(lib.PYAMX_CONVERT_F32_TO_BF16, 1, 4, 0, 4, lib.PYAMX_MATMUL_MAX_THREADS + 1) == lib.PYAMX_E_ARG
    assert bf16_module.from_float32(np.float32(1.0)).shape == ()


def test_complex_operands_round_their_parts_as_numpy(monkeypatch):
    from pyamx import _validate
    from pyamx.table import isa

    fmt = next(f for f in isa.FORMAT_ROWS if f.name == "cfp16")
    bits = float32_cases(np.random.default_rng(14))[: 2 * 64 * 100].reshape(64, 200)
    c64 = bits.view(np.complex64)
    with np.errstate(invalid="ignore"):
        c128 = c64.astype(np.complex128) * (1 + 2.0**-30)
    operands = [c64, c128, c64[::2, ::3], c128.T, c64.astype(">c8")]
    with_c = [_validate.complex_pairs(x, "a", "matmul", fmt) for x in operands]
    monkeypatch.setattr(_convert, "library", lambda: None)
    for x, got in zip(operands, with_c):
        _equal_bits(got, _validate.complex_pairs(x, "a", "matmul", fmt), x)
