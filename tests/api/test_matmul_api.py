"""pyamx.matmul's interface: operand kinds (strict), accumulator, labels, backends, engines, threads, memory."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest

import pyamx
from pyamx.table import bf16
import pyamx.emulator.engine  # noqa: F401  (a submodule: bound on pyamx only once imported)
from pyamx.errors import BackendError, NativeUnavailableError

RNG_SEED = 99


def _operands(m=5, k=7, n=3):
    rng = np.random.default_rng(RNG_SEED)
    a = bf16.from_float32(rng.standard_normal((m, k)).astype(np.float32))
    b = bf16.from_float32(rng.standard_normal((k, n)).astype(np.float32))
    return a, b


def test_result_is_labelled_and_typed():
    a, b = _operands()
    r = pyamx.matmul(a, b, backend="emulator", engine="numpy")
    assert isinstance(r, pyamx.AMXResult) and r.dtype == np.float32 and r.shape == (5, 3)
    assert (r.backend, r.engine, r.native_mode) == ("emulator", "numpy", None)
    assert "engine=numpy" in repr(r)
    auto = pyamx.matmul(a, b, backend="emulator")
    assert auto.engine in pyamx.emulator.engine.NAMES and auto.engine != "auto"
    i = pyamx.matmul(np.ones((2, 3), np.int8), np.ones((3, 4), np.uint8), backend="emulator")
    assert i.dtype == np.int32 and (np.asarray(i) == 3).all()


def test_values_are_the_product():
    a, b = _operands(9, 40, 6)
    exact = bf16.to_float32(a).astype(np.float64) @ bf16.to_float32(b).astype(np.float64)
    got = pyamx.matmul(a, b, backend="emulator")
    assert np.allclose(got, exact, rtol=1e-5, atol=1e-5)
    c = np.full((9, 6), 2.5, np.float32)
    assert np.allclose(pyamx.matmul(a, b, c, backend="emulator"), exact + 2.5, rtol=1e-5, atol=1e-5)


def test_inputs_are_never_modified():
    a, b = _operands(4, 33, 5)
    c = np.arange(20, dtype=np.float32).reshape(4, 5)
    copies = [x.copy() for x in (a, b, c)]
    pyamx.matmul(a, b, c, backend="emulator")
    for before, after in zip(copies, (a, b, c)):
        assert np.array_equal(before.view(np.uint8), after.view(np.uint8))


def test_ml_dtypes_noncontiguous_and_big_endian_operands_give_the_same_bits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = _operands(6, 9, 4)
    want = pyamx.matmul(a, b, backend="emulator").view(np.uint32)
    assert np.array_equal(pyamx.matmul(a.view(ml_dtypes.bfloat16), b, backend="emulator").view(np.uint32), want)
    a_t = np.ascontiguousarray(a.T).T  # a Fortran-ordered view of the same values
    assert np.array_equal(pyamx.matmul(a_t, b, backend="emulator").view(np.uint32), want)
    a_be = a.astype(">u2")
    assert np.array_equal(pyamx.matmul(a_be, b, backend="emulator").view(np.uint32), want)


@pytest.mark.parametrize("a_dtype, b_dtype, kind, error", [
    (np.float32, np.uint16, None, TypeError),  # float32 is not an AMX input format
    (np.uint16, np.float16, None, TypeError),  # bf16 bits with fp16: ambiguous mix
    (np.float16, np.int8, None, TypeError),
    (np.float16, np.float16, "bf16", TypeError),  # kind is strict
    (np.int8, np.int8, "fp16", TypeError),
    (np.uint16, np.uint16, "half", ValueError),  # not a kind ("float16" is fp16)
    (np.float64, np.float64, None, TypeError),  # floats are rounded only to a kind the call names
    (np.float32, np.float32, "int8", TypeError),
])
def test_operand_kinds_are_strict(a_dtype, b_dtype, kind, error):
    with pytest.raises(error, match="matmul"):
        pyamx.matmul(np.zeros((2, 2), a_dtype), np.zeros((2, 2), b_dtype), kind=kind, backend="emulator")


def test_fp16_bits_need_kind():
    rng = np.random.default_rng(RNG_SEED)
    a = rng.standard_normal((3, 5)).astype(np.float16)
    b = rng.standard_normal((5, 2)).astype(np.float16)
    want = pyamx.matmul(a, b, backend="emulator").view(np.uint32)
    assert np.array_equal(pyamx.matmul(a.view(np.uint16), b.view(np.uint16), kind="fp16", backend="emulator").view(np.uint32), want)
    as_bf16 = pyamx.matmul(a.view(np.uint16), b.view(np.uint16), backend="emulator").view(np.uint32)
    assert not np.array_equal(as_bf16, want)  # uint16 alone means bf16 bits


@pytest.mark.parametrize("a_shape, b_shape, c_shape, words", [
    ((2, 3), (4, 2), None, "columns must equal"),
    ((0, 3), (3, 2), None, "at least 1"),
    ((2, 3), (3, 0), None, "at least 1"),
    ((3,), (3, 2), None, "2-D"),
    ((2, 3), (3, 2), (2, 3), "shape"),
])
def test_shape_errors(a_shape, b_shape, c_shape, words):
    c = None if c_shape is None else np.zeros(c_shape, np.float32)
    with pytest.raises(ValueError, match=words):
        pyamx.matmul(np.zeros(a_shape, np.uint16), np.zeros(b_shape, np.uint16), c, backend="emulator")


def test_accumulator_dtype_is_checked():
    with pytest.raises(TypeError, match="c has dtype"):
        pyamx.matmul(np.zeros((2, 2), np.uint16), np.zeros((2, 2), np.uint16), np.zeros((2, 2), np.float64))
    with pytest.raises(TypeError, match="c has dtype"):
        pyamx.matmul(np.zeros((2, 2), np.int8), np.zeros((2, 2), np.int8), np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match="c has dtype"):
        pyamx.matmul(np.zeros((2, 2), np.uint16), np.zeros((2, 2), np.uint16), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2", 257, 1000])
def test_threads_are_checked(threads):
    with pytest.raises(ValueError, match="threads"):
        pyamx.matmul(np.zeros((2, 2), np.uint16), np.zeros((2, 2), np.uint16), threads=threads, backend="emulator")


def test_threads_do_not_change_bits(monkeypatch):
    monkeypatch.setattr(pyamx.emulator.dot, "CHUNK_ELEMENTS", 64)  # many chunks even on a small case
    rng = np.random.default_rng(RNG_SEED)
    a = rng.integers(0, 2**16, (37, 70)).astype(np.uint16)
    b = rng.integers(0, 2**16, (70, 29)).astype(np.uint16)
    one = pyamx.matmul(a, b, backend="emulator", engine="numpy", threads=1).view(np.uint32)
    assert np.array_equal(pyamx.matmul(a, b, backend="emulator", engine="numpy", threads=3).view(np.uint32), one)
    assert np.array_equal(pyamx.matmul(a, b, backend="emulator", threads=2).view(np.uint32), one)  # auto


def test_engine_choice_is_strict(monkeypatch):
    a, b = _operands()
    with pytest.raises(BackendError, match="engine"):
        pyamx.matmul(a, b, backend="emulator", engine="fastest")
    for compiled in ("avx512", "avx2", "portable"):
        try:
            r = pyamx.matmul(a, b, backend="emulator", engine=compiled)
        except BackendError as exc:
            assert compiled in str(exc)  # asked for by name: used, or the call fails
        else:
            assert r.engine == compiled
    try:
        monkeypatch.setenv("PYAMX_ENGINE", "nonsense")
        pyamx.emulator.engine.reset_environment()  # the environment is read once, like PYAMX_BACKEND
        with pytest.raises(BackendError, match="PYAMX_ENGINE"):
            pyamx.matmul(a, b, backend="emulator")
        monkeypatch.setenv("PYAMX_ENGINE", "numpy")
        pyamx.emulator.engine.reset_environment()
        assert pyamx.matmul(a, b, backend="emulator").engine == "numpy"
    finally:
        monkeypatch.undo()
        pyamx.emulator.engine.reset_environment()


def test_native_backend_by_name_is_used_or_fails():
    a, b = _operands()
    try:
        r = pyamx.matmul(a, b, backend="native")
    except NativeUnavailableError as exc:
        assert "native" in str(exc)
    else:
        assert r.backend == "native" and r.native_mode in ("silicon", "trap", "complement")


def test_a_named_native_backend_refuses_an_emulator_model_or_engine_wherever_it_runs():
    a, b = _operands()
    with pytest.raises(ValueError, match="numerics='straight' selects an emulator model"):
        pyamx.matmul(a, b, backend="native", numerics="straight")
    with pytest.raises(ValueError, match="engine='portable' selects the emulator"):
        pyamx.matmul(a, b, backend="native", engine="portable")
    with pytest.raises(ValueError, match="engine='numpy' selects the emulator"):
        pyamx.tdpbf16ps(np.zeros((1, 1), np.float32), a[:1, :2], b[:1, :1].repeat(2, 1), backend="native",
                        engine="numpy")
    with pytest.raises(ValueError, match="engine='numpy' selects the emulator"):
        pyamx.tile_machine(backend="native", engine="numpy")


@pytest.mark.parametrize("backend", [None, "auto"])
def test_auto_runs_an_emulator_model_or_named_engine_on_the_emulator_even_where_native_runs(backend):
    # Where auto picks native (silicon, or the CI trap leg), these must still run on the emulator:
    # the same script behaves the same on every machine.
    a, b = _operands()
    if backend is None and pyamx._backend.requested() == "native":
        pytest.skip("PYAMX_BACKEND=native: a named native backend refuses these (tested above)")
    r = pyamx.matmul(a, b, backend=backend, numerics="straight")
    assert (r.backend, r.engine) == ("emulator", "numpy")
    r = pyamx.matmul(a, b, backend=backend, engine="portable")
    assert (r.backend, r.engine) == ("emulator", "portable")
    one = pyamx.tdpbf16ps(np.zeros((1, 1), np.float32), a[:1, :2], b[:1, :1].repeat(2, 1), backend=backend,
                          engine="numpy")
    assert (one.backend, one.engine) == ("emulator", "numpy")
    assert isinstance(pyamx.tile_machine(backend=backend, engine="numpy"), pyamx.TileMachine)


@pytest.mark.parametrize("backend", [None, "auto", "native", "emulator"])
def test_an_unknown_engine_name_is_refused_on_every_backend(backend):
    a, b = _operands()
    # A ValueError like every other bad keyword, and a BackendError for older callers.
    with pytest.raises(BackendError, match="bogus") as refused:
        pyamx.matmul(a, b, backend=backend, engine="bogus")
    assert isinstance(refused.value, ValueError)
    with pytest.raises(BackendError, match="bogus") as refused:
        pyamx.tile_machine(backend=backend, engine="bogus")
    assert isinstance(refused.value, ValueError)


def test_auto_backend_says_what_ran():
    a, b = _operands()
    r = pyamx.matmul(a, b, backend="auto")
    assert r.backend in ("emulator", "native")
    assert (r.engine is not None) == (r.backend == "emulator")


@pytest.mark.parametrize("data", ["normal", "tiny", "fp16", "int8"])
def test_memory_is_linear_in_the_operands(data):
    """No (M, N, K) array: peak extra memory stays a small multiple of M*K + K*N + M*N.

    "tiny" products reach the float64 tier (values near 2**-63), the others the fast tier.
    """
    m = n = 128
    k = 2048
    rng = np.random.default_rng(RNG_SEED)
    a32, b32 = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    if data == "fp16":
        a, b = a32.astype(np.float16), b32.astype(np.float16)
    elif data == "int8":
        a, b = rng.integers(-128, 128, (m, k)).astype(np.int8), rng.integers(0, 256, (k, n)).astype(np.uint8)
    else:
        scale = np.float32(2.0**-63 if data == "tiny" else 1.0)
        a, b = bf16.from_float32(a32 * scale), bf16.from_float32(b32 * scale)
    pyamx.matmul(a[:2, :40], b[:40, :3], backend="emulator", engine="numpy")  # imports and caches
    tracemalloc.start()  # sees numpy's allocations (a compiled engine's own buffers it would not)
    pyamx.matmul(a, b, backend="emulator", engine="numpy")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    linear = (m * k + k * n + m * n) * 4
    assert peak < 12 * linear, f"peak {peak} bytes vs linear size {linear}"
    assert peak < m * n * k * 4 / 4, f"peak {peak} bytes: close to an (M, N, K) array"


def test_plan_packs_b_in_the_instruction_layout():
    b = np.arange(15, dtype=np.uint16).reshape(5, 3)  # K = 5: padded to 3 dwords
    p = sys.modules["pyamx._matmul"].plan(  # pyamx.matmul, the attribute, is the function
np.zeros((2, 5), np.uint16), b)
    assert p.k_dwords == 3 and p.a.shape == (2, 6) and p.b_vnni.shape == (3, 6)
    assert np.array_equal(p.b_vnni, bf16.pack_pairs(b, pad=True))
    assert (p.a[:, 5] == 0x8000).all()
