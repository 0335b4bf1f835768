"""The bit-exact AMX emulator: a tile machine and array-level dot products.

``TileMachine`` models TILECFG and the eight tiles and runs the instructions
one method per mnemonic. The array-level functions run one instruction on
numpy operands without a machine; both share the same arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _validate, isa
from .. import engine as _engine
from .._result import AMXResult
from . import instructions  # noqa: F401  (public: pyamx.emulator.instructions.tdpbf16ps and its kin, docs/isa.md)
from .call import run_one
from .numerics import PRESETS, Numerics

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .._types import ArrayInput
    from . import machine as _machine

    class TileMachine(_machine.TileMachine):
        """The tile machine as type checkers must see it: machine.TileMachine, whose dot-product
        methods pyamx.isa.add_dot_methods adds at import, with its constructor typed."""

        def __init__(self, numerics: str | Numerics = "sdm", engine: str | None = None) -> None: ...
        def snapshot(self) -> tuple[bytes, npt.NDArray[np.uint8]]: ...
        def tile(self, tmm: int) -> npt.NDArray[np.uint8]: ...
        def tdpbf16ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpfp16ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpbssd(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpbsud(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpbusd(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpbuud(self, dst: int, src1: int, src2: int) -> None: ...
else:
    from .machine import TileMachine

__all__ = ["TileMachine", "Numerics", "PRESETS", *isa.DOT_NAMES]


def bf16_operands(fn, c, a, b) -> _validate.DotOperands:
    c = _validate.fp32_view(c, "c", fn)
    a = _validate.bf16_view(a, "a", fn)
    b = _validate.bf16_view(b, "b", fn)
    return _validate.check_dot_shapes(fn, c, a, b, 2, "bf16")


def fp16_operands(fn, c, a, b) -> _validate.DotOperands:
    c = _validate.fp32_view(c, "c", fn)
    a = _validate.fp16_view(a, "a", fn)
    b = _validate.fp16_view(b, "b", fn)
    return _validate.check_dot_shapes(fn, c, a, b, 2, "fp16")


def int8_operands(fn, c, a, b) -> _validate.DotOperands:
    c = _validate.int32_view(c, "c", fn)
    a = _validate.byte_lanes_view(a, "a", fn)
    b = _validate.byte_lanes_view(b, "b", fn)
    return _validate.check_dot_shapes(fn, c, a, b, 4, "byte")


_OPERANDS = {"bf16": bf16_operands, "fp16": fp16_operands, "int8": int8_operands}


def operands(name: str, c, a, b) -> _validate.DotOperands:
    """Validate the operands of dot product ``name`` (dtypes, shapes) as its family requires."""
    return _OPERANDS[isa.family_of(name)](name, c, a, b)


def _sign(signed: bool) -> str:
    return "signed" if signed else "unsigned"


def _doc(insn: isa.Instruction) -> str:
    m = insn.mnemonic
    if insn.family == "bf16":
        return f"""One {m} on arrays: returns a new (M, N) float32 array ``c + a . b``.

    ``c`` is (M, N) float32 (or uint32 raw bits), ``a`` (M, 2K) and ``b``
    (K, 2N) bf16 bits (uint16 or ml_dtypes.bfloat16), ``b`` pair-interleaved
    (see :func:`pyamx.layout.pack_pairs`); 1 <= M, K, N <= 16. ``numerics`` is
    a preset name or a :class:`Numerics`. Inputs are never modified.
    """
    if insn.family == "fp16":
        return f"One {m} (AMX-FP16): as :func:`tdpbf16ps` with float16 (or uint16 bits) ``a`` and ``b``."
    s1, s2 = (_sign(x) for x in insn.signed)
    if insn.signed == (True, True):
        return f"""One {m}: ``c`` (M, N) int32 plus {s1} (M, 4K) ``a`` times {s2} (K, 4N) quad-interleaved ``b``.

    ``a`` and ``b`` are int8 or uint8 arrays (their bytes are reinterpreted
    per the mnemonic); the int32 sum wraps around. See :func:`pyamx.layout.pack_quads`.
    """
    return f"One {m}: {s1} ``a`` bytes times {s2} ``b`` bytes (see :func:`tdpbssd`)."


def _function(insn: isa.Instruction):
    """The array-level function of one dot product, generated from its pyamx.isa row."""
    name, family, check = insn.name, insn.family, _OPERANDS[insn.family]
    dot_operands, resolve_engine = _validate.dot_operands, _engine.resolve

    if insn.is_float:
        def fn(c, a, b, *, numerics="sdm", engine=None) -> AMXResult:
            c, a, b, shape = dot_operands(check, name, family, c, a, b)
            return run_one(name, resolve_engine(engine, numerics), c, a, b, *shape)
    else:
        def fn(c, a, b, *, engine=None) -> AMXResult:
            c, a, b, shape = dot_operands(check, name, family, c, a, b)
            return run_one(name, resolve_engine(engine), c, a, b, *shape)
    return fn


isa.export_functions(globals(), _function, _doc)

if TYPE_CHECKING:  # the functions export_functions generates, as type checkers must see them
    def tdpbf16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                  engine: str | None = None) -> AMXResult: ...

    def tdpfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                  engine: str | None = None) -> AMXResult: ...

    def tdpbssd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...

    def tdpbsud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...

    def tdpbusd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...

    def tdpbuud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...
