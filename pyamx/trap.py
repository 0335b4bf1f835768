"""The trap-and-emulate test mode: the native code path on a CPU without AMX.

With ``PYAMX_TRAP_EMULATION=1`` the detection code calls :func:`enable`,
which installs a SIGILL handler written in C (``csrc/trap.c``). Every AMX
instruction the extension executes then raises #UD, and the handler decodes
it, performs it on a per-thread emulated tile state and resumes after it.
Results therefore prove the extension's compiled code -- its addressing,
its tile configurations, its instruction sequence -- but not the hardware.
Faults behave as on silicon: an illegal LDTILECFG kills the process with
SIGSEGV, a #UD case (shape mismatch, unconfigured tile, missing permission)
with SIGILL. See docs/trap.md.

The mode is never on by default and is refused on a CPU with usable AMX,
so real and emulated tile state can never mix.

What the bindings do in this mode (all cheap, all idempotent):

* once, after :func:`enable`: request permission as usual; the C
  permission code calls ``pyamx_trap_grant_permission()`` instead of
  ``arch_prctl`` (until then every tile instruction dies with SIGILL);
* before each native entry: :func:`ensure_installed` (reinstalls the
  handler if faulthandler or anyone else replaced it) and, on each thread,
  :func:`thread_prepare` (frees the thread's emulated tile state when the
  thread exits; without it the state is reclaimed lazily).
"""

from __future__ import annotations

import os
import platform
import sys

from . import isa
from .errors import BackendError

ENV_VAR = "PYAMX_TRAP_EMULATION"
_ALLOWED = {"0": False, "1": True}

# Instruction families the handler emulates (the names pyamx.detect uses).
_KERNELS = frozenset(isa.FAMILIES)


def requested() -> bool:
    """Whether ``PYAMX_TRAP_EMULATION`` asks for the mode (strict parsing).

    Unset or ``"0"``: False; ``"1"``: True; any other value raises
    :class:`~pyamx.errors.BackendError`, because a typo must not silently
    run the tests against the emulator instead of the native path.
    """
    value = os.environ.get(ENV_VAR)
    if value is None:
        return False
    if value in _ALLOWED:
        return _ALLOWED[value]
    raise BackendError(
        f"{ENV_VAR}={value!r} is not understood; allowed values are '1' (trap and emulate "
        f"AMX instructions), '0' or unset (off)"
    )


def _lib():
    """The cffi ``lib`` of pyamx._native, or BackendError saying why not."""
    try:
        from . import _nativelib
    except ModuleNotFoundError:
        _nativelib = None
    try:
        if _nativelib is not None:
            _, lib = _nativelib.load()
        else:
            from ._native import lib
    except ImportError as exc:
        raise BackendError(f"the trap mode needs the C extension pyamx._native: {exc}") from exc
    if not hasattr(lib, "pyamx_trap_install"):
        raise BackendError("this build of pyamx._native has no trap mode (csrc/trap.c was not compiled in)")
    return lib


def _platform_reason():
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        return f"the trap mode needs x86-64 Linux; this is {sys.platform}/{platform.machine()}"
    return None


def enable() -> None:
    """Install the SIGILL handler; BackendError with the reason if impossible.

    Refused when this is not x86-64 Linux, the extension (or its trap part)
    is missing, or the CPU has usable AMX (CPUID.7.0:EDX bit 24 and XCR0
    bits 17 and 18): there the real instructions must run. Idempotent.
    """
    reason = _platform_reason()
    if reason:
        raise BackendError(reason)
    lib = _lib()
    if not lib.pyamx_trap_supported():
        raise BackendError("this build of pyamx._native was not compiled for x86-64 Linux; no trap mode")
    if lib.pyamx_trap_cpu_has_amx():
        raise BackendError(
            "refusing the trap mode: this CPU has usable AMX (CPUID.7.0:EDX[24] AMX-TILE set and "
            "XCR0 bits 17/18 enabled); the native path must run on the silicon here"
        )
    rc = lib.pyamx_trap_install()
    if rc != 0:
        from ._native import ffi

        raise BackendError(f"the trap mode cannot be installed: {ffi.string(lib.pyamx_trap_strerror(rc)).decode()}")


def active() -> bool:
    """True while the handler is installed and is the current SIGILL disposition."""
    try:
        lib = _lib()
    except BackendError:
        return False
    return bool(lib.pyamx_trap_active())


def ensure_installed() -> bool:
    """Reinstall the handler if it was replaced; True if it had to. Call before native entries."""
    rc = _lib().pyamx_trap_ensure_installed()
    if rc < 0:
        raise BackendError("the trap mode is not enabled; call pyamx.trap.enable() first")
    return rc == 1


def thread_prepare() -> None:
    """Claim this thread's emulated tile state from normal context (see module doc)."""
    lib = _lib()
    rc = lib.pyamx_trap_thread_prepare()
    if rc == lib.PYAMX_TRAP_E_TABLE_FULL:
        raise BackendError("the trap mode's per-thread tile state table is full (256 live threads)")
    if rc < 0:
        raise BackendError("the trap mode is not enabled; call pyamx.trap.enable() first")


def grant_permission() -> None:
    """The emulated ``arch_prctl(ARCH_REQ_XCOMP_PERM)``; normally done by the C permission code."""
    if _lib().pyamx_trap_grant_permission() != 0:
        raise BackendError("the trap mode is not enabled; call pyamx.trap.enable() first")


def trapped_count() -> int:
    """How many AMX instructions were trapped and emulated in this process."""
    return int(_lib().pyamx_trap_count())


def op_counts() -> dict:
    """Trapped instructions per mnemonic (only those seen)."""
    lib = _lib()
    from ._native import ffi

    from . import isa

    out = {}
    for op in (insn.op_id for insn in isa.TABLE):
        n = int(lib.pyamx_trap_op_count(op))
        if n:
            out[ffi.string(lib.pyamx_trap_op_name(op)).decode()] = n
    return out


def supported_kernels() -> frozenset:
    """The kernel families whose instructions the handler emulates."""
    return _KERNELS
