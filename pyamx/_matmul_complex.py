"""``pyamx.matmul`` of complex operands: two chains of AMX-COMPLEX instructions.

``c + a @ b`` for complex (M, K) ``a`` and (K, N) ``b``: the real part of every
output element is the schedule of docs/matmul.md run with TCMMRLFP16PS, its
imaginary part the same schedule with TCMMIMFP16PS. For every element K is
consumed in blocks of 16 complex numbers (one instruction's worth: 16 dwords),
in increasing order, each block one instruction whose C is the previous
block's result (the real or imaginary part of ``c`` first). A complex number
fills its dword, so nothing is padded and B needs no interleaving: its rows
are the instructions' tsrc2 rows as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from . import _backend, _validate
from .table import isa
from .emulator import engine as _engine
from ._first_use import module
from ._result import AMXResult, label

if TYPE_CHECKING:
    from ._types import ArrayInput
    from .table.numerics import Numerics

#: the kernel group (``kind=``) and its two rows: the real part, then the imaginary part
KIND = "complex"
REAL, IMAGINARY = (next(i.name for i in isa.DOTS if i.group == KIND and i.part == part) for part in ("real", "imaginary"))


def _operand_format() -> isa.Format:
    return isa.get(REAL).source_format


_FORMAT = _operand_format()


def wants_complex(a: object, b: object, kind: object) -> bool:
    """Whether a matmul call is a complex one: ``kind="complex"``, or a numpy complex operand."""
    if kind == KIND:
        return True
    return kind is None and any(getattr(getattr(x, "dtype", None), "kind", None) == "c" for x in (a, b))


def _pairs(operand: object, name: str) -> np.ndarray:
    """A complex operand as (rows, 2 * columns) fp16 bits (real, imaginary), C-contiguous."""
    x = _validate.require_array(operand, name, "matmul")
    if x.dtype.kind != "c" and _validate.dtype_name(x.dtype) != "uint32":
        raise TypeError(f"matmul: kind='complex' takes complex64, complex128 or uint32 (imaginary << 16 | real "
                        f"fp16 bits) operands, but {name} has dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"matmul: complex operands are 2-D (no batch), but {name} has shape {x.shape}")
    return _validate.contiguous_bits(_validate.complex_pairs(x, name, "matmul", _FORMAT))


def _accumulator(operand: object, m: int, n: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """(real, imaginary) fp32 bits of ``c``: complex64 (M, N), or None for zeros."""
    if operand is None:
        zeros = np.zeros((m, n), np.uint32)
        return zeros, zeros
    c = _validate.require_array(operand, "c", "matmul")
    if c.dtype != np.complex64:
        raise TypeError(f"matmul: a complex product's c must be complex64 (its parts are the fp32 "
                        f"accumulators), not {c.dtype}")
    if c.shape != (m, n):
        raise ValueError(f"matmul: c has shape {c.shape}; the product is {(m, n)}")
    return (np.ascontiguousarray(c.real).view(np.uint32), np.ascontiguousarray(c.imag).view(np.uint32))


def complex_matmul(a: ArrayInput, b: ArrayInput, c: ArrayInput | None = None, *, backend: str | None = None,
                   engine: str | None = None, threads: int | None = None,
                   numerics: str | Numerics = "sdm") -> AMXResult:
    """``c + a @ b`` of complex matrices through TCMMRLFP16PS (real) and TCMMIMFP16PS (imaginary).

    ``a`` (M, K) and ``b`` (K, N): complex64/complex128 (each part rounded to
    fp16 by numpy, to nearest even: the caller's rounding) or uint32 words
    (imaginary << 16 | real fp16 bits). ``c``: optional complex64 (M, N).
    Returns a new complex64 (M, N) AMXResult labelled with what ran; the
    other arguments as :func:`pyamx.matmul`'s (``threads`` already checked).
    """
    a_pairs, b_pairs = _pairs(a, "a"), _pairs(b, "b")
    (m, k2), (k, n2) = a_pairs.shape, b_pairs.shape
    if k2 != 2 * k:
        raise ValueError(f"matmul: a is {m}x{k2 // 2} and b is {k}x{n2 // 2}; a's columns must equal b's rows")
    if min(m, k, n2) < 1:
        raise ValueError(f"matmul: M={m}, K={k}, N={n2 // 2}; every dimension must be at least 1")
    c_parts = _accumulator(c, m, n2 // 2)
    chosen = _backend.choose_backend(backend, KIND, numerics, engine)
    out = np.empty((m, n2 // 2), np.complex64)
    if chosen == "native":
        matmul_native = module(".cpu._native_matmul", __package__).matmul_native  # pyamx._first_use
        for part, name, c_bits in ((out.real, REAL, c_parts[0]), (out.imag, IMAGINARY, c_parts[1])):
            part[...] = matmul_native(name, a_pairs, b_pairs, c_bits, k, threads).view(np.float32)
        return label(out, "native", _backend.native_mode())
    eng = _engine.choose_engine(engine, numerics)
    for part, name, c_bits in ((out.real, REAL, c_parts[0]), (out.imag, IMAGINARY, c_parts[1])):
        part[...] = np.asarray(eng.run_dot(name, c_bits, a_pairs, b_pairs, k, threads)).view(np.float32)
    return label(out, "emulator", engine=eng.name)
