"""pyamx.pack of float32/float64 B with kind="bf16"/"fp16": rounded while it is packed (csrc/pack_b.c's
pyamx_pack_b_rounded, one pass over B), byte for byte the tiles of rounding first and packing the bits.

Held to the two-pass path it replaced (pyamx_convert, then pyamx_pack_b), to the numpy rounding and
layout that work without the C extension, and to an exact rounding written here from the spec
(docs/numerics.md, "Conversions"): RNE on the exact values, overflow to infinity, the NaN rules. Over
random and adversarial values (denormals, both zeros, infinities, quiet and signalling NaNs with
payloads, ties of both parities and one ulp around them, the overflow edge, float64 values that a
detour through float32 would round twice), odd K and N, any strides, and under a hostile MXCSR.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import pyamx
from mxcsr import DAZ, FTZ, ROUND_DOWN, ROUND_UP, RZ, caller_mxcsr
from pyamx import _convert
from pyamx.cpu import _tile_layout

if _convert.library() is None:
    pytest.skip("the C extension pyamx._native is not built (python build.py)", allow_module_level=True)

FORMATS = {"bf16": (8, -126, 127), "fp16": (11, -14, 15)}  # significand bits, smallest normal exponent, largest


def _float32_values(rng) -> np.ndarray:
    """uint32 bits of every class the rounding tells apart, both signs."""
    u32 = np.uint32
    random = (np.repeat(np.arange(256, dtype=u32), 8) << u32(23)) | rng.integers(0, 1 << 23, 2048, dtype=u32)
    ties = []
    for bit in (16, 13):  # bf16's and fp16's rounding bit in a float32
        tie = ((rng.integers(0, 255, 512, dtype=u32) << u32(23)) | (rng.integers(0, 1 << (23 - bit), 512, dtype=u32)
                                                                    << u32(bit)) | u32(1 << (bit - 1)))
        ties += [tie, tie - u32(1), tie + u32(1)]
    fp16_denormal_ties = ((np.arange(1, 1 << 10) + 0.5) * 2.0**-24).astype(np.float32).view(u32)
    payloads = np.array([1, 0x1FFF, 0x2000, 0xFFFF, 0x10000, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF], dtype=u32)
    edges = np.array([0, 0x7F800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7FC000, 0x477FE000, 0x477FEFFF,
                      0x477FF000, 0x47800000, 0x00000001, 0x007FFFFF, 0x00800000, 0x33000000, 0x33000001], dtype=u32)
    positive = np.concatenate([random, *ties, fp16_denormal_ties, u32(0x7F800000) | payloads, edges])
    return np.concatenate([positive, positive | u32(0x80000000)])


def _float64_values(rng) -> np.ndarray:
    """uint64 bits: as above at float64's rounding bits (45, 42), and values near a float32 tie that a
    detour through float32 would round twice."""
    u64 = np.uint64
    exponents = rng.integers(1023 - 160, 1023 + 160, 4096).astype(u64)
    near = (exponents << u64(52)) | rng.integers(0, 1 << 52, 4096, dtype=u64)
    ties = []
    for bit in (45, 42):
        tie = ((exponents[:1024] << u64(52)) | (rng.integers(0, 1 << (51 - bit), 1024, dtype=u64) << u64(bit + 1))
               | (rng.integers(0, 2, 1024, dtype=u64) << u64(bit)) | u64(1 << (bit - 1)))
        ties += [tie, tie - u64(1), tie + u64(1)]
    double_rounding = np.array([1.0 + 2.0**-8 + 2.0**-40, 1.0 + 2.0**-11 + 2.0**-40, 1.0 + 2.0**-8 - 2.0**-30])
    payloads = np.array([1, (1 << 42) - 1, 1 << 42, (1 << 45) - 1, 1 << 45, 1 << 51, (1 << 52) - 1], dtype=u64)
    edges = np.array([65504.0, 65519.99, 65520.0, 3.3895313892515355e38, 3.4e38, 1e308, 2.0**-1074, 2.0**-1022,
                      2.0**-25, 2.0**-133, 2.0**-134, 2.0**-134 * (1 + 2.0**-40), 0.0, np.inf])
    positive = np.concatenate([near, *ties, double_rounding.view(u64), u64(0x7FF0000000000000) | payloads,
                               rng.integers(1, 1 << 52, 64, dtype=u64), edges.view(u64)])  # denormals
    return np.concatenate([positive, positive | u64(1 << 63)])


def _values(dtype, rng) -> np.ndarray:
    bits = _float32_values(rng) if dtype == np.float32 else _float64_values(rng)
    return rng.permutation(bits).view(dtype)


def _as_b(values: np.ndarray, k: int) -> np.ndarray:
    """The values as a (k, N) B with an odd N, the last row topped up with +-0 (both zeros once more)."""
    n = -(-values.size // k) | 1
    padded = np.zeros(k * n, values.dtype)
    padded[:values.size] = values
    padded[values.size::2] = -padded.dtype.type(0)
    return padded.reshape(k, n)


def _two_pass(b: np.ndarray, fmt: str) -> bytes:
    """The path pack took before: the whole B rounded to a bits array, then packed."""
    return _tile_layout.pack(np.ascontiguousarray(_convert.round_floats(b, fmt)), 1).tobytes()


def _numpy_tiles(b: np.ndarray, fmt: str) -> bytes:
    """No C at all: pyamx's numpy rounding and layout (the fallback without the extension)."""
    with np.errstate(all="ignore"):
        bits = _convert.numpy_bf16_bits(b) if fmt == "bf16" else _convert.numpy_fp16_bits(b)
    return _tile_layout.numpy_tiles(np.ascontiguousarray(bits)).tobytes()


def _views(b: np.ndarray) -> list:
    """b and views of it that pack reads in place (negative, zero and transposed strides) or copies."""
    big_endian = b.astype(b.dtype.newbyteorder(">"))
    raw = np.zeros(b.nbytes + 1, np.uint8)
    raw[1:] = b.reshape(-1).view(np.uint8)
    misaligned = np.frombuffer(raw.data, dtype=b.dtype, offset=1).reshape(b.shape)
    views = [b, b[::-1], b[:, ::-1], b[::-1, ::-3], np.asfortranarray(b), b[1:-2:2, 3:],
             np.broadcast_to(b[-1], (37, b.shape[1])), big_endian, misaligned]
    return [view for view in views if view.size]


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_pack_gives_the_tiles_of_round_then_pack(fmt, dtype):
    rng = np.random.default_rng(29)
    values = _values(dtype, rng)
    for k in (1, 2, 33, 97):  # odd K: the last dword padded with +0
        b = _as_b(values, k)
        for view in _views(b):
            want = _two_pass(view, fmt)
            assert want == _numpy_tiles(np.array(view), fmt)
            for threads in (1, 3):
                got = pyamx.pack(view, kind=fmt, threads=threads)
                assert got.rounded_to == fmt and not got.tiles.flags.writeable and got.tiles.ctypes.data % 64 == 0
                assert got.tiles.tobytes() == want, (k, view.shape, view.strides, threads)


def test_wide_and_tall_b_through_several_staging_chunks_and_threads():
    """N past the staging chunk (4096 columns), a ragged last block column, K blocks over threads."""
    rng = np.random.default_rng(30)
    for dtype, fmt in ((np.float32, "bf16"), (np.float64, "fp16"), (np.float32, "fp16")):
        b = rng.permutation(np.resize(_values(dtype, rng), 35 * 4133)).reshape(35, 4133)
        want = _two_pass(b, fmt)
        for threads in (1, 2, 7):
            assert pyamx.pack(b, kind=fmt, threads=threads).tiles.tobytes() == want
        tall = np.ascontiguousarray(b.reshape(-1)[: 1001 * 65].reshape(1001, 65)[:, ::-1])
        assert pyamx.pack(tall, kind=fmt, threads=3).tiles.tobytes() == _two_pass(tall, fmt)


# -- the exact rounding, from the spec ------------------------------------------------------------


def _exact(x: float, source_bits: int, source_width: int, fmt: str) -> int:
    """RNE of x's exact value to ``fmt``, overflow to infinity; NaNs by docs/numerics.md's rules."""
    p, emin, emax = FORMATS[fmt]
    sign = 0x8000 if source_bits >> (source_width - 1) else 0
    infinity = (2 * emax + 1) << (p - 1)
    fraction_bits = 23 if source_width == 32 else 52
    if math.isnan(x):
        payload = source_bits & ((1 << fraction_bits) - 1)
        top = payload >> (fraction_bits - (p - 1))
        if fmt == "bf16":
            return sign | infinity | top | 0x40  # quieted
        return sign | infinity | (top or 1)  # not quieted; stays a NaN
    if math.isinf(x):
        return sign | infinity
    if x == 0:
        return sign
    e = max(math.frexp(x)[1] - 1, emin)
    step = Fraction(2) ** (e - (p - 1))
    count = round(abs(Fraction(x)) / step)  # Fraction rounds half to even
    code = ((e + emax) << (p - 1)) + count - (1 << (p - 1))  # e == emin: count itself, a denormal or the least normal
    return sign | min(code, infinity)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_pack_holds_the_exact_rounding(fmt, dtype):
    rng = np.random.default_rng(31)
    values = _values(dtype, rng)[::3]
    b = _as_b(values, 45)
    width = 32 if dtype == np.float32 else 64
    source = b.view(np.uint32 if width == 32 else np.uint64)
    want = np.array([[_exact(float(v), int(s), width, fmt) for v, s in zip(row, srow)]
                     for row, srow in zip(b, source)], dtype=np.uint16)
    got = pyamx.pack(b[:, ::-1], kind=fmt, threads=2).unpack().view(np.uint16)[:, ::-1]
    bad = np.argwhere(got != want)
    assert bad.size == 0, [(hex(int(source[i, j])), hex(int(got[i, j])), hex(int(want[i, j]))) for i, j in bad[:5]]


def test_the_callers_mxcsr_does_not_change_a_byte():
    rng = np.random.default_rng(32)
    cases = [(_as_b(_values(dtype, rng), 33), fmt) for dtype in (np.float32, np.float64) for fmt in FORMATS]
    want = [_numpy_tiles(b, fmt) for b, fmt in cases]
    for mxcsr in (RZ | FTZ | DAZ, ROUND_DOWN | FTZ | DAZ, ROUND_UP):
        with caller_mxcsr(mxcsr) as lib:
            got = [pyamx.pack(b, kind=fmt, threads=threads).tiles.tobytes() for b, fmt in cases for threads in (1, 2)]
            after = lib.pyamx_get_mxcsr()
        assert after == mxcsr
        assert got == [w for w in want for _ in (1, 2)]


def test_bad_requests_are_refused_by_the_c_side():
    ffi, lib = _convert.library()
    b = np.ones((5, 7), np.float32)
    tiles = _tile_layout.aligned_empty(_tile_layout.layout_bytes(2, 5, 7))
    src, dst = ffi.from_buffer(b), ffi.from_buffer(tiles)
    op = lib.PYAMX_CONVERT_F32_TO_BF16
    assert lib.pyamx_pack_b_rounded(op, src, 28, 4, 5, 7, dst, tiles.nbytes, 1) == 0
    for args in [(lib.PYAMX_CONVERT_BF16_TO_F32, src, 28, 4, 5, 7, dst, tiles.nbytes, 1),  # a widening
                 (op, src, 28, 2, 5, 7, dst, tiles.nbytes, 1),  # a stride that is not whole items
                 (op, src, 30, 4, 5, 7, dst, tiles.nbytes, 1),
                 (op, src, 28, 4, 5, 7, dst, tiles.nbytes - 1, 1),  # dst too small
                 (op, src, 28, 4, 0, 7, dst, tiles.nbytes, 1),
                 (op, src, 28, 4, 5, 7, dst, tiles.nbytes, 0),
                 (op, src, 28, 4, 5, 7, dst, tiles.nbytes, lib.PYAMX_MATMUL_MAX_THREADS + 1),
                 (op, ffi.NULL, 28, 4, 5, 7, dst, tiles.nbytes, 1)]:
        assert lib.pyamx_pack_b_rounded(*args) == lib.PYAMX_E_ARG, args


def test_no_rounded_copy_of_b_is_made(monkeypatch):
    """The whole B is never rounded into a bits array of its own first (the two-pass path)."""
    b = np.random.default_rng(34).standard_normal((70, 90)).astype(np.float32)
    want = _two_pass(b, "bf16")

    def refused(*args, **kwargs):
        raise AssertionError("pack rounded the whole of b before packing it")

    for name in ("round_floats", "to_bits", "numpy_bf16_bits", "numpy_fp16_bits"):
        monkeypatch.setattr(_convert, name, refused)
    assert pyamx.pack(b, kind="bf16").tiles.tobytes() == want
    assert pyamx.matmul(np.ones((3, 70), np.float16), pyamx.pack(b[::-1], kind="fp16"), backend="emulator").shape == (3, 90)


def test_without_the_c_extension_the_same_tiles(monkeypatch):
    rng = np.random.default_rng(33)
    b = _as_b(_values(np.float64, rng), 21)[:, ::2]
    with_c = pyamx.pack(b, kind="bf16").tiles.tobytes()
    monkeypatch.setattr(_tile_layout, "_c_library", lambda: None)
    monkeypatch.setattr(_convert, "to_bits", lambda *args, **kwargs: None)
    assert pyamx.pack(b, kind="bf16").tiles.tobytes() == with_c


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_native_matmul_rounds_a_float_b_while_packing_it(monkeypatch, native_group, fmt):
    """pyamx.matmul(a, float b, kind=...) on the native kernels lays b out as pyamx.pack does, rounded on
    the way (only a is rounded to a bits array first), with the emulator's bits."""
    native_group(fmt)
    rng = np.random.default_rng(35)
    a = rng.standard_normal((5, 33)).astype(np.float32)
    b = _as_b(_values(np.float64, rng)[:33 * 41], 33)[:, ::-1] * 2.0**-100  # some products stay finite
    want = np.asarray(pyamx.matmul(a, b, kind=fmt, backend="emulator")).view(np.uint32)
    rounded = []
    original = _convert.round_floats
    monkeypatch.setattr(_convert, "round_floats", lambda values, f: rounded.append(values.shape) or original(values, f))
    got = pyamx.matmul(a, b, kind=fmt, backend="native")
    assert got.backend == "native" and got.rounded_to == fmt
    assert np.array_equal(np.asarray(got).view(np.uint32), want)
    assert b.shape not in rounded and rounded  # a was rounded, b never on its own


@pytest.mark.parametrize("a_shape, b_stack, c_shape", [
    ((3, 5, 33), None, None),                 # a stack times one 2-D b
    ((5, 33), (1,), None),                    # b with a leading 1: the batch is b's
    ((2, 1, 5, 33), (3,), (2, 3, 5, 41)),     # b repeated by zero strides, c batched
    ((4, 5, 33), None, (5, 41)),              # c broadcast along the batch
])
def test_a_batch_rounds_its_shared_float_b_once_while_packing(monkeypatch, native_group, a_shape, b_stack, c_shape):
    """A stack times one float b: b is rounded while packed, once for the whole batch, with each
    product's bits those of the emulator's."""
    native_group("bf16")
    rng = np.random.default_rng(36)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b2 = _as_b(_values(np.float32, rng)[:33 * 41], 33) * np.float32(2.0**-60)
    b = b2 if b_stack is None else np.broadcast_to(b2, b_stack + b2.shape)
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
    want = np.asarray(pyamx.matmul(a, b, c, kind="bf16", backend="emulator")).view(np.uint32)
    packs = []
    original_pack = _tile_layout.pack_rounded
    monkeypatch.setattr(_tile_layout, "pack_rounded", lambda values, *r: packs.append(values.shape) or original_pack(values, *r))
    rounded = []
    original_round = _convert.round_floats
    monkeypatch.setattr(_convert, "round_floats", lambda values, f: rounded.append(values.shape[-2:]) or original_round(values, f))
    got = pyamx.matmul(a, b, c, kind="bf16", backend="native")
    assert got.backend == "native" and got.rounded_to == "bf16"
    assert np.array_equal(np.asarray(got).view(np.uint32), want)
    assert packs == [b2.shape]  # one fused pack for all the batch's products
    assert rounded == [a.shape[-2:]]  # a rounded to bits; b never on its own
