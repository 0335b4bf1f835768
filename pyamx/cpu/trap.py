"""The trap-and-emulate test mode: the native code path on a CPU without AMX.

With ``PYAMX_TRAP_EMULATION=1`` the native start (pyamx.cpu._native_start, at the backend
choice) calls :func:`enable`,
which installs a SIGILL handler written in C (the extension module
``pyamx._trap``, built from ``csrc/trap/``). Every AMX instruction that
``pyamx._native`` executes then raises #UD, and the handler decodes it,
performs it on a per-thread emulated tile state and resumes after it.
Results therefore prove the extension's compiled code -- its addressing,
its tile configurations, its instruction sequence -- but not the hardware.
Faults behave as on silicon: an illegal LDTILECFG kills the process with
SIGSEGV, a #UD case (shape mismatch, unconfigured tile, missing permission)
with SIGILL. See docs/trap.md.

The mode is never on by default and is refused on a CPU with usable AMX,
so real and emulated tile state can never mix.

The two modules are joined by one hook: :func:`enable` hands the addresses
of ``pyamx_trap_grant_permission`` and ``pyamx_trap_thread_prepare`` to
``pyamx._native``'s ``pyamx_set_trap_hook``, so the native permission
request asks the trap for its emulated grant instead of calling
``arch_prctl``, and native worker threads claim their emulated tile state.

What the bindings do in this mode (all cheap, all idempotent):

* once, after :func:`enable`: request permission as usual (until then
  every tile instruction dies with SIGILL);
* before each native entry: :func:`ensure_installed` (a no-op while the
  guard is active; otherwise reinstalls the handler if faulthandler or
  anyone else replaced it) and, on each thread, :func:`thread_prepare`
  (frees the thread's emulated tile state when the thread exits; without
  it the state is reclaimed lazily).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import TYPE_CHECKING, NamedTuple, Optional

from .. import _env
from ..table import isa
from ._nativelib import load_trap as _load  # the one loader of the compiled modules (cached)
from ..errors import BackendError, EnvironmentVariableError

if TYPE_CHECKING:
    from ._nativelib import FFI, Lib

ENV_VAR = "PYAMX_TRAP_EMULATION"
#: ``0`` leaves out the seccomp guard (its cost: some tens of ns on every system call of the process)
GUARD_ENV = "PYAMX_TRAP_GUARD"

# Kernel groups the handler emulates (the names pyamx.cpu.detect uses): every dot-product row
# (csrc/trap/isa/semantics.c, fp8_dot.c).
_KERNELS = frozenset(isa.GROUPS)


def requested() -> bool:
    """Whether ``PYAMX_TRAP_EMULATION`` asks for the mode (strict parsing, see :mod:`pyamx._env`).

    Unset, empty or false (``0``, ``false``, ``no``): False; true
    (``1``, ``true``, ``yes``): True; any other value raises
    :class:`~pyamx.errors.EnvironmentVariableError` (a BackendError),
    because a typo must not silently run the tests against the emulator
    instead of the native path.
    """
    return _env.flag(ENV_VAR, False, error=EnvironmentVariableError)


def guard_wanted() -> bool:
    """Whether ``PYAMX_TRAP_GUARD`` (default on) asks for the guard; strict like every ``PYAMX_*`` flag.

    Off, the handler stays installed against libc's ``sigaction``/``signal``
    only through the reinstall before each native entry (and, under ``pyamx
    run``, the preload's interposed functions); a raw ``rt_sigaction(SIGILL)``
    system call then displaces it. On, every system call of the process pays
    the filter (docs/run.md, "The guard").
    """
    return _env.flag(GUARD_ENV, True, error=EnvironmentVariableError)


def _lib() -> Lib:
    """The cffi ``lib`` of pyamx._trap, or BackendError saying why not."""
    try:
        return _load()[1]
    except ImportError as exc:
        raise BackendError(f"the trap mode is unavailable: {exc}") from exc


def _platform_reason() -> Optional[str]:
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        return f"the trap mode needs x86-64 Linux; this is {sys.platform}/{platform.machine()}"
    return None


def _native() -> tuple[FFI, Lib]:
    """``(ffi, lib)`` of pyamx._native, whose kernels the trap mode exists to run."""
    from . import _nativelib

    try:
        return _nativelib.load()
    except ImportError as exc:
        raise BackendError(f"the trap mode needs the C extension pyamx._native: {exc}") from exc


def _hook_into_native(lib: Lib) -> None:
    """The one link between the modules: native's permission request calls the trap's grant.

    The addresses cross between the two modules' cffi instances as integers.
    """
    nffi, nlib = _native()
    tffi = _load()[0]

    def address(name: str) -> int:
        return int(tffi.cast("uintptr_t", tffi.addressof(lib, name)))

    nlib.pyamx_set_trap_hook(nffi.cast("int (*)(void)", address("pyamx_trap_grant_permission")),
                             nffi.cast("int32_t (*)(void)", address("pyamx_trap_thread_prepare")))


def enable() -> None:
    """Install the SIGILL handler and its guard; BackendError with the reason if impossible.

    Refused when this is not x86-64 Linux, an extension is missing, or the
    CPU has usable AMX (CPUID.7.0:EDX bit 24 and XCR0 bits 17 and 18):
    there the real instructions must run. A guard that cannot be installed
    is not an error (see :func:`guard`). Idempotent.
    """
    reason = _platform_reason()
    if reason:
        raise BackendError(reason)
    with_guard = guard_wanted()
    lib = _lib()
    _native()
    if lib.pyamx_trap_cpu_has_amx():
        raise BackendError(
            "refusing the trap mode: this CPU has usable AMX (CPUID.7.0:EDX[24] AMX-TILE set and "
            "XCR0 bits 17/18 enabled); the native path must run on the silicon here"
        )
    rc = lib.pyamx_trap_install()
    if rc != 0:
        ffi = _load()[0]
        raise BackendError(f"the trap mode cannot be installed: {ffi.string(lib.pyamx_trap_strerror(rc)).decode()}")
    if with_guard:
        lib.pyamx_trap_guard_install()
    _hook_into_native(lib)


def complement() -> tuple[str, ...]:
    """On AMX silicon, emulate in this process the AMX extensions the CPU lacks; their feature names.

    Installs the complement mode (docs/run.md, "On AMX silicon: the complement
    mode"): the CPU runs its own AMX instructions and the kernel grants the
    permission, and the SIGILL of an instruction of a missing extension
    (AMX-FP16, AMX-COMPLEX, AMX-FP8, AMX-AVX512, AMX-MOVRS on a Sapphire
    Rapids) is emulated on the tile registers the kernel saved in the signal
    frame. pyamx's native kernels of those extensions may then run; their
    results say ``native (complement mode)``. Returns the CPUID feature names
    emulated, () where the CPU has every extension pyamx knows; BackendError
    without usable AMX (:func:`enable` is the mode there) or where it cannot
    be installed. Idempotent.
    """
    reason = _platform_reason()
    if reason:
        raise BackendError(reason)
    ffi, lib = _load_or_backend_error()
    if not lib.pyamx_trap_cpu_has_amx():
        raise BackendError("the complement mode needs usable AMX silicon; without it the trap mode "
                           "(pyamx.cpu.trap.enable) emulates every AMX instruction")
    if not lib.pyamx_trap_complementing():
        rc = lib.pyamx_trap_install_complement()
        if rc == lib.PYAMX_TRAP_E_HAS_AMX:
            return ()
        if rc != 0:
            raise BackendError(f"the complement mode cannot be installed: {ffi.string(lib.pyamx_trap_strerror(rc)).decode()}")
    try:
        _native()[1].pyamx_set_complemented(1)
    except BackendError:
        pass  # no pyamx._native: other modules' instructions are still emulated
    return _complemented_features(lib)


def _complemented_features(lib: Lib) -> tuple[str, ...]:
    """The CPUID features whose instructions the installed complement mode emulates."""
    return tuple(dict.fromkeys(insn.feature.name for insn in isa.TABLE
                               if lib.pyamx_trap_complement_emulates(getattr(lib, insn.c_op))))


class GuardStatus(NamedTuple):
    """Whether seccomp keeps the handler installed (see docs/trap.md, "Other SIGILL handlers")."""

    active: bool
    reason: str
    answered: int  # sigaction(SIGILL) calls of other code the guard answered


def guard() -> GuardStatus:
    """The state of the guard that keeps other code from replacing the handler."""
    try:
        ffi, lib = _load()
    except ImportError as exc:
        return GuardStatus(False, str(exc), 0)
    return GuardStatus(
        lib.pyamx_trap_guard_state() == lib.PYAMX_TRAP_GUARD_ACTIVE,
        ffi.string(lib.pyamx_trap_guard_reason()).decode(),
        int(lib.pyamx_trap_guard_calls()),
    )


def active() -> bool:
    """True while the handler is installed and is the current SIGILL disposition."""
    try:
        lib = _lib()
    except BackendError:
        return False
    return bool(lib.pyamx_trap_active())


def complementing() -> bool:
    """True while this process runs in the complement mode (:func:`complement`, or
    :func:`emulate_process` on AMX silicon lacking some extensions), whatever the SIGILL disposition."""
    try:
        lib = _lib()
    except BackendError:
        return False
    return bool(lib.pyamx_trap_complementing())


def ensure_installed() -> bool:
    """Reinstall the handler if it was replaced; True if it had to. Call before native entries."""
    rc: int = _lib().pyamx_trap_ensure_installed()
    if rc < 0:
        raise BackendError("the trap mode is not enabled; call pyamx.cpu.trap.enable() first")
    return rc == 1


def thread_prepare() -> None:
    """Claim this thread's emulated tile state from normal context (see module doc)."""
    lib = _lib()
    rc = lib.pyamx_trap_thread_prepare()
    if rc == lib.PYAMX_TRAP_E_TABLE_FULL:
        raise BackendError(
            f"the trap mode's per-thread tile state table is full ({lib.PYAMX_TRAP_MAX_THREADS} live threads)"
        )
    if rc < 0:
        raise BackendError("the trap mode is not enabled; call pyamx.cpu.trap.enable() first")


def grant_permission() -> None:
    """The emulated ``arch_prctl(ARCH_REQ_XCOMP_PERM)``; normally done by the C permission code."""
    if _lib().pyamx_trap_grant_permission() != 0:
        raise BackendError("the trap mode is not enabled; call pyamx.cpu.trap.enable() first")


def trapped_count() -> int:
    """How many AMX instructions were trapped and emulated in this process."""
    return int(_lib().pyamx_trap_count())


def op_counts() -> dict[str, int]:
    """Trapped instructions per mnemonic (only those seen)."""
    ffi, lib = _load()
    out: dict[str, int] = {}
    for op in (getattr(lib, insn.c_op) for insn in isa.TABLE):
        n = int(lib.pyamx_trap_op_count(op))
        if n:
            out[ffi.string(lib.pyamx_trap_op_name(op)).decode()] = n
    return out


def supported_kernels() -> frozenset[str]:
    """The kernel groups whose instructions the handler emulates."""
    return _KERNELS


# -- the whole process: other code's AMX too (docs/run.md, "Python processes") --


def _preload_active() -> bool:
    """Whether ``pyamx run``'s preload library is in this process with its handler in place."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).pyamx_preload_active
    except (AttributeError, OSError):
        return False
    fn.restype = ctypes.c_int
    return bool(fn())


def emulate_process() -> str:
    """Emulate AMX for everything in this process, other extension modules included.

    Installs the trap mode (:func:`enable`'s handler and guard; the hook into
    ``pyamx._native`` too when it is built) and the emulated kernel interface
    that other code uses to ask for AMX: ``arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)``, ``ARCH_GET_XCOMP_PERM`` and ``ARCH_GET_XCOMP_SUPP``
    answer as a kernel with AMX would, however they are called (the guard's
    seccomp listener, else a seccomp filter and SIGSYS handler; see
    csrc/trap/guard/xcomp_permission.c). A module's tile
    instruction before its own permission request still dies with SIGILL,
    as on silicon. Cannot be undone; sets ``PR_SET_NO_NEW_PRIVS``. Idempotent.

    Returns ``"silicon"`` where the CPU has usable AMX and every AMX
    extension pyamx knows (nothing is installed: the real instructions
    run), ``"complement"`` where it has usable AMX but lacks some extensions
    (AMX-FP8, AMX-COMPLEX, AMX-MOVRS on a Sapphire Rapids): the real
    instructions and the real kernel interface run, and only the missing
    extensions' instructions are emulated, on the tile registers the kernel
    saved in the signal frame (docs/run.md), ``"preload"`` under ``pyamx
    run`` (its library already does all of it), ``"emulated"`` otherwise;
    :class:`~pyamx.errors.BackendError` with the reason where it is
    impossible. Code that checks CPUID or XGETBV itself still sees no AMX.
    """
    reason = _platform_reason()
    if reason:
        raise BackendError(reason)
    with_guard = guard_wanted()
    ffi, lib = _load_or_backend_error()
    if _preload_active():
        return "preload"
    if lib.pyamx_trap_cpu_has_amx():
        if lib.pyamx_trap_complementing():
            return "complement"
        rc = lib.pyamx_trap_install_complement()
        if rc == lib.PYAMX_TRAP_E_HAS_AMX:
            return "silicon"
        if rc != 0:
            raise BackendError(f"the complement mode cannot be installed: "
                               f"{ffi.string(lib.pyamx_trap_strerror(rc)).decode()}")
        _preload_for_children()
        return "complement"
    rc = lib.pyamx_trap_install()
    if rc != 0:
        raise BackendError(f"AMX emulation cannot be installed: {ffi.string(lib.pyamx_trap_strerror(rc)).decode()}")
    if with_guard:
        lib.pyamx_trap_guard_install()
    try:
        _hook_into_native(lib)
    except BackendError:
        pass  # no pyamx._native: other modules' AMX code is still emulated
    err = lib.pyamx_trap_xcomp_install()
    if err:
        raise BackendError(f"the AMX permission request (arch_prctl) cannot be emulated in this process: "
                           f"{os.strerror(err)} (needs seccomp filters; a container may forbid them)")
    _preload_for_children()
    return "emulated"


def _preload_for_children() -> None:
    """Programs this process execs are emulated too: ``pyamx run``'s preload joins LD_PRELOAD.

    They inherit the seccomp filters but not the handlers (exec replaces them):
    without the preload, a child that asks arch_prctl about AMX (a Python
    importing pyamx, a multiprocessing spawn worker) died of SIGSYS. A child the
    loader does not preload (a static or setuid program) still does
    (docs/run.md, "What differs from silicon").
    """
    from ..tools import run

    try:
        preload = run.preload_file()
    except run.RunError:
        return
    current = os.environ.get("LD_PRELOAD", "")
    if preload not in current.replace(":", " ").split():
        os.environ["LD_PRELOAD"] = run.environment(preload, base={"LD_PRELOAD": current})["LD_PRELOAD"]


def process_emulated() -> bool:
    """True when :func:`emulate_process` (or ``pyamx run``) emulates AMX for all code in this process."""
    if _preload_active():
        return True
    try:
        lib = _load()[1]
    except ImportError:
        return False
    return bool(lib.pyamx_trap_active() and lib.pyamx_trap_xcomp_active())


def _load_or_backend_error() -> tuple[FFI, Lib]:
    try:
        return _load()
    except ImportError as exc:
        raise BackendError(f"AMX emulation is unavailable: {exc}") from exc


#: what each answer of emulate_process() means, for a line a user reads (the pytest plugin's header)
_EMULATION_WORDS = {
    "silicon": "silicon: the CPU runs every AMX extension pyamx knows; nothing is emulated",
    "preload": "emulated by pyamx run's preload library for this whole process",
    "emulated": "emulated by pyamx for this whole process (the CPU has no usable AMX)",
}


def describe_emulation(how: str) -> str:
    """What ``how`` (an answer of :func:`emulate_process`) means, in words: in the complement mode,
    which extensions are emulated ("silicon, with AMX-FP16, AMX-FP8 emulated (complement mode)")."""
    if how != "complement":
        return _EMULATION_WORDS.get(how, how)
    try:
        features = _complemented_features(_load_or_backend_error()[1])
    except BackendError:
        features = ()
    emulated = ", ".join(features) if features else "the AMX extensions this CPU lacks"
    return f"silicon, with {emulated} emulated by pyamx (complement mode)"
