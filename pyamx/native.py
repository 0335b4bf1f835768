"""The native backend: real tile instructions through the C extension.

Same interface as the emulator: one-shot dot products on raw-bit arrays
(``tdpbf16ps``, ``tdpfp16ps``, ``tdpbssd``/``sud``/``usd``/``uud``) and
:class:`NativeMachine`, interchangeable with
:class:`pyamx.emulator.TileMachine`.

On silicon a rule violation is not an exception but a fatal signal (#UD is
SIGILL, #GP is SIGSEGV), so every operand is checked here, with the rule
modules the emulator uses, before the C call; the C side refuses to run at
all until detection and the permission request said yes.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from . import _memory, detect, isa
from .errors import AMXError, BackendError, NativeUnavailableError, WrongThreadError
from .tilecfg import (
    MAX_COLSB,
    MAX_ROWS,
    NUM_TILES,
    TILECFG_BYTES,
    TileConfig,
    check_configured,
    check_dot_product,
    check_tile_index,
    parse_tilecfg,
)

#: mnemonic -> (C op name in lib, kernel family, lanes per dword), from pyamx.isa; the id itself is read from lib.
OPS = {insn.name: (insn.c_op, insn.family, insn.lanes) for insn in isa.DOTS}

#: kernel family -> what it needs (the CPUID feature of pyamx.isa, with where to find it)
FAMILY_FEATURE = {
    family: feature + (" (Granite Rapids and later)" if family == "fp16" else "")
    for family, feature in isa.FAMILY_FEATURE.items()
}

_MASK64 = (1 << 64) - 1


def available(family=None):
    """``(usable, reason)`` of the native backend, from the cached detection report.

    ``family`` (``"bf16"``, ``"int8"``, ``"fp16"``) narrows the question to
    one kernel family: AMX-FP16, for one, exists only from Granite Rapids on.
    """
    if family is not None and family not in FAMILY_FEATURE:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {', '.join(FAMILY_FEATURE)}")
    rep = detect.report()
    if not rep.amx_usable:
        return False, rep.reason
    if family is not None and family not in rep.kernels:
        return False, (
            f"the native {family} kernels cannot run here: they need {FAMILY_FEATURE[family]} in the CPU "
            f"and in this build (available: {', '.join(sorted(rep.kernels)) or 'none'})"
        )
    return True, rep.reason


def _lib(family=None):
    usable, reason = available(family)
    if not usable:
        raise NativeUnavailableError(f"the native backend cannot run here: {reason}")
    from . import _nativelib

    return _nativelib.load()


_thread_prepared = threading.local()


def _before_entry() -> None:
    """In trap mode, make sure the SIGILL handler is still ours before a tile instruction runs.

    faulthandler (pytest enables it) replaces the handler; the trap module
    reinstalls it, and claims this thread's emulated tile state once.
    """
    if detect.report().mode != "trap":
        return
    from . import trap

    trap.ensure_installed()
    if not getattr(_thread_prepared, "done", False):
        trap.thread_prepare()
        _thread_prepared.done = True


def _check(rc: int, what: str) -> None:
    """Turn a C status code into the exception it stands for."""
    if rc == 0:
        return
    if rc == isa.c_constant("PYAMX_E_NOT_READY"):
        raise NativeUnavailableError(
            f"{what}: the C module refused to run a tile instruction because detection and the "
            "permission request have not said yes in this process"
        )
    if rc == isa.c_constant("PYAMX_E_NO_KERNEL"):
        raise NativeUnavailableError(f"{what}: this build of pyamx._native has no AMX kernels")
    if rc == isa.c_constant("PYAMX_E_START_ROW"):
        raise BackendError(
            f"{what}: this thread's tile state has a pending start_row (set by LDTILECFG, consumed by "
            "the next load, store or dot product); it cannot be saved without consuming it, so nothing ran"
        )
    raise AMXError(f"{what}: internal error, the C module rejected an argument (status {rc})")


def _address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


# -- one-shot dot products ------------------------------------------------------


def _oneshot(name: str, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    insn = isa.BY_NAME[name]
    lanes = insn.lanes
    ffi, lib = _lib(insn.family)
    op = insn.op_id
    # The caller validated dtypes and shapes (pyamx._validate); these checks
    # only guard the memory the C code will touch.
    for x, size in ((c, 4), (a, 4 // lanes), (b, 4 // lanes)):
        if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype.itemsize != size or not x.flags.c_contiguous:
            raise ValueError(f"native {name}: operands must be validated C-contiguous 2-D arrays")
    m, n = c.shape
    k = a.shape[1] // lanes
    if a.shape != (m, lanes * k) or b.shape != (k, lanes * n) or not (1 <= m <= 16 and 1 <= k <= 16 and 1 <= n <= 16):
        raise ValueError(f"native {name}: inconsistent shapes c{c.shape} a{a.shape} b{b.shape}")
    out = np.array(c, copy=True, order="C")
    _before_entry()
    rc = lib.pyamx_dp_oneshot(
        op,
        ffi.cast("uint32_t *", _address(out)),
        ffi.cast("const void *", _address(a)),
        ffi.cast("const void *", _address(b)),
        m, k, n,
    )
    _check(rc, name.upper())
    return out


def run(name: str, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One dot product ``name`` (a :mod:`pyamx.isa` row) on silicon; see the per-mnemonic functions."""
    return _oneshot(name, c, a, b)


def _oneshot_doc(insn: isa.Instruction) -> str:
    m = insn.mnemonic
    if insn.family == "bf16":
        return f"""One {m} on silicon: (M,N) uint32 fp32 bits + (M,2K) uint16 bf16 . (K,2N) uint16 pairs.

    Operands must already be validated and C-contiguous; returns a new (M,N)
    array of the dtype of ``c_bits``. The thread's own tile state (a
    :class:`NativeMachine` in use) is saved and restored around the call;
    the GIL is released while the instructions run.
    """
    if insn.family == "fp16":
        return f"One {m} (AMX-FP16): as :func:`tdpbf16ps` with fp16 bits in ``a_bits``/``b_bits``."
    s1, s2 = ("signed" if x else "unsigned" for x in insn.signed)
    if insn.signed == (True, True):
        return f"One {m}: (M,N) int32 + {s1} (M,4K) bytes . {s2} (K,4N) quad-interleaved bytes."
    return f"One {m}: {s1} ``a`` bytes, {s2} ``b`` bytes (see :func:`tdpbssd`)."


def _oneshot_function(insn: isa.Instruction):
    name = insn.name
    if insn.is_float:  # fp32 and bf16/fp16 operands are raw bits here, as the names say
        def fn(c_bits: np.ndarray, a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
            return _oneshot(name, c_bits, a_bits, b_bits)
    else:
        def fn(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return _oneshot(name, c, a, b)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = _oneshot_doc(insn)
    return fn


for _insn in isa.DOTS:
    globals()[_insn.name] = _oneshot_function(_insn)


# -- the tile machine -----------------------------------------------------------

# Which NativeMachine's state is in this OS thread's tile registers. Several
# machines in one thread take turns: the one in the registers is saved into
# its Python-side stash before another one's stash is restored.
_resident = threading.local()

_INIT_STATE = (bytes(TILECFG_BYTES), np.zeros((NUM_TILES, MAX_ROWS, MAX_COLSB), dtype=np.uint8))


class NativeMachine:
    """The AMX tile machine of this OS thread, one C call per instruction.

    Same methods and semantics as :class:`pyamx.emulator.TileMachine`; the
    arithmetic is whatever the silicon computes (``numerics``: None or the default
    model only, the rule of :mod:`pyamx._backend`).
    Every argument is checked against the shared fault rules before the
    instruction runs, so a rule violation raises the same exception as the
    emulator instead of killing the process. Tile registers belong to one
    OS thread: the machine refuses any other thread (WrongThreadError).
    """

    backend = "native"

    def __init__(self, numerics=None):
        from ._backend import native_numerics_error, native_runs

        if not native_runs(numerics):  # the one numerics rule of pyamx._backend
            raise native_numerics_error(numerics)
        self._ffi, self._lib = _lib()
        # The Thread object, not get_ident(): CPython reuses the ident of a finished thread.
        self._owner = weakref.ref(threading.current_thread())
        self._owner_name = threading.current_thread().name
        self._config = TileConfig()
        self._stash = _INIT_STATE
        self._kernels = detect.report().kernels

    # -- plumbing -------------------------------------------------------------

    def _enter(self, mnemonic: str) -> None:
        if self._owner() is not threading.current_thread():
            raise WrongThreadError(
                f"{mnemonic}: this NativeMachine belongs to thread {self._owner_name!r}; tile registers "
                f"are per OS thread, so thread {threading.current_thread().name!r} must create its own"
            )

    def _activate(self) -> None:
        """Put this machine's state into the thread's tile registers if another machine's is there."""
        _before_entry()
        ref = getattr(_resident, "machine", None)
        current = ref() if ref is not None else None
        if current is self:
            return
        if current is not None:
            current._stash = current._save("switching NativeMachine")
        cfg, tiles = self._stash
        if cfg[0] == 0:
            _check(self._lib.pyamx_tilerelease(), "TILERELEASE")
        else:
            _check(self._lib.pyamx_restore_tiles(cfg, self._ffi.from_buffer(tiles)), "restoring a NativeMachine")
        self._stash = None
        _resident.machine = weakref.ref(self)

    def _save(self, what: str):
        cfg = self._ffi.new("uint8_t[64]")
        tiles = np.zeros((NUM_TILES, MAX_ROWS, MAX_COLSB), dtype=np.uint8)
        _check(self._lib.pyamx_save_tiles(cfg, self._ffi.from_buffer(tiles)), what)
        return bytes(self._ffi.buffer(cfg)), tiles

    def _run(self, mnemonic: str, fn, *args) -> None:
        self._activate()
        _check(fn(*args), mnemonic)

    # -- inspection -------------------------------------------------------------

    @property
    def config(self) -> TileConfig:
        """The current TILECFG as the machine tracks it (palette 0 means the init state)."""
        return self._config

    def snapshot(self):
        """``(sttilecfg image, (8, 16, 64) uint8 copy of every tile)`` read from the registers.

        Each configured tile is stored with stride 64; bytes outside a
        tile's rows x colsb are architecturally zero. A pending start_row
        would be consumed by the stores, so it is refused (BackendError).
        """
        self._enter("snapshot")
        if self._config.start_row:
            raise BackendError(
                f"snapshot: start_row is {self._config.start_row}; storing the tiles would consume it"
            )
        self._activate()
        return self._save("snapshot")

    def tile(self, tmm: int) -> np.ndarray:
        """A copy of all 16 x 64 bytes of tile ``tmm``."""
        tmm = check_tile_index("tile", "tmm", tmm)
        return self.snapshot()[1][tmm].copy()

    # -- configuration -----------------------------------------------------------

    def ldtilecfg(self, cfg) -> None:
        """LDTILECFG: load a 64-byte config (or TileConfig); #GP on an illegal one; zeroes every tile."""
        self._enter("LDTILECFG")
        parsed = parse_tilecfg(cfg)
        self._run("LDTILECFG", self._lib.pyamx_ldtilecfg, parsed.to_bytes())
        self._config = parsed

    def sttilecfg(self) -> bytes:
        """STTILECFG: the 64-byte config image, read from the registers."""
        self._enter("STTILECFG")
        out = self._ffi.new("uint8_t[64]")
        self._run("STTILECFG", self._lib.pyamx_sttilecfg, out)
        return bytes(self._ffi.buffer(out))

    def tilerelease(self) -> None:
        """TILERELEASE: back to the init state (config cleared, tiles zeroed)."""
        self._enter("TILERELEASE")
        self._run("TILERELEASE", self._lib.pyamx_tilerelease)
        self._config = TileConfig()

    # -- data movement -------------------------------------------------------------

    def _memory_operand(self, mnemonic, tmm, buf, stride, offset, writable):
        memory = _memory.byte_view(mnemonic, buf, writable=writable)
        check_configured(mnemonic, self._config)
        tmm = check_tile_index(mnemonic, "tile", tmm)
        cfg = self._config
        _memory.row_offsets(mnemonic, memory.size, offset, stride, cfg.start_row, cfg.rows[tmm], cfg.colsb[tmm])
        # Rows before start_row are not touched, so the base itself may lie
        # outside the buffer; only the checked rows are ever addressed.
        base = self._ffi.cast("uint8_t *", (_address(memory) + int(offset)) & _MASK64)
        return memory, tmm, base, int(stride)

    def _load(self, mnemonic, tmm, buf, stride, offset, t1) -> None:
        self._enter(mnemonic)
        memory, tmm, base, stride = self._memory_operand(mnemonic, tmm, buf, stride, offset, False)
        self._run(mnemonic, self._lib.pyamx_tileloadd, tmm, base, stride, t1)
        del memory  # kept alive until the instruction ran
        self._config = self._config.with_start_row(0)

    def tileloadd(self, tmm: int, buf, stride: int, offset: int = 0) -> None:
        """TILELOADD: rows start_row..rows-1 of ``colsb`` bytes from ``offset + r * stride``."""
        self._load("TILELOADD", tmm, buf, stride, offset, 0)

    def tileloaddt1(self, tmm: int, buf, stride: int, offset: int = 0) -> None:
        """TILELOADDT1: TILELOADD with a cache hint; the same architectural effect."""
        self._load("TILELOADDT1", tmm, buf, stride, offset, 1)

    def tilestored(self, tmm: int, buf, stride: int, offset: int = 0) -> None:
        """TILESTORED: store rows start_row..rows-1 (``colsb`` bytes each); start_row resets to 0."""
        self._enter("TILESTORED")
        memory, tmm, base, stride = self._memory_operand("TILESTORED", tmm, buf, stride, offset, True)
        self._run("TILESTORED", self._lib.pyamx_tilestored, tmm, base, stride)
        del memory
        self._config = self._config.with_start_row(0)

    def tilezero(self, tmm: int) -> None:
        """TILEZERO: all 16 x 64 bytes of the tile become zero."""
        self._enter("TILEZERO")
        check_configured("TILEZERO", self._config)
        tmm = check_tile_index("TILEZERO", "tdest", tmm)
        self._run("TILEZERO", self._lib.pyamx_tilezero, tmm)
        self._config = self._config.with_start_row(0)

    # -- dot products ----------------------------------------------------------------

    def _dot(self, name: str, dst, src1, src2) -> None:
        mnemonic = name.upper()
        self._enter(mnemonic)
        insn = isa.BY_NAME[name]
        if insn.family not in self._kernels:
            raise NativeUnavailableError(available(insn.family)[1])
        check_dot_product(mnemonic, self._config, dst, src1, src2)
        self._run(mnemonic, self._lib.pyamx_tdp, insn.op_id, int(dst), int(src1), int(src2))
        self._config = self._config.with_start_row(0)


def _dot_method(insn: isa.Instruction):
    name = insn.name

    def method(self, dst: int, src1: int, src2: int) -> None:
        self._dot(name, dst, src1, src2)

    method.__name__ = name
    method.__qualname__ = f"NativeMachine.{name}"
    method.__module__ = __name__
    method.__doc__ = f"{insn.mnemonic}: {insn.summary}, on silicon."
    return method


for _insn in isa.DOTS:
    setattr(NativeMachine, _insn.name, _dot_method(_insn))
del _insn
