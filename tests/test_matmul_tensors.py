"""pyamx.matmul's tensors in and out: DLPack operands, ``out=``, ``out_dtype=``, dtype names for
``kind``, a stack times a shared b as one kernel call. Each compared as bits with the plain call,
on the emulator (default and numpy engines) and on the native backend (silicon, or the trap mode:
PYAMX_TRAP_EMULATION=1 PYAMX_BACKEND=native)."""

from __future__ import annotations


import numpy as np
import pytest

import pyamx
from pyamx import _matmul, bf16

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


_FAMILY = {"bf16": "bf16", "fp16": "fp16", "int8": "int8", "f32": "bf16"}
_KIND = {"f32": "bf16"}


@pytest.fixture(params=["emulator", "numpy", "native"])
def run(request, native_family):
    """``run(family) -> matmul keyword arguments``: the emulator's default engine, the numpy engine, or native."""
    def arguments(family):
        if request.param == "native":
            native_family(family)
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
    calls = []
    real = _matmul._product

    def counted(ops, *args, **kwargs):
        calls.append(ops.a.shape)
        return real(ops, *args, **kwargs)

    monkeypatch.setattr(_matmul, "_product", counted)
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
    where = dict(run(_FAMILY[kind]), kind=_KIND.get(kind))
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
