"""The public one-instruction functions, dispatched to a backend.

One function per dot product of :mod:`pyamx.isa`, generated from its row:
``tdpbf16ps``, ``tdpfp16ps``, ``tdpbssd``, ``tdpbsud``, ``tdpbusd``, ``tdpbuud``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import _backend, _validate, emulator, isa
from . import engine as _engine
from ._result import AMXResult, label
from .emulator.call import run_one

_EMULATOR = _backend.EMULATOR


def _sign(signed: bool) -> str:
    return "signed" if signed else "unsigned"


def _doc(insn: isa.Instruction) -> str:
    m = insn.mnemonic
    if insn.family == "bf16":
        return f"""Run one {m}: a new (M, N) float32 array ``c + a . b``; inputs are never modified.

    ``c``: (M, N) float32, or uint32 taken as raw bits. ``a``: (M, 2K) bf16;
    ``b``: (K, 2N) bf16 in the pair-interleaved layout (row k holds
    ``(b[2k][n], b[2k+1][n])`` for each n; build it with
    :func:`pyamx.layout.pack_pairs`). bf16 arrays are uint16 bit patterns or
    ``ml_dtypes.bfloat16``. 1 <= M, K, N <= 16.

    ``backend``: None for the process default (``PYAMX_BACKEND``), or
    ``"auto"``, ``"native"``, ``"emulator"``. The result's ``.backend`` says
    which ran. The emulator uses the SDM numerics; for other models call
    :func:`pyamx.emulator.{insn.name}` with ``numerics=``.

    ``engine``: the emulator's arithmetic engine (:mod:`pyamx.engine`):
    None for ``PYAMX_ENGINE`` (default ``"auto"``), or ``"auto"``,
    ``"avx512"``, ``"avx2"``, ``"portable"``, ``"numpy"``; all give the same
    bits, the result's ``.engine`` says which ran. Naming a concrete engine
    means the emulator: ``auto`` picks it, a named ``native`` raises ValueError.
    """
    if insn.family == "fp16":
        return f"Run one {m} (AMX-FP16): as :func:`tdpbf16ps` with float16 (or uint16 bit) ``a``, ``b``."
    s1, s2 = (_sign(x) for x in insn.signed)
    if insn.signed == (True, True):
        return f"""Run one {m}: ``c`` (M, N) int32 + {s1} (M, 4K) ``a`` . {s2} (K, 4N) ``b``, wrapping.

    ``a``/``b`` are int8 or uint8 arrays whose bytes the mnemonic reads as
    signed or unsigned; ``b`` is quad-interleaved (:func:`pyamx.layout.pack_quads`).
    """
    return f"Run one {m}: {s1} ``a`` bytes, {s2} ``b`` bytes (see :func:`tdpbssd`)."


def _function(insn: isa.Instruction):
    """The public function of one dot product, generated from its pyamx.isa row."""
    name, family = insn.name, insn.family
    check = emulator._OPERANDS[family]
    c_view = np.float32 if insn.is_float else np.int32
    bits = (np.uint32, np.uint16) if insn.is_float else (np.int32, np.uint8)
    dot_operands, resolve_backend, resolve_engine = _validate.dot_operands, _backend.resolve, _engine.resolve

    def fn(c, a, b, *, backend=None, engine=None) -> AMXResult:
        c, a, b, shape = dot_operands(check, name, family, c, a, b)
        chosen = resolve_backend(backend, family, engine=engine)
        if chosen is _EMULATOR:
            # The SDM numerics on the engine (compiled when available); one instruction is K <= 16 dwords.
            return run_one(name, resolve_engine(engine), c, a, b, *shape)
        from . import native

        c, a, b = c.view(bits[0]), a.view(bits[1]), b.view(bits[1])
        return label(native.run(name, c, a, b).view(c_view), "native", chosen.mode)

    return fn


isa.export_functions(globals(), _function, _doc)

if TYPE_CHECKING:  # the functions export_functions generates, as type checkers must see them
    from ._types import ArrayInput
    from .emulator import Numerics, TileMachine

    def tdpbf16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
                  engine: str | None = None) -> AMXResult: ...

    def tdpfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
                  engine: str | None = None) -> AMXResult: ...

    def tdpbssd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
                engine: str | None = None) -> AMXResult: ...

    def tdpbsud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
                engine: str | None = None) -> AMXResult: ...

    def tdpbusd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
                engine: str | None = None) -> AMXResult: ...

    def tdpbuud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
                engine: str | None = None) -> AMXResult: ...


def tile_machine(*, backend: str | None = None, numerics: str | Numerics = "sdm",
                 engine: str | None = None) -> TileMachine:
    """A tile machine on the chosen backend.

    ``numerics`` is an emulator model; the native machine runs only the
    default one, so ``backend="auto"`` (or None with ``PYAMX_BACKEND=auto``)
    picks the emulator for any other model on every machine, and a
    ``native`` backend named by the call or ``PYAMX_BACKEND`` refuses it
    with ValueError (see :mod:`pyamx._backend`). Typed as the emulator's
    :class:`~pyamx.TileMachine`: the native machine has the same methods.
    """
    chosen = _backend.resolve(backend, numerics=numerics, engine=engine)
    if not chosen.is_native:
        return emulator.TileMachine(numerics, engine=engine)
    from .native import NativeMachine

    return NativeMachine(numerics)
