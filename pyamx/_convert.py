"""float32/float64 <-> bf16/fp16 arrays in C (csrc/convert.c), where ``pyamx._native`` is built.

The one bridge between the conversions' Python callers (:mod:`pyamx.table.bf16`,
the fp16 widening of the numpy engine, ``pyamx.matmul``'s rounding of float
operands) and ``pyamx_convert()``. Where the extension is not built, or is
an older build without the function, :func:`to_bits` and :func:`widen`
return None and the caller runs its numpy implementation, which stays the
reference the tests compare the C code with, bit for bit.

Any strides are read in place (a transposed or sliced 2-D view is not
copied first); the result is a new C-contiguous array of the input's shape.
Large arrays are split over the threads ``PYAMX_ENGINE_THREADS`` allows.
"""

from __future__ import annotations

import functools

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._fpenv import default_fpenv

if TYPE_CHECKING:
    from .cpu._nativelib import FFI, Lib


#: (source dtype name, target) -> (the op's name in enum pyamx_convert_op, the result's dtype)
OPS = {
    ("float32", "bf16"): ("PYAMX_CONVERT_F32_TO_BF16", np.uint16),
    ("float64", "bf16"): ("PYAMX_CONVERT_F64_TO_BF16", np.uint16),
    ("float32", "fp16"): ("PYAMX_CONVERT_F32_TO_FP16", np.uint16),
    ("float64", "fp16"): ("PYAMX_CONVERT_F64_TO_FP16", np.uint16),
    ("uint16", "bf16"): ("PYAMX_CONVERT_BF16_TO_F32", np.uint32),
    ("uint16", "fp16"): ("PYAMX_CONVERT_FP16_TO_F32", np.uint32),
}


@functools.lru_cache(maxsize=None)
def library() -> tuple[FFI, Lib] | None:
    """``(ffi, lib)`` of an extension that has ``pyamx_convert``, else None (numpy fallback)."""
    try:
        from .cpu._nativelib import load

        ffi, lib = load()
    except ImportError:  # not built, or a stale build (refused by the loader)
        return None
    return (ffi, lib) if hasattr(lib, "pyamx_convert") else None


def _threads(elements: int, parallel_min: int) -> int:
    """The threads a conversion of ``elements`` may use: 1 below the C side's threshold (so a small
    call reads no environment), else pyamx._threads.default() (``PYAMX_ENGINE_THREADS`` or the usable
    CPUs, read once and kept until ``pyamx.engine.reset_environment()``), as the engines."""
    if elements < parallel_min:
        return 1
    from . import _threads as threads_rule  # the one default of the engines, the matmul and the packing

    return threads_rule.default()


def _as_rows(array: np.ndarray) -> tuple[np.ndarray, int, int, int, int]:
    """``(array, rows, cols, row stride, column stride)``: the array (copied only where it must be)
    as a rows x cols grid of elements in C order, strides in bytes."""
    item = array.itemsize
    if not array.flags.aligned or not array.dtype.isnative or any(s % item for s in array.strides):
        array = np.require(array, dtype=array.dtype.newbyteorder("="), requirements=("C", "A"))
    if array.flags.c_contiguous:
        return array, 1, array.size, 0, item
    if array.ndim == 1:
        return array, 1, array.shape[0], 0, array.strides[0]
    # The leading dimensions merge into rows where each steps over the whole of the next one.
    shape, strides = array.shape, array.strides
    if all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(array.ndim - 2)):
        return array, array.size // shape[-1], shape[-1], strides[-2], strides[-1]
    array = np.ascontiguousarray(array)
    return array, 1, array.size, 0, item


def _run(array: np.ndarray, key: tuple[str, str], threads: int | None) -> np.ndarray | None:
    loaded = library()
    if loaded is None:
        return None
    ffi, lib = loaded
    op_name, out_dtype = OPS[key]
    out = np.empty(array.shape, dtype=out_dtype)
    if out.size == 0:
        return out
    source, rows, cols, row_stride, col_stride = _as_rows(array)
    status = lib.pyamx_convert(getattr(lib, op_name), ffi.cast("const void *", source.__array_interface__["data"][0]),
                               rows, cols, row_stride, col_stride, ffi.from_buffer(out),
                               _threads(out.size, lib.pyamx_convert_parallel_min()) if threads is None else threads)
    if status != 0:  # the checks above make this unreachable; say so rather than return garbage
        raise RuntimeError(f"pyamx_convert({op_name}) refused {array.dtype} {array.shape} strides {array.strides} "
                           f"(status {status}): please report this as a pyamx bug")
    return out


def to_bits(values: np.ndarray, fmt: str, threads: int | None = None) -> npt.NDArray[np.uint16] | None:
    """float32/float64 values -> ``fmt`` ("bf16" or "fp16") bits (uint16), rounded once, directly;
    None without the extension. ``threads``: at most that many (None: the engines' default)."""
    return _run(values, (values.dtype.name, fmt), threads)


def widen(bits: np.ndarray, fmt: str, threads: int | None = None) -> npt.NDArray[np.uint32] | None:
    """``fmt`` ("bf16" or "fp16") bits (any 16-bit integer view) -> float32 bits (uint32), exactly;
    None without the extension."""
    if bits.dtype.itemsize != 2:
        return None
    if bits.dtype != np.uint16:
        bits = bits.view(np.dtype(np.uint16).newbyteorder(bits.dtype.byteorder))
    return _run(bits, ("uint16", fmt), threads)


def round_floats(values: np.ndarray, fmt: str) -> npt.NDArray[np.uint16]:
    """float32/float64 values -> ``fmt`` ("bf16" or "fp16") bits, each rounded once, directly, to
    nearest even: in C where built, else by :func:`numpy_bf16_bits` or :func:`numpy_fp16_bits`.
    :func:`pyamx.table.bf16.from_float32` and ``pyamx.matmul``'s rounding of float operands."""
    out = to_bits(values, fmt)
    if out is not None:
        return out
    return numpy_bf16_bits(values) if fmt == "bf16" else numpy_fp16_bits(values)


# -- the numpy implementations: the fallback, and the reference the tests hold the C code to --------


@default_fpenv
def numpy_fp16_bits(values: np.ndarray) -> npt.NDArray[np.uint16]:
    """numpy's float16 conversion (its software rule: NaNs keep their top 10 payload bits, unquieted).

    Under the default MXCSR: a numpy built for F16C/AVX512-FP16 converts with those instructions,
    which read it.
    """
    return values.astype(np.float16).view(np.uint16)


def numpy_bf16_bits(values: np.ndarray) -> npt.NDArray[np.uint16]:
    """float32/float64 (native-endian) -> bf16 bits, RNE, on integers only."""
    if not values.dtype.isnative:  # the bits are read as native integers
        values = values.astype(values.dtype.newbyteorder("="))
    flat = values.reshape(-1)  # 1-d: the same integer dtypes on numpy 1.x and 2.x (no value-based casting)
    if flat.dtype == np.float64:
        out = _bf16_of_float64(flat.view(np.uint64))
    else:
        out = _bf16_of_float32(flat.view(np.uint32))
    return out.reshape(values.shape)


def _bf16_of_float32(bits: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint16]:
    nan = ((bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & ((bits & np.uint32(0x007FFFFF)) != 0)
    tie_to_even = np.uint64(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)).astype(np.uint64)
    rounded = ((bits.astype(np.uint64) + tie_to_even) >> np.uint64(16)).astype(np.uint16)
    quiet = ((bits >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    out: npt.NDArray[np.uint16] = np.where(nan, quiet, rounded).astype(np.uint16)
    return out


def _bf16_of_float64(bits: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint16]:
    """float64 bits -> bf16 bits, RNE, on integers only."""
    u64 = np.uint64
    sign = ((bits >> u64(48)) & u64(0x8000)).astype(np.uint16)
    biased = ((bits >> u64(52)) & u64(0x7FF)).astype(np.int64)
    mantissa = bits & u64((1 << 52) - 1)
    special = biased == 0x7FF
    nan = special & (mantissa != 0)
    # The significand as an integer with an unbounded exponent: value = significand * 2**(e - 52).
    significand = np.where(biased == 0, mantissa, mantissa | u64(1 << 52))
    e = np.where(biased == 0, -1022, biased - 1023)
    # bf16 keeps 8 significant bits down to 2**-126, then a fixed 2**-133 step (denormals).
    shift = np.clip(45 + np.maximum(-126 - e, 0), 45, 60).astype(np.uint64)
    kept = significand >> shift
    rest = significand & ((u64(1) << shift) - u64(1))
    half = u64(1) << (shift - u64(1))
    kept = kept + ((rest > half) | ((rest == half) & ((kept & u64(1)) == u64(1)))).astype(np.uint64)
    normal = e >= -126
    # A normal kept value is 1xxxxxxx (or 100000000 after a carry, which moves into the exponent).
    exponent_field = np.where(normal, e + 127, 0).astype(np.int64)
    magnitude = np.where(normal, (exponent_field << 7) + kept.astype(np.int64) - 128, kept.astype(np.int64))
    magnitude = np.minimum(magnitude, 0x7F80)  # overflow: infinity
    payload = ((mantissa >> u64(45)) | u64(0x40)).astype(np.int64)
    magnitude = np.where(special, np.where(nan, 0x7F80 | payload, 0x7F80), magnitude)
    out: npt.NDArray[np.uint16] = (sign | magnitude.astype(np.uint16)).astype(np.uint16)
    return out
