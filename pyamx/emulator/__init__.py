"""The bit-exact AMX emulator: a tile machine and array-level dot products.

``TileMachine`` models TILECFG and the eight tiles and runs the instructions
one method per mnemonic. The array-level functions run one instruction on
numpy operands without a machine; both share the same arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .. import _validate
from ..table import isa
from . import engine as _engine
from .._result import AMXResult
from . import instructions  # noqa: F401  (public: pyamx.emulator.instructions.tdpbf16ps and its kin, docs/isa.md)
from .call import run_one
from ..table.numerics import PRESETS, Numerics

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .. import _dot_types
    from .._types import ArrayInput
    from . import machine as _machine

    class TileMachine(_machine.TileMachine, _dot_types.TileMachine):
        """The tile machine as type checkers must see it: machine.TileMachine, whose dot-product
        methods pyamx.table.isa.add_dot_methods adds at import (build.py generates their types), with its
        constructor typed."""

        def __init__(self, numerics: str | Numerics = "sdm", engine: str | None = None) -> None: ...
        def snapshot(self) -> tuple[bytes, npt.NDArray[np.uint8]]: ...
        def tile(self, tmm: int) -> npt.NDArray[np.uint8]: ...
else:
    from .machine import TileMachine

__all__ = ["TileMachine", "Numerics", "PRESETS", *isa.DOT_NAMES]


def operands(name: str, c: object, a: object, b: object) -> _validate.DotOperands:
    """Validate the operands of dot product ``name`` (dtypes, shapes) as the formats of its row require."""
    insn = isa.get(name)
    acc_format, (a_format, b_format), lanes = insn.acc, insn.src_formats, insn.dword_lanes
    c_bits = _validate.format_view(c, "c", name, acc_format)
    if a_format.components > 1:
        a_bits = _validate.complex_pairs(a, "a", name, a_format)
        b_bits = _validate.complex_pairs(b, "b", name, b_format)
        return _validate.check_dot_shapes(name, c_bits, a_bits, b_bits, lanes, "fp16 (real, imaginary)")
    a_bits = _validate.format_view(a, "a", name, a_format)
    b_bits = _validate.format_view(b, "b", name, b_format)
    element = a_format.name if a_format.is_float else "byte"
    return _validate.check_dot_shapes(name, c_bits, a_bits, b_bits, lanes, element)


def _function(insn: isa.Instruction) -> Callable[..., AMXResult]:
    """The array-level function of one dot product, generated from its pyamx.table.isa row."""
    name = insn.name
    dot_operands, choose_engine = _validate.dot_operands, _engine.choose_engine

    def float_fn(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm",
                 engine: str | None = None) -> AMXResult:
        c_bits, a_bits, b_bits, shape = dot_operands(operands, name, c, a, b)
        return run_one(name, choose_engine(engine, numerics, op=name), c_bits, a_bits, b_bits, *shape)

    def integer_fn(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult:
        c_bits, a_bits, b_bits, shape = dot_operands(operands, name, c, a, b)
        return run_one(name, choose_engine(engine), c_bits, a_bits, b_bits, *shape)

    return float_fn if insn.is_float else integer_fn


isa.export_functions(globals(), _function, "emulator")

if TYPE_CHECKING:
    from ._dot_types import *  # noqa: F403  (what export_functions made above, as type checkers must see it)
