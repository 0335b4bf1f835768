"""The public one-instruction functions, dispatched to a backend."""

from __future__ import annotations

import numpy as np

from . import _backend, emulator
from . import engine as _engine
from ._result import AMXResult, label


_FAMILY = {"tdpbf16ps": "bf16", "tdpfp16ps": "fp16"}


def _run(fn, operands, backend, engine, c_view):
    chosen = _backend.resolve(backend, _FAMILY.get(fn, "int8"))
    if chosen == "emulator":
        # The SDM numerics on the engine (compiled when available); one instruction is K <= 16 dwords.
        eng = _engine.resolve(engine)
        bits = eng.dot(fn, operands.c, operands.a, operands.b, operands.k)
        return label(bits.view(c_view), "emulator", engine=eng.name)
    from . import native

    bits = getattr(native, fn)(operands.c, operands.a, operands.b)
    return label(bits.view(c_view), "native", _backend.native_mode())


def tdpbf16ps(c, a, b, *, backend=None, engine=None) -> AMXResult:
    """Run one TDPBF16PS: a new (M, N) float32 array ``c + a . b``; inputs are never modified.

    ``c``: (M, N) float32, or uint32 taken as raw bits. ``a``: (M, 2K) bf16;
    ``b``: (K, 2N) bf16 in the pair-interleaved layout (row k holds
    ``(b[2k][n], b[2k+1][n])`` for each n; build it with
    :func:`pyamx.bf16.pack_pairs`). bf16 arrays are uint16 bit patterns or
    ``ml_dtypes.bfloat16``. 1 <= M, K, N <= 16.

    ``backend``: None for the process default (``PYAMX_BACKEND``), or
    ``"auto"``, ``"native"``, ``"emulator"``. The result's ``.backend`` says
    which ran. The emulator uses the SDM numerics; for other models call
    :func:`pyamx.emulator.tdpbf16ps` with ``numerics=``.

    ``engine``: the emulator's arithmetic engine (:mod:`pyamx.engine`):
    None for ``PYAMX_ENGINE`` (default ``"auto"``), or ``"auto"``,
    ``"avx512"``, ``"avx2"``, ``"portable"``, ``"numpy"``; all give the same
    bits, the result's ``.engine`` says which ran. Ignored by the native
    backend.
    """
    ops = emulator.bf16_operands("tdpbf16ps", c, a, b)
    return _run("tdpbf16ps", ops, backend, engine, np.float32)


def tdpfp16ps(c, a, b, *, backend=None, engine=None) -> AMXResult:
    """Run one TDPFP16PS (AMX-FP16): as :func:`tdpbf16ps` with float16 (or uint16 bit) ``a``, ``b``."""
    ops = emulator.fp16_operands("tdpfp16ps", c, a, b)
    return _run("tdpfp16ps", ops, backend, engine, np.float32)


def _int8(mnemonic, c, a, b, backend, engine) -> AMXResult:
    ops = emulator.int8_operands(mnemonic, c, a, b)
    return _run(mnemonic, ops, backend, engine, np.int32)


def tdpbssd(c, a, b, *, backend=None, engine=None) -> AMXResult:
    """Run one TDPBSSD: ``c`` (M, N) int32 + signed (M, 4K) ``a`` . signed (K, 4N) ``b``, wrapping.

    ``a``/``b`` are int8 or uint8 arrays whose bytes the mnemonic reads as
    signed or unsigned; ``b`` is quad-interleaved (:func:`pyamx.bf16.pack_quads`).
    """
    return _int8("tdpbssd", c, a, b, backend, engine)


def tdpbsud(c, a, b, *, backend=None, engine=None) -> AMXResult:
    """Run one TDPBSUD: signed ``a`` bytes, unsigned ``b`` bytes (see :func:`tdpbssd`)."""
    return _int8("tdpbsud", c, a, b, backend, engine)


def tdpbusd(c, a, b, *, backend=None, engine=None) -> AMXResult:
    """Run one TDPBUSD: unsigned ``a`` bytes, signed ``b`` bytes (see :func:`tdpbssd`)."""
    return _int8("tdpbusd", c, a, b, backend, engine)


def tdpbuud(c, a, b, *, backend=None, engine=None) -> AMXResult:
    """Run one TDPBUUD: unsigned ``a`` and ``b`` bytes (see :func:`tdpbssd`)."""
    return _int8("tdpbuud", c, a, b, backend, engine)


def tile_machine(*, backend=None, numerics="sdm", engine=None):
    """A tile machine on the chosen backend (``numerics`` and ``engine`` apply to the emulator only)."""
    chosen = _backend.resolve(backend)
    if chosen == "emulator":
        return emulator.TileMachine(numerics, engine=engine)
    if emulator.numerics.resolve(numerics) != emulator.PRESETS["sdm"]:
        raise ValueError("numerics= selects an emulator model; the native machine computes what silicon computes")
    from .native import NativeMachine

    return NativeMachine()
