"""The public one-instruction functions, dispatched to a backend.

One function per dot product of :mod:`pyamx.isa` (``isa.DOT_NAMES``), generated from its row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import _backend, _validate, emulator
from ._first_use import module
from .table import isa
from .emulator import engine as _engine
from ._result import AMXResult, label
from .emulator.call import run_one

_EMULATOR = _backend.EMULATOR


def _function(insn: isa.Instruction):
    """The public function of one dot product, generated from its pyamx.isa row."""
    name, group, check = insn.name, insn.group, emulator.operands
    c_view = np.float32 if insn.is_float else np.int32
    bits = (np.uint32, np.dtype(insn.ab_dtype).newbyteorder("=")) if insn.is_float else (np.int32, np.uint8)
    dot_operands, resolve_backend, resolve_engine = _validate.dot_operands, _backend.resolve, _engine.resolve

    def fn(c, a, b, *, backend=None, engine=None) -> AMXResult:
        c, a, b, shape = dot_operands(check, name, c, a, b)
        chosen = resolve_backend(backend, group, engine=engine)
        if chosen is _EMULATOR:
            # The SDM numerics on the engine (compiled when available); one instruction is K <= 16 dwords.
            return run_one(name, resolve_engine(engine, op=name), c, a, b, *shape)
        native = module(".cpu.native", __package__)  # under the first use's lock (pyamx._first_use)
        c, a, b = c.view(bits[0]), a.view(bits[1]), b.view(bits[1])
        return label(native.run(name, c, a, b, chosen).view(c_view), "native", chosen.mode_for(insn))

    return fn


isa.export_functions(globals(), _function, "function")

if TYPE_CHECKING:
    from ._dot_types import *  # noqa: F403  (what export_functions made above, as type checkers must see it)
    from .emulator import Numerics, TileMachine

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
    return module(".cpu.native", __package__).NativeMachine(numerics)
