"""pyamx.pack: B packed once, in the native kernel's layout, gives the bits of the unpacked call everywhere.

The layout is checked against an independent construction from its description (docs/matmul.md,
"Packed operands"), element by element; the products against the unpacked call on every engine and,
where native runs (silicon or the trap mode), against the emulator, as uint32.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

try:
    import ml_dtypes  # fp8 operands come as its arrays; the numpy-floor leg runs without it
except ImportError:
    ml_dtypes = None

import pyamx
from pyamx.cpu import _tile_layout
from pyamx.cpu import _native_matmul
from pyamx.emulator import engine as eng

ENGINES = [name for name, ok, _ in eng.available_engines() if ok]
SHAPES = [(1, 1, 1), (3, 2, 1), (5, 33, 17), (17, 64, 32), (40, 70, 65), (33, 129, 100)]


def _u32(x):
    return np.asarray(x).view(np.uint32)


def _operands(rng, kind_case, m, k, n):
    """(a, b, kind) of one operand kind, with specials mixed in for the float formats."""
    dtype, kind = kind_case
    if dtype == "bf16":
        a = rng.integers(0, 1 << 16, (m, k), dtype=np.uint16)
        b = rng.integers(0, 1 << 16, (k, n), dtype=np.uint16)
    elif dtype in ("int8", "uint8", "int8/uint8", "uint8/int8"):
        da, db = (dtype.split("/") * 2)[:2]
        a = rng.integers(0, 256, (m, k), dtype=np.uint8).view(da)
        b = rng.integers(0, 256, (k, n), dtype=np.uint8).view(db)
    elif dtype == "fp16":
        a = rng.integers(0, 1 << 16, (m, k), dtype=np.uint16).view(np.float16)
        b = rng.integers(0, 1 << 16, (k, n), dtype=np.uint16).view(np.float16)
    elif dtype in ("bf8", "hf8/bf8"):
        if ml_dtypes is None:
            pytest.skip("fp8 operands are ml_dtypes arrays, and ml_dtypes is not installed")
        da = ml_dtypes.float8_e4m3fn if dtype == "hf8/bf8" else ml_dtypes.float8_e5m2
        a = rng.integers(0, 256, (m, k), dtype=np.uint8).view(da)
        b = rng.integers(0, 256, (k, n), dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    else:  # float32 values rounded once to the kind
        a = rng.standard_normal((m, k)).astype(dtype)
        b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-30, 12, (k, n))).astype(dtype)
    return a, b, kind


KIND_CASES = [("bf16", None), ("fp16", None), ("int8", None), ("uint8", None), ("int8/uint8", None),
              ("uint8/int8", None), ("bf8", None), ("hf8/bf8", None), (np.float32, "bf16"),
              (np.float64, "fp16")]


# -- the layout ------------------------------------------------------------------------------


def layout_from_description(bits: np.ndarray) -> bytes:
    """The documented layout, element by element: (block column, K block, half) tiles of 16 rows x
    16 dwords, dword (d, c) holding B[L*d + i][col] for i < L, zero outside B."""
    k, n = bits.shape
    item = bits.itemsize
    lanes = 4 // item
    kd = -(-k // lanes)
    kblocks, nbn = -(-kd // 16), -(-n // 32)
    raw = bits.view(np.uint8).reshape(k, n * item)
    out = bytearray(nbn * kblocks * 2048)
    for bj in range(nbn):
        for kb in range(kblocks):
            for half in range(2):
                base = (bj * kblocks + kb) * 2048 + 1024 * half
                for r in range(16):
                    for c in range(16):
                        col = 32 * bj + 16 * half + c
                        for i in range(lanes):
                            row = lanes * (16 * kb + r) + i
                            if row < k and col < n:
                                at = base + 64 * r + 4 * c + item * i
                                out[at:at + item] = bytes(raw[row, item * col:item * (col + 1)])
    return bytes(out)


@pytest.mark.parametrize("dtype", [np.uint16, np.int8, np.uint8])
@pytest.mark.parametrize("k,n", [(1, 1), (3, 17), (33, 40), (70, 65)])
def test_the_layout_is_the_documented_one(dtype, k, n):
    rng = np.random.default_rng(k * 100 + n)
    b = rng.integers(0, 256 if dtype != np.uint16 else 1 << 16, (k, n)).astype(dtype)
    packed = pyamx.pack(b)
    assert packed.tiles.ctypes.data % 64 == 0
    assert packed.tiles.tobytes() == layout_from_description(b)
    # the numpy fallback (a build without the C extension) makes the same bytes and reads them back
    assert _tile_layout.numpy_tiles(b).tobytes() == packed.tiles.tobytes()
    assert np.array_equal(_tile_layout.numpy_rows(packed.tiles, k, n, b.itemsize).view(dtype), b)
    assert np.array_equal(packed.unpack().view(dtype), b)  # the bits, as matmul reads them


def test_packing_threads_do_not_change_a_byte():
    rng = np.random.default_rng(3)
    b = rng.integers(0, 1 << 16, (300, 1000), dtype=np.uint16)
    one = pyamx.pack(b, threads=1).tiles
    for threads in (2, 3, 7):
        assert pyamx.pack(b, threads=threads).tiles.tobytes() == one.tobytes()


def test_floats_are_rounded_once_while_packing():
    rng = np.random.default_rng(4)
    b = (rng.standard_normal((37, 21)) * 2.0 ** rng.integers(-140, 120, (37, 21))).astype(np.float64)
    packed = pyamx.pack(b, "bf16")
    assert packed.rounded_to == "bf16" and packed.format == "bf16"
    assert np.array_equal(packed.unpack(), pyamx.table.bf16.from_float32(b))  # float64 directly, never via float32
    with np.errstate(over="ignore"):  # values past fp16's range round to infinity, as they should
        fp16 = pyamx.pack(b.astype(np.float32), "fp16")
        want = b.astype(np.float32).astype(np.float16).view(np.uint16)
    assert np.array_equal(fp16.unpack().view(np.uint16), want)


def test_a_packed_operand_is_immutable_and_independent_of_b():
    b = np.arange(64, dtype=np.uint16).reshape(8, 8)
    packed = pyamx.pack(b)
    b[...] = 0  # the caller's array changes; the packed copy does not
    assert np.array_equal(packed.unpack(), np.arange(64, dtype=np.uint16).reshape(8, 8))
    with pytest.raises(ValueError):
        packed.tiles[0] = 1
    with pytest.raises(AttributeError):
        packed.k = 9


# -- the products ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind_case", KIND_CASES, ids=lambda c: str(c[0].__name__ if isinstance(c[0], type) else c[0]))
def test_packed_b_gives_the_unpacked_bits_on_every_engine(engine, kind_case):
    rng = np.random.default_rng(5)
    for m, k, n in SHAPES:
        a, b, kind = _operands(rng, kind_case, m, k, n)
        packed = pyamx.pack(b, kind)
        want = pyamx.matmul(a, b, kind=kind, backend="emulator", engine=engine)
        got = pyamx.matmul(a, packed, kind=kind, backend="emulator", engine=engine)
        assert np.array_equal(_u32(got), _u32(want)), (m, k, n)
        assert (got.backend, got.engine, got.rounded_to) == (want.backend, want.engine, want.rounded_to)


def test_batches_and_accumulators_go_through_a_packed_b():
    rng = np.random.default_rng(6)
    a = rng.integers(0, 1 << 16, (3, 2, 9, 40), dtype=np.uint16)
    b = rng.integers(0, 1 << 16, (40, 19), dtype=np.uint16)
    c = rng.standard_normal((2, 9, 19)).astype(np.float32)
    packed = pyamx.pack(b)
    for engine in ENGINES:
        want = pyamx.matmul(a, b, c, backend="emulator", engine=engine)
        assert np.array_equal(_u32(pyamx.matmul(a, packed, c, backend="emulator", engine=engine)), _u32(want))


def test_one_packed_b_serves_many_threads_at_once():
    rng = np.random.default_rng(7)
    b = rng.integers(-128, 128, (130, 70)).astype(np.int8)
    packed = pyamx.pack(b)
    inputs = [rng.integers(-128, 128, (20 + i, 130)).astype(np.int8) for i in range(6)]
    wants = [pyamx.matmul(a, b, backend="emulator") for a in inputs]
    results = [None] * len(inputs)

    def run(i):
        for _ in range(3):
            results[i] = pyamx.matmul(inputs[i], packed, backend="emulator")

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for got, want in zip(results, wants):
        assert np.array_equal(np.asarray(got), np.asarray(want))


# -- what is refused ------------------------------------------------------------------------------


def test_mismatches_are_clear_errors():
    bf16_b = pyamx.pack(np.ones((8, 4), np.uint16))
    with pytest.raises(TypeError, match="packed as bf16"):
        pyamx.matmul(np.ones((2, 8), np.int8), bf16_b)
    with pytest.raises(ValueError, match="kind='fp16', but b was packed as bf16"):
        pyamx.matmul(np.ones((2, 8), np.uint16), bf16_b, kind="fp16")
    with pytest.raises(ValueError, match="2x7 and b was packed as 8x4"):
        pyamx.matmul(np.ones((2, 7), np.uint16), bf16_b)
    with pytest.raises(ValueError, match="the product is"):
        pyamx.matmul(np.ones((2, 8), np.uint16), bf16_b, np.zeros((2, 5), np.float32))
    fp16_b = pyamx.pack(np.ones((8, 4), np.uint16), "fp16")
    assert fp16_b.kind == "fp16"
    with pytest.raises(TypeError, match="packed as fp16"):
        pyamx.matmul(np.ones((2, 8), np.uint16), fp16_b)  # uint16 means bf16 unless kind says fp16
    assert np.array_equal(_u32(pyamx.matmul(np.ones((2, 8), np.uint16), fp16_b, kind="fp16", backend="emulator")),
                          _u32(pyamx.matmul(np.ones((2, 8), np.uint16), np.ones((8, 4), np.uint16), kind="fp16",
                                            backend="emulator")))


@pytest.mark.parametrize("b,kind,error,match", [
    (np.ones((4, 4), np.float32), None, TypeError, "pack: b has dtype float32"),
    (np.ones((4, 4), np.complex64), None, TypeError, "complex operands are not packed"),
    (np.ones(4, np.uint16), None, ValueError, "must be 2-D"),
    (np.ones((2, 4, 4), np.uint16), None, ValueError, "must be 2-D"),
    (np.ones((0, 4), np.uint16), None, ValueError, "at least 1"),
    (np.ones((4, 4), np.uint16), "int4", ValueError, "kind must be None, one of"),
])
def test_pack_refuses_what_matmul_refuses(b, kind, error, match):
    with pytest.raises(error, match=match):
        pyamx.pack(b, kind)


# -- native (silicon, or the trap mode) ------------------------------------------------------------


@pytest.mark.parametrize("kind_case", KIND_CASES, ids=lambda c: str(c[0].__name__ if isinstance(c[0], type) else c[0]))
def test_native_packed_and_unpacked_equal_the_emulator(kind_case, native_group):
    """Edge tiles (M, N, K not multiples of 16/32/64), 1..4 threads, packed and unpacked B."""
    group = {"bf16": "bf16", "fp16": "fp16", "bf8": "fp8", "hf8/bf8": "fp8"}.get(kind_case[1] or kind_case[0], "int8")
    native_group(group)
    rng = np.random.default_rng(8)
    random_shapes = [tuple(int(x) for x in rng.integers(1, 100, 3)) for _ in range(3)]
    for m, k, n in SHAPES + [(70, 200, 33), (33, 65, 97)] + random_shapes:
        a, b, kind = _operands(rng, kind_case, m, k, n)
        want = _u32(pyamx.matmul(a, b, kind=kind, backend="emulator"))
        packed = pyamx.pack(b, kind)
        for threads in (1, 2, 3, 4, None):
            for operand in (b, packed):
                got = pyamx.matmul(a, operand, kind=kind, backend="native", threads=threads)
                assert got.backend == "native"
                assert np.array_equal(_u32(got), want), (m, k, n, threads, type(operand).__name__)


def test_native_packed_kernel_refuses_tiles_that_do_not_fit(native_group):
    native_group("int8")
    packed = pyamx.pack(np.ones((40, 8), np.int8))  # 10 dwords of K
    a, c = np.ones((2, 40), np.int8), np.zeros((2, 8), np.int32)
    with pytest.raises(ValueError, match="shapes do not fit"):
        _native_matmul.matmul_native_packed("tdpbssd", np.ones((2, 44), np.int8), packed.tiles, 10, c, 1)
    with pytest.raises(ValueError, match="at least 4096 bytes"):  # 17 K blocks need two K blocks of tiles
        _native_matmul.matmul_native_packed("tdpbssd", np.ones((2, 68), np.int8), packed.tiles, 17, c, 1)
    with pytest.raises(ValueError, match="64-byte aligned"):
        _native_matmul.matmul_native_packed("tdpbssd", a, np.array(packed.tiles[1:]), 10, c, 1)
    assert np.array_equal(_native_matmul.matmul_native_packed("tdpbssd", a, packed.tiles, 10, c, 1),
                          np.full((2, 8), 40, np.int32))


def test_native_cache_panels_do_not_change_a_bit_of_a_packed_product(native_group):
    native_group("bf16")
    rng = np.random.default_rng(10)
    m, k, n = 70, 1100, 100  # 3 block rows, 4 block columns, 34 K blocks and a remainder
    a = rng.integers(0, 1 << 16, (m, k), dtype=np.uint16)
    b = rng.integers(0, 1 << 16, (k, n), dtype=np.uint16)
    c = rng.integers(0, 1 << 32, (m, n), dtype=np.uint32)
    want = _u32(pyamx.matmul(a, b, c, backend="emulator"))
    packed = pyamx.pack(b)
    for panels, threads in (((1, 1), 1), ((2, 1), 3), ((1, 3), 2), ((40, 2), 4), (None, 2)):
        got = _native_matmul.matmul_native_packed("tdpbf16ps", a, packed.tiles, packed.k_dwords, c, threads,
                                                  panels=panels)
        assert np.array_equal(_u32(got), want), (panels, threads)


# -- threads=None ------------------------------------------------------------------------------------


def test_threads_none_grows_with_the_work():
    rule, unit = _native_matmul.threads_for_work, _native_matmul.MIN_MACS_PER_THREAD
    assert rule(64, 64, 64, 16) == 1  # the 64^3: the calling thread alone
    assert rule(1, 4096, 4096, 16) == 1
    assert rule(1, 1, unit, 16) == 1
    assert rule(1, 2, unit, 16) == 2
    assert rule(2048, 2048, 2048, 16) == 16
    assert rule(2048, 2048, 2048, 3) == 3


def test_small_work_with_threads_none_stays_on_the_calling_thread(native_group):
    native_group("bf16")
    _, kernels = pyamx.cpu.native._lib()
    assert kernels.pyamx_pool_shutdown() >= 0
    rng = np.random.default_rng(9)
    a = rng.integers(0, 1 << 16, (64, 64), dtype=np.uint16)
    b = rng.integers(0, 1 << 16, (64, 64), dtype=np.uint16)
    got = pyamx.matmul(a, b, backend="native")
    assert kernels.pyamx_pool_workers() == 0
    assert np.array_equal(_u32(got), _u32(pyamx.matmul(a, b, backend="emulator")))


def test_without_the_c_extension_numpy_packs_the_same_bytes(monkeypatch):
    from pyamx.cpu import _tile_layout as layout

    rng = np.random.default_rng(11)
    b = rng.integers(0, 256, (45, 70), dtype=np.uint8)
    with_c = pyamx.pack(b)
    monkeypatch.setattr(layout, "_c_library", lambda: None)
    without = pyamx.pack(b)
    assert without.tiles.tobytes() == with_c.tiles.tobytes() and without.tiles.ctypes.data % 64 == 0
    assert not without.tiles.flags.writeable
    assert np.array_equal(without.unpack(), b)


# -- a packed b through the rest of matmul's front: kind names, out=, out_dtype=, stacks, blocks --------


def _backends(native_group):
    """The emulator, and native where it runs (silicon or the trap mode); skip-free for the emulator."""
    try:
        native_group("bf16")
    except pytest.skip.Exception:
        return ["emulator"]
    return ["emulator", "native"]


def test_packed_b_takes_the_front_of_matmul_like_any_b(native_group):
    """kind's dtype names, out=, out_dtype='bf16', a stack times one packed b (one product on the
    stack's rows, and a broadcast c), each the bits of the same call with the unpacked b."""
    rng = np.random.default_rng(21)
    a = rng.standard_normal((3, 2, 17, 40)).astype(np.float32)
    b = rng.standard_normal((40, 33)).astype(np.float32)
    c = rng.standard_normal((17, 33)).astype(np.float32)
    packed = pyamx.pack(b, "bfloat16")
    assert packed.kind == "bf16"
    for backend in _backends(native_group):
        want = pyamx.matmul(a, b, c, kind="bf16", backend=backend)
        got = pyamx.matmul(a, packed, c, kind="bfloat16", backend=backend)
        assert got.backend == backend and np.array_equal(_u32(got), _u32(want))
        per_item = np.stack([np.stack([pyamx.matmul(a[i, j], b, c, kind="bf16", backend=backend)
                                       for j in range(2)]) for i in range(3)])
        assert np.array_equal(_u32(got), _u32(per_item))
        strided = a[:, :, ::2, :]  # rows not one run in memory: still the per-item bits
        assert np.array_equal(_u32(pyamx.matmul(strided, packed, kind="bf16", backend=backend)),
                              _u32(pyamx.matmul(strided, b, kind="bf16", backend=backend)))
        out = np.full(want.shape, np.nan, np.float32)
        into = pyamx.matmul(a, packed, c, kind="bf16", backend=backend, out=out)
        assert into.base is out and np.array_equal(_u32(out), _u32(want))
        rounded = pyamx.matmul(a, packed, c, kind="bf16", backend=backend, out_dtype="bf16")
        assert rounded.dtype == np.uint16
        assert np.array_equal(rounded, pyamx.matmul(a, b, c, kind="bf16", backend=backend, out_dtype="bf16"))
    with pytest.raises(ValueError, match="packed as bf16"):
        pyamx.matmul(a, packed, kind="float16", backend="emulator")
    with pytest.raises(ValueError, match="shape"):
        pyamx.matmul(a, packed, kind="bf16", backend="emulator", out=np.zeros((17, 33), np.float32))


def test_packed_b_in_blocks_of_rows_gives_the_same_bits(monkeypatch, native_group):
    """Where the transients would pass the block size the rows run in blocks, B's tiles shared by all."""
    from pyamx import _matmul_memory

    rng = np.random.default_rng(22)
    a = rng.integers(0, 1 << 16, (300, 70), dtype=np.uint16)
    b = rng.integers(0, 1 << 16, (70, 40), dtype=np.uint16)
    c = rng.integers(0, 1 << 32, (300, 40), dtype=np.uint32).view(np.float32)
    packed = pyamx.pack(b)
    backends = _backends(native_group)
    whole = {backend: _u32(pyamx.matmul(a, b, c, backend=backend)) for backend in backends}
    monkeypatch.setattr(_matmul_memory, "BLOCK_BYTES", 4096)
    for backend in backends:
        for operand in (b, packed):
            assert np.array_equal(_u32(pyamx.matmul(a, operand, c, backend=backend)), whole[backend])
        assert np.array_equal(whole[backend], whole["emulator"])
