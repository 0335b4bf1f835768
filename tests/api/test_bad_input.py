"""Bad input gets TypeError, ValueError or an AMXFault naming the rule, before any large allocation."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pyamx
from pyamx import AMXFault, MemoryAccessFault, TileConfig
from allocations import smallest_peak

DOCUMENTED = (TypeError, ValueError, AMXFault)


def _raises_documented(fn, *args, **kwargs):
    """The exception ``fn`` raises, which must be one of the documented kinds (and not an IndexError)."""
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    exc = info.value
    assert isinstance(exc, DOCUMENTED), f"{type(exc).__name__}: {exc}"
    assert not isinstance(exc, (OverflowError, BufferError, MemoryError)) or isinstance(exc, AMXFault)
    assert not (isinstance(exc, IndexError) and not isinstance(exc, MemoryAccessFault)), repr(exc)
    return exc


# -- TileConfig ---------------------------------------------------------------


@pytest.mark.parametrize("tmm", [8, 9, -1, -8, 2**63, -(2**63) - 1])
def test_make_refuses_tiles_outside_tmm0_to_tmm7(tmm):
    exc = _raises_documented(TileConfig.make, {tmm: (1, 4)})
    assert isinstance(exc, ValueError) and "tmm0..tmm7" in str(exc)


def test_make_minus_one_does_not_configure_tmm7():
    with pytest.raises(ValueError):
        TileConfig.make({-1: (16, 64)})
    assert TileConfig.make({7: (16, 64)}).rows[7] == 16  # the register that -1 used to alias


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda: TileConfig.make({0: (256, 4)}), "rows of tmm0"),
        (lambda: TileConfig.make({0: (-1, 4)}), "rows of tmm0"),
        (lambda: TileConfig.make({0: (1, 70000)}), "colsb of tmm0"),
        (lambda: TileConfig.make({0: (1, -1)}), "colsb of tmm0"),
        (lambda: TileConfig(palette=256), "palette"),
        (lambda: TileConfig(palette=-1), "palette"),
        (lambda: TileConfig(1, 999), "start_row"),
        (lambda: TileConfig(1, 0, (0,) * 8, (0,) * 7), "rows has 7 entries"),
        (lambda: TileConfig(1, 0, (2**16,) + (0,) * 7, (1,) + (0,) * 7), r"colsb\[0\]"),
        (lambda: TileConfig.make({0: (1.5, 4)}), "must be an int"),
        (lambda: TileConfig.make({0: 5}), r"\(rows, colsb\) pair"),
        (lambda: TileConfig.make(5), "mapping"),
        (lambda: TileConfig.make({"0": (1, 4)}), "tile register"),
    ],
)
def test_config_fields_out_of_range_name_the_field(build, field):
    exc = _raises_documented(build)
    assert re.search(field, str(exc)), str(exc)


def test_config_values_the_image_can_hold_but_ldtilecfg_refuses_still_fault_as_gp():
    cfg = TileConfig.make({0: (17, 4)})  # representable: the #GP belongs to LDTILECFG
    with pytest.raises(pyamx.GeneralProtectionFault, match="rows"):
        pyamx.TileMachine().ldtilecfg(cfg)


def test_config_image_length_is_checked_before_copying():
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(2**40,), strides=(0,))
    exc = _raises_documented(pyamx.TileMachine().ldtilecfg, huge)
    assert "64" in str(exc)


# -- memory operands -------------------------------------------------------------


def _machine(rows=1, colsb=8):
    m = pyamx.TileMachine()
    m.ldtilecfg(TileConfig.make({0: (rows, colsb)}))
    return m


@pytest.mark.parametrize("offset", [2**63 - 1, 2**63 - 4, 2**63 - 8, 2**63 - 64, -(2**63)])
@pytest.mark.parametrize("stride", [8, 2**62, -(2**63)])
@pytest.mark.parametrize("rows", [1, 2])
def test_offsets_near_the_64_bit_limit_are_memory_faults(offset, stride, rows):
    m = _machine(rows=rows)
    exc = _raises_documented(m.tileloadd, 0, np.zeros(64, np.uint8), stride, offset)
    assert isinstance(exc, MemoryAccessFault)


def test_non_contiguous_buffer_is_a_type_or_value_error_not_buffer_error():
    strided = memoryview(bytearray(128))[::2]
    m = _machine()
    _raises_documented(m.tileloadd, 0, strided, 8)
    _raises_documented(m.tilestored, 0, strided, 8)


# -- array operands ----------------------------------------------------------------


def test_a_huge_zero_stride_view_is_refused_before_any_allocation():
    a = np.lib.stride_tricks.as_strided(np.zeros(16, np.uint16), shape=(2**15, 2**15), strides=(0, 0))
    c, b = np.zeros((1, 1), np.float32), np.zeros((1, 2), np.uint16)
    big_endian = a.view(">u2")
    for operand in (a, big_endian):
        exc = _raises_documented(pyamx.tdpbf16ps, c, operand, b, backend="emulator")
        assert "rows" in str(exc)
        peak = smallest_peak(lambda: pyamx.tdpbf16ps(c, operand, b, backend="emulator"))
        assert peak < 1 << 20, f"{peak} bytes allocated before the ValueError"


def test_bad_shapes_come_before_dtype_conversions_for_every_group():
    z8 = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(2**20, 2**20), strides=(0, 0))
    with pytest.raises(ValueError):
        pyamx.tdpbssd(np.zeros((1, 1), np.int32), z8, np.zeros((1, 4), np.uint8), backend="emulator")
    z16 = np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), shape=(2**20, 2**20), strides=(0, 0))
    with pytest.raises(ValueError):
        pyamx.tdpfp16ps(np.zeros((1, 1), np.float32), z16, np.zeros((1, 2), np.float16), backend="emulator")


# -- interop: what numpy converts consistently --------------------------------------


class _ArrayLike:
    """Stands in for a framework tensor (JAX, CuPy on host...) that implements __array__."""

    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)


class _Unconvertible:
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Got unsupported ScalarType BFloat16")  # what torch says for a bf16 tensor


def _bf16_case(seed=0):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((3, 4)).astype(np.float32)
    a = pyamx.table.bf16.from_float32(rng.standard_normal((3, 6)).astype(np.float32))
    b = pyamx.table.bf16.from_float32(rng.standard_normal((3, 8)).astype(np.float32))
    return c, a, b


def test_int16_bit_patterns_are_bf16_and_fp16_operands():
    c, a, b = _bf16_case()
    expected = pyamx.tdpbf16ps(c, a, b, backend="emulator").view(np.uint32)
    got = pyamx.tdpbf16ps(c, a.view(np.int16), b.view(np.int16), backend="emulator")
    np.testing.assert_array_equal(got.view(np.uint32), expected)
    h = np.array([[1.5, -2.0, 0.25, 3.0]], np.float16)
    hb = np.array([[0.5, 7.0, -1.0, 2.0], [3.0, 0.125, 6.0, -4.0]], np.float16)
    expected16 = pyamx.tdpfp16ps(np.zeros((1, 2), np.float32), h, hb, backend="emulator")
    got16 = pyamx.tdpfp16ps(np.zeros((1, 2), np.float32), h.view(np.int16), hb.view(np.int16), backend="emulator")
    np.testing.assert_array_equal(got16.view(np.uint32), expected16.view(np.uint32))
    np.testing.assert_array_equal(pyamx.table.bf16.to_float32(a.view(np.int16)), pyamx.table.bf16.to_float32(a))


def test_array_likes_and_buffers_are_converted_by_numpy():
    import array

    c, a, b = _bf16_case(1)
    expected = pyamx.tdpbf16ps(c, a, b, backend="emulator").view(np.uint32)
    via_array = pyamx.tdpbf16ps(_ArrayLike(c), _ArrayLike(a.view(np.int16)), _ArrayLike(b), backend="emulator")
    np.testing.assert_array_equal(via_array.view(np.uint32), expected)
    buffer_a = memoryview(array.array("H", a.ravel().tolist())).cast("B").cast("H", a.shape)
    via_buffer = pyamx.tdpbf16ps(c, buffer_a, b, backend="emulator")
    np.testing.assert_array_equal(via_buffer.view(np.uint32), expected)


def test_an_unconvertible_tensor_gets_a_type_error_with_the_recipe():
    c, a, b = _bf16_case()
    with pytest.raises(TypeError, match=r"view\(torch.int16\)"):
        pyamx.tdpbf16ps(c, _Unconvertible(), b, backend="emulator")


def _entry_points():
    """Every public function that takes an array operand: (name, call with ``x`` first, a valid ``x``)."""
    c, a, b = _bf16_case()
    return [
        ("tdpbf16ps", lambda x: pyamx.tdpbf16ps(c, x, b, backend="emulator"), a.view(np.int16)),
        ("tdpbf16ps", lambda x: pyamx.emulator.tdpbf16ps(c, x, b), a.view(np.int16)),
        ("matmul", lambda x: pyamx.matmul(x, a.T, backend="emulator"), a.view(np.int16)),
        ("from_float32", pyamx.table.bf16.from_float32, a.astype(np.float32)),
        ("to_float32", pyamx.table.bf16.to_float32, a.view(np.int16)),
        ("widen_bits", pyamx.table.bf16.widen_bits, a.view(np.int16)),
        ("pack_pairs", pyamx.table.layout.pack_pairs, a.T),
        ("unpack_quads", pyamx.table.layout.unpack_quads, a[:, :4]),
    ]


@pytest.mark.parametrize("index", range(len(_entry_points())))
def test_every_entry_point_has_the_one_operand_rule(index):
    name, call, valid = _entry_points()[index]
    with pytest.raises(TypeError, match=rf"^{name}: .*\(_Unconvertible\).*view\(torch.int16\)"):
        call(_Unconvertible())
    with pytest.raises(TypeError, match=rf"^{name}: .* must be an array, not str"):
        call("1, 2")
    np.testing.assert_array_equal(np.asarray(call(_ArrayLike(valid))), np.asarray(call(valid)))
