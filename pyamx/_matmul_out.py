"""What ``pyamx.matmul`` hands back: ``out_dtype=`` (float32, or the result rounded once to bf16)
and ``out=`` (a caller's array written in place, checked before anything runs).

The product itself is always computed into a new array of the accumulator's format (float32,
int32, complex64); only then is it rounded (``out_dtype`` bf16: :func:`pyamx.table.bf16.from_float32`,
nearest even, once) and copied, bit for bit, into ``out``. So ``out`` may even be ``c`` itself
(every input is read before anything is written), and a result's bits never depend on either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _dlpack
from ._result import AMXResult, label, tag
from ._validate import dtype_name
from .table import bf16 as _bf16

#: what ``out_dtype=`` takes as a string; "bf16"/"bfloat16" give the bits as uint16
_NAMES = {"float32": "float32", "int32": "int32", "complex64": "complex64", "bf16": "bf16", "bfloat16": "bf16"}
_ACCEPTED = ("None, 'float32' (float kinds), 'int32' (int8), 'complex64' (complex), 'bf16' or 'bfloat16' "
             "(bf16 bits as uint16), ml_dtypes.bfloat16 (an ml_dtypes.bfloat16 array) or those numpy dtypes")
#: the dtypes a bf16 result is written into: its bits, as every pyamx operand takes them
_BF16_OUT = ("uint16", "int16", "bfloat16")
_TOO_HARD = getattr(np, "exceptions", np).TooHardError  # np.exceptions from numpy 1.25


@dataclass(frozen=True)
class OutDtype:
    """A checked ``out_dtype``: the result's format (None: the accumulator's) and dtype."""

    name: "str | None"  # None, "float32", "int32", "complex64" or "bf16"
    dtype: "np.dtype | None"  # uint16 for the "bf16" names, ml_dtypes.bfloat16 for that dtype


NATURAL = OutDtype(None, None)


def parse(out_dtype: object) -> OutDtype:
    """``out_dtype`` read strictly: one of :data:`_ACCEPTED`, else ValueError listing them."""
    if out_dtype is None:
        return NATURAL
    if isinstance(out_dtype, str):
        name = _NAMES.get(out_dtype)
        if name is None:
            raise ValueError(f"matmul: out_dtype must be {_ACCEPTED}; not {out_dtype!r}")
        return OutDtype(name, np.dtype(np.uint16) if name == "bf16" else np.dtype(name))
    try:
        dtype = np.dtype(out_dtype)  # type: ignore[call-overload]
    except TypeError:
        dtype = None
    name = None if dtype is None else dtype_name(dtype)
    if name == "bfloat16" and dtype is not None:
        return OutDtype("bf16", dtype)
    if name in ("float32", "int32", "complex64") and dtype is not None and dtype.isnative:
        return OutDtype(name, dtype)
    raise ValueError(f"matmul: out_dtype must be {_ACCEPTED}; not {out_dtype!r}")


def result_dtype(spec: OutDtype, accumulator: np.dtype, group: str) -> np.dtype:
    """The dtype a ``group`` product with this ``accumulator`` dtype returns under ``spec``."""
    if spec.name is None:
        return accumulator
    if spec.name == "bf16":
        if accumulator != np.float32:
            raise ValueError(f"matmul: out_dtype='bf16' rounds a float32 result once to bf16; a {group} product's "
                             f"result is {accumulator}")
    elif np.dtype(spec.name) != accumulator:
        raise ValueError(f"matmul: out_dtype={spec.name!r}, but a {group} product's result is {accumulator}")
    assert spec.dtype is not None
    return spec.dtype


def check_out(out: object, shape: tuple[int, ...], dtype: np.dtype[Any], inputs: dict[str, np.ndarray | None]) -> np.ndarray:
    """``out`` as the ndarray to write the result into, after every check: its type, dtype, shape,
    that it is writable, and that it shares no memory with an input (``inputs``: name -> array).
    ``out`` may be ``c`` itself (same memory, shape and strides): ``c += a @ b`` in place.
    """
    if isinstance(out, np.ndarray):
        array = out
    elif _dlpack.exports(out):
        array = _dlpack.import_writable(out, "out", "matmul")
    else:
        raise TypeError(f"matmul: out must be a numpy array or a DLPack tensor (torch), not {type(out).__name__}: "
                        "the result is written into its memory")
    allowed = _BF16_OUT if dtype.itemsize == 2 else (dtype_name(dtype),)
    if dtype_name(array.dtype) not in allowed or not array.dtype.isnative:
        raise TypeError(f"matmul: out has dtype {array.dtype}; this result needs {' or '.join(allowed)} "
                        "(native byte order)" + ("" if dtype.itemsize == 2 else
                                                 "; pass out_dtype='bf16' for a bf16 result in a uint16 out"))
    if array.shape != shape:
        raise ValueError(f"matmul: out has shape {array.shape}; the product is {shape}")
    if not array.flags.writeable:
        raise ValueError("matmul: out is read-only")
    for name, x in inputs.items():
        if x is None or not np.may_share_memory(array, x):
            continue
        if name == "c" and _same_elements(array, x):
            continue
        try:
            # numpy < 2.5 declares only -1 and 0 for max_work; it documents any positive bound too
            # (unused-ignore: numpy 2.5's stubs accept it)
            overlaps = np.shares_memory(array, x, max_work=1 << 20)  # type: ignore[arg-type, unused-ignore]
        except _TOO_HARD:  # strides too intricate to decide quickly: taken as an overlap
            overlaps = True
        if overlaps:
            raise ValueError(f"matmul: out shares memory with {name}; the result needs memory of its own "
                             "(out may be c itself, element for element, to accumulate in place)")
    return array


def _same_elements(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether x and y are the same memory element for element (same start, shape, strides, item size)."""
    return (x.shape == y.shape and x.strides == y.strides and x.dtype.itemsize == y.dtype.itemsize
            and x.__array_interface__["data"][0] == y.__array_interface__["data"][0])


def finish(values: np.ndarray, spec: OutDtype, out: "np.ndarray | None") -> np.ndarray:
    """The result in ``spec``'s format: ``values`` itself, or rounded once to bf16 bits; written
    into ``out`` (bit for bit) where one was given, which is then what is returned."""
    if spec.name == "bf16":
        assert spec.dtype is not None
        values = _bf16.from_float32(values).view(spec.dtype)
    if out is None:
        return values
    unsigned = np.dtype(f"u{values.dtype.itemsize}")
    np.copyto(out.view(unsigned), values.view(unsigned))
    return out


def labelled(result: np.ndarray, into_out: bool, backend: str, native_mode: "str | None" = None,
             engine: "str | None" = None, **labels: object) -> AMXResult:
    """``result`` labelled with what ran: a new AMXResult, or (``into_out``) an AMXResult view of the
    caller's ``out``, strides kept, so the labels never need a copy and writes reach ``out``."""
    if not into_out:
        return label(result, backend, native_mode, engine, **labels)
    view = result.view(AMXResult)
    view.__dict__.clear()  # an earlier result given as out: its labels (rounded_to...) are not this call's
    tag(view, backend, native_mode, engine)
    for name, value in labels.items():
        setattr(view, name, value)
    return view
