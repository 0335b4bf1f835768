"""The native AMX matmul kernel (``csrc/matmul_amx.c``) behind ``pyamx.matmul(backend="native")``.

Contract of :func:`matmul_native` (the caller, :mod:`pyamx.matmul`, packs and pads):

``matmul_native(op_name, a_bits, b_vnni, c_bits, k_dwords, threads) -> out``

- ``op_name``: ``"tdpbf16ps"``, ``"tdpfp16ps"``, ``"tdpbssd"``, ``"tdpbsud"``,
  ``"tdpbusd"`` or ``"tdpbuud"``; lanes per dword L is 2 for the first two, 4
  for the int8 ones.
- ``a_bits``: (M, k_dwords * L) array of the operand's bits, row-major, K
  already padded with zeros to whole dwords: 2-byte items (uint16/int16
  bits, float16, bfloat16) for L = 2, 1-byte items (uint8/int8) for L = 4.
  The signedness is the mnemonic's, not the dtype's.
- ``b_vnni``: (k_dwords, N * L) array of the same item size, pair- or
  quad-interleaved exactly as the instruction takes tsrc2 (row k holds, for
  every column n, B[L*k + i][n] for i in 0..L-1), packed once by the caller.
- ``c_bits``: (M, N) array of 4-byte items (float32, uint32 or int32): the
  accumulator. It is not modified.
- ``k_dwords``: int >= 1. ``threads``: an int from 1 to
  ``lib.PYAMX_MATMUL_MAX_THREADS`` already checked by the public entry
  (``pyamx.matmul``, through :func:`pyamx._threads.check`; the C entry refuses a
  count outside that range, nothing else here looks at it), or None for
  :func:`threads_for_work`: one thread per :data:`MIN_MACS_PER_THREAD`
  multiply-adds, at most :func:`pyamx._threads.default` (``PYAMX_ENGINE_THREADS``,
  else the CPUs this process may run on). The kernel
  never starts more threads than there are 32 x 32 output blocks, and the
  result does not depend on ``threads``.
- Each array must have contiguous rows (unit item stride) and non-negative
  row strides at least one row long, and native byte order; a C-contiguous
  array always qualifies. Nothing is copied except ``c_bits`` into ``out``.
- Returns ``out``, a new C-contiguous (M, N) array of ``c_bits``' dtype:
  ``c + a . b`` as the tile-instruction schedule of :mod:`pyamx.matmul`
  computes it (for every element K in blocks of 16 dwords in increasing
  order, one dot-product instruction per block, its C the previous block's
  result; edge tiles with smaller shapes), bit for bit what this machine's
  AMX (or the trap mode's emulation of it) produces.
- Raises ``ValueError`` (unknown op, shapes,
  strides), ``TypeError`` (not an ndarray, wrong item size or
  dtype kind, non-native byte order), ``NativeUnavailableError`` (no AMX,
  no permission, kernel group not built or not in this CPU),
  ``BackendError`` (the thread's tile state has a pending start_row).

The GIL is released while the kernel runs (cffi API mode releases it around
every call).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import numpy as np

from . import native
from ._tile_layout import aligned_empty
from .. import _threads

if TYPE_CHECKING:
    from typing import Callable

    from .._backend import Backend
    from ._nativelib import FFI, CData, Lib

__all__ = ["matmul_native", "matmul_native_packed", "default_threads", "threads_for_work"]

#: Multiply-adds (outputs x K values) below which ``threads=None`` adds no thread: waking a pool
#: worker and splitting the blocks costs microseconds, and 2**25 bf16 multiply-adds are about
#: 30-50 us of one core's TMUL at the 0.6-1 T multiply-adds/s the issue measured. A first
#: estimate, to be tuned on silicon with benchmarks/bench_native.py; the bits never depend on it.
MIN_MACS_PER_THREAD = 1 << 25


def _operand(fn: str, name: str, x: object, itemsize: int, kinds: str) -> int:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{fn}: {name} must be a numpy array, not {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{fn}: {name} must be 2-D, got shape {x.shape}")
    if x.dtype.itemsize != itemsize or (x.dtype.kind not in kinds and x.dtype.name != "bfloat16"):
        raise TypeError(f"{fn}: {name} must hold {itemsize}-byte items ({kinds!r} kinds), got dtype {x.dtype}")
    if not x.dtype.isnative:
        raise TypeError(f"{fn}: {name} must be in native byte order, got dtype {x.dtype.str}")
    rows, cols = x.shape
    if rows > 1 and x.strides[0] < cols * itemsize:
        raise ValueError(f"{fn}: {name} rows overlap or run backwards (row stride {x.strides[0]} bytes)")
    if cols > 1 and x.strides[1] != itemsize:
        raise ValueError(f"{fn}: {name} rows must be contiguous (item stride {x.strides[1]}, need {itemsize})")
    # A single row may report any stride; the kernel never steps it.
    return x.strides[0] if rows > 1 else cols * itemsize


def _count(fn: str, name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{fn}: {name} must be an int count, not {value!r}")
    try:
        count = operator.index(value)  # type: ignore[arg-type]  # checked here: anything else raises TypeError
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, not {type(value).__name__}") from None
    if count < low or (high is not None and count > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{fn}: {name} must be {bound}, got {count!r}")
    return count


def default_threads() -> int:
    """What ``threads=None`` uses: :func:`pyamx._threads.default` (``PYAMX_ENGINE_THREADS``, else the
    usable CPUs), read once and kept as the engines keep it."""
    return _threads.default()


def _pointer(ffi: FFI, x: np.ndarray) -> CData:
    """``x``'s first byte for C: the buffer itself where it is C-contiguous (no array interface
    dict per call), else its address (rows further apart than their length)."""
    if x.flags.c_contiguous:
        return ffi.from_buffer(x)
    return ffi.cast("const void *", native._address(x))


def threads_for_work(m: int, n: int, k_values: int, cap: int) -> int:
    """What ``threads=None`` runs: one thread per :data:`MIN_MACS_PER_THREAD` multiply-adds, at
    least 1 (small work stays on the calling thread) and at most ``cap``."""
    return max(1, min(cap, m * n * k_values // MIN_MACS_PER_THREAD))


def _thread_count(lib: Lib, threads: int | None, m: int, n: int, k_values: int) -> int:
    """``threads`` as given (checked by the public entry), or what None runs."""
    if threads is None:
        return threads_for_work(m, n, k_values, min(default_threads(), lib.PYAMX_MATMUL_MAX_THREADS))
    return threads


def _panels(fn: str, lib: Lib, panels: object) -> tuple[int, int]:
    if panels is None:  # the build's own constants: nothing to check
        return lib.PYAMX_MATMUL_K_PANEL, lib.PYAMX_MATMUL_N_PANEL
    if not isinstance(panels, tuple) or len(panels) != 2:
        raise TypeError(f"{fn}: panels must be None or a (k_panel, n_panel) tuple, not {panels!r}")
    return _count(fn, "k_panel", panels[0], 1), _count(fn, "n_panel", panels[1], 1)


def _aligned_copy(c_bits: np.ndarray) -> np.ndarray:
    """``c_bits`` copied into a new C-contiguous array whose first byte is 64-byte aligned: with N
    a multiple of 16 every C tile row is then a whole cache line."""
    out = aligned_empty(c_bits.nbytes, c_bits.dtype.newbyteorder("="), c_bits.shape)
    out[...] = c_bits
    return out


def matmul_native(op_name: str, a_bits: np.ndarray, b_vnni: np.ndarray, c_bits: np.ndarray, k_dwords: int,
                  threads: int | None, *, panels: tuple[int, int] | None = None,
                  backend: Backend | None = None) -> np.ndarray:
    """``c_bits + a_bits . b_vnni`` through the native AMX matmul kernel (see the module docstring).

    ``panels``: ``(k_panel, n_panel)``, the kernel's cache blocking in K blocks
    of 16 dwords and block columns of 32 (default ``lib.PYAMX_MATMUL_K_PANEL``,
    ``lib.PYAMX_MATMUL_N_PANEL``): a tuning and test knob, the bits do not
    depend on it. ``backend``: the call's resolved native :class:`~pyamx._backend.Backend`
    (its detection report and library); None checks availability here.
    """
    fn = f"native matmul ({op_name})"
    if op_name not in native.OPS:
        raise ValueError(f"native matmul: unknown instruction {op_name!r}; expected one of {', '.join(native.OPS)}")
    op_attr, group, lanes = native.OPS[op_name]
    k_dwords = _count(fn, "k_dwords", k_dwords, 1)
    item = 4 // lanes
    lda = _operand(fn, "a_bits", a_bits, item, "uif")
    ldb = _operand(fn, "b_vnni", b_vnni, item, "uif")
    _operand(fn, "c_bits", c_bits, 4, "uif")
    m, n = c_bits.shape
    if m < 1 or n < 1:
        raise ValueError(f"{fn}: c_bits must be at least 1 x 1, got {c_bits.shape}")
    if a_bits.shape != (m, k_dwords * lanes) or b_vnni.shape != (k_dwords, n * lanes):
        raise ValueError(
            f"{fn}: shapes do not fit: c{c_bits.shape}, k_dwords={k_dwords} needs a({m}, {k_dwords * lanes}) "
            f"and b({k_dwords}, {n * lanes}), got a{a_bits.shape} b{b_vnni.shape}"
        )
    # A call's resolved native backend has checked this group against its detection report already.
    library = native._lib(group) if backend is None else backend.library
    assert library is not None  # a native backend's: only the emulator has none
    ffi, lib = library
    return _run_kernel(fn, lib.pyamx_matmul_amx_panels, op_attr, k_dwords, lanes, a_bits, lda,
                       (_pointer(ffi, b_vnni), ldb), c_bits, threads, panels, backend, ffi, lib)


def _run_kernel(fn: str, entry: Callable[..., int], op_attr: str, k_dwords: int, lanes: int, a_bits: np.ndarray,
                lda: int, b_args: tuple[CData, int], c_bits: np.ndarray, threads: int | None, panels: object,
                backend: Backend | None, ffi: FFI, lib: Lib) -> np.ndarray:
    """The second half of both entries, their operands checked: the thread count and panels, C
    copied into an aligned output, the native state checked, then ``entry(op, m, n, k_dwords, a,
    lda, *b_args, out, ldout, threads, k_panel, n_panel)``, its status turned into an exception.
    Returns the output."""
    m, n = c_bits.shape
    threads = _thread_count(lib, threads, m, n, k_dwords * lanes)
    k_panel, n_panel = _panels(fn, lib, panels)
    out = _aligned_copy(c_bits)
    native._before_entry(None if backend is None else backend.report)
    rc = entry(getattr(lib, op_attr), m, n, k_dwords, _pointer(ffi, a_bits), lda, *b_args,
               ffi.from_buffer("uint32_t[]", out), 4 * n, threads, k_panel, n_panel)
    native._check(rc, fn)
    return out


def matmul_native_packed(op_name: str, a_bits: np.ndarray, tiles: np.ndarray, k_dwords: int, c_bits: np.ndarray,
                         threads: int | None, *, panels: tuple[int, int] | None = None,
                         backend: Backend | None = None) -> np.ndarray:
    """``c_bits + a_bits . B`` with B in the kernel's tile layout (``tiles``, _tile_layout.py,
    as :func:`pyamx.pack` makes it): as :func:`matmul_native`, but B is read from the tiles
    (``pyamx_matmul_amx_packed``). ``tiles``: a 64-byte aligned uint8 array of at least the
    layout's size for ``k_dwords`` x N dwords; N is ``c_bits``' width.
    """
    fn = f"native matmul ({op_name})"
    if op_name not in native.OPS:
        raise ValueError(f"native matmul: unknown instruction {op_name!r}; expected one of {', '.join(native.OPS)}")
    op_attr, group, lanes = native.OPS[op_name]
    k_dwords = _count(fn, "k_dwords", k_dwords, 1)
    lda = _operand(fn, "a_bits", a_bits, 4 // lanes, "uif")
    _operand(fn, "c_bits", c_bits, 4, "uif")
    m, n = c_bits.shape
    if m < 1 or n < 1 or a_bits.shape != (m, k_dwords * lanes):
        raise ValueError(f"{fn}: shapes do not fit: c{c_bits.shape} and k_dwords={k_dwords} need "
                         f"a({m}, {k_dwords * lanes}) with M, N >= 1, got a{a_bits.shape}")
    need = 2048 * (-(-n // 32)) * (-(-k_dwords // 16))
    tiles_ok = isinstance(tiles, np.ndarray) and tiles.dtype == np.uint8 and tiles.ndim == 1 and \
        tiles.flags.c_contiguous and tiles.nbytes >= need
    library = native._lib(group) if backend is None else backend.library
    assert library is not None  # a native backend's: only the emulator has none
    ffi, lib = library
    tiles_ptr = ffi.from_buffer(tiles) if tiles_ok else None
    if tiles_ptr is None or int(ffi.cast("uintptr_t", tiles_ptr)) % 64:
        raise ValueError(f"{fn}: tiles must be a 64-byte aligned, contiguous uint8 array of at least {need} bytes "
                         f"(the tile layout of {k_dwords} x {n} dwords: pyamx.pack)")
    return _run_kernel(fn, lib.pyamx_matmul_amx_packed, op_attr, k_dwords, lanes, a_bits, lda,
                       (tiles_ptr, tiles.nbytes), c_bits, threads, panels, backend, ffi, lib)
