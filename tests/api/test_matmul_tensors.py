"""pyamx.matmul's tensors in and out: DLPack operands, ``out=``, ``out_dtype=``, dtype names for
``kind``, a stack times a shared b as one kernel call. Each compared as bits with the plain call,
on the emulator (default and numpy engines) and on the native backend (silicon, or the trap mode:
PYAMX_TRAP_EMULATION=1 PYAMX_BACKEND=native)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import pyamx
from pyamx import _matmul
from pyamx.table import bf16
from allocations import smallest_peak

RNG = np.random.default_rng(29)
#: bf16 values every product must carry through: zeros of both signs, infinities, NaN payloads, denormals
_BF16_SPECIALS = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFA5, 0x0001, 0x807F, 0x7F7F], np.uint16)


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def _bf16(shape, specials=True) -> np.ndarray:
    x = bf16.from_float32(RNG.standard_normal(shape).astype(np.float32))
    if specials:
        flat = x.reshape(-1)
        where = RNG.choice(flat.size, size=max(1, flat.size // 16), replace=False)
        flat[where] = RNG.choice(_BF16_SPECIALS, size=where.size)
    return x


def _make(kind, shape):
    """Operands of each kind, with special values where the kind has them."""
    if kind == "bf16":
        return _bf16(shape)
    if kind == "fp16":
        return RNG.standard_normal(shape).astype(np.float16)
    if kind == "int8":
        return RNG.integers(-128, 128, shape).astype(np.int8)
    return RNG.standard_normal(shape).astype(np.float32)  # "f32": rounded by kind="bf16"


_GROUP = {"bf16": "bf16", "fp16": "fp16", "int8": "int8", "f32": "bf16"}
_KIND = {"f32": "bf16"}


@pytest.fixture(params=["emulator", "numpy", "native"])
def run(request, native_group):
    """``run(group) -> matmul keyword arguments``: the emulator's default engine, the numpy engine, or native."""
    def arguments(group):
        if request.param == "native":
            native_group(group)
            return {"backend": "native"}
        return {"backend": "emulator", "engine": None if request.param == "emulator" else "numpy"}
    return arguments


# -- kind: the dtype names users write --------------------------------------------------------


@pytest.mark.parametrize("name, kind", [("bfloat16", "bf16"), ("float16", "fp16"), (np.float16, "fp16"),
                                        (np.dtype("float16"), "fp16")])
def test_dtype_names_are_kinds(run, name, kind):
    a, b = _make("f32", (5, 37)), _make("f32", (37, 4))
    where = run(kind)
    want = pyamx.matmul(a, b, kind=kind, **where)
    got = pyamx.matmul(a, b, kind=name, **where)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert got.rounded_to == kind


def test_the_ml_dtypes_bfloat16_dtype_is_kind_bf16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = _make("f32", (3, 8)), _make("f32", (8, 2))
    for name in (ml_dtypes.bfloat16, np.dtype(ml_dtypes.bfloat16)):
        got = pyamx.matmul(a, b, kind=name, backend="emulator")
        np.testing.assert_array_equal(_bits(got), _bits(pyamx.matmul(a, b, kind="bf16", backend="emulator")))


@pytest.mark.parametrize("name", ["float32", "half", "BF16", "bfloat", np.float32, np.int8, float, 3])
def test_unknown_kind_names_are_refused_with_the_list(name):
    with pytest.raises(ValueError, match=r"kind must be None, one of 'bf16', 'fp16', 'int8'.*'bfloat16', 'float16'"):
        pyamx.matmul(_bf16((2, 2)), _bf16((2, 2)), kind=name, backend="emulator")


def test_a_kind_name_reads_bits_as_that_kind():
    h = RNG.standard_normal((4, 6)).astype(np.float16)
    hb = RNG.standard_normal((6, 3)).astype(np.float16)
    want = pyamx.matmul(h, hb, backend="emulator")
    got = pyamx.matmul(h.view(np.uint16), hb.view(np.int16), kind="float16", backend="emulator")
    np.testing.assert_array_equal(_bits(got), _bits(want))


# -- a stack times a shared b: one kernel call -------------------------------------------------


def _count_products(monkeypatch):
    """The a shapes of the 2-D products a call runs: each _product, and each native kernel call
    made outside one (a float b rounded while packed goes straight to the kernel)."""
    calls = []
    inside = []
    real_product, real_native = _matmul._product, _matmul.native_packed

    def counted(ops, *args, **kwargs):
        calls.append(ops.a.shape)
        inside.append(True)
        try:
            return real_product(ops, *args, **kwargs)
        finally:
            inside.pop()

    def counted_native(row, a_bits, *args, **kwargs):
        if not inside:
            calls.append(a_bits.shape)
        return real_native(row, a_bits, *args, **kwargs)

    monkeypatch.setattr(_matmul, "_product", counted)
    monkeypatch.setattr(_matmul, "native_packed", counted_native)
    return calls


def _per_item(a, b, c, batch, **where):
    """The batch as a loop of 2-D calls: what each element must be, bit for bit."""
    m, n = a.shape[-2], b.shape[-1]
    a_all = np.broadcast_to(a, batch + a.shape[-2:])
    b_all = np.broadcast_to(b, batch + b.shape[-2:])
    c_all = None if c is None else np.broadcast_to(c, batch + (m, n))
    return [pyamx.matmul(a_all[i], b_all[i], None if c is None else c_all[i], **where) for i in np.ndindex(*batch)]


@pytest.mark.parametrize("kind", ["bf16", "fp16", "int8", "f32"])
@pytest.mark.parametrize("c_shape", [None, "mn", "full", "one"])
def test_a_stack_times_a_shared_b_is_one_call_with_each_elements_bits(run, monkeypatch, kind, c_shape):
    batch, m, k, n = (2, 3), 5, 45, 7  # K not a multiple of 32: padded
    a, b = _make(kind, batch + (m, k)), _make(kind, (k, n))
    acc = np.int32 if kind == "int8" else np.float32
    c = None if c_shape is None else {"mn": RNG.standard_normal((m, n)), "full": RNG.standard_normal(batch + (m, n)),
                                      "one": RNG.standard_normal((1, 1, m, n))}[c_shape].astype(acc)
    where = dict(run(_GROUP[kind]), kind=_KIND.get(kind))
    calls = _count_products(monkeypatch)
    got = pyamx.matmul(a, b, c, **where)
    assert calls == [(6 * m, k)], calls  # one call on the stacked rows
    assert got.shape == batch + (m, n)
    for index, one in zip(np.ndindex(*batch), _per_item(a, b, c, batch, **where)):
        np.testing.assert_array_equal(_bits(got[index]), _bits(one), err_msg=str(index))


@pytest.mark.parametrize("make_a, merged", [
    (lambda a: a, True),
    (lambda a: np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2), True),  # copied once, not per item
    (lambda a: a.swapaxes(0, 1).copy().swapaxes(0, 1), True),
    (lambda a: a[:, ::2], True),  # every other row: one run of rows with a stride, no copy
    (lambda a: np.broadcast_to(a[:1], a.shape), False),  # a broadcast stack: never tiled to the stack
    (lambda a: np.broadcast_to(a[:, :1], a.shape), False),
])
def test_a_stack_is_one_call_unless_it_is_broadcast(monkeypatch, make_a, merged):
    a = make_a(_bf16((4, 6, 33)))
    b = np.broadcast_to(_bf16((33, 5)), (4, 33, 5))  # a broadcast b is shared too
    calls = _count_products(monkeypatch)
    got = pyamx.matmul(a, b, backend="emulator")
    assert len(calls) == (1 if merged else 4), calls
    for index, one in zip(np.ndindex(4), _per_item(a, b, None, (4,), backend="emulator")):
        np.testing.assert_array_equal(_bits(got[index]), _bits(one))


def test_a_b_that_differs_along_the_stack_runs_per_item(monkeypatch):
    a, b = _bf16((3, 4, 10)), _bf16((3, 10, 2))
    calls = _count_products(monkeypatch)
    pyamx.matmul(a, b, backend="emulator")
    assert len(calls) == 3


# -- out_dtype ----------------------------------------------------------------------------------


def _rne_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, nearest even, written from the definition (non-NaN values): add half an
    ulp of bf16, less one unless the kept last bit is odd, and drop the low 16 bits."""
    u = values.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("kind", ["bf16", "fp16", "f32"])
def test_out_dtype_bf16_is_the_float32_result_rounded_once_to_nearest_even(run, kind):
    a, b = _make(kind, (9, 40)), _make(kind, (40, 11))
    where = dict(run(_GROUP[kind]), kind=_KIND.get(kind))
    plain = np.asarray(pyamx.matmul(a, b, **where))
    got = pyamx.matmul(a, b, out_dtype="bf16", **where)
    assert isinstance(got, pyamx.AMXResult) and got.dtype == np.uint16 and got.shape == plain.shape
    assert got.backend == where["backend"]
    finite = ~np.isnan(plain)
    np.testing.assert_array_equal(_bits(got)[finite], _rne_bf16(plain)[finite])
    assert np.isnan(bf16.to_float32(np.asarray(got))[~finite]).all()
    np.testing.assert_array_equal(_bits(got), bf16.from_float32(plain))  # NaNs as pyamx.table.bf16 keeps them
    np.testing.assert_array_equal(_bits(pyamx.matmul(a, b, out_dtype="bfloat16", **where)), _bits(got))
    np.testing.assert_array_equal(_bits(pyamx.matmul(a, b, out_dtype="float32", **where)), _bits(plain))


def test_rne_reference_rounds_ties_to_even():
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8)], np.float32)
    np.testing.assert_array_equal(_rne_bf16(ties), bf16.from_float32(ties))
    np.testing.assert_array_equal(_rne_bf16(ties), [0x3F80, 0x3F82, 0x3F81, 0xBF80])


def test_out_dtype_ml_dtypes_bfloat16_gives_that_dtype_with_the_same_bits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = _bf16((4, 20)), _bf16((20, 3))
    bits = pyamx.matmul(a, b, out_dtype="bf16", backend="emulator")
    for spelling in (ml_dtypes.bfloat16, np.dtype(ml_dtypes.bfloat16)):
        got = pyamx.matmul(a, b, out_dtype=spelling, backend="emulator")
        assert got.dtype == np.dtype(ml_dtypes.bfloat16) and got.backend == "emulator"
        np.testing.assert_array_equal(_bits(got), _bits(bits))


def test_out_dtype_bf16_of_a_stack():
    a, b = _bf16((3, 4, 20)), _bf16((20, 6))
    plain = pyamx.matmul(a, b, backend="emulator")
    got = pyamx.matmul(a, b, out_dtype="bf16", backend="emulator")
    np.testing.assert_array_equal(_bits(got), bf16.from_float32(np.asarray(plain)))


@pytest.mark.parametrize("make, out_dtype, words", [
    (lambda: (np.ones((2, 3), np.int8), np.ones((3, 2), np.int8)), "bf16", "rounds a float32 result"),
    (lambda: (np.ones((2, 3), np.int8), np.ones((3, 2), np.int8)), "float32", "result is int32"),
    (lambda: (_bf16((2, 3)), _bf16((3, 2))), "int32", "result is float32"),
    (lambda: (np.ones((2, 3), np.complex64), np.ones((3, 2), np.complex64)), "bf16", "complex product"),
    (lambda: (_bf16((2, 3)), _bf16((3, 2))), "fp16", "out_dtype must be"),
    (lambda: (_bf16((2, 3)), _bf16((3, 2))), np.float64, "out_dtype must be"),
    (lambda: (_bf16((2, 3)), _bf16((3, 2))), np.dtype(">f4"), "out_dtype must be"),
    (lambda: (_bf16((2, 3)), _bf16((3, 2))), object(), "out_dtype must be"),
])
def test_out_dtype_is_strict(make, out_dtype, words):
    a, b = make()
    with pytest.raises(ValueError, match=words):
        pyamx.matmul(a, b, out_dtype=out_dtype, backend="emulator")


def test_int8_takes_out_dtype_int32():
    a, b = np.ones((2, 3), np.int8), np.ones((3, 2), np.uint8)
    np.testing.assert_array_equal(pyamx.matmul(a, b, out_dtype="int32", backend="emulator"), np.full((2, 2), 3))


# -- out ------------------------------------------------------------------------------------------


def _strided(shape, dtype, fill):
    """A view with strides in both dimensions inside a larger array (what lies around it must stay)."""
    big = np.full((shape[0] * 2 + 1, shape[1] * 3 + 2), fill, dtype)
    return big, big[1::2, 2::3]


@pytest.mark.parametrize("kind", ["bf16", "int8", "f32"])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "fortran"])
def test_out_is_written_in_place_and_returned_labelled(run, kind, layout):
    m, k, n = 6, 37, 5
    a, b = _make(kind, (m, k)), _make(kind, (k, n))
    where = dict(run(_GROUP[kind]), kind=_KIND.get(kind))
    plain = pyamx.matmul(a, b, **where)
    dtype = np.int32 if kind == "int8" else np.float32
    big = None
    if layout == "contiguous":
        out = np.full((m, n), 7, dtype)
    elif layout == "fortran":
        out = np.asfortranarray(np.full((m, n), 7, dtype))
    else:
        big, out = _strided((m, n), dtype, 7)
    got = pyamx.matmul(a, b, out=out, **where)
    assert isinstance(got, pyamx.AMXResult) and got.base is out and np.shares_memory(got, out)
    assert (got.backend, got.native_mode, got.engine) == (plain.backend, plain.native_mode, plain.engine)
    np.testing.assert_array_equal(_bits(out), _bits(plain))
    np.testing.assert_array_equal(_bits(got), _bits(plain))
    if big is not None:
        around = np.ones(big.shape, bool)
        around[1::2, 2::3] = False
        assert (big[around] == 7).all(), "out= wrote outside its view"


@pytest.mark.parametrize("dtype", ["uint16", "int16", "bfloat16"])
def test_out_takes_a_bf16_result_as_bits(run, dtype):
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    a, b = _bf16((5, 40)), _bf16((40, 3))
    where = run("bf16")
    want = pyamx.matmul(a, b, out_dtype="bf16", **where)
    out = np.zeros((5, 3), dtype)
    got = pyamx.matmul(a, b, out=out, out_dtype="bf16", **where)
    assert got.base is out and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(_bits(out), _bits(want))


def test_out_of_a_stack_with_a_shared_b(run):
    a, b = _bf16((2, 3, 4, 33)), _bf16((33, 5))
    where = run("bf16")
    plain = pyamx.matmul(a, b, **where)
    out = np.empty((4, 3, 4, 10), np.float32)[::2, :, :, ::2]  # a strided stack
    got = pyamx.matmul(a, b, out=out, **where)
    assert got.base is out
    np.testing.assert_array_equal(_bits(out), _bits(plain))


def test_out_may_be_c_itself_to_accumulate_in_place(run):
    a, b = _bf16((2, 6, 40)), _bf16((40, 4))
    c = RNG.standard_normal((2, 6, 4)).astype(np.float32)
    where = run("bf16")
    want = pyamx.matmul(a, b, c, **where)
    got = pyamx.matmul(a, b, c, out=c, **where)
    assert got.base is c
    np.testing.assert_array_equal(_bits(c), _bits(want))


def test_a_result_given_as_out_carries_this_calls_labels_only():
    a32, b32 = _make("f32", (3, 20)), _make("f32", (20, 4))
    earlier = pyamx.matmul(a32, b32, kind="bf16", backend="emulator", engine="numpy")
    assert earlier.rounded_to == "bf16"
    a, b = _bf16((3, 20)), _bf16((20, 4))
    got = pyamx.matmul(a, b, out=earlier, backend="emulator", engine="numpy")
    assert got.rounded_to is None and got.engine == "numpy" and got.base is earlier
    np.testing.assert_array_equal(_bits(earlier), _bits(pyamx.matmul(a, b, backend="emulator")))


def test_complex_products_take_out():
    a = (RNG.standard_normal((3, 20)) + 1j * RNG.standard_normal((3, 20))).astype(np.complex64)
    b = (RNG.standard_normal((20, 4)) + 1j * RNG.standard_normal((20, 4))).astype(np.complex64)
    want = pyamx.matmul(a, b, backend="emulator")
    out = np.zeros((3, 4), np.complex64)
    got = pyamx.matmul(a, b, out=out, backend="emulator")
    assert got.base is out and got.backend == "emulator" and got.engine == want.engine
    np.testing.assert_array_equal(_bits(out), _bits(want))


def _huge(dtype):
    """A 2**40-element zero-stride view of 1 element: any copy is a MemoryError or terabytes."""
    return np.broadcast_to(np.zeros(1, dtype), (1 << 20, 1 << 20))


@pytest.mark.parametrize("make_out, error, words", [
    (lambda a, c: np.zeros((1 << 20, 2), np.float64), TypeError, "out has dtype float64"),
    (lambda a, c: np.zeros((1 << 20, 2), np.uint32), TypeError, "out has dtype uint32"),
    (lambda a, c: np.zeros((1 << 20, 2), np.uint16), TypeError, "out_dtype='bf16'"),
    (lambda a, c: np.zeros((1 << 20, 2), ">f4"), TypeError, "native byte order"),
    (lambda a, c: np.zeros((1 << 20, 3), np.float32), ValueError, "out has shape"),
    (lambda a, c: np.zeros((2, 1 << 20, 2), np.float32), ValueError, "out has shape"),
    (lambda a, c: np.broadcast_to(np.float32(0), (1 << 20, 2)), ValueError, "read-only"),
    (lambda a, c: [[0.0, 0.0]] * 4, TypeError, "out must be a numpy array"),
    (lambda a, c: a[:, :4].view(np.float32), ValueError, "shares memory with a"),
    (lambda a, c: c[1:], ValueError, "shares memory with c"),
])
def test_a_bad_out_is_refused_before_anything_runs(monkeypatch, make_out, error, words):
    a = np.zeros((1 << 20, 4), np.uint16)  # 8 MiB: a copy of it would show
    c_memory = np.zeros(((1 << 20) + 1, 2), np.float32)
    c = c_memory[:-1]
    out = make_out(a, c_memory)
    ran = []
    monkeypatch.setattr(_matmul, "_product", lambda *args, **kwargs: ran.append(1))
    b = _bf16((4, 2))
    with pytest.raises(error, match=words):
        pyamx.matmul(a, b, c, out=out, backend="emulator")
    peak = smallest_peak(lambda: pyamx.matmul(a, b, c, out=out, backend="emulator"))
    assert not ran and peak < 1 << 20, f"{peak} bytes allocated before the error"


def test_a_bad_out_dtype_with_a_huge_view_allocates_nothing():
    b16, b8 = np.zeros((1 << 20, 1), np.uint16), np.zeros((1 << 20, 1), np.int8)
    with pytest.raises(ValueError, match="out_dtype"):
        pyamx.matmul(_huge(np.uint16), b16, out_dtype="fp8")
    with pytest.raises(ValueError, match="rounds a float32"):
        pyamx.matmul(_huge(np.int8), b8, out_dtype="bf16")
    assert smallest_peak(lambda: pyamx.matmul(_huge(np.uint16), b16, out_dtype="fp8")) < 1 << 20
    assert smallest_peak(lambda: pyamx.matmul(_huge(np.int8), b8, out_dtype="bf16")) < 1 << 20


# -- DLPack operands ------------------------------------------------------------------------------


class _Exporter:
    """A DLPack producer that is not a numpy array (as a framework tensor is): only the two methods."""

    def __init__(self, array, device=(1, 0)):
        self._array = array
        self._device = device

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._device


def test_a_dlpack_producer_is_read_in_place(run):
    a, b = _bf16((5, 33)), _bf16((33, 4))
    a_in, carried = pyamx._validate.require_operand(_Exporter(a), "a", "matmul")
    assert carried is None and a_in.dtype == np.uint16 and np.shares_memory(a_in, a)
    where = run("bf16")
    got = pyamx.matmul(_Exporter(a), _Exporter(b[::-1][::-1]), **where)
    np.testing.assert_array_equal(_bits(got), _bits(pyamx.matmul(a, b, **where)))


def test_a_dlpack_producer_on_a_device_is_refused_with_the_recipe():
    with pytest.raises(TypeError, match=r"matmul: a \(_Exporter\) cannot be read through DLPack: it lives on cuda "
                                        r"memory.*t.cpu\(\)"):
        pyamx.matmul(_Exporter(_bf16((2, 2)), device=(2, 0)), _bf16((2, 2)), backend="emulator")


class _FailingExporter(_Exporter):
    def __dlpack__(self, *args, **kwargs):
        raise BufferError("cannot export this one")


class _FailingExporterWithArray(_FailingExporter):
    def __array__(self, dtype=None, copy=None):
        return self._array


def test_a_producer_whose_export_fails_is_taken_through_array_where_it_has_one():
    a, b = _bf16((3, 8)), _bf16((8, 2))
    got = pyamx.matmul(_FailingExporterWithArray(a), b, backend="emulator")
    np.testing.assert_array_equal(_bits(got), _bits(pyamx.matmul(a, b, backend="emulator")))
    with pytest.raises(TypeError, match=r"a \(_FailingExporter\) cannot be read through DLPack: BufferError: "
                                        "cannot export this one"):
        pyamx.matmul(_FailingExporter(a), b, backend="emulator")


def _torch():
    return pytest.importorskip("torch")


def test_torch_tensors_are_read_in_place():
    torch = _torch()
    t = torch.randn(4, 6).to(torch.bfloat16)
    array, carried = pyamx._validate.require_operand(t, "a", "matmul")
    assert carried == "bfloat16" and array.dtype == np.uint16
    assert np.shares_memory(array, t.view(torch.int16).numpy())
    np.testing.assert_array_equal(array.view(np.int16), t.view(torch.int16).numpy())


@pytest.mark.parametrize("dtype, reference", [
    ("bfloat16", lambda t, torch: t.view(torch.int16).numpy()),
    ("float16", lambda t, torch: t.numpy()),
    ("int8", lambda t, torch: t.numpy()),
    ("uint8", lambda t, torch: t.numpy()),
    ("float32", lambda t, torch: t.numpy()),
])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
def test_torch_operands_give_the_bits_of_their_numpy_arrays(run, dtype, reference, layout):
    torch = _torch()
    kind = "bf16" if dtype == "float32" else None
    a = torch.randn(7, 40) * 3
    b = torch.randn(40, 5) * 3
    a, b = (x.to(getattr(torch, dtype)) for x in (a, b))
    if layout == "transposed":
        a = a.t().contiguous().t()
    elif layout == "sliced":
        a, b = torch.cat([a, a], 1)[:, ::2], torch.cat([b, b], 0)[1::2]
    elif layout == "expanded":
        a = a[:1].expand(7, 40)
    group = "int8" if "int" in dtype else ("fp16" if dtype == "float16" else "bf16")
    where = dict(run(group), kind=kind)
    got = pyamx.matmul(a, b, **where)
    want = pyamx.matmul(reference(a, torch), reference(b, torch), **where)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_a_torch_bfloat16_stack_times_shared_weights_with_out_and_bf16_out(run):
    torch = _torch()
    x = torch.randn(2, 8, 48).to(torch.bfloat16)
    w = torch.randn(48, 16).to(torch.bfloat16)
    where = run("bf16")
    want = pyamx.matmul(x.view(torch.int16).numpy(), w.view(torch.int16).numpy(), **where)
    np.testing.assert_array_equal(_bits(pyamx.matmul(x, w, **where)), _bits(want))
    y = pyamx.matmul(x, w, out_dtype="bf16", **where)
    back = torch.from_numpy(np.asarray(y).view(np.int16)).view(torch.bfloat16)
    np.testing.assert_array_equal(back.view(torch.int16).numpy().view(np.uint16), bf16.from_float32(np.asarray(want)))


def test_a_torch_out_is_written_where_numpy_writes_dlpack_arrays():
    torch = _torch()
    a, b = _bf16((3, 20)), _bf16((20, 4))
    want = pyamx.matmul(a, b, backend="emulator")
    out = torch.zeros(3, 4)
    if not np.from_dlpack(out).flags.writeable:  # numpy < 2.1: every DLPack import is read-only
        with pytest.raises(TypeError, match=r"out \(Tensor\) cannot be written through DLPack.*t.numpy\(\)"):
            pyamx.matmul(a, b, out=out, backend="emulator")
        out = out.numpy()
    got = pyamx.matmul(a, b, out=out, backend="emulator")
    np.testing.assert_array_equal(_bits(out.numpy() if hasattr(out, "numpy") else out), _bits(want))
    assert got.backend == "emulator"


@pytest.mark.parametrize("kind, words", [("fp16", "kind='fp16' takes"), ("int8", "kind='int8' takes")])
def test_a_torch_bfloat16_tensor_is_bf16_whatever_the_kind_says(kind, words):
    torch = _torch()
    t = torch.ones(2, 2, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=words + r".*has dtype bfloat16"):
        pyamx.matmul(t, t, kind=kind, backend="emulator")


def test_a_torch_tensor_that_requires_grad_is_refused_saying_detach():
    torch = _torch()
    t = torch.ones(2, 2, requires_grad=True)
    with pytest.raises(TypeError, match=r"matmul: a \(Tensor\) cannot be read through DLPack.*detach"):
        pyamx.matmul(t, t, kind="bf16", backend="emulator")


def test_torch_float8_tensors_are_read_as_their_formats():
    torch = _torch()
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = torch.randn(4, 70).to(torch.float8_e5m2)
    b = torch.randn(70, 3).to(torch.float8_e4m3fn)
    got = pyamx.matmul(a, b, backend="emulator")
    want = pyamx.matmul(a.view(torch.uint8).numpy().view(ml_dtypes.float8_e5m2),
                        b.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn), backend="emulator")
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_torch_complex_tensors_are_complex_products():
    torch = _torch()
    a, b = torch.randn(3, 5, dtype=torch.complex64), torch.randn(5, 2, dtype=torch.complex64)
    got = pyamx.matmul(a, b, backend="emulator")
    np.testing.assert_array_equal(_bits(got), _bits(pyamx.matmul(a.numpy(), b.numpy(), backend="emulator")))


def test_without_ml_dtypes_a_bfloat16_tensor_still_runs_matmul_and_other_readers_say_what_to_do(monkeypatch):
    torch = _torch()
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes raises ImportError
    t = torch.randn(2, 4).to(torch.bfloat16)
    bits = t.view(torch.int16).numpy()
    np.testing.assert_array_equal(_bits(pyamx.matmul(t, t.t(), backend="emulator")),
                                  _bits(pyamx.matmul(bits, bits.T, backend="emulator")))
    with pytest.raises(TypeError, match=r"to_float32: bits \(Tensor\) holds bfloat16 values.*install ml_dtypes.*view\(torch.int16\)"):
        bf16.to_float32(t)


def test_other_entry_points_read_a_torch_bfloat16_tensor_as_bf16():
    torch = _torch()
    pytest.importorskip("ml_dtypes")
    t = torch.randn(2, 4).to(torch.bfloat16)
    np.testing.assert_array_equal(bf16.to_float32(t), t.float().numpy())
    with pytest.raises(TypeError, match="tdpfp16ps: a has dtype bfloat16"):
        pyamx.tdpfp16ps(np.zeros((2, 2), np.float32), t, t, backend="emulator")


def test_jax_arrays_are_read_in_place():
    jnp = pytest.importorskip("jax.numpy")
    a32 = RNG.standard_normal((6, 40)).astype(np.float32)
    b32 = RNG.standard_normal((40, 3)).astype(np.float32)
    want = pyamx.matmul(a32, b32, kind="bf16", backend="emulator")
    np.testing.assert_array_equal(_bits(pyamx.matmul(jnp.asarray(a32), jnp.asarray(b32), kind="bf16",
                                                     backend="emulator")), _bits(want))
    a16, b16 = jnp.asarray(a32, jnp.bfloat16), jnp.asarray(b32, jnp.bfloat16)
    np.testing.assert_array_equal(_bits(pyamx.matmul(a16, b16, backend="emulator")), _bits(want))
