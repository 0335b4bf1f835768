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
        def tcvtrowd2ps(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
        def tcvtrowps2bf16h(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
        def tcvtrowps2bf16l(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
        def tcvtrowps2phh(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
        def tcvtrowps2phl(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
        def tilemovrow(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
        def tcmmimfp16ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tcmmrlfp16ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpbf8ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tdpbhf8ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tdphbf8ps(self, dst: int, src1: int, src2: int) -> None: ...
        def tdphf8ps(self, dst: int, src1: int, src2: int) -> None: ...
else:
    from .machine import TileMachine

__all__ = ["TileMachine", "Numerics", "PRESETS", *isa.DOT_NAMES]


def operands(name: str, c, a, b) -> _validate.DotOperands:
    """Validate the operands of dot product ``name`` (dtypes, shapes) as the formats of its row require."""
    insn = isa.get(name)
    c = _validate.format_view(c, "c", name, insn.acc_format)
    if insn.a_format.components > 1:
        a = _validate.complex_pairs(a, "a", name, insn.a_format)
        b = _validate.complex_pairs(b, "b", name, insn.b_format)
        return _validate.check_dot_shapes(name, c, a, b, insn.lanes, "fp16 (real, imaginary)")
    a = _validate.format_view(a, "a", name, insn.a_format)
    b = _validate.format_view(b, "b", name, insn.b_format)
    element = insn.a_format.name if insn.a_format.is_float else "byte"
    return _validate.check_dot_shapes(name, c, a, b, insn.lanes, element)


def _function(insn: isa.Instruction):
    """The array-level function of one dot product, generated from its pyamx.isa row."""
    name = insn.name
    dot_operands, resolve_engine = _validate.dot_operands, _engine.resolve

    if insn.is_float:
        def fn(c, a, b, *, numerics="sdm", engine=None) -> AMXResult:
            c, a, b, shape = dot_operands(operands, name, c, a, b)
            return run_one(name, resolve_engine(engine, numerics, op=name), c, a, b, *shape)
    else:
        def fn(c, a, b, *, engine=None) -> AMXResult:
            c, a, b, shape = dot_operands(operands, name, c, a, b)
            return run_one(name, resolve_engine(engine), c, a, b, *shape)
    return fn


isa.export_functions(globals(), _function, "emulator")

if TYPE_CHECKING:  # the functions export_functions generates, as type checkers must see them
    def tdpbf16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                  engine: str | None = None) -> AMXResult: ...

    def tdpfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                  engine: str | None = None) -> AMXResult: ...

    def tdpbssd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...

    def tdpbsud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...

    def tdpbusd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...

    def tdpbuud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...
    def tcmmimfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                     engine: str | None = None) -> AMXResult: ...
    def tcmmrlfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                     engine: str | None = None) -> AMXResult: ...

    def tdpbf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                 engine: str | None = None) -> AMXResult: ...

    def tdpbhf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                  engine: str | None = None) -> AMXResult: ...

    def tdphbf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                  engine: str | None = None) -> AMXResult: ...

    def tdphf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                 engine: str | None = None) -> AMXResult: ...
