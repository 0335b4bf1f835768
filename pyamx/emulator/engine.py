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

The AMX-FP8 rows run on the compiled engines through their own C entry
(csrc/engine_fp8.c: exact double sums, an integer path where a block's
exponent span is too wide; docs/engine.md, "AMX-FP8").
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

import os
import signal
import threading

import numpy as np

from .. import _env as env_parser  # the one PYAMX_* parser (this module's own _env caches what it said)
from ..table import isa
from .._first_use import LOCK, module
from .._fpenv import default_fpenv
from .._validate import contiguous_bits
from ..errors import BackendError, EnvironmentVariableError, UnknownBackendError

ENV_VAR = "PYAMX_ENGINE"
THREADS_ENV_VAR = env_parser.ENGINE_THREADS
NAMES = ("auto", "avx512", "avx2", "portable", "numpy")
#: compiled variants, best first (auto's order of preference), with their C kind names
_KINDS = {"avx512": "PYAMX_ENGINE_AVX512", "avx2": "PYAMX_ENGINE_AVX2", "portable": "PYAMX_ENGINE_PORTABLE"}
_SIMD = {"avx512": "AVX-512", "avx2": "AVX2+FMA", "portable": "none (plain C)", "numpy": "numpy"}
#: op name -> (values per dword, float op), from the instruction table
OPS = {insn.name: (insn.lanes, insn.is_float) for insn in isa.DOTS}
#: kernel groups the compiled engines implement (csrc/engine.c, and csrc/engine_fp8.c for
#: "fp8"); a row of any other group runs on the numpy engine only
COMPILED_GROUPS = frozenset({"bf16", "fp16", "int8", "complex", "fp8"})
#: groups with their own C entry (pyamx_engine_fp8: fp8 codes, k values, exact sums)
_FP8_GROUPS = frozenset({"fp8"})
FP8_OPS = frozenset(insn.name for insn in isa.DOTS if insn.group in _FP8_GROUPS)
NUMPY_ONLY = frozenset(insn.name for insn in isa.DOTS if insn.group not in COMPILED_GROUPS)
BLOCK_DWORDS = 16  # K dwords per tile instruction (tmul_maxk)


def _sdm():
    from .._numerics_rule import default

    return default()


class EngineUnavailableError(BackendError):
    """An engine was asked for by name but cannot run here (not built, or this CPU/OS lacks it)."""


def parse_name(value, source: str) -> str:
    """Validate an engine name; ``source`` says where it came from, for the message."""
    if value not in NAMES:
        raise UnknownBackendError(f"{source} is {value!r}; it must be one of {', '.join(NAMES)}")
    return value


def requested() -> str:
    """The engine ``PYAMX_ENGINE`` asks for (unset or empty: ``auto``)."""
    return env_parser.choice(ENV_VAR, NAMES, "auto", error=EnvironmentVariableError)


def _usable_cpus() -> int:
    """The CPUs this process may run on (affinity and cpusets count, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_CPU_COUNT = _usable_cpus()  # read once: it costs microseconds per call
#: more threads than this never help (the C side also caps by work); it keeps any int within C's int
MAX_THREADS = 256
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
_env: dict = {}


#: Counts reset_environment() calls: the backend choices kept per call arguments (pyamx._backend)
#: are made again when it changes.
settings_generation = 0


def reset_environment() -> None:
    """Forget what PYAMX_ENGINE / PYAMX_ENGINE_THREADS said: the next call reads them again, and
    every engine and backend choice kept for the calls is made again."""
    global settings_generation
    _env.clear()
    _resolved.clear()
    settings_generation += 1


def thread_default() -> int:
    """What ``threads=None`` means (:func:`default_threads`), read once and kept until
    :func:`reset_environment`: the one default of the engines and the native matmul."""
    threads = _env.get("threads")
    if threads is None:
        threads = _env["threads"] = default_threads()
    return threads


_threads_default = thread_default


def default_threads() -> int:
    """``PYAMX_ENGINE_THREADS`` (a positive integer) when set and not empty, else the usable CPUs.

    The default of every ``threads=None`` in pyamx (engines and the native matmul kernels). A
    machine with more CPUs than :data:`MAX_THREADS` gets that many; a variable asking for more is
    refused, as ``threads=`` is (:func:`check_threads`).
    """
    value = env_parser.integer(THREADS_ENV_VAR, _CPU_COUNT, minimum=1, error=EnvironmentVariableError)
    if env_parser.raw(THREADS_ENV_VAR) is not None and value > MAX_THREADS:
        raise EnvironmentVariableError(THREADS_ENV_VAR, str(value),
                                       f"a decimal integer from 1 to {MAX_THREADS} (more never helps), "
                                       f"or empty/unset for the usable CPUs")
    return min(value, MAX_THREADS)


def check_threads(threads, fn: str = "threads"):
    """``threads=`` as every pyamx function takes it: None, or an integer from 1 to :data:`MAX_THREADS`
    (returned as an int); ValueError naming ``fn`` otherwise. More is refused rather than capped:
    a caller who asked for 1000 threads would otherwise be told nothing of running 256."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"{fn}: threads must be None or an integer from 1 to {MAX_THREADS}, not {threads!r}")
    if threads > MAX_THREADS:
        raise ValueError(f"{fn}: threads={int(threads)} is more than pyamx runs: at most {MAX_THREADS} "
                         f"(more never helps); pass a count from 1 to {MAX_THREADS}, or None for the default")
    return int(threads)


def _lib():
    """``(ffi, lib)`` of the extension, or None when it is not built."""
    try:
        from ..cpu._nativelib import load

        return load()
    except ImportError:
        return None


def _compiled_status(name: str):
    """``(available, reason)`` of a compiled variant."""
    loaded = _lib()
    if loaded is None:
        return False, "the C extension pyamx._native is not built"
    ffi, lib = loaded
    if not hasattr(lib, "pyamx_engine_dot"):
        return False, "this build of pyamx._native has no compiled engine"
    kind = getattr(lib, _KINDS[name])
    reason = ffi.string(lib.pyamx_engine_reason(kind)).decode()
    return bool(lib.pyamx_engine_available(kind)), reason


def available_engines() -> list:
    """``[(name, available, reason), ...]`` for every concrete engine, best first (for ``pyamx info``)."""
    rows = [(name, *_compiled_status(name)) for name in _KINDS]
    rows.append(("numpy", True, "always available; the only engine of non-default numerics"))
    return rows


def describe() -> dict:
    """The default engine, its SIMD level and thread count, and every engine's availability (``pyamx info``)."""
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


def describe_lines() -> list:
    """:func:`describe` as text lines."""
    info = describe()
    head = (f"emulator engine: {info['default']} ({info['simd']}), threads: {info['threads']}"
            if info["error"] is None else f"emulator engine: none ({info['error']})")
    rows = [f"  {'[ok  ]' if e['available'] else '[    ]'} {e['name']:<9} {e['reason']}" for e in info["engines"]]
    return [head, *rows]


class Engine:
    """One engine. ``name`` (``"avx512"``, ..., ``"numpy"``), ``simd`` (the instruction set it uses)."""

    def __init__(self, name: str, numerics=None):
        self.name = name
        self.simd = _SIMD[name]
        self.compiled = name in _KINDS
        self._numerics = numerics  # the numpy engine's Numerics
        if self.compiled:
            self._ffi, self._lib = _lib()
            self._kind = getattr(self._lib, _KINDS[name])
            # Rows the build has an id for: a table row newer than the build must not break the others.
            self._op_ids = {insn.name: getattr(self._lib, insn.c_op) for insn in isa.DOTS
                            if hasattr(self._lib, insn.c_op)}
            self._quick_macs = _UNINTERRUPTED_MACS[name]

    def __repr__(self):
        return f"<pyamx engine {self.name} ({self.simd})>"

    def dot(self, op_name: str, c_bits: np.ndarray, a: np.ndarray, b_vnni: np.ndarray, k_dwords=None, threads=None):
        """``C`` after the instruction schedule over all K, as a new (M, N) array.

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
        threads = check_threads(threads, op_name)
        if not self.compiled:
            return self._numpy_dot(op_name, is_float, c_bits, a, b_vnni, kd, threads)
        return self._compiled_dot(op_name, is_float, c_bits, a, b_vnni, m, n, kd, threads)

    def _compiled_dot(self, op_name, is_float, c, a, b, m, n, kd, threads):
        ffi, lib = self._ffi, self._lib
        if c.dtype != np.uint32:
            c = c.view(np.uint32)
        if not c.flags.c_contiguous:
            c = np.ascontiguousarray(c)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if not b.flags.c_contiguous:
            b = np.ascontiguousarray(b)
        out = np.empty((m, n), dtype=np.uint32)
        if threads is None:
            threads = _threads_default()
        if op_name in FP8_OPS:
            rc = self._call(lib.pyamx_engine_fp8, m * n * a.shape[1], threads, (
                self._kind, self._op_ids[op_name], ffi.from_buffer(a), a.shape[1], ffi.from_buffer(b), b.shape[1],
                0, ffi.from_buffer("uint32_t[]", c), n, ffi.from_buffer("uint32_t[]", out), n,
                m, n, a.shape[1], threads,
            ))
            if rc:
                raise _error(lib, rc, self.name)
            return out
        rc = self._call(lib.pyamx_engine_dot_cancellable, m * n * a.shape[1], threads, (
            self._kind, self._op_ids[op_name],
            # Row pitch from the shape, not strides[0]: numpy reports any stride for a size-1 axis.
            ffi.from_buffer(a), a.shape[1] * a.itemsize, ffi.from_buffer(b), b.shape[1] * b.itemsize,
            ffi.from_buffer("uint32_t[]", c), n, ffi.from_buffer("uint32_t[]", out), n,
            m, n, kd, threads,
        ))
        if rc:
            raise _error(lib, rc, self.name)
        return out if is_float else out.view(np.int32)

    def matmul(self, op_name: str, a: np.ndarray, b: np.ndarray, c_bits=None, threads=None):
        """``pyamx.matmul``'s schedule on row-major operands, packed inside C (compiled engines only).

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
        threads = check_threads(threads, op_name)
        if threads is None:
            threads = _threads_default()
        ffi, lib = self._ffi, self._lib
        # C-contiguous and aligned (the C side reads 16-bit values in place)
        a, b = contiguous_bits(a), contiguous_bits(b)
        if c_bits is None:
            c_ptr, ldc = ffi.NULL, n
        else:
            c_bits = contiguous_bits(c_bits.view(np.uint32) if c_bits.dtype != np.uint32 else c_bits)
            c_ptr, ldc = ffi.from_buffer("uint32_t[]", c_bits), n
        out = np.empty((m, n), dtype=np.uint32)
        if op_name in FP8_OPS:  # K need not be whole dwords: the C side reads k values and pads with zeros
            rc = self._call(lib.pyamx_engine_fp8, m * n * k, threads, (
                self._kind, self._op_ids[op_name], ffi.from_buffer(a), a.shape[1], ffi.from_buffer(b), b.shape[1],
                1, c_ptr, ldc, ffi.from_buffer("uint32_t[]", out), n, m, n, k, threads,
            ))
            if rc:
                raise _error(lib, rc, self.name)
            return out
        rc = self._call(lib.pyamx_engine_matmul_cancellable, m * n * k, threads, (
            self._kind, self._op_ids[op_name],
            ffi.from_buffer(a), a.shape[1] * a.itemsize, ffi.from_buffer(b), b.shape[1] * b.itemsize,
            c_ptr, ldc, ffi.from_buffer("uint32_t[]", out), n, m, n, k, threads,
        ))
        if rc:
            raise _error(lib, rc, self.name)
        return out if is_float else out.view(np.int32)

    def _call(self, entry, macs: int, threads: int, args: tuple) -> int:
        """``entry(*args, cancel, max_exact)``, a compiled entry point: interruptible when it is long.

        Python runs signal handlers only in the main thread, so only there can an
        exception arrive in the middle of a call; short calls are not worth a thread.
        """
        if threading.current_thread() is not threading.main_thread():
            return entry(*args, self._ffi.NULL, -1)
        used = min(threads, _CPU_COUNT)
        if macs < self._quick_macs * used:
            rc = entry(*args, self._ffi.NULL, _UNINTERRUPTED_EXACT_MACS * used)
            if rc != self._lib.PYAMX_ENGINE_E_SLOW:  # else nothing ran: NaN operands make it long
                return rc
        return _call_interruptibly(self._ffi, self._lib, entry, args)

    def tile_call(self, op_name: str):
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
        call, buf = lib.pyamx_engine_dot, ffi.from_buffer
        if op_name in FP8_OPS:
            fp8 = lib.pyamx_engine_fp8

            def run_fp8(a, lda, b, ldb, c, ldc, out, ldout, m, n, kd):
                rc = fp8(kind, op, buf(a), lda, buf(b), ldb, 0, buf("uint32_t[]", c), ldc,
                         buf("uint32_t[]", out), ldout, m, n, 4 * kd, 1, ffi.NULL, -1)
                if rc:
                    raise _error(lib, rc, name)

            return run_fp8

        def run(a, lda, b, ldb, c, ldc, out, ldout, m, n, kd):
            rc = call(kind, op, buf(a), lda, buf(b), ldb, buf("uint32_t[]", c), ldc,
                      buf("uint32_t[]", out), ldout, m, n, kd, 1)
            if rc:
                raise _error(lib, rc, name)

        return run

    @default_fpenv  # every numpy step, and the caller's MXCSR (flags too) restored exactly afterwards
    def _numpy_dot(self, op_name, is_float, c, a, b, kd, threads):
        # the whole schedule at once (pyamx/emulator/dot.py): operands scanned once, every K
        # block per row chunk, the output rows split over ``threads`` (default 1)
        engine_dot = module(".dot", __package__).engine_dot

        return engine_dot(op_name, c, a, b, kd, threads or 1, self._numerics)


def _call_interruptibly(ffi, lib, entry, args: tuple) -> int:
    """``entry(*args, cancel, -1)`` on a helper thread while this (the main) thread waits for it.

    The wait is where signal handlers run. When one raises (KeyboardInterrupt), the call is
    cancelled and the exception leaves only after the engine's threads have stopped: they
    write into the call's own output array, which the caller then drops.
    """
    cancel = ffi.new("int *")
    # Taken once, by the helper as it begins the call or by an interrupted caller first:
    # the caller then knows whether there is a call to wait for (an interrupt can land
    # inside Thread.start(), before or after the thread exists).
    claim = threading.Lock()
    done = threading.Event()
    outcome = []

    def call():
        if not claim.acquire(blocking=False):
            return  # the caller was interrupted before this thread began
        try:
            if _ASYNC_SIGNALS:
                signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
            outcome.append(entry(*args, cancel, -1))
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
            return entry(*args, ffi.NULL, -1)
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


def _error(lib, rc: int, name: str) -> Exception:
    if rc == lib.PYAMX_ENGINE_E_NOMEM:
        return MemoryError(f"engine {name}: could not allocate the packed operands")
    if rc == lib.PYAMX_ENGINE_E_CANCELLED:  # only an interrupted call cancels, and it raises that instead
        return RuntimeError(f"engine {name}: the call was cancelled")
    if rc == lib.PYAMX_ENGINE_E_UNAVAILABLE:
        return EngineUnavailableError(f"engine {name} cannot run here: {_compiled_status(name)[1]}")
    return ValueError(f"engine {name}: the C engine refused the arguments (status {rc})")


_engines: dict = {}
_resolved: dict = {}  # (name or env value) -> Engine, for the default numerics: the per-call fast path


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


def choose_engine(name=None, numerics="sdm", op=None) -> Engine:
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


def numpy_for(op: str, name=None, numerics="sdm") -> Engine:
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


def _resolve(name, numerics) -> Engine:
    from .. import _numerics_rule

    from_env = name is None
    if from_env:
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
