"""One dot-product instruction on operands already validated: the per-call path of the emulator.

Shared by the public functions (pyamx.tdpbf16ps, ...; pyamx.emulator.tdpbf16ps,
...). A compiled engine is called straight on the callers' buffers (it reads
bits, so a float32 ``c`` or an ml_dtypes.bfloat16 ``a`` need no view) and
writes into the result array itself; the numpy engine gets bit views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from ..table import isa
from .._result import AMXResult, new_result, tag

if TYPE_CHECKING:
    from .engine import Engine

#: name -> (result dtype, c bits dtype, a/b bits dtype)
_DTYPES = {insn.name: ((np.float32, np.uint32, np.dtype(insn.ab_dtype).newbyteorder("=")) if insn.is_float
                       else (np.int32, np.int32, np.uint8))
           for insn in isa.DOTS}
# (compiled Engine, name) -> its tile_call: a few engines per process
_RUNS: dict[tuple[Engine, str], Callable[..., object]] = {}


def run_one(name: str, eng: Engine, c: np.ndarray, a: np.ndarray, b: np.ndarray, m: int, k: int, n: int) -> AMXResult:
    """``c + a . b`` of instruction ``name`` on engine ``eng`` as a labelled AMXResult.

    ``c`` (M, N), ``a`` (M, lanes*K), ``b`` (K, lanes*N): C-contiguous arrays of
    accepted dtypes (pyamx._validate); 1 <= M, K, N <= 16.
    """
    out_dtype, c_bits, ab_bits = _DTYPES[name]
    if eng.compiled:
        run = _RUNS.get((eng, name))
        if run is None:
            made = eng.tile_call(name)
            assert made is not None  # a compiled engine has a tile call for every row it runs
            run = _RUNS[(eng, name)] = made
        out = new_result((m, n), out_dtype)
        run(a, a.shape[1] * a.itemsize, b, b.shape[1] * b.itemsize, c, n, out, n, m, n, k)
        return tag(out, "emulator", engine=eng.name)
    bits: np.ndarray = eng.dot(name, c.view(c_bits), a.view(ab_bits), b.view(ab_bits), k)
    if not bits.flags.c_contiguous:
        bits = np.ascontiguousarray(bits)
    return tag(bits.view(dtype=out_dtype, type=AMXResult), "emulator", engine=eng.name)
