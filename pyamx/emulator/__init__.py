"""The bit-exact AMX emulator: a tile machine and array-level dot products.

``TileMachine`` models TILECFG and the eight tiles and runs the instructions
one method per mnemonic. The array-level functions run one instruction on
numpy operands without a machine; both share the same arithmetic.
"""

from __future__ import annotations

import numpy as np

from .. import _validate
from .. import engine as _engine
from .._result import AMXResult, label
from . import instructions
from .machine import TileMachine
from .numerics import PRESETS, Numerics, resolve

__all__ = [
    "TileMachine", "Numerics", "PRESETS",
    "tdpbf16ps", "tdpfp16ps", "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud",
]


def bf16_operands(fn, c, a, b) -> _validate.DotOperands:
    c = _validate.fp32_bits(c, "c", fn)
    a = _validate.bf16_bits(a, "a", fn)
    b = _validate.bf16_bits(b, "b", fn)
    return _validate.check_dot_shapes(fn, c, a, b, 2, "bf16")


def fp16_operands(fn, c, a, b) -> _validate.DotOperands:
    c = _validate.fp32_bits(c, "c", fn)
    a = _validate.fp16_bits(a, "a", fn)
    b = _validate.fp16_bits(b, "b", fn)
    return _validate.check_dot_shapes(fn, c, a, b, 2, "fp16")


def int8_operands(fn, c, a, b) -> _validate.DotOperands:
    c = _validate.int32_words(c, "c", fn)
    a = _validate.byte_lanes(a, "a", fn)
    b = _validate.byte_lanes(b, "b", fn)
    return _validate.check_dot_shapes(fn, c, a, b, 4, "byte")


def tdpbf16ps(c, a, b, *, numerics="sdm", engine=None) -> AMXResult:
    """One TDPBF16PS on arrays: returns a new (M, N) float32 array ``c + a . b``.

    ``c`` is (M, N) float32 (or uint32 raw bits), ``a`` (M, 2K) and ``b``
    (K, 2N) bf16 bits (uint16 or ml_dtypes.bfloat16), ``b`` pair-interleaved
    (see :func:`pyamx.bf16.pack_pairs`); 1 <= M, K, N <= 16. ``numerics`` is
    a preset name or a :class:`Numerics`. Inputs are never modified.
    ``engine`` names the arithmetic engine (:func:`pyamx.engine.resolve`);
    the result's ``.engine`` says which ran.
    """
    ops = bf16_operands("tdpbf16ps", c, a, b)
    eng = _engine.resolve(engine, numerics)
    return label(eng.dot("tdpbf16ps", ops.c, ops.a, ops.b, ops.k).view(np.float32), "emulator", engine=eng.name)


def tdpfp16ps(c, a, b, *, numerics="sdm", engine=None) -> AMXResult:
    """One TDPFP16PS (AMX-FP16): as :func:`tdpbf16ps` with float16 (or uint16 bits) ``a`` and ``b``."""
    ops = fp16_operands("tdpfp16ps", c, a, b)
    eng = _engine.resolve(engine, numerics)
    return label(eng.dot("tdpfp16ps", ops.c, ops.a, ops.b, ops.k).view(np.float32), "emulator", engine=eng.name)


def _int8(mnemonic, c, a, b, engine) -> AMXResult:
    ops = int8_operands(mnemonic, c, a, b)
    eng = _engine.resolve(engine)
    return label(eng.dot(mnemonic, ops.c, ops.a, ops.b, ops.k), "emulator", engine=eng.name)


def tdpbssd(c, a, b, *, engine=None) -> AMXResult:
    """One TDPBSSD: ``c`` (M, N) int32 plus signed (M, 4K) ``a`` times signed (K, 4N) quad-interleaved ``b``.

    ``a`` and ``b`` are int8 or uint8 arrays (their bytes are reinterpreted
    per the mnemonic); the int32 sum wraps around. See :func:`pyamx.bf16.pack_quads`.
    """
    return _int8("tdpbssd", c, a, b, engine)


def tdpbsud(c, a, b, *, engine=None) -> AMXResult:
    """One TDPBSUD: signed ``a`` bytes times unsigned ``b`` bytes (see :func:`tdpbssd`)."""
    return _int8("tdpbsud", c, a, b, engine)


def tdpbusd(c, a, b, *, engine=None) -> AMXResult:
    """One TDPBUSD: unsigned ``a`` bytes times signed ``b`` bytes (see :func:`tdpbssd`)."""
    return _int8("tdpbusd", c, a, b, engine)


def tdpbuud(c, a, b, *, engine=None) -> AMXResult:
    """One TDPBUUD: unsigned ``a`` bytes times unsigned ``b`` bytes (see :func:`tdpbssd`)."""
    return _int8("tdpbuud", c, a, b, engine)
