"""The emulator's arithmetic engines give the same bits as each other and as the exact reference.

Every engine this build and CPU offer (avx512, avx2, portable, numpy) runs
the instruction schedule of pyamx.emulator.engine over random and adversarial
operands (denormals, +-0, infinities, NaN payloads, overflow, cancellation,
ties and products near 2^-126) for all six dot products; results are
compared as uint32 bits. tests/reference.py (exact fractions, written from
the spec) is the independent check.
"""

from __future__ import annotations

import os
import threading
import time

import zlib

import numpy as np
import pytest

import pyamx
from pyamx.emulator import engine as eng
from pyamx.table import isa
from pyamx.errors import BackendError
from mxcsr import caller_mxcsr

import reference

FLOAT_OPS = ("tdpbf16ps", "tdpfp16ps")
#: whether this thread's MXCSR can be set and read (x86-64 with the extension)
HAS_MXCSR = bool(eng._lib() and eng._lib()[1].pyamx_fpenv_supported())
#: the engine's test hooks are in a test build only (csrc/engine_test_hooks.h)
TEST_BUILD = bool(eng._lib() and hasattr(eng._lib()[1], "pyamx_engine_fma32"))
NOT_A_TEST_BUILD = ("the engine's test hooks are in a test build only: rebuild with "
                    "PYAMX_ENGINE_TEST_HOOKS=1 python build.py")


def run_under_mxcsr(lib, call, mxcsr):
    """``pyamx_engine_run(call)`` from a thread whose MXCSR is ``mxcsr``, as a caller that changed
    its own has it: (status, the MXCSR right after the call); this thread's MXCSR is put back."""
    with caller_mxcsr(mxcsr):
        return lib.pyamx_engine_run(call.struct), lib.pyamx_get_mxcsr()
INT_OPS = ("tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud")
COMPILED = ("avx512", "avx2", "portable")


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _compiled_engine(name: str) -> eng.Engine:
    """The compiled engine, or a skip that says why; a CPU that has the features must get it."""
    status = {row[0]: row[1:] for row in eng.available_engines()}
    available, reason = status[name]
    if not available:
        flags = _cpu_flags()
        needs = {"avx512": {"avx512f", "avx512bw", "avx2", "fma"}, "avx2": {"avx2", "fma"}}.get(name)
        built = reason != "the C extension pyamx._native is not built"
        if built and (name == "portable" or (needs and needs <= flags)):
            pytest.fail(f"engine {name} is unavailable on a CPU that has its features: {reason}")
        pytest.skip(f"engine {name} unavailable here: {reason}")
    return eng.resolve(name)


@pytest.fixture(params=COMPILED)
def compiled(request) -> eng.Engine:
    return _compiled_engine(request.param)


# ---- operand generators ----------------------------------------------------

BF16_SPECIAL = np.array([
    0x0000, 0x8000,                  # +-0
    0x0001, 0x8001, 0x007F, 0x807F,  # denormals (zero under DAZ, sign kept)
    0x0080, 0x8080, 0x0081,          # around 2^-126
    0x7F80, 0xFF80,                  # +-inf
    0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FA5, 0x7FFF, 0xFFAB,  # quiet and signalling NaNs with payloads
    0x7F7F, 0xFF7F, 0x7F00,          # huge: overflow
    0x3F80, 0xBF80, 0x3F81, 0x4000,  # ordinary
    0x2000, 0xA000, 0x1980, 0x9A00,  # 2^-63, 2^-76, -2^-75: products at 2^-126 and just below
], dtype=np.uint16)
FP16_SPECIAL = np.array([
    0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7C00, 0xFC00,
    0x7E00, 0xFE00, 0x7C01, 0xFD55, 0x7FFF, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x3C01, 0x0200,
], dtype=np.uint16)
FP32_SPECIAL = np.array([
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x80800000,
    0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FBFFFFF,
    0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0x0C800000,
], dtype=np.uint32)

KINDS = ("random", "adversarial", "nan_free", "tiny", "cancel")


def _no_nan16(pool, nan_test):
    return pool[~nan_test(pool)]


def _bf16_is_nan(x):
    return ((x & 0x7F80) == 0x7F80) & ((x & 0x7F) != 0)


def _fp16_is_nan(x):
    return ((x & 0x7C00) == 0x7C00) & ((x & 0x3FF) != 0)


def _floats16(rng, shape, op, kind):
    """bf16/fp16 bit patterns of the given kind."""
    bf16 = op == "tdpbf16ps"
    if kind == "tiny":  # products land around 2^-126 (bf16) / at fp16's extremes
        exps = rng.integers(-66, -60, shape) if bf16 else rng.integers(-14, -10, shape)
        values = rng.choice([1.0, 1.5, 1.25, 1.0078125], shape) * rng.choice([-1.0, 1.0], shape) * np.exp2(exps)
    else:
        spread = 40 if bf16 else 6
        values = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))
    if bf16:
        bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    else:
        bits = values.astype(np.float16).view(np.uint16)
    if kind in ("adversarial", "nan_free"):
        pool = BF16_SPECIAL if bf16 else FP16_SPECIAL
        if kind == "nan_free":
            pool = _no_nan16(pool, _bf16_is_nan if bf16 else _fp16_is_nan)
        mask = rng.random(shape) < 0.2
        bits = np.where(mask, rng.choice(pool, shape), bits).astype(np.uint16)
    return bits


def _fp32_c(rng, shape, kind):
    bits = (rng.standard_normal(shape) * 4).astype(np.float32).view(np.uint32)
    if kind in ("adversarial", "nan_free", "tiny"):
        pool = FP32_SPECIAL
        if kind != "adversarial":
            pool = pool[~(((pool & 0x7F800000) == 0x7F800000) & ((pool & 0x7FFFFF) != 0))]
        bits = np.where(rng.random(shape) < 0.3, rng.choice(pool, shape), bits).astype(np.uint32)
    return bits


def operands(rng, op, m, n, kd, kind):
    """(c, a, b) for ``op`` with M x N outputs and K = kd dwords."""
    if op in FLOAT_OPS:
        a = _floats16(rng, (m, 2 * kd), op, kind)
        b = _floats16(rng, (kd, 2 * n), op, kind)
        if kind == "cancel":  # the odd lane of each pair is minus the even lane: exact cancellations
            a[:, 1::2] = a[:, 0::2]
            b[:, 1::2] = b[:, 0::2] ^ 0x8000
        c = _fp32_c(rng, (m, n), kind)
        return c, a, b
    a = rng.integers(0, 256, (m, 4 * kd), dtype=np.uint8)
    b = rng.integers(0, 256, (kd, 4 * n), dtype=np.uint8)
    if kind == "adversarial":  # extremes of every signedness
        a = np.where(rng.random(a.shape) < 0.5, rng.choice(np.array([0, 1, 127, 128, 255], np.uint8), a.shape), a)
        b = np.where(rng.random(b.shape) < 0.5, rng.choice(np.array([0, 1, 127, 128, 255], np.uint8), b.shape), b)
    c = rng.integers(-2**31, 2**31, (m, n), dtype=np.int64).astype(np.int32)
    if kind == "adversarial":
        c.flat[:4] = [2**31 - 1, -2**31, -1, 0][: c.size]
    return c, a.astype(np.uint8), b.astype(np.uint8)


def reference_dot(op, c, a, b):
    """The schedule on tests/reference.py: one reference instruction per block of 16 dwords."""
    kd = b.shape[0]
    lanes = 2 if op in FLOAT_OPS else 4
    c = [[int(x) for x in row] for row in c]
    for k0 in range(0, kd, 16):
        k1 = min(kd, k0 + 16)
        ab, bb = a[:, lanes * k0 : lanes * k1], b[k0:k1]
        if op == "tdpbf16ps":
            c = reference.tdpbf16ps(c, ab, bb)
        elif op == "tdpfp16ps":
            c = reference.tdpfp16ps(c, ab, bb)
        else:
            signed_a, signed_b = op[4] == "s", op[5] == "s"
            c = reference.tdpb_int8(signed_a, signed_b, c, ab, bb)
    dtype = np.uint32 if op in FLOAT_OPS else np.int64
    out = np.array(c, dtype=dtype)
    return out if op in FLOAT_OPS else out.astype(np.int32)


def as_bits(x):
    return np.ascontiguousarray(x).view(np.uint32)


# K up to 300 dwords: more than one K panel of the compiled kernels (ENG_KC = 256)
SHAPES = [(1, 1, 1), (16, 16, 16), (7, 5, 3), (6, 32, 17), (13, 33, 32), (3, 70, 40), (37, 19, 49), (64, 64, 64),
          (9, 37, 300)]


# ---- engines agree with each other and with the reference -------------------


@pytest.mark.parametrize("op", FLOAT_OPS + INT_OPS)
@pytest.mark.parametrize("kind", KINDS)
def test_compiled_engine_bits_equal_numpy_engine(compiled, op, kind):
    # Stable seeds (str hashes change per process): a failure must replay.
    rng = np.random.default_rng(zlib.crc32(f"{op}/{kind}".encode()))
    numpy_engine = eng.resolve("numpy")
    for m, n, kd in SHAPES:
        c, a, b = operands(rng, op, m, n, kd, kind)
        expected = numpy_engine.dot(op, c, a, b, kd)
        got = compiled.dot(op, c, a, b, kd, 1)
        assert got.dtype == (np.uint32 if op in FLOAT_OPS else np.int32)
        mismatch = np.flatnonzero(as_bits(got) != as_bits(expected))
        assert mismatch.size == 0, (
            f"{compiled.name} {op} {kind} {m}x{n}x{kd}: {mismatch.size} outputs differ, first at "
            f"{np.unravel_index(mismatch[0], (m, n))}: {as_bits(got).flat[mismatch[0]]:#010x} "
            f"vs numpy {as_bits(expected).flat[mismatch[0]]:#010x}"
        )


@pytest.mark.parametrize("op", FLOAT_OPS + INT_OPS)
@pytest.mark.parametrize("kind", ("adversarial", "tiny", "cancel", "nan_free"))
def test_every_engine_matches_the_exact_reference(op, kind):
    rng = np.random.default_rng(1000 + zlib.crc32(f"{op}/{kind}".encode()))
    names = ["numpy"] + [name for name, ok, _ in eng.available_engines() if ok and name != "numpy"]
    for m, n, kd in [(3, 5, 7), (4, 3, 20), (2, 7, 33)]:  # K over one, two and three blocks
        c, a, b = operands(rng, op, m, n, kd, kind)
        expected = reference_dot(op, c, a, b)
        for name in names:
            got = eng.resolve(name).dot(op, c, a, b, kd)
            assert np.array_equal(as_bits(got), as_bits(expected)), f"{name} {op} {kind} {m}x{n}x{kd}"


def test_rounding_up_to_min_normal_is_kept_and_just_below_is_flushed(compiled):
    """FTZ decides after rounding: 2^-126 - 2^-151 rounds (tie to even) to 2^-126 and is kept;
    2^-126 - 2^-150 is representable below 2^-126, hence tiny, hence +0."""
    # even lane: 2^-63 * 2^-63 = 2^-126, then 2^-76 * (-2^-75 or -2^-74)
    a = np.array([[0x2000, 0x0000, 0x1980, 0x0000]], dtype=np.uint16)
    for b_second, expected in ((0x9A00, 0x00800000), (0x9A80, 0x00000000)):
        b = np.array([[0x2000, 0x0000], [b_second, 0x0000]], dtype=np.uint16)
        c = np.zeros((1, 1), dtype=np.uint32)
        assert reference_dot("tdpbf16ps", c, a, b)[0, 0] == expected
        for engine in (compiled, eng.resolve("numpy")):
            assert engine.dot("tdpbf16ps", c, a, b, 2)[0, 0] == expected, engine.name


def test_nan_operand_order_is_a_then_b_then_accumulator(compiled):
    """Two NaN operands in one fma32: the tsrc1 (a) NaN wins, quieted; hardware order may differ."""
    a = np.array([[0x7F81, 0x3F80]], dtype=np.uint16)   # signalling NaN payload 1, 1.0
    b = np.array([[0xFFA5, 0x7FC3]], dtype=np.uint16)   # NaN payloads 0x25 (signalling), 0x43
    c = np.array([[0x7F800007]], dtype=np.uint32)       # a third NaN in C
    expected = reference_dot("tdpbf16ps", c, a, b)
    # add32(C, t): C's NaN comes first, quieted
    assert expected[0, 0] == 0x7FC00007
    assert compiled.dot("tdpbf16ps", c, a, b, 1)[0, 0] == expected[0, 0]
    c2 = np.zeros((1, 1), dtype=np.uint32)
    expected2 = reference_dot("tdpbf16ps", c2, a, b)
    assert expected2[0, 0] == 0x7FC10000  # even lane: a's NaN quieted; it then wins add32(even, odd)
    assert compiled.dot("tdpbf16ps", c2, a, b, 1)[0, 0] == expected2[0, 0]


@pytest.mark.skipif(not TEST_BUILD, reason=NOT_A_TEST_BUILD)
def test_scalar_primitives_match_the_reference():
    _, lib = eng._lib()
    rng = np.random.default_rng(7)
    pool = np.concatenate([FP32_SPECIAL, (BF16_SPECIAL.astype(np.uint32) << 16)])
    values = np.concatenate([pool, rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32)])
    for _ in range(3000):
        x, y, z = (int(v) for v in rng.choice(values, 3))
        dx, dy, dz = (reference.decode32(v, True) for v in (x, y, z))
        assert lib.pyamx_engine_fma32(x, y, z) == reference.fma32(dx, dy, dz), (hex(x), hex(y), hex(z))
        assert lib.pyamx_engine_add32(x, y) == reference.add32(dx, dy), (hex(x), hex(y))


# ---- threads and the floating-point environment ------------------------------


@pytest.mark.parametrize("op", ("tdpbf16ps", "tdpfp16ps", "tdpbusd"))
def test_thread_count_does_not_change_bits(compiled, op):
    rng = np.random.default_rng(11)
    for m, n, kd in [(200, 150, 40), (31, 400, 70), (500, 20, 33), (40, 70, 270)]:
        c, a, b = operands(rng, op, m, n, kd, "adversarial")
        one = compiled.dot(op, c, a, b, kd, 1)
        for threads in (2, 3, 7):
            assert np.array_equal(as_bits(compiled.dot(op, c, a, b, kd, threads)), as_bits(one)), (m, n, kd, threads)


# x86 MXCSR values a caller may have: default, round toward zero / up / down, FTZ, DAZ,
# FTZ|DAZ (-ffast-math), sticky flags set, invalid-operation exception unmasked.
MXCSR_CASES = {
    "default": 0x1F80, "toward_zero": 0x7F80, "up": 0x5F80, "down": 0x3F80, "ftz": 0x9F80, "daz": 0x1FC0,
    "fast_math": 0x9FC0, "flags_set": 0x1FBF, "invalid_unmasked": 0x1F00,
}


@pytest.mark.skipif(not HAS_MXCSR, reason="x86-64 MXCSR only")
@pytest.mark.parametrize("case", sorted(MXCSR_CASES))
@pytest.mark.parametrize("threads", (1, 2))
def test_caller_mxcsr_changes_no_bit_and_is_restored(compiled, case, threads):
    ffi, lib = eng._lib()
    mxcsr = MXCSR_CASES[case]
    rng = np.random.default_rng(5)
    m, n, kd = 96, 160, 40  # enough work for two threads
    c, a, b = operands(rng, "tdpbf16ps", m, n, kd, "adversarial")
    expected = eng.resolve("numpy").dot("tdpbf16ps", c, a, b, kd)
    out = np.empty((m, n), dtype=np.uint32)
    call = eng.call_descriptor(ffi, lib, compiled._kind, lib.PYAMX_OP_TDPBF16PS, a, a.strides[0], b, b.strides[0],
                               c, n, out, n, m, n, 2 * kd, threads)
    rc, after = run_under_mxcsr(lib, call, mxcsr)
    assert rc == 0
    assert after == mxcsr, f"the engine left MXCSR {after:#06x}, the caller had {mxcsr:#06x}"
    assert np.array_equal(out, expected)


@pytest.mark.skipif(not HAS_MXCSR, reason="x86-64 MXCSR only")
def test_mxcsr_is_per_thread_and_restored_in_python_threads(compiled):
    """Calls from several Python threads at once (GIL released), each with its own MXCSR."""
    ffi, lib = eng._lib()
    rng = np.random.default_rng(9)
    m, n, kd = 64, 64, 48
    c, a, b = operands(rng, "tdpbf16ps", m, n, kd, "adversarial")
    expected = eng.resolve("numpy").dot("tdpbf16ps", c, a, b, kd)
    failures = []

    def work(mxcsr):
        for _ in range(5):
            out = np.empty((m, n), dtype=np.uint32)
            call = eng.call_descriptor(ffi, lib, compiled._kind, lib.PYAMX_OP_TDPBF16PS, a, a.strides[0],
                                       b, b.strides[0], c, n, out, n, m, n, 2 * kd, 2)
            rc, after = run_under_mxcsr(lib, call, mxcsr)
            if rc or after != mxcsr or not np.array_equal(out, expected):
                failures.append((hex(mxcsr), rc, hex(after)))

    threads = [threading.Thread(target=work, args=(v,)) for v in MXCSR_CASES.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# ---- the C entry point refuses bad arguments ---------------------------------


def test_c_entry_point_refuses_bad_arguments(compiled):
    ffi, lib = eng._lib()
    a = np.zeros((4, 8), dtype=np.uint16)
    b = np.zeros((4, 8), dtype=np.uint16)
    c = np.zeros((4, 4), dtype=np.uint32)
    out = np.zeros((4, 4), dtype=np.uint32)

    def call(out_buf=out, **fields):
        described = eng.call_descriptor(ffi, lib, compiled._kind, lib.PYAMX_OP_TDPBF16PS, a, 16, b, 16, c, 4,
                                        out_buf, 4, 4, 4, 8, 1)
        for name, value in fields.items():
            setattr(described.struct, name, value)
        return lib.pyamx_engine_run(described.struct)

    assert call() == lib.PYAMX_ENGINE_OK
    for bad in (dict(op=lib.PYAMX_OP_TILELOADD), dict(lda_bytes=8), dict(ldb_bytes=-16), dict(ldc_in=3), dict(m=0),
                dict(k=-2), dict(k=7), dict(n=0), dict(out_buf=c), dict(threads=0),
                dict(threads=lib.PYAMX_MATMUL_MAX_THREADS + 1), dict(numerics=1), dict(b_layout=2), *BAD_OP_IDS):
        assert call(**bad) == lib.PYAMX_ENGINE_E_ARG, bad
    assert call(kind=99) == lib.PYAMX_ENGINE_E_UNAVAILABLE
    assert lib.pyamx_engine_run(ffi.NULL) == lib.PYAMX_ENGINE_E_ARG


# The C side indexes its traits table by op: ids off the table's ends (and its NONE row) must be
# refused before that index is taken, not read past it.
BAD_OP_IDS = [dict(op=op) for op in (-1, 0, len(isa.TABLE) + 1, 2**31 - 1, -(2**31))]


def test_c_matmul_entry_refuses_ops_that_are_not_dot_products(compiled):
    ffi, lib = eng._lib()
    a = np.zeros((4, 8), dtype=np.uint16)
    b = np.zeros((8, 4), dtype=np.uint16)
    out = np.zeros((4, 4), dtype=np.uint32)

    def call(op):
        described = eng.call_descriptor(ffi, lib, compiled._kind, op, a, 16, b, 8, None, 0, out, 4, 4, 4, 8, 1,
                                        rows_of_b=True)
        return lib.pyamx_engine_run(described.struct)

    assert call(lib.PYAMX_OP_TDPBF16PS) == lib.PYAMX_ENGINE_OK
    for bad in [dict(op=lib.PYAMX_OP_LDTILECFG), *BAD_OP_IDS]:
        assert call(**bad) == lib.PYAMX_ENGINE_E_ARG, bad


# ---- strict selection ----------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(eng.ENV_VAR, raising=False)
    monkeypatch.delenv(eng.THREADS_ENV_VAR, raising=False)
    eng.reset_environment()
    yield monkeypatch
    eng.reset_environment()


def test_unknown_engine_names_are_refused(clean_env):
    with pytest.raises(BackendError, match="must be one of auto, avx512, avx2, portable, numpy"):
        eng.resolve("avx")
    clean_env.setenv(eng.ENV_VAR, "fast")
    eng.reset_environment()
    with pytest.raises(BackendError, match="PYAMX_ENGINE"):
        eng.resolve()
    clean_env.setenv(eng.ENV_VAR, "")  # empty means unset
    eng.reset_environment()
    assert eng.resolve().name == eng.resolve("auto").name


def test_engine_named_in_environment_is_used(clean_env):
    clean_env.setenv(eng.ENV_VAR, "numpy")
    eng.reset_environment()
    assert eng.resolve().name == "numpy"
    c = np.zeros((2, 2), np.float32)
    a = np.zeros((2, 2), np.uint16)
    b = np.zeros((1, 4), np.uint16)
    assert pyamx.tdpbf16ps(c, a, b, backend="emulator").engine == "numpy"


def test_unavailable_engine_named_raises_never_falls_back(clean_env):
    real = eng._compiled_status
    clean_env.setattr(eng, "_compiled_status", lambda name: (False, "pretend CPU") if name == "avx512" else real(name))
    eng._engines.clear()
    try:
        with pytest.raises(eng.EngineUnavailableError, match="avx512.*pretend CPU"):
            eng.resolve("avx512")
        clean_env.setenv(eng.ENV_VAR, "avx512")
        eng.reset_environment()
        with pytest.raises(eng.EngineUnavailableError):
            pyamx.tdpbf16ps(np.zeros((1, 1), np.float32), np.zeros((1, 2), np.uint16), np.zeros((1, 2), np.uint16),
                            backend="emulator")
        assert eng.resolve("auto").name != "avx512"
    finally:
        eng._engines.clear()


def test_compiled_engines_refuse_other_numerics_and_auto_takes_numpy(clean_env):
    for name in COMPILED:
        with pytest.raises(ValueError, match="only the default 'sdm' numerics"):
            eng.resolve(name, "straight")
    assert eng.resolve("auto", "straight").name == "numpy"
    assert eng.resolve("auto", pyamx.Numerics(tininess="before")).name == "numpy"
    assert eng.resolve("numpy", "wide").name == "numpy"
    for name in COMPILED:  # the environment variable chooses the engine of the default numerics only
        clean_env.setenv(eng.ENV_VAR, name)
        eng.reset_environment()
        assert eng.resolve(None, "straight").name == "numpy"
    with pytest.raises(ValueError):
        pyamx.emulator.tdpbf16ps(np.zeros((1, 1), np.float32), np.zeros((1, 2), np.uint16),
                                 np.zeros((1, 2), np.uint16), numerics="straight", engine="portable")


def test_threads_environment_is_strict(clean_env):
    clean_env.setenv(eng.THREADS_ENV_VAR, "0")
    with pytest.raises(ValueError, match=eng.THREADS_ENV_VAR):
        eng.default_threads()
    clean_env.setenv(eng.THREADS_ENV_VAR, "3")
    assert eng.default_threads() == 3
    clean_env.setenv(eng.THREADS_ENV_VAR, str(eng.MAX_THREADS))
    assert eng.default_threads() == eng.MAX_THREADS
    clean_env.setenv(eng.THREADS_ENV_VAR, "1000")  # refused, as threads=1000 is, not capped
    with pytest.raises(ValueError, match=f"{eng.THREADS_ENV_VAR}.*1 to {eng.MAX_THREADS}"):
        eng.default_threads()
    clean_env.setenv(eng.THREADS_ENV_VAR, "")
    assert eng.default_threads() == (os.cpu_count() or 1)


def test_available_engines_lists_every_engine_with_a_reason():
    rows = eng.available_engines()
    assert [r[0] for r in rows] == ["avx512", "avx2", "portable", "numpy"]
    assert all(isinstance(reason, str) and reason for _, _, reason in rows)


# ---- the public functions run on the engine --------------------------------------


@pytest.mark.parametrize("op", FLOAT_OPS + INT_OPS)
def test_public_one_instruction_functions_say_which_engine_ran(op, clean_env):
    rng = np.random.default_rng(3)
    c, a, b = operands(rng, op, 16, 16, 16, "adversarial")
    if op in FLOAT_OPS:
        c = c.view(np.float32)
    if op == "tdpfp16ps":
        a, b = a.view(np.float16), b.view(np.float16)
    fn = getattr(pyamx, op)
    auto = fn(c, a, b, backend="emulator")
    assert auto.backend == "emulator" and auto.engine == eng.resolve("auto").name
    assert f"engine={auto.engine}" in repr(auto)
    names = ["numpy"] + [name for name, ok, _ in eng.available_engines() if ok and name != "numpy"]
    for name in names:
        result = fn(c, a, b, backend="emulator", engine=name)
        assert result.engine == name
        assert np.array_equal(as_bits(result), as_bits(auto)), name
        array_level = getattr(pyamx.emulator, op)(c, a, b, engine=name)
        assert array_level.engine == name and np.array_equal(as_bits(array_level), as_bits(auto))


def test_tile_machine_runs_on_the_named_engine(clean_env):
    names = ["numpy"] + [name for name, ok, _ in eng.available_engines() if ok and name != "numpy"]
    rng = np.random.default_rng(4)
    c, a, b = operands(rng, "tdpbf16ps", 16, 16, 16, "adversarial")
    results = {}
    for name in names:
        machine = pyamx.TileMachine(engine=name)
        assert machine.engine == name
        machine.ldtilecfg(pyamx.TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}))
        machine.tileloadd(0, c, 64)
        machine.tileloadd(1, a, 64)
        machine.tileloadd(2, b, 64)
        machine.tdpbf16ps(0, 1, 2)
        results[name] = machine.tile(0)
    assert all(np.array_equal(r, results["numpy"]) for r in results.values())
    assert pyamx.TileMachine(numerics="straight").engine == "numpy"
    assert pyamx.tile_machine(backend="emulator", engine="numpy").engine == "numpy"
    with pytest.raises(ValueError):
        pyamx.TileMachine(numerics="straight", engine="portable")


def test_thread_argument_is_strict(compiled):
    c, a, b = operands(np.random.default_rng(2), "tdpbf16ps", 4, 4, 4, "random")
    for engine in (compiled, eng.resolve("numpy")):
        for bad in (0, -1, 1.5, "2", True):
            with pytest.raises(ValueError, match="threads"):
                engine.dot("tdpbf16ps", c, a, b, 4, bad)


def test_compiled_engine_releases_the_gil(compiled):
    """Another Python thread runs bytecode in the middle of one long engine call.

    With the GIL held no bytecode could run there at all; on a loaded
    machine the spinning thread may simply not be scheduled in one window,
    so a few attempts are allowed (a held GIL fails every one)."""
    rng = np.random.default_rng(8)
    size = 1024 if compiled.name != "portable" else 512
    c, a, b = operands(rng, "tdpbf16ps", size, size, size // 2, "random")
    attempts = []
    for _ in range(5):
        window = {}
        stamps = []

        def call():
            window["start"] = time.perf_counter()
            compiled.dot("tdpbf16ps", c, a, b, size // 2, 1)
            window["end"] = time.perf_counter()

        worker = threading.Thread(target=call)
        worker.start()
        while worker.is_alive():
            stamps.append(time.perf_counter())
        worker.join()
        margin = (window["end"] - window["start"]) / 4  # far more than the Python around the C call
        inside = [t for t in stamps if window["start"] + margin < t < window["end"] - margin]
        if inside:
            return
        attempts.append(round((window["end"] - window["start"]) * 1e3, 1))
    pytest.fail(f"no bytecode ran in the middle of any of {len(attempts)} calls ({attempts} ms): the GIL was held")


def test_one_row_operands_with_any_row_stride_give_the_numpy_engines_bits(compiled):
    # numpy gives a size-1 axis any stride (here negative) and still calls the array C-contiguous.
    rng = np.random.default_rng(7)
    for op in FLOAT_OPS + INT_OPS:
        c, a, b = operands(rng, op, 1, 3, 1, "random")
        a_odd = np.repeat(a, 40, axis=0)[::-40]
        b_odd = np.repeat(b, 40, axis=0)[::-40]
        assert a_odd.shape == a.shape and a_odd.strides[0] < 0 and a_odd.flags.c_contiguous
        expected = eng.resolve("numpy").dot(op, c, a, b, 1)
        assert np.array_equal(as_bits(compiled.dot(op, c, a_odd, b_odd, 1)), as_bits(expected)), op


def test_threads_beyond_the_cap_are_refused_not_capped(compiled):
    c, a, b = operands(np.random.default_rng(3), "tdpbf16ps", 5, 5, 5, "random")
    expected = compiled.dot("tdpbf16ps", c, a, b, 5, 1)
    assert np.array_equal(compiled.dot("tdpbf16ps", c, a, b, 5, eng.MAX_THREADS), expected)
    assert np.array_equal(compiled.dot("tdpbf16ps", c, a, b, 5, np.int64(3)), expected)
    for engine in (compiled, eng.resolve("numpy")):
        for too_many in (eng.MAX_THREADS + 1, 1000, 2**40, np.int64(1000)):
            with pytest.raises(ValueError, match=f"threads={int(too_many)} is more than pyamx runs: at most "
                                                 f"{eng.MAX_THREADS}"):
                engine.dot("tdpbf16ps", c, a, b, 5, too_many)
    a_rows = np.zeros((4, 8), np.uint16)
    with pytest.raises(ValueError, match="threads=1000"):
        compiled.matmul("tdpbf16ps", a_rows, a_rows.T.copy(), threads=1000)


def test_one_place_checks_threads():
    assert eng.check_threads(None) is None and eng.check_threads(np.int32(7)) == 7
    for bad in (0, -1, 1.5, "2", True, eng.MAX_THREADS + 1):
        with pytest.raises(ValueError, match="threads"):
            eng.check_threads(bad, "fn")
