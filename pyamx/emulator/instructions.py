"""The dot-product instructions as functions of raw operand matrices.

Shared by the tile machine (operands cut out of tiles) and the array-level
functions (operands given by the user), so both run the same code. The
float ones are the entry points of the numpy arithmetic: each runs under
the default floating-point environment (pyamx._fpenv), whatever MXCSR the
calling thread has, and gives the caller's back.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..table import isa
from .._fpenv import default_fpenv
from ..table.bf16 import widen_bits
from .complex_rows import fp16_operand
from . import fp8
from .dot import float_dot, integer_dot
from .fp16 import widen_fp16_bits
from ..table.numerics import Numerics

#: sign extension per operand for TDPB[SU][SU]D: (tsrc1 signed, tsrc2 signed), from pyamx.table.isa
INT8_SIGNEDNESS = {insn.name: signed for insn in isa.DOTS if (signed := insn.signed) is not None}

#: one dot product's arithmetic: ``f(c, a, b, numerics) -> out`` on bits (:func:`compute`)
Compute = Callable[[np.ndarray, np.ndarray, np.ndarray, Numerics], np.ndarray]


def _lanes(matrix: np.ndarray, lanes: int) -> np.ndarray:
    rows, width = matrix.shape
    return matrix.reshape(rows, width // lanes, lanes)


@default_fpenv
def tdpbf16ps(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    """c (M, N) fp32 bits, a (M, 2K) and b (K, 2N) bf16 bits -> (M, N) fp32 bits."""
    return float_dot(c, _lanes(widen_bits(a), 2), _lanes(widen_bits(b), 2), numerics, numerics.input_daz)


@default_fpenv
def tdpfp16ps(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    """As tdpbf16ps with fp16 inputs, whose denormals are always honoured."""
    return float_dot(c, _lanes(widen_fp16_bits(a), 2), _lanes(widen_fp16_bits(b), 2), numerics, False)


@default_fpenv
def tcmmimfp16ps(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    """c (M, N) fp32 bits + the imaginary part of a (M, 2K) . b (K, 2N), complex fp16 pairs (re low, im high)."""
    return _complex("tcmmimfp16ps", c, a, b, numerics)


@default_fpenv
def tcmmrlfp16ps(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    """c (M, N) fp32 bits + the real part of a (M, 2K) . b (K, 2N), complex fp16 pairs (re low, im high)."""
    return _complex("tcmmrlfp16ps", c, a, b, numerics)


def _complex(name: str, c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
    a = fp16_operand(name, a)  # TDPFP16PS on a transformed A (complex_rows.py proves it)
    return float_dot(c, _lanes(widen_fp16_bits(a), 2), _lanes(widen_fp16_bits(b), 2), numerics, False,
                     acc_first=True)


def tdpb_int8(mnemonic: str, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c (M, N) int32, a (M, 4K) and b (K, 4N) bytes -> (M, N) int32 with wrap-around."""
    a_signed, b_signed = INT8_SIGNEDNESS[mnemonic]
    a = a.view(np.int8) if a_signed else a.view(np.uint8)
    b = b.view(np.int8) if b_signed else b.view(np.uint8)
    return integer_dot(c.view(np.int32), _lanes(a, 4), _lanes(b, 4))


def fp8_dot(name: str) -> Compute:
    """The AMX-FP8 dot product ``name`` as ``f(c, a, b, numerics)``: c (M, N) fp32 bits, a (M, 4K) and
    b (K, 4N) fp8 codes (b quad-interleaved) -> (M, N) fp32 bits (pyamx.emulator.fp8)."""
    insn = isa.get(name)

    @default_fpenv
    def run(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics) -> np.ndarray:
        return fp8.dot(insn, np.asarray(c).view(np.uint32), _lanes(a.view(np.uint8), 4), _lanes(b.view(np.uint8), 4),
                       numerics)

    run.__name__ = name
    return run


def compute(name: str) -> Compute:
    """The arithmetic of dot product ``name`` as ``f(c, a, b, numerics) -> out``.

    The integer ones ignore ``numerics`` (integer arithmetic has no open point).
    """
    insn = isa.get(name)
    if insn.kind == "dot-complex":
        return _COMPLEX[insn.name]
    if insn.group == "fp8":
        return fp8_dot(name)
    if insn.is_float:
        return _FLOAT_PAIRS[insn.source_format.name]

    def integer(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics | None = None) -> np.ndarray:
        return tdpb_int8(name, c, a, b)

    return integer


#: operand format -> the float dot product over its pairs (each widens its format exactly)
_FLOAT_PAIRS = {"bf16": tdpbf16ps, "fp16": tdpfp16ps}
_COMPLEX = {"tcmmimfp16ps": tcmmimfp16ps, "tcmmrlfp16ps": tcmmrlfp16ps}
