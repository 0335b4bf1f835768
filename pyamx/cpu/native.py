"""The native backend: real tile instructions through the C extension.

Same interface as the emulator: one-shot dot products on raw-bit arrays
(``tdpbf16ps``, ``tdpfp16ps``, ``tdpbssd``/``sud``/``usd``/``uud``) and
:class:`NativeMachine`, interchangeable with
:class:`pyamx.emulator.TileMachine`.

On silicon a rule violation is not an exception but a fatal signal (#UD is
SIGILL, #GP is SIGSEGV) or a stray memory access. The guarantee lives in C:
each tile-machine call reads the configuration back from the registers and
checks the instruction against it (registers, shape rules, every row of a
memory operand against the buffer's length) before executing it, and the C
side refuses to run at all until detection and the permission request said
yes. The checks here, with the rule modules the emulator uses, come first
only so that a violation is worded exactly as the emulator words it.
"""

from __future__ import annotations

import operator
import sys
import threading
import weakref
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

import numpy as np
import numpy.typing as npt

from ..table import _memory, isa
from . import _native_start, detect
from ..errors import (
    AMXError,
    AMXFault,
    BackendError,
    GeneralProtectionFault,
    InvalidOpcodeFault,
    MemoryAccessFault,
    NativeUnavailableError,
    ReentrantUseError,
    WrongThreadError,
)
from ..table.tilecfg import (
    MAX_COLSB,
    MAX_ROWS,
    NUM_TILES,
    TILECFG_BYTES,
    TileConfig,
    check_dot_product,
    check_memory_tile,
    check_tile_index,
    check_tile_usable,
    parse_tilecfg,
)

if TYPE_CHECKING:
    from .._backend import Backend
    from .._types import MemoryOperand
    from ..table.numerics import Numerics
    from ..table.tilecfg import ConfigInput
    from ._nativelib import FFI, Lib

_T = TypeVar("_T")
#: a machine's state away from the registers: the STTILECFG image and the 8 tiles' bytes
Stash = tuple[bytes, npt.NDArray[np.uint8]]
#: the emulator's rule check of an instruction against a configuration (raises the fault)
Recheck = Callable[[TileConfig], None]

#: mnemonic -> (C op name in lib, kernel group, lanes per dword), from pyamx.table.isa; the id itself is read from lib.
OPS = {insn.name: (insn.c_op, insn.kernel_group, insn.dword_lanes) for insn in isa.DOTS}


def _needs(feature: isa.Feature) -> str:
    where = f"CPUID.(EAX={feature.leaf:#x},ECX={feature.subleaf}):{feature.register.upper()}[{feature.bit}]"
    return f"{feature.name} ({where}" + (f"; {feature.since})" if feature.since else ")")


#: kernel group -> what it needs (the CPUID feature of pyamx.table.isa, with where to find it)
GROUP_FEATURE = {group: _needs(isa.FEATURES[name]) for group, name in isa.GROUP_FEATURE.items()}


def available(group: Optional[str] = None) -> tuple[bool, str]:
    """``(usable, reason)`` of the native backend in this process, from the detection report once the
    native start ran (:mod:`pyamx.cpu._native_start`: the first call starts native here: the AMX
    permission, the forked child, or the trap mode where ``PYAMX_TRAP_EMULATION`` asks for it).

    ``group`` (``"bf16"``, ``"int8"``, ``"fp16"``) narrows the question to
    one kernel group: AMX-FP16, for one, exists only from Granite Rapids on.
    """
    return availability(_native_start.report(), group)


def report() -> detect.Report:
    """Detection's report once native has started in this process (:func:`available` starts it: the
    AMX permission and the forked child, or the trap or complement mode): what native does here.
    ``pyamx.cpu.detect.report()`` is the same judgement without the start, and changes nothing."""
    return _native_start.report()


def availability(rep: detect.Report, group: Optional[str]) -> tuple[bool, str]:
    """``available``'s answer from a given report (a machine, or a call's resolved backend, asks with
    the one it kept)."""
    if group is not None and group not in GROUP_FEATURE:
        raise ValueError(f"unknown kernel group {group!r}; expected one of {', '.join(GROUP_FEATURE)}")
    if not rep.native_usable:
        return False, rep.reason
    if group is not None and group not in rep.kernels:
        return False, (
            f"the native {group} kernels cannot run here: they need {GROUP_FEATURE[group]} in the CPU "
            f"and in this build (available: {', '.join(sorted(rep.kernels)) or 'none'})"
        )
    return True, rep.reason


def _lib(group: Optional[str] = None) -> tuple[FFI, Lib]:
    usable, reason = available(group)
    if not usable:
        raise NativeUnavailableError(f"the native backend cannot run here: {reason}", reason=reason)
    from . import _nativelib

    return _nativelib.load()


_thread_prepared = threading.local()


def _before_entry(rep: Optional[detect.Report] = None) -> None:
    """In the trap or the complement mode, make sure the SIGILL handler is still ours before a
    tile instruction runs (``rep``: the detection report the call was resolved from, if it has one).

    faulthandler (pytest enables it) replaces the handler; the trap module
    reinstalls it, and claims this thread's emulated tile state once.
    """
    rep = rep or detect.report()
    if rep.mode == "trap" or rep.complemented:
        _trap_entry()


# pyamx.cpu.trap, imported on the first trapped call and then kept (no import per call)
_trap_module: Optional[ModuleType] = None


def _trap_entry() -> None:
    global _trap_module
    if _trap_module is None:
        from . import trap

        _trap_module = trap
    _trap_module.ensure_installed()
    if not getattr(_thread_prepared, "done", False):
        _trap_module.thread_prepare()
        _thread_prepared.done = True


# What each guard status of the C tile machine (enum pyamx_status) means, by
# the name of its constant in lib: the fault class and the rule in words.
_C_FAULTS: dict[str, tuple[type[AMXFault], str]] = {
    "PYAMX_E_UD_UNCONFIGURED": (InvalidOpcodeFault, "tiles are not configured (palette 0, init state)"),
    "PYAMX_E_UD_REGISTER": (InvalidOpcodeFault, "a tile register outside tmm0..tmm7"),
    "PYAMX_E_UD_SHAPE": (InvalidOpcodeFault, "an operand tile breaks a shape rule (unconfigured, colsb, start_row, or the dot-product shapes)"),
    "PYAMX_E_GP_CONFIG": (GeneralProtectionFault, "an illegal tile configuration"),
    "PYAMX_E_MEMORY": (MemoryAccessFault, "a row of the memory operand lies outside the buffer"),
}


def _c_fault(rc: int) -> Optional[tuple[type[AMXFault], str]]:
    """``(fault class, rule)`` for a guard status of the C tile machine, else None."""
    for name, fault in _C_FAULTS.items():
        if rc == isa.c_constant(name):
            return fault
    return None


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
            f"{what}: this thread's tile state has a pending start_row (set by "
            f"{isa.of_action('load-config').mnemonic}, consumed by "
            "the next load, store or dot product); it cannot be saved without consuming it, so nothing ran"
        )
    fault = _c_fault(rc)
    if fault is not None:
        cls, rule = fault
        raise cls(what, f"{rule} in the configuration loaded in the tile registers (checked in C; nothing ran)")
    raise AMXError(f"{what}: internal error, the C module rejected an argument (status {rc})")


def _consumed(cfg: TileConfig) -> TileConfig:
    """The configuration after an instruction that consumes start_row (the same object when none is pending)."""
    return cfg.with_start_row(0) if cfg.start_row else cfg


def _exact(value: int) -> int:
    """An integer operand as an exact ``int``, converted once with ``operator.index``.

    The number checked must be the number used: an ``int`` subclass whose
    ``__int__``/``__index__`` answers differently on each call cannot slip a
    different value past the checks. Anything else is passed through for the
    rule checks to refuse with their TypeError.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return operator.index(value)
    return value


def _address(arr: np.ndarray) -> int:
    address: int = arr.__array_interface__["data"][0]
    return address


# -- one-shot dot products ------------------------------------------------------


def _oneshot(name: str, c: np.ndarray, a: np.ndarray, b: np.ndarray, backend: Optional[Backend] = None) -> np.ndarray:
    insn = isa.BY_NAME[name]
    lanes = insn.dword_lanes
    # A call's resolved native backend has checked this group's kernels against its report already.
    library = _lib(insn.group) if backend is None else backend.library
    assert library is not None  # a native backend's: only the emulator has none
    ffi, lib = library
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
    _before_entry(None if backend is None else backend.report)
    rc = lib.pyamx_dp_oneshot(
        op,
        ffi.from_buffer("uint32_t[]", out), ffi.from_buffer(a), ffi.from_buffer(b),  # C-contiguous: checked above
        m, k, n,
    )
    _check(rc, name.upper())
    return out


def oneshot_runner(name: str, backend: Backend) -> Callable[..., np.ndarray]:
    """The per-call path of one dot product ``name`` on a resolved native ``backend``, made once per
    backend (pyamx._ops keeps it): ``run(c, a, b, m, k, n, result)`` writes ``c + a . b`` into
    ``result``, a new C-contiguous M x N array of 4-byte elements, and returns it.

    ``c``, ``a``, ``b`` are validated operands (pyamx._validate: C-contiguous, aligned, their dtypes
    and shapes those of the instruction; any dtype of those bits, as the C code reads bits). The
    buffers go to C as they are (``ffi.from_buffer``): no array interface, no copies, no lookups.
    """
    insn = isa.BY_NAME[name]
    library = backend.library
    assert library is not None  # a native backend's: only the emulator has none
    ffi, lib = library
    op, call, buf, copy = insn.op_id, lib.pyamx_dp_oneshot, ffi.from_buffer, ffi.memmove
    rep = backend.report or detect.report()
    trapped = rep.mode == "trap" or rep.complemented
    what = name.upper()

    def run(c: np.ndarray, a: np.ndarray, b: np.ndarray, m: int, k: int, n: int, result: np.ndarray) -> np.ndarray:
        out = buf("uint32_t[]", result)
        copy(out, c, 4 * m * n)
        if trapped:
            _trap_entry()
        rc = call(op, out, buf(a), buf(b), m, k, n)
        if rc:
            _check(rc, what)
        return result

    return run


def run(name: str, c: np.ndarray, a: np.ndarray, b: np.ndarray, backend: Optional[Backend] = None) -> np.ndarray:
    """One dot product ``name`` (a :mod:`pyamx.table.isa` row) on silicon; see the per-mnemonic functions.

    ``backend``: the native :class:`~pyamx._backend.Backend` the call resolved for the row's
    group, whose report and library it runs with; None checks availability here.
    """
    return _oneshot(name, c, a, b, backend)


def _oneshot_function(insn: isa.Instruction) -> Callable[..., np.ndarray]:
    name = insn.name

    def float_fn(c_bits: np.ndarray, a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
        return _oneshot(name, c_bits, a_bits, b_bits)

    def integer_fn(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _oneshot(name, c, a, b)

    return float_fn if insn.is_float else integer_fn  # fp32 and bf16/fp16 operands are raw bits, as the names say


isa.export_functions(globals(), _oneshot_function, "native")


# -- the tile machine -----------------------------------------------------------


class _ThreadState(threading.local):
    """Per OS thread: whose state the tile registers hold, and which call is running.

    ``resident`` (a weakref) names the NativeMachine whose state is in the
    registers; every other machine's state is in its ``_stash``. A machine's
    stash is meaningful only while it is not resident, so each step of a
    switch is one attribute store and an exception between any two of them
    leaves a consistent picture (see ``NativeMachine._activate``).

    ``busy`` is set while a NativeMachine call runs on this thread: a second
    call that starts inside it (from a signal handler, finalizer or trace
    hook) is refused with ReentrantUseError instead of switching the
    registers under the interrupted instruction.
    """

    resident: Optional[weakref.ref[NativeMachine]] = None
    busy: Optional[tuple[str, FrameType]] = None


_thread = _ThreadState()

# threading.local lives in the interpreter's per-thread state, which a new OS
# thread never inherits, whoever started it; so a token kept there names one
# OS thread for its whole life and never a later one.
_thread_identity = threading.local()


def _thread_token() -> object:
    token = getattr(_thread_identity, "token", None)
    if token is None:
        token = _thread_identity.token = object()
    return token


def _thread_name() -> str:
    return f"{threading.current_thread().name!r} (native id {threading.get_native_id()})"


_INIT_STATE: Stash = (bytes(TILECFG_BYTES), np.zeros((NUM_TILES, MAX_ROWS, MAX_COLSB), dtype=np.uint8))


def _still_running(frame: FrameType) -> bool:
    """Whether ``frame`` is on this thread's stack (the busy call really encloses this one)."""
    caller: Optional[FrameType] = sys._getframe(2)
    while caller is not None:
        if caller is frame:
            return True
        caller = caller.f_back
    return False


class NativeMachine:
    """The AMX tile machine of this OS thread, one C call per instruction.

    Same methods and semantics as :class:`pyamx.emulator.TileMachine`; the
    arithmetic is whatever the silicon computes (``numerics``: None or the default
    model only, the rule of :mod:`pyamx._numerics_rule`). A rule violation raises the same exception as the emulator instead of
    killing the process: the C call checks every instruction against the
    configuration actually loaded in the tile registers before it runs it.
    Tile registers belong to one OS thread: the machine refuses any other
    thread (WrongThreadError), and refuses to be entered from code that runs
    inside another NativeMachine call on the same thread (ReentrantUseError).
    """

    backend = "native"

    def __init__(self, numerics: str | Numerics | None = None) -> None:
        from .._numerics_rule import native_numerics_error, native_runs

        if not native_runs(numerics):  # the one numerics rule (pyamx._numerics_rule)
            assert numerics is not None  # None: whatever native computes, always run
            raise native_numerics_error(numerics)
        self._ffi, self._lib = _lib()
        # A token private to this OS thread, not get_ident() nor the Thread object: CPython
        # reuses the ident of a finished thread, and a thread not started by threading
        # (_thread, C) gets a _DummyThread that a later thread with that ident inherits.
        self._owner = _thread_token()
        self._owner_name = _thread_name()
        # The configuration this machine's state holds, kept to word faults as
        # the emulator does; never a safety decision (the C calls re-read the
        # registers). None means unknown: cleared before every C call that
        # changes state and set after it succeeded, so an exception in between
        # (a signal handler raising after the call returned) leaves it unknown
        # and the next use reads the registers (STTILECFG) instead.
        self._known: Optional[TileConfig] = TileConfig()
        self._stash: Optional[Stash] = _INIT_STATE
        report = detect.report()
        self._report = report
        self._kernels = report.kernels
        # Decided once: detect.report() takes a lock, and an exception between
        # its acquire and release (a profile hook raising at __exit__) would
        # leave it held; nothing on an instruction's path may take one.
        self._trap = report.mode == "trap" or bool(report.complemented)

    # -- plumbing -------------------------------------------------------------

    def _call(self, mnemonic: str, body: Callable[..., _T], *args: object) -> _T:
        """Run ``body(*args)`` as one machine call: right thread, not nested in another call."""
        if self._owner is not _thread_token():
            raise WrongThreadError(
                f"{mnemonic}: this NativeMachine belongs to thread {self._owner_name}; tile registers "
                f"are per OS thread, so thread {_thread_name()} must create its own"
            )
        state = _thread
        if state.busy is not None and _still_running(state.busy[1]):
            raise ReentrantUseError(
                f"{mnemonic}: a NativeMachine call ({state.busy[0]}) is already running on this thread and "
                "this call started inside it (a signal handler, finalizer or trace/profile hook); the "
                "thread has one set of tile registers, so nesting would run the interrupted instruction "
                "on the wrong machine's state. Use the machine outside such hooks, or pyamx.TileMachine "
                "(the emulator) inside them"
            )
        # A fresh object per call, released only by the call that set it. It holds the call's frame:
        # a signal handler that raises inside the `finally` below (Python 3.10 checks for signals
        # there) leaves the token behind, and the next call must tell that leftover from a call
        # still running under it.
        token = (mnemonic, sys._getframe())
        try:
            state.busy = token
            return body(*args)
        finally:
            if state.busy is token:
                state.busy = None

    def _activate(self) -> None:
        """Put this machine's state into the thread's tile registers if another machine's is there.

        Every step is one store, ordered so that an exception between any two
        (the calls are C calls, after which a signal handler may raise) never
        loses a state or lets a machine run on another's: the resident
        machine's stash is written before it stops being resident; nobody is
        resident while the registers are being overwritten; this machine
        becomes resident only after its state is in the registers. Retrying
        after an interruption simply redoes the remaining steps.
        """
        if self._trap:
            _trap_entry()
        state = _thread
        ref = state.resident
        current = ref() if ref is not None else None
        if current is self:
            return
        if current is not None:
            current._stash = current._save("switching NativeMachine")
            state.resident = None
        assert self._stash is not None  # a machine not resident keeps its state in the stash
        cfg, tiles = self._stash
        if cfg[0] == 0:
            _check(self._lib.pyamx_release_tiles(), isa.of_action("release").mnemonic)
        else:
            _check(self._lib.pyamx_restore_tiles(cfg, self._ffi.from_buffer(tiles)), "restoring a NativeMachine")
        state.resident = weakref.ref(self)
        self._stash = None

    def _save(self, what: str) -> Stash:
        cfg = self._ffi.new("uint8_t[64]")
        tiles = np.zeros((NUM_TILES, MAX_ROWS, MAX_COLSB), dtype=np.uint8)
        _check(self._lib.pyamx_save_tiles(cfg, self._ffi.from_buffer(tiles)), what)
        return bytes(self._ffi.buffer(cfg)), tiles

    def _registers(self) -> bytes:
        """STTILECFG of this machine's state, read from the registers."""
        self._activate()
        out = self._ffi.new("uint8_t[64]")
        _check(self._lib.pyamx_store_config(out), isa.of_action("store-config").mnemonic)
        image = bytes(self._ffi.buffer(out))
        self._known = parse_tilecfg(image)
        return image

    def _config_now(self) -> TileConfig:
        """The configuration of this machine's state: the kept copy, or the registers when unknown."""
        known = self._known
        if known is None:
            self._registers()
            known = self._known
            assert known is not None  # _registers keeps what it read
        return known

    def _execute(self, mnemonic: str, fn: Callable[..., int], args: tuple[object, ...], after: Optional[TileConfig],
                 recheck: Recheck) -> None:
        """One state-changing C call; the kept configuration is unknown while it runs."""
        self._activate()
        self._known = None
        rc = fn(*args)
        if rc != 0:
            self._refused(mnemonic, rc, recheck)
        self._known = after

    def _refused(self, mnemonic: str, rc: int, recheck: Recheck) -> None:
        """Raise what a refusal by the C guards means, worded from the registers' configuration.

        The Python checks passed against the kept copy, so the registers
        disagree with it (code outside this machine changed them): the copy is
        resynchronized, and ``recheck(config)`` runs the emulator's rules
        against the truth to name the rule; the C status says the class.
        """
        if _c_fault(rc) is not None:
            self._known = None
            recheck(parse_tilecfg(self._registers()))
        _check(rc, mnemonic)

    # -- inspection -------------------------------------------------------------

    @property
    def config(self) -> TileConfig:
        """The current TILECFG of this machine (palette 0 means the init state)."""
        return self._call("config", self._config_now)

    def _snapshot(self) -> Stash:
        cfg = self._config_now()
        if cfg.start_row:
            raise BackendError(f"snapshot: start_row is {cfg.start_row}; storing the tiles would consume it")
        self._activate()
        return self._save("snapshot")

    def snapshot(self) -> Stash:
        """``(sttilecfg image, (8, 16, 64) uint8 copy of every tile)`` read from the registers.

        Each configured tile is stored with stride 64; bytes outside a
        tile's rows x colsb are architecturally zero. A pending start_row
        would be consumed by the stores, so it is refused (BackendError).
        """
        return self._call("snapshot", self._snapshot)

    def tile(self, tmm: int) -> npt.NDArray[np.uint8]:
        """A copy of all 16 x 64 bytes of tile ``tmm``."""
        tmm = check_tile_index("tile", "tmm", _exact(tmm))
        tile: npt.NDArray[np.uint8] = self._call("tile", self._snapshot)[1][tmm].copy()
        return tile

    # -- configuration -----------------------------------------------------------

    # The public methods (one per config or memory row) are bound from the table at the end of
    # this module (pyamx.table.isa.add_state_methods); each passes its row's name for the messages.

    def _configure(self, mnemonic: str, cfg: ConfigInput) -> None:
        parsed = parse_tilecfg(cfg)
        self._execute(mnemonic, self._lib.pyamx_load_config, (parsed.to_bytes(),), parsed, lambda c: None)

    def _load_config(self, mnemonic: str, cfg: ConfigInput) -> None:
        self._call(mnemonic, self._configure, mnemonic, cfg)

    def _store_config(self, mnemonic: str) -> bytes:
        return self._call(mnemonic, self._registers)

    def _release(self, mnemonic: str) -> None:
        self._call(mnemonic, self._execute, mnemonic, self._lib.pyamx_release_tiles, (), TileConfig(),
                   lambda c: None)

    # -- data movement -------------------------------------------------------------

    def _memory_op(self, mnemonic: str, tmm: int, buf: MemoryOperand, stride: int, offset: int, hint: int,
                   store: bool) -> None:
        memory = _memory.byte_view(mnemonic, buf, writable=store)
        cfg = self._config_now()
        tmm, offset, stride = _exact(tmm), _exact(offset), _exact(stride)

        def check(cfg: TileConfig) -> None:
            check_memory_tile(mnemonic, "tile", cfg, tmm)
            _memory.row_offsets(mnemonic, memory.size, offset, stride, cfg.start_row, cfg.rows[tmm], cfg.colsb[tmm])

        check(cfg)
        # The C call checks every row against the buffer's length itself, with
        # the configuration in the registers; `memory` keeps the buffer alive.
        base = self._ffi.cast("uint8_t *", _address(memory))
        args: tuple[object, ...]
        if store:
            fn, args = self._lib.pyamx_store_tile, (tmm, base, memory.size, offset, stride)
        else:
            fn, args = self._lib.pyamx_load_tile, (tmm, base, memory.size, offset, stride, hint)
        self._execute(mnemonic, fn, args, _consumed(cfg), check)

    def _load_tile(self, mnemonic: str, tmm: int, buf: MemoryOperand, stride: int, offset: int) -> None:
        insn = isa.get(mnemonic)
        if insn.feature is not isa.of_action("load").feature:  # a hint of a later extension (AMX-MOVRS)
            self._require(mnemonic)
        hint = isa.LOAD_ACTIONS.index(insn.action)  # the C kernel's hint argument (csrc/pyamx.h)
        self._call(mnemonic, self._memory_op, mnemonic, tmm, buf, stride, offset, hint, False)

    def _store_tile(self, mnemonic: str, tmm: int, buf: MemoryOperand, stride: int, offset: int) -> None:
        self._call(mnemonic, self._memory_op, mnemonic, tmm, buf, stride, offset, 0, True)

    def _require(self, mnemonic: str) -> None:
        """NativeUnavailableError, before anything runs, where the CPU lacks the row's CPUID feature."""
        reason = feature_missing(self._report, isa.get(mnemonic))
        if reason is not None:
            raise NativeUnavailableError(f"{mnemonic}: {reason}", reason=reason)

    def _zero(self, mnemonic: str, tmm: int) -> None:
        cfg = self._config_now()
        tmm = _exact(tmm)

        def check(cfg: TileConfig) -> None:
            check_tile_usable(mnemonic, "tdest", cfg, tmm)

        check(cfg)
        self._execute(mnemonic, self._lib.pyamx_zero_tile, (tmm,), _consumed(cfg), check)

    def _zero_tile(self, mnemonic: str, tmm: int) -> None:
        self._call(mnemonic, self._zero, mnemonic, tmm)

    # -- row instructions (AMX-AVX512) --------------------------------------------------

    def _tilerow(self, name: str, tmm: int, row: int, imm: bool) -> npt.NDArray[np.uint32]:
        from ..emulator.machine import check_row_selector, row_source
        from ..table.numerics import PRESETS
        from ..emulator.rows import LANES

        insn = isa.BY_NAME[name]
        cfg = self._config_now()
        tmm, row = _exact(tmm), check_row_selector(insn.mnemonic, _exact(row), imm)
        index = row & 0x3F if imm else row & 0xFFFF

        def check(cfg: TileConfig) -> None:
            tmm_ = check_tile_usable(insn.mnemonic, "tsrc", cfg, tmm)
            row_source(insn.mnemonic, PRESETS["sdm"], index, cfg.rows[tmm_])

        check(cfg)
        out = np.zeros(LANES, dtype=np.uint32)
        # Whether silicon's raw row move (TILEMOVROW) resets start_row is open: the registers are read
        # again after it.
        after = None if insn.moves_raw else _consumed(cfg)
        kernel = self._lib.pyamx_tilerow_imm if imm else self._lib.pyamx_tilerow
        self._execute(insn.mnemonic, kernel, (insn.op_id, tmm, row, self._ffi.cast("uint32_t *", _address(out))),
                      after, check)
        return out

    def _row(self, name: str, tmm: int, row: int, imm: bool) -> npt.NDArray[np.uint32]:
        self._require(name.upper())
        return self._call(name.upper(), self._tilerow, name, tmm, row, imm)

    # -- dot products ----------------------------------------------------------------

    def _tdp(self, name: str, dst: int, src1: int, src2: int) -> None:
        mnemonic = name.upper()
        insn = isa.BY_NAME[name]
        if insn.group not in self._kernels:
            raise NativeUnavailableError(availability(self._report, insn.group)[1])
        cfg = self._config_now()
        dst, src1, src2 = _exact(dst), _exact(src1), _exact(src2)

        def check(cfg: TileConfig) -> None:
            check_dot_product(mnemonic, cfg, dst, src1, src2)

        check(cfg)
        self._execute(mnemonic, self._lib.pyamx_tdp, (insn.op_id, dst, src1, src2),
                      _consumed(cfg), check)

    def _dot(self, name: str, dst: int, src1: int, src2: int) -> None:
        self._call(name.upper(), self._tdp, name, dst, src1, src2)


def feature_missing(rep: detect.Report, insn: isa.Instruction) -> Optional[str]:
    """Why ``insn`` (a row of an extension beyond the kernel groups: AMX-AVX512, AMX-MOVRS) cannot run
    natively per report ``rep``, or None. Silicon only: the trap mode emulates none of them."""
    feature = insn.feature
    emulated = rep.mode == "trap" or feature.name in rep.complemented
    if not emulated and (rep.mode != "silicon" or not rep.cpu.get(feature.key)):
        where = f"CPUID.({feature.leaf:#x},{feature.subleaf}):{feature.register.upper()}[{feature.bit}]"
        return (f"the native {insn.mnemonic} needs {_needs(feature)}, which this CPU does not report ({where} "
                f"is 0{'' if rep.mode != 'trap' else '; the trap mode emulates no ' + feature.name}); "
                "executing it would kill the process with SIGILL, so nothing ran")
    if insn.is_row and not _avx512_state_enabled():
        return (f"the native {insn.mnemonic} writes a zmm register, but the OS has not enabled the AVX-512 "
                "state (XCR0 bits 5-7), so nothing ran")
    return None


def _avx512_state_enabled() -> bool:
    xcr0 = detect.facts().xcr0  # detection's table read XCR0 once
    return xcr0 is not None and (xcr0 & 0xE6) == 0xE6


isa.add_state_methods(NativeMachine, "native-method")
isa.add_dot_methods(NativeMachine, "native-method")
isa.add_row_methods(NativeMachine, "native-method")
