"""pyamx.matmul's operands: the one operand rule, float32 rounded once, batches, checks before copies."""

from __future__ import annotations

import array

import numpy as np
import pytest

import pyamx
from pyamx.table import bf16
from pyamx.errors import BackendError
from allocations import smallest_peak
from test_bad_input import _ArrayLike, _Unconvertible  # stand-ins for framework tensors

RNG = np.random.default_rng(20)


def _bits(result) -> np.ndarray:
    return np.asarray(result).view(np.uint32)


def _bf16(shape) -> np.ndarray:
    return bf16.from_float32(RNG.standard_normal(shape).astype(np.float32))


# -- the one operand rule --------------------------------------------------------------------


def test_int16_bit_patterns_are_bf16_and_fp16_operands_as_for_tdpbf16ps():
    a, b = _bf16((3, 5)), _bf16((5, 4))
    want = _bits(pyamx.matmul(a, b, backend="emulator"))
    np.testing.assert_array_equal(_bits(pyamx.matmul(a.view(np.int16), b.view(np.int16), backend="emulator")), want)
    h, hb = RNG.standard_normal((2, 3)).astype(np.float16), RNG.standard_normal((3, 2)).astype(np.float16)
    want16 = _bits(pyamx.matmul(h, hb, backend="emulator"))
    got16 = pyamx.matmul(h.view(np.int16), hb.view(np.int16), kind="fp16", backend="emulator")
    np.testing.assert_array_equal(_bits(got16), want16)


def test_lists_array_likes_and_buffers_are_operands():
    a, b = _bf16((2, 4)), _bf16((4, 2))
    c = np.array([[1.5, -2.0], [0.25, 8.0]], np.float32)
    want = _bits(pyamx.matmul(a, b, c, backend="emulator"))
    via_array = pyamx.matmul(_ArrayLike(a), _ArrayLike(b.view(np.int16)), _ArrayLike(c), backend="emulator")
    np.testing.assert_array_equal(_bits(via_array), want)
    buffer_a = memoryview(array.array("H", a.ravel().tolist())).cast("B").cast("H", a.shape)
    np.testing.assert_array_equal(_bits(pyamx.matmul(buffer_a, b, c.tolist() and c, backend="emulator")), want)
    floats = bf16.to_float32(a).tolist()  # Python floats: float64, exact bf16 values, so rounding keeps them
    np.testing.assert_array_equal(_bits(pyamx.matmul(floats, b, c, kind="bf16", backend="emulator")), want)


def test_an_unconvertible_tensor_gets_a_type_error_with_the_recipe():
    with pytest.raises(TypeError, match=r"matmul: a \(_Unconvertible\).*view\(torch.int16\)"):
        pyamx.matmul(_Unconvertible(), _bf16((2, 2)), backend="emulator")


@pytest.mark.parametrize("bad", [None, "abc", {"a": 1}])
def test_objects_that_are_not_arrays_are_refused_by_name(bad):
    with pytest.raises(TypeError, match=f"matmul: b must be an array, not {type(bad).__name__}"):
        pyamx.matmul(_bf16((2, 2)), bad, backend="emulator")


# -- floats, rounded once ------------------------------------------------------------------


@pytest.mark.parametrize("kind, to_bits", [("bf16", bf16.from_float32),
                                           ("fp16", lambda x: x.astype(np.float16).view(np.uint16))])
@pytest.mark.parametrize("engine", ["numpy", None])
def test_float32_operands_are_rounded_once_then_run_as_bits(kind, to_bits, engine):
    a32, b32 = RNG.standard_normal((5, 9)).astype(np.float32), RNG.standard_normal((9, 3)).astype(np.float32)
    got = pyamx.matmul(a32, b32, kind=kind, backend="emulator", engine=engine)
    want = pyamx.matmul(to_bits(a32), to_bits(b32), kind=kind, backend="emulator", engine=engine)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert got.rounded_to == kind and want.rounded_to is None
    assert f"rounded_to={kind}" in repr(got)
    mixed = pyamx.matmul(a32, to_bits(b32), kind=kind, backend="emulator", engine=engine)
    np.testing.assert_array_equal(_bits(mixed), _bits(want))
    big_endian = pyamx.matmul(a32.astype(">f4"), b32.T.copy().T, kind=kind, backend="emulator", engine=engine)
    np.testing.assert_array_equal(_bits(big_endian), _bits(want))


# (value, its nearest-even neighbour in the format): ties go to the even significand, and a float64
# just above a tie rounds up (rounding it through float32 first would land on the tie, then go down).
_ROUNDING_CASES = {
    "bf16": [(1 + 2**-8, 1.0), (1 + 3 * 2**-8, 1 + 2**-6), (1 + 2**-8 + 2**-40, 1 + 2**-7)],
    "fp16": [(1 + 2**-11, 1.0), (1 + 3 * 2**-11, 1 + 2**-9), (1 + 2**-11 + 2**-40, 1 + 2**-10)],
}


@pytest.mark.parametrize("kind", ["bf16", "fp16"])
def test_rounding_is_to_nearest_even_and_direct_from_float64(kind):
    for value, rounded in _ROUNDING_CASES[kind]:
        dtype = np.float32 if float(np.float32(value)) == value else np.float64
        a = np.array([[value]], dtype)
        got = pyamx.matmul(a, np.ones((1, 1), np.float32), kind=kind, backend="emulator")
        assert float(got[0, 0]) == rounded, (kind, value, float(got[0, 0]))


def test_floats_need_a_kind_and_the_error_says_so():
    with pytest.raises(TypeError, match="kind='bf16'"):
        pyamx.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), backend="emulator")


# -- batches -------------------------------------------------------------------------------


@pytest.mark.parametrize("a_shape, b_shape, c_shape, out_shape", [
    ((3, 4, 5), (3, 5, 2), None, (3, 4, 2)),
    ((3, 4, 5), (5, 2), (4, 2), (3, 4, 2)),
    ((2, 1, 4, 5), (3, 5, 2), (2, 3, 4, 2), (2, 3, 4, 2)),
    ((4, 5), (2, 5, 2), (1, 4, 2), (2, 4, 2)),
])
@pytest.mark.parametrize("engine", ["numpy", None])
def test_batches_broadcast_like_np_matmul_and_match_the_2d_call(a_shape, b_shape, c_shape, out_shape, engine):
    a, b = _bf16(a_shape), _bf16(b_shape)
    c = None if c_shape is None else RNG.standard_normal(c_shape).astype(np.float32)
    got = pyamx.matmul(a, b, c, backend="emulator", engine=engine)
    assert got.shape == out_shape == np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    assert isinstance(got, pyamx.AMXResult) and got.backend == "emulator" and got.dtype == np.float32
    a_all, b_all = np.broadcast_to(a, out_shape[:-2] + a_shape[-2:]), np.broadcast_to(b, out_shape[:-2] + b_shape[-2:])
    c_all = None if c is None else np.broadcast_to(c, out_shape)
    for index in np.ndindex(*out_shape[:-2]):
        one = pyamx.matmul(a_all[index], b_all[index], None if c is None else c_all[index], backend="emulator",
                           engine=engine)
        np.testing.assert_array_equal(_bits(got[index]), _bits(one), err_msg=str(index))


@pytest.mark.parametrize("make, kind", [
    (lambda s: RNG.integers(-128, 128, s).astype(np.int8), None),
    (lambda s: RNG.standard_normal(s).astype(np.float16), None),
    (lambda s: RNG.standard_normal(s).astype(np.float32), "fp16"),
])
def test_every_kind_batches(make, kind):
    a, b = make((2, 3, 70)), make((70, 4))
    got = pyamx.matmul(a, b, kind=kind, backend="emulator")
    for i in range(2):
        np.testing.assert_array_equal(_bits(got[i]), _bits(pyamx.matmul(a[i], b, kind=kind, backend="emulator")))


@pytest.mark.parametrize("a_shape, b_shape, c_shape, words", [
    ((2, 4, 5), (3, 5, 2), None, "do not broadcast"),
    ((2, 4, 5), (5, 2), (3, 4, 2), "c has shape"),
    ((2, 4, 5), (5, 2), (2, 2, 4, 2), "c has shape"),  # c may not grow the batch
    ((2, 4, 5), (5, 2), (2, 4, 1), "c has shape"),
])
def test_batch_shape_errors(a_shape, b_shape, c_shape, words):
    c = None if c_shape is None else np.zeros(c_shape, np.float32)
    with pytest.raises(ValueError, match=words):
        pyamx.matmul(_bf16(a_shape), _bf16(b_shape), c, backend="emulator")


# -- every check before any copy -------------------------------------------------------------


def _huge(dtype):
    """A 2**40-element zero-stride view of 1 element: any copy is a MemoryError or terabytes."""
    return np.broadcast_to(np.zeros(1, dtype), (1 << 20, 1 << 20))


@pytest.mark.parametrize("dtype, kind", [(np.uint16, None), (np.float32, "bf16"), (np.float32, "fp16"),
                                         (np.int8, None)])
@pytest.mark.parametrize("mistake, error", [
    ({"backend": "fastest"}, BackendError),
    ({"engine": "fastest"}, BackendError),
    ({"threads": 0}, ValueError),
    ({"numerics": "nonsense"}, ValueError),
    ({"c": np.zeros((2, 2), np.float32)}, (ValueError, TypeError)),
    ({"b_rows": 3}, ValueError),
])
def test_a_refused_call_copies_nothing(dtype, kind, mistake, error):
    huge = _huge(dtype)
    mistake = dict(mistake)
    b = np.zeros((mistake.pop("b_rows", 1 << 20), 1), dtype)
    with pytest.raises(error) as info:
        pyamx.matmul(huge, b, kind=kind, **mistake)
    peak = smallest_peak(lambda: pyamx.matmul(huge, b, kind=kind, **mistake))
    assert not isinstance(info.value, MemoryError)
    assert peak < 1 << 20, f"{peak} bytes allocated before the {type(info.value).__name__}"


def test_a_bad_kind_is_refused_before_the_operands_are_looked_at():
    with pytest.raises(ValueError, match="kind must be"):
        pyamx.matmul(_huge(np.uint16), _huge(np.uint16), kind="half")


@pytest.mark.parametrize("group, make, kind", [
    ("bf16", lambda s: RNG.standard_normal(s).astype(np.float32), "bf16"),
    ("int8", lambda s: RNG.integers(-128, 128, s).astype(np.int8), None),
])
def test_native_batches_and_rounded_floats_match_the_emulator(native_group, group, make, kind):
    native_group(group)
    a, b = make((3, 20, 40)), make((40, 17))
    got = pyamx.matmul(a, b, kind=kind, backend="native")
    assert got.backend == "native" and got.shape == (3, 20, 17) and got.rounded_to == kind
    np.testing.assert_array_equal(_bits(got), _bits(pyamx.matmul(a, b, kind=kind, backend="emulator")))
    for i in range(3):
        np.testing.assert_array_equal(_bits(got[i]), _bits(pyamx.matmul(a[i], b, kind=kind, backend="native")))
