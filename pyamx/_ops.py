"""The public one-instruction functions, dispatched to a backend.

One function per dot product of :mod:`pyamx.table.isa` (``isa.DOT_NAMES``), generated from its row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from . import _backend, _validate, emulator
from ._first_use import module
from ._numerics_rule import choose_numerics
from .table import isa
from .emulator import engine as _engine
from ._result import AMXResult, new_result, tag
from .emulator.call import run_one

_EMULATOR = _backend.EMULATOR


def _function(insn: isa.Instruction) -> Callable[..., AMXResult]:
    """The public function of one dot product, generated from its pyamx.table.isa row."""
    name, group, check = insn.name, insn.kernel_group, emulator.operands
    result_dtype = np.dtype(np.float32 if insn.is_float else np.int32)
    dot_operands, choose_backend, choose_engine = _validate.dot_operands, _backend.choose_backend, _engine.choose_engine
    # resolved native Backend -> (itself, its runner, its label): one per backend object
    native_runs: dict[_backend.Backend, tuple[_backend.Backend, Callable[..., AMXResult], str | None]] = {}

    def fn(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None,
           engine: str | None = None) -> AMXResult:
        c, a, b, shape = dot_operands(check, name, c, a, b)
        chosen = choose_backend(backend, group, None, engine)  # kept per arguments (pyamx._backend)
        if chosen is _EMULATOR:
            # The SDM numerics on the engine (compiled when available); one instruction is K <= 16 dwords.
            return run_one(name, choose_engine(engine, op=name), c, a, b, *shape)
        runner = native_runs.get(chosen)
        if runner is None or runner[0] is not chosen:  # Backend("native") objects compare as strings
            native = module(".cpu.native", __package__)  # under the first use's lock (pyamx._first_use)
            runner = native_runs[chosen] = (chosen, native.oneshot_runner(name, chosen), chosen.mode_for(insn))
        m, k, n = shape
        return tag(runner[1](c, a, b, m, k, n, new_result((m, n), result_dtype)), "native", runner[2])

    return fn


isa.export_functions(globals(), _function, "function")

if TYPE_CHECKING:
    from ._dot_types import *  # noqa: F403  (what export_functions made above, as type checkers must see it)
    from ._types import ArrayInput
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
    chosen = _backend.choose_backend(backend, "bf16", choose_numerics(numerics), engine)
    if not chosen.is_native:
        return emulator.TileMachine(numerics, engine=engine)
    machine: TileMachine = module(".cpu.native", __package__).NativeMachine(numerics)  # the same methods
    return machine
