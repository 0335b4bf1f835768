"""The emulator backend's arithmetic engines: a named, strict choice.

An engine computes the tile dot products of the emulator backend on whole
matrices with the schedule of :func:`pyamx.matmul`: for every output element
K is consumed in blocks of 16 dwords in increasing order, each block one
dot-product instruction whose C is the previous block's result. One
instruction is the special case K <= 16 dwords.

Engines (``engine=`` argument, ``PYAMX_ENGINE`` environment variable):

``avx512``, ``avx2``
    compiled x86-64 variants: the CPU's own FMA under MXCSR DAZ|FTZ|RNE
    (the caller's MXCSR is saved and restored on every call and in every
    worker thread), an exact scalar path for outputs with NaN operands.
``portable``
    compiled plain C for any platform (software DAZ, an exact FTZ decision).

The AMX-FP8 rows run on the compiled engines through the same C entry
(``pyamx_engine_run``, one call descriptor for every product; their arithmetic is
csrc/engine_fp8.c: exact double sums, an integer path where a block's exponent span is
too wide; docs/engine.md, "AMX-FP8").
``numpy``
    the numpy implementation in :mod:`pyamx.emulator`; the only engine of
    the non-default numerics options.
``auto`` (default)
    the best compiled variant this CPU and build run, else ``numpy``; always
    ``numpy`` for numerics other than the default ``"sdm"``.

Every engine gives the same bits. An engine asked for by name runs or the
call fails (:class:`EngineUnavailableError`); it is never replaced. The
compiled engines release the GIL and split the work over ``threads``
threads (default: ``PYAMX_ENGINE_THREADS``, else the CPUs this process may use), with
the operands packed once and shared. A long call from the main thread can be
interrupted (Ctrl-C): KeyboardInterrupt arrives within tens of milliseconds, after
the engine's threads have stopped; inputs are never written, so nothing is left
half-done.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Protocol, TypedDict

import numpy as np

from .. import _env as env_parser  # the one PYAMX_* parser (this module's own _env caches what it said)
from .. import _threads
from ..table import isa
from .._first_use import LOCK, module
from .._fpenv import default_fpenv
from .._validate import contiguous_bits
from ..errors import BackendError, EnvironmentVariableError, UnknownBackendError

if TYPE_CHECKING:
    from typing import Callable

    from ..cpu._nativelib import FFI, CData, Lib
    from ..table.numerics import Numerics

ENV_VAR = "PYAMX_ENGINE"
THREADS_ENV_VAR = env_parser.ENGINE_THREADS
NAMES = ("auto", "avx512", "avx2", "portable", "numpy")
#: compiled variants, best first (auto's order of preference), with their C kind names
_KINDS = {"avx512": "PYAMX_ENGINE_AVX512", "avx2": "PYAMX_ENGINE_AVX2", "portable": "PYAMX_ENGINE_PORTABLE"}
_SIMD = {"avx512": "AVX-512", "avx2": "AVX2+FMA", "portable": "none (plain C)", "numpy": "numpy"}


#: op name -> (values per dword, float op), from the instruction table
OPS = {insn.name: (insn.dword_lanes, insn.is_float) for insn in isa.DOTS}
#: kernel groups the compiled engines implement (csrc/engine.c, and csrc/engine_fp8.c for
#: "fp8"); a row of any other group runs on the numpy engine only
COMPILED_GROUPS = frozenset({"bf16", "fp16", "int8", "complex", "fp8"})
#: groups whose arithmetic is csrc/engine_fp8.c (fp8 codes, exact sums; the same entry and descriptor)
_FP8_GROUPS = frozenset({"fp8"})
FP8_OPS = frozenset(insn.name for insn in isa.DOTS if insn.group in _FP8_GROUPS)
NUMPY_ONLY = frozenset(insn.name for insn in isa.DOTS if insn.group not in COMPILED_GROUPS)
BLOCK_DWORDS = 16  # K dwords per tile instruction (tmul_maxk)


def _sdm() -> Numerics:
    from .._numerics_rule import default

    return default()


class EngineUnavailableError(BackendError):
    """An engine was asked for by name but cannot run here (not built, or this CPU/OS lacks it)."""


def parse_name(value: object, source: str) -> str:
    """Validate an engine name; ``source`` says where it came from, for the message."""
    if not isinstance(value, str) or value not in NAMES:
        raise UnknownBackendError(f"{source} is {value!r}; it must be one of {', '.join(NAMES)}")
    return value


def requested() -> str:
    """The engine ``PYAMX_ENGINE`` asks for (unset or empty: ``auto``)."""
    return env_parser.choice(ENV_VAR, NAMES, "auto", error=EnvironmentVariableError)


_CPU_COUNT = _threads.CPU_COUNT
#: the most ``threads=`` pyamx takes (pyamx._threads, where threads are checked and defaulted)
MAX_THREADS = _threads.MAX_THREADS
#: Multiply-adds (outputs x K values) one thread of each compiled engine runs in 15-30 ms
#: (Sapphire Rapids, fp16: avx512 74, avx2 46, portable 4.6 GMAC/s). A call with less work per
#: thread runs on the calling thread, where an interrupt waits for its end (still well within
#: the 50 ms aimed at); a longer one runs on a helper thread (about 0.1-0.3 ms to start and
#: join, 1-2% of the shortest such call) so that an interrupt can stop it.
_UNINTERRUPTED_MACS = {"avx512": 1 << 31, "avx2": 1 << 30, "portable": 1 << 26}
#: The same for the exact per-element path of outputs with NaN operands (about 5 ns per
#: multiply-add): a short call whose NaNs would take more goes to a helper thread as well.
_UNINTERRUPTED_EXACT_MACS = 1 << 22
_POLL_S = 0.02  # how long a signal delivered to another thread can go unnoticed
#: What a helper thread (and the engine's threads it starts) blocks, so that the OS hands a
#: process-wide SIGINT to the waiting main thread and wakes it at once; faults stay deliverable.
_ASYNC_SIGNALS = (signal.valid_signals() - {signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGTRAP}
                  if hasattr(signal, "pthread_sigmask") else None)  # POSIX only, like the SIGTRAP it names
# The environment is read on first use and then kept (as PYAMX_BACKEND is): a
# lookup per call would cost a tenth of a one-instruction call. Tests that
# change it call reset_environment().
_env: dict[str, str] = {}


#: Counts reset_environment() calls: the backend choices kept per call arguments (pyamx._backend)
#: are made again when it changes.
settings_generation = 0


def reset_environment() -> None:
    """Forget what PYAMX_ENGINE / PYAMX_ENGINE_THREADS said: the next call reads them again, and
    every engine and backend choice kept for the calls is made again."""
    global settings_generation
    _env.clear()
    _threads.forget()
    _resolved.clear()
    settings_generation += 1


# threads= and its default live in pyamx._threads; these names are this module's public API.
thread_default = _threads.default
_threads_default = _threads.default
default_threads = _threads.read_default
check_threads = _threads.check


def _lib() -> tuple[FFI, Lib] | None:
    """``(ffi, lib)`` of the extension, or None when it is not built."""
    try:
        from ..cpu._nativelib import load

        return load()
    except ImportError:
        return None


def _compiled_status(name: str) -> tuple[bool, str]:
    """``(available, reason)`` of a compiled variant."""
    loaded = _lib()
    if loaded is None:
        return False, "the C extension pyamx._native is not built"
    ffi, lib = loaded
    if not hasattr(lib, "pyamx_engine_run"):
        return False, "this build of pyamx._native has no compiled engine"
    kind = getattr(lib, _KINDS[name])
    reason: str = ffi.string(lib.pyamx_engine_reason(kind)).decode()
    return bool(lib.pyamx_engine_available(kind)), reason


def available_engines() -> list[tuple[str, bool, str]]:
    """``[(name, available, reason), ...]`` for every concrete engine, best first (for ``pyamx info``)."""
    rows = [(name, *_compiled_status(name)) for name in _KINDS]
    rows.append(("numpy", True, "always available; the only engine of non-default numerics"))
    return rows


def describe() -> EngineInfo:
    """The default engine, its SIMD level and thread count, and every engine's availability (``pyamx info``)."""
    default: str | None
    simd: str | None
    why: str | None
    threads: int | None
    try:
        chosen = resolve(None)
        default, simd, why = chosen.name, chosen.simd, None
    except BackendError as exc:  # PYAMX_ENGINE names one that cannot run, or is not a name at all
        default, simd, why = None, None, str(exc)
    try:
        threads = default_threads()
    except BackendError as exc:
        threads, why = None, why or str(exc)
    return {
        "default": default, "simd": simd, "threads": threads, "error": why,
        "engines": [{"name": n, "available": ok, "reason": r} for n, ok, r in available_engines()],
    }


def describe_lines() -> list[str]:
    """:func:`describe` as text lines."""
    info = describe()
    head = (f"emulator engine: {info['default']} ({info['simd']}), threads: {info['threads']}"
            if info["error"] is None else f"emulator engine: none ({info['error']})")
    rows = [f"  {'[ok  ]' if e['available'] else '[    ]'} {e['name']:<9} {e['reason']}" for e in info["engines"]]
    return [head, *rows]


class EngineAvailability(TypedDict):
    """One engine of :func:`describe`: its name, whether it runs here, and why (not)."""

    name: str
    available: bool
    reason: str


class EngineInfo(TypedDict):
    """What :func:`describe` returns (``pyamx info``): the default engine and every engine's availability."""

    default: str | None
    simd: str | None
    threads: int | None
    error: str | None
    engines: list[EngineAvailability]


class TileRun(Protocol):
    """What :meth:`Engine.tile_call` returns: one instruction on validated buffers."""

    def __call__(self, a: np.ndarray, lda: int, b: np.ndarray, ldb: int, c: np.ndarray, ldc: int, out: np.ndarray,
                 ldout: int, m: int, n: int, kd: int) -> None: ...


class Engine:
    """One engine. ``name`` (``"avx512"``, ..., ``"numpy"``), ``simd`` (the instruction set it uses)."""

    _ffi: FFI
    _lib: Lib
    _kind: int
    _op_ids: dict[str, int]
    _quick_macs: int

    def __init__(self, name: str, numerics: Numerics | None = None) -> None:
        self.name = name
        self.simd = _SIMD[name]
        self.compiled = name in _KINDS
        self._numerics = numerics  # the numpy engine's Numerics
        if self.compiled:
            loaded = _lib()
            assert loaded is not None  # a compiled engine is made once _compiled_status found it available
            self._ffi, self._lib = loaded
            self._kind = getattr(self._lib, _KINDS[name])
            # Rows the build has an id for: a table row newer than the build must not break the others.
            self._op_ids = {insn.name: getattr(self._lib, insn.c_op) for insn in isa.DOTS
                            if hasattr(self._lib, insn.c_op)}
            self._quick_macs = _UNINTERRUPTED_MACS[name]

    def __repr__(self) -> str:
        return f"<pyamx engine {self.name} ({self.simd})>"

    def dot(self, op_name: str, c_bits: np.ndarray, a: np.ndarray, b_vnni: np.ndarray, k_dwords: int | None = None,
            threads: object = None) -> np.ndarray:
        """``C`` after the instruction schedule over all K, as a new (M, N) array (:meth:`run_dot`
        with ``threads`` checked: this is a public entry)."""
        return self.run_dot(op_name, c_bits, a, b_vnni, k_dwords, check_threads(threads, op_name))

    def run_dot(self, op_name: str, c_bits: np.ndarray, a: np.ndarray, b_vnni: np.ndarray, k_dwords: int | None = None,
                threads: int | None = None) -> np.ndarray:
        """``C`` after the instruction schedule over all K, as a new (M, N) array; ``threads``
        already checked (:func:`pyamx._threads.check`: pyamx.matmul's callers) or None.

        ``c_bits``: (M, N) uint32 fp32 bits (float ops) or int32/uint32
        words (int8 ops); ``a``: (M, K*lanes) uint16 bits / 8-bit values;
        ``b_vnni``: (K, N*lanes), interleaved as the instructions take it;
        ``k_dwords``: K (default: from ``b_vnni``); ``threads``: an upper
        bound on the threads (default :func:`default_threads`; compiled
        engines only). Returns uint32 bits for float ops, int32 for int8.
        Inputs are never modified. Operands are assumed validated (the
        public functions do that); shapes are checked here.
        """
        lanes, is_float = OPS[op_name]
        m, n = c_bits.shape
        kd = b_vnni.shape[0] if k_dwords is None else k_dwords
        if a.shape != (m, kd * lanes) or b_vnni.shape != (kd, n * lanes) or min(m, n, kd) < 1:
            raise ValueError(
                f"{op_name}: engine operands must be c (M, N), a (M, K*{lanes}), b (K, N*{lanes}) with "
                f"M, N, K >= 1; got c {c_bits.shape}, a {a.shape}, b {b_vnni.shape}, K={kd}"
            )
        if a.itemsize != 4 // lanes or b_vnni.itemsize != 4 // lanes or c_bits.itemsize != 4:
            raise TypeError(
                f"{op_name}: engine operands are {32 // lanes}-bit values in a and b and 32-bit words in c; "
                f"got {a.dtype}, {b_vnni.dtype}, {c_bits.dtype}"
            )
        if not self.compiled:
            return self._numpy_dot(op_name, is_float, c_bits, a, b_vnni, kd, threads)
        return self._compiled_dot(op_name, is_float, c_bits, a, b_vnni, m, n, kd,
                                  _threads_default() if threads is None else threads)

    def _compiled_dot(self, op_name: str, is_float: bool, c: np.ndarray, a: np.ndarray, b: np.ndarray, m: int, n: int,
                      kd: int, threads: int) -> np.ndarray:
        if c.dtype != np.uint32:
            c = c.view(np.uint32)
        if not c.flags.c_contiguous:
            c = np.ascontiguousarray(c)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if not b.flags.c_contiguous:
            b = np.ascontiguousarray(b)
        out = np.empty((m, n), dtype=np.uint32)
        # Row pitch from the shape, not strides[0]: numpy reports any stride for a size-1 axis.
        call = call_descriptor(self._ffi, self._lib, self._kind, self._op_ids[op_name], a, a.shape[1] * a.itemsize,
                               b, b.shape[1] * b.itemsize, c, n, out, n, m, n, a.shape[1], threads)
        self._run(call, m * n * a.shape[1], threads)
        return out if is_float else out.view(np.int32)

    def matmul(self, op_name: str, a: np.ndarray, b: np.ndarray, c_bits: np.ndarray | None = None,
               threads: object = None) -> np.ndarray:
        """``pyamx.matmul``'s schedule on row-major operands, packed inside C (compiled engines only):
        :meth:`run_matmul` with ``threads`` checked (a public entry)."""
        return self.run_matmul(op_name, a, b, c_bits, check_threads(threads, op_name))

    def run_matmul(self, op_name: str, a: np.ndarray, b: np.ndarray, c_bits: np.ndarray | None = None,
                   threads: int | None = None) -> np.ndarray:
        """``pyamx.matmul``'s schedule on row-major operands, packed inside C (compiled engines only);
        ``threads`` already checked, or None.

        ``a``: (M, K) uint16 bits / 8-bit values; ``b``: (K, N) likewise, row-major, *not*
        interleaved; ``c_bits``: (M, N) 32-bit words or None for zeros. K need not be a multiple
        of the values per dword: the C side pads the last dword as docs/matmul.md says. Returns
        what :meth:`dot` returns for the padded, interleaved operands, without building them.
        """
        if not self.compiled:
            raise TypeError(f"engine {self.name}: matmul() on row-major operands is for compiled engines; use dot()")
        if isa.get(op_name).kind == "dot-complex":
            # a complex number is a whole dword: B's rows are already the instruction's (pyamx._matmul_complex)
            raise ValueError(f"{op_name}: a complex row takes b as (K, 2N) fp16 pairs; use dot(), not matmul()")
        lanes, is_float = OPS[op_name]
        (m, k), (k_b, n) = a.shape, b.shape
        if k != k_b or min(m, n, k) < 1 or (c_bits is not None and c_bits.shape != (m, n)):
            raise ValueError(f"{op_name}: engine operands must be a (M, K), b (K, N), c (M, N) with M, N, K >= 1; "
                             f"got a {a.shape}, b {b.shape}, c {None if c_bits is None else c_bits.shape}")
        if a.itemsize != 4 // lanes or b.itemsize != 4 // lanes or (c_bits is not None and c_bits.itemsize != 4):
            raise TypeError(f"{op_name}: engine operands are {32 // lanes}-bit values in a and b and 32-bit words "
                            f"in c; got {a.dtype}, {b.dtype}, {None if c_bits is None else c_bits.dtype}")
        if threads is None:
            threads = _threads_default()
        # C-contiguous and aligned (the C side reads 16-bit values in place); K need not be whole
        # dwords: the C side reads k values and pads the last dword
        a, b = contiguous_bits(a), contiguous_bits(b)
        if c_bits is not None:
            c_bits = contiguous_bits(c_bits.view(np.uint32) if c_bits.dtype != np.uint32 else c_bits)
        out = np.empty((m, n), dtype=np.uint32)
        call = call_descriptor(self._ffi, self._lib, self._kind, self._op_ids[op_name], a, a.shape[1] * a.itemsize,
                               b, b.shape[1] * b.itemsize, c_bits, n, out, n, m, n, k, threads, rows_of_b=True)
        self._run(call, m * n * k, threads)
        return out if is_float else out.view(np.int32)

    def _run(self, call: _Call, macs: int, threads: int) -> None:
        """``pyamx_engine_run(call)``, interruptible when it is long; a status other than OK raises.

        Python runs signal handlers only in the main thread, so only there can an
        exception arrive in the middle of a call; short calls are not worth a thread.
        """
        lib = self._lib
        if threading.current_thread() is not threading.main_thread():
            rc: int = lib.pyamx_engine_run(call.struct)
        else:
            used = min(threads, _CPU_COUNT)
            rc = lib.PYAMX_ENGINE_E_SLOW
            if macs < self._quick_macs * used:
                call.struct.max_exact = _UNINTERRUPTED_EXACT_MACS * used
                rc = lib.pyamx_engine_run(call.struct)
            if rc == lib.PYAMX_ENGINE_E_SLOW:  # long, or NaN operands make it long: nothing ran
                call.struct.max_exact = -1
                rc = _run_interruptibly(self._ffi, lib, call.struct)
        if rc:
            raise _error(lib, rc, self.name)

    def tile_call(self, op_name: str) -> TileRun | None:
        """Hook for the per-instruction fast paths (pyamx._ops, TileMachine); None on the numpy engine.

        Returns ``run(a, lda_bytes, b, ldb_bytes, c, ldc, out, ldout, m, n, kd)``:
        one instruction (K <= 16 dwords) on buffers the caller has already
        validated (dtype, shape, row pitches within the buffers; ``out`` a
        separate M x N 4-byte buffer), on one thread. The checks of
        :meth:`dot` are the caller's job here: they cost more than the
        arithmetic of one tile.
        """
        if not self.compiled:
            return None
        ffi, lib, kind, op, name = self._ffi, self._lib, self._kind, self._op_ids[op_name], self.name
        entry, buf, lanes, null = lib.pyamx_engine_run, ffi.from_buffer, OPS[op_name][0], ffi.NULL
        rows = lib.PYAMX_ENGINE_B_DWORDS
        # One descriptor per thread and shape, kept: a call sets its four pointers only. Filling a new
        # struct field by field from Python cost more than the tile's arithmetic (1.5 us a call).
        kept = threading.local()

        def run(a: np.ndarray, lda: int, b: np.ndarray, ldb: int, c: np.ndarray, ldc: int, out: np.ndarray,
                ldout: int, m: int, n: int, kd: int) -> None:
            shape = (lda, ldb, ldc, ldout, m, n, kd)
            try:
                call = kept.calls[shape]
            except (AttributeError, KeyError):
                calls = getattr(kept, "calls", None)
                if calls is None or len(calls) > 256:  # a few shapes in practice; never unbounded
                    calls = kept.calls = {}
                call = calls[shape] = ffi.new("struct pyamx_engine_call *", [
                    kind, op, lib.PYAMX_ENGINE_NUMERICS_SDM, rows, null, lda, null, ldb, null, ldc, null, ldout,
                    m, n, kd * lanes, 1, null, -1])
            # the buffers stay referenced (here) for as long as the call runs
            a_buf, b_buf, c_buf, out_buf = buf(a), buf(b), buf("uint32_t[]", c), buf("uint32_t[]", out)
            call.a, call.b, call.c_in, call.c_out = a_buf, b_buf, c_buf, out_buf
            rc = entry(call)
            if rc:
                raise _error(lib, rc, name)

        return run

    @default_fpenv  # every numpy step, and the caller's MXCSR (flags too) restored exactly afterwards
    def _numpy_dot(self, op_name: str, is_float: bool, c: np.ndarray, a: np.ndarray, b: np.ndarray, kd: int,
                   threads: int | None) -> np.ndarray:
        # the whole schedule at once (pyamx/emulator/dot.py): operands scanned once, every K
        # block per row chunk, the output rows split over ``threads`` (default 1)
        engine_dot: Callable[[str, np.ndarray, np.ndarray, np.ndarray, int, int, Numerics | None], np.ndarray] = \
            module(".dot", __package__).engine_dot

        return engine_dot(op_name, c, a, b, kd, threads or 1, self._numerics)


class _Call:
    """A ``struct pyamx_engine_call`` and the buffers its pointers point into (kept alive with it)."""

    __slots__ = ("struct", "buffers")

    def __init__(self, struct: CData, buffers: tuple[CData, ...]) -> None:
        self.struct, self.buffers = struct, buffers


def call_descriptor(ffi: FFI, lib: Lib, kind: int, op: int, a: np.ndarray, lda: int, b: np.ndarray, ldb: int,
                    c_in: np.ndarray | None, ldc_in: int, out: np.ndarray, ldc_out: int, m: int, n: int, k: int,
                    threads: int, *, rows_of_b: bool = False) -> _Call:
    """The one engine call, described (csrc/engine.h, ``struct pyamx_engine_call``).

    ``a``, ``b``, ``c_in`` (None: C = +0), ``out``: buffers (arrays), pitches in bytes for A
    and B and in elements for C; ``k``: values per row of A; ``rows_of_b``: B is k rows of N
    values (else the instructions' interleaved dwords). Not cancellable and unbounded until
    :meth:`Engine._run` says otherwise.
    """
    buf = ffi.from_buffer
    buffers = (buf(a), buf(b), ffi.NULL if c_in is None else buf("uint32_t[]", c_in), buf("uint32_t[]", out))
    # in the struct's field order (a list fills it faster than a dict, a visible share of a small call)
    struct = ffi.new("struct pyamx_engine_call *", [
        kind, op, lib.PYAMX_ENGINE_NUMERICS_SDM, lib.PYAMX_ENGINE_B_ROWS if rows_of_b else lib.PYAMX_ENGINE_B_DWORDS,
        buffers[0], lda, buffers[1], ldb, buffers[2], ldc_in, buffers[3], ldc_out, m, n, k, threads, ffi.NULL, -1,
    ])
    return _Call(struct, buffers)


def _run_interruptibly(ffi: FFI, lib: Lib, described: CData) -> int:
    """``pyamx_engine_run(described)`` on a helper thread while this (the main) thread waits for it.

    The wait is where signal handlers run. When one raises (KeyboardInterrupt), the call is
    cancelled and the exception leaves only after the engine's threads have stopped: they
    write into the call's own output array, which the caller then drops.
    """
    entry = lib.pyamx_engine_run
    cancel = ffi.new("int *")
    described.cancel = cancel
    # Taken once, by the helper as it begins the call or by an interrupted caller first:
    # the caller then knows whether there is a call to wait for (an interrupt can land
    # inside Thread.start(), before or after the thread exists).
    claim = threading.Lock()
    done = threading.Event()
    outcome: list[int | BaseException] = []

    def call() -> None:
        if not claim.acquire(blocking=False):
            return  # the caller was interrupted before this thread began
        try:
            if _ASYNC_SIGNALS:
                signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
            outcome.append(entry(described))
        except BaseException as exc:  # raised again in the caller's thread
            outcome.append(exc)
        finally:
            done.set()

    started = False
    try:
        threading.Thread(target=call, name="pyamx-engine-call", daemon=True).start()
        started = True
        # Short waits: a signal the OS hands to another thread (one of the application's
        # own) sets Python's flag for the handler but does not wake this one.
        while not done.wait(_POLL_S):
            pass
    except BaseException as exc:
        lib.pyamx_engine_cancel(cancel)
        if not claim.acquire(blocking=False):  # the helper has the call: its workers must stop first
            _wait_out(done)
        elif isinstance(exc, RuntimeError) and not started:
            # no thread to be had (interpreter shutdown, a limit): the same result, not interruptible
            described.cancel = ffi.NULL
            rc: int = entry(described)
            return rc
        raise
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _wait_out(done: threading.Event) -> None:
    """Wait for a cancelled call to end (milliseconds), ignoring further interrupts.

    Its threads still write into memory that unwinding the first exception may free; that
    exception is already on its way, a second Ctrl-C adds nothing.
    """
    while True:
        try:
            done.wait()
            return
        except BaseException:
            pass


def _error(lib: Lib, rc: int, name: str) -> Exception:
    if rc == lib.PYAMX_ENGINE_E_NOMEM:
        return MemoryError(f"engine {name}: could not allocate the packed operands")
    if rc == lib.PYAMX_ENGINE_E_CANCELLED:  # only an interrupted call cancels, and it raises that instead
        return RuntimeError(f"engine {name}: the call was cancelled")
    if rc == lib.PYAMX_ENGINE_E_UNAVAILABLE:
        return EngineUnavailableError(f"engine {name} cannot run here: {_compiled_status(name)[1]}")
    return ValueError(f"engine {name}: the C engine refused the arguments (status {rc})")


_engines: dict[str, Engine] = {}
# (name or env value) -> Engine, for the default numerics: the per-call fast path
_resolved: dict[str | None, Engine] = {}


def _concrete(name: str, source: str) -> Engine:
    engine = _engines.get(name)
    if engine is None:
        if name in _KINDS:
            available, reason = _compiled_status(name)
            if not available:
                raise EngineUnavailableError(
                    f"the {name} engine was requested ({source}) but cannot run here: {reason}. "
                    f"Run `pyamx info` for the engines this build and CPU offer; use engine='auto' "
                    f"(or unset {ENV_VAR}) to take the best one."
                )
        engine = _engines[name] = Engine(name)
    return engine


def choose_engine(name: str | None = None, numerics: str | Numerics = "sdm", op: str | None = None) -> Engine:
    """The engine a call runs on, decided once per name for the default numerics and then kept
    (until :func:`reset_environment`). ``name``: None (``PYAMX_ENGINE``, default auto) or one of :data:`NAMES`.

    ``numerics`` (a preset name or :class:`~pyamx.Numerics`): compiled
    engines implement only the default ``"sdm"``; for other numerics
    ``auto`` and ``PYAMX_ENGINE`` give ``numpy``, a compiled engine named
    by the ``name`` argument raises ValueError. ``op``: the dot product the
    engine is for, where known; one no compiled engine implements
    (:data:`NUMPY_ONLY`; empty while every group is compiled) gets ``numpy`` in the same way.
    """
    if NUMPY_ONLY and op in NUMPY_ONLY:
        return numpy_for(op, name, numerics)
    key = name
    if numerics == "sdm" if isinstance(numerics, str) else numerics is _SDM:
        engine = _resolved.get(key)
        if engine is not None:
            return engine
        with LOCK:  # the extension's loading, once: not to be split by a fork (pyamx._first_use)
            engine = _resolved[key] = _resolve(name, _SDM)
        return engine
    return _resolve(name, numerics)


def numpy_for(op: str, name: str | None = None, numerics: str | Numerics = "sdm") -> Engine:
    """The numpy engine for ``op``, which no compiled engine implements: ``auto`` and
    ``PYAMX_ENGINE`` give it; naming a compiled engine for ``op`` raises ValueError."""
    from .._numerics_rule import resolve as resolve_numerics

    if name is not None and parse_name(name, "engine") in _KINDS:
        insn = isa.get(op)
        raise ValueError(
            f"the {name} engine does not implement {insn.mnemonic} ({insn.feature.name}): only the numpy "
            "engine computes it; use engine='numpy' or 'auto'"
        )
    return Engine("numpy", resolve_numerics(numerics))


def variable() -> str:
    """The engine ``PYAMX_ENGINE`` names, read once and then kept (a bad value raises
    EnvironmentVariableError at every call, and is never kept)."""
    name = _env.get("name")
    if name is None:
        name = _env["name"] = requested()
    return name


def _resolve(name: str | None, numerics: str | Numerics) -> Engine:
    from .. import _numerics_rule

    from_env = name is None
    if name is None:
        name = variable()
        source = f"{ENV_VAR}={name}"
    else:
        source = f"engine={name!r}"
        name = parse_name(name, "engine")
    numerics = _numerics_rule.resolve(numerics)
    default = _numerics_rule.compiled_runs(numerics)
    # PYAMX_ENGINE chooses the engine of the default numerics (the only ones
    # compiled engines run): other numerics keep running on numpy under it.
    if name == "numpy" or (not default and (name == "auto" or from_env)):
        return Engine("numpy", numerics)
    if not default:
        raise ValueError(
            f"the {name} engine ({source}) implements only the default 'sdm' numerics, not {numerics.name!r}; "
            "use engine='numpy' (or 'auto') for the other numerics options"
        )
    if name == "auto":
        cached = _engines.get("auto")
        if cached is None:
            for candidate in _KINDS:
                if _compiled_status(candidate)[0]:
                    cached = _concrete(candidate, source)
                    break
            else:
                cached = Engine("numpy", numerics)
            _engines["auto"] = cached
        return cached
    return _concrete(name, source)


_SDM = _sdm()


resolve = choose_engine  # the name pyamx's tools and tests have long called it by
