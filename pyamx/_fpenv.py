"""The emulator's arithmetic runs under the default floating-point environment, whatever the caller's.

numpy computes with the thread's SSE control register (MXCSR on x86-64):
under round-toward-zero, or with FTZ/DAZ set (a library built with
-ffast-math sets them when it is loaded), the emulator's float64 steps
(TwoSum, conversions, denormal widening) would give other bits. Every
entry point of the numpy arithmetic is wrapped in :func:`default_fpenv`,
which saves the caller's MXCSR, loads the default (round to nearest even,
no FTZ, no DAZ, every exception masked, flags clear) and restores the
caller's, flags included, on the way out, also when the call raises.

Where the register is reached from, in order of preference:

* ``pyamx._native`` (``pyamx_get_mxcsr``/``pyamx_set_mxcsr``, csrc/fpenv.c);
* without the extension, the C library through ctypes: ``fegetenv`` and
  ``fesetenv`` carry the MXCSR in the last 4 bytes of the 32-byte x86-64
  ``fenv_t`` (glibc and musl lay it out the same way);
* elsewhere (not x86-64): ``fegetround``/``fesetround`` to round to
  nearest; the emulator's arithmetic assumes nothing else there.

Each way is checked once by writing a test value and reading it back; one
that does not hold is not used.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import platform
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes as _ctypes
    from collections.abc import Iterator
    from typing import Any, Callable, Protocol, TypeVar

    _F = TypeVar("_F", bound=Callable[..., Any])

    class _Register(Protocol):
        """One way to reach the register: read it, write it, and say how (for pyamx info)."""

        name: str

        def get(self) -> int: ...

        def set(self, value: int) -> None: ...

#: round to nearest even, no FTZ (bit 15), no DAZ (bit 6), all six exceptions masked, no flags
DEFAULT_MXCSR = 0x1F80
_FLAGS = 0x3F
_X86_64 = platform.machine().lower() in ("x86_64", "amd64")


class _Extension:
    name = "pyamx._native"

    def __init__(self) -> None:
        from .cpu import _nativelib

        _, lib = _nativelib.load()
        if not hasattr(lib, "pyamx_fpenv_supported") or not lib.pyamx_fpenv_supported():
            raise OSError("this build of pyamx._native cannot reach MXCSR")
        self.get = lib.pyamx_get_mxcsr
        self._set = lib.pyamx_set_mxcsr

    def set(self, value: int) -> None:
        if self._set(value) != 0:
            raise ValueError(f"MXCSR value 0x{value:x} has reserved bits set")


def _libm_function(name: str) -> _ctypes._NamedFuncPointer:
    """``name`` from the C math library: libm on glibc, libc itself on musl, or the process's own symbols."""
    import ctypes.util  # here: it loads tempfile and random, whose at-fork hook must not register in a first use

    for library in (None, ctypes.util.find_library("m"), ctypes.util.find_library("c")):
        try:
            function: _ctypes._NamedFuncPointer = getattr(ctypes.CDLL(library), name)
            return function
        except (OSError, AttributeError, TypeError):
            continue
    raise OSError(f"{name} was not found in the C library")


class _LibcFenv:
    """MXCSR through fegetenv/fesetenv: the x86-64 fenv_t ends with it (offset 28)."""

    name = "libc fegetenv/fesetenv"
    _SIZE, _MXCSR_OFFSET = 32, 28

    def __init__(self) -> None:
        self._fegetenv, self._fesetenv = _libm_function("fegetenv"), _libm_function("fesetenv")
        self._local = threading.local()

    def _env(self) -> _ctypes.Array[_ctypes.c_ubyte]:
        env = getattr(self._local, "env", None)
        if env is None:
            env = self._local.env = (ctypes.c_ubyte * self._SIZE)()
        if self._fegetenv(env) != 0:
            raise OSError("fegetenv failed")
        return env

    def get(self) -> int:
        return int.from_bytes(bytes(self._env())[self._MXCSR_OFFSET:], "little")

    def set(self, value: int) -> None:
        if value > 0xFFFF:
            raise ValueError(f"MXCSR value 0x{value:x} has reserved bits set")
        env = self._env()  # the x87 half stays as it is
        ctypes.memmove(ctypes.addressof(env) + self._MXCSR_OFFSET, value.to_bytes(4, "little"), 4)
        if self._fesetenv(env) != 0:
            raise OSError("fesetenv failed")


class _LibcRounding:
    """Not x86-64: only the rounding mode, through fegetround/fesetround."""

    name = "libc fegetround/fesetround"
    _TONEAREST = 0  # FE_TONEAREST on aarch64, arm, ppc, riscv, s390x and x86

    def __init__(self) -> None:
        self.get, self._fesetround = _libm_function("fegetround"), _libm_function("fesetround")

    def set(self, value: int) -> None:
        if self._fesetround(value) != 0:
            raise OSError("fesetround failed")


def _holds(way: _Register, test_value: int) -> bool:
    """Whether writing ``test_value`` reads back as written, and the original value comes back."""
    original = way.get()
    try:
        way.set(test_value)
        ok = way.get() == test_value
    finally:
        way.set(original)
    return ok and way.get() == original


#: the value each kind of register is set to around the arithmetic
DEFAULT = DEFAULT_MXCSR if _X86_64 else _LibcRounding._TONEAREST


@functools.lru_cache(maxsize=None)
def access() -> _Register | None:
    """The way this process reaches the register, or None where there is none (reported by pyamx info)."""
    candidates = (_Extension, _LibcFenv) if _X86_64 else (_LibcRounding,)
    for make in candidates:
        try:
            way = make()
            if not _X86_64 or _holds(way, DEFAULT_MXCSR | 0x6000 | 0x8040):  # RZ, FTZ, DAZ
                return way
        except (ImportError, OSError, AttributeError, ValueError):
            continue
    return None


def _enter() -> int | None:
    """Load the default environment; the caller's register value to restore (None: nothing to do)."""
    way = access()  # cached after the first call
    if way is None:
        return None
    saved = way.get()
    if saved != DEFAULT:
        way.set(DEFAULT)
    return saved


def _leave(saved: int | None) -> None:
    if saved is not None:
        way = access()
        assert way is not None  # _enter saved a value, so there is a way
        way.set(saved)  # also when saved was the default: the arithmetic may have raised flags


def default_fpenv(fn: _F) -> _F:
    """Run ``fn`` under the default floating-point environment; the caller's, flags included, comes back."""

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        saved = _enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _leave(saved)

    return guarded  # type: ignore[return-value]  # the same signature: functools.wraps


@contextlib.contextmanager
def default_environment() -> Iterator[None]:
    """:func:`default_fpenv` as a ``with`` block (per thread: each thread has its own register)."""
    saved = _enter()
    try:
        yield
    finally:
        _leave(saved)


def guarded() -> bool:
    """Whether this process can set the environment (else results assume round to nearest)."""
    return access() is not None


def describe() -> str:
    """One line for ``pyamx info``: how the emulator controls the floating-point environment."""
    way = access()
    if way is None:
        return "not controlled (no way to reach it on this platform): results assume round to nearest"
    return f"saved, set to the default and restored around the emulator's arithmetic, via {way.name}"
