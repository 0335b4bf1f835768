"""The native backend's start in this process: the actions that detection's facts allow, once.

Detection (pyamx.cpu.detect) reads and judges and changes nothing. This module acts, once per
process, when the native backend is chosen or asked whether it can run (pyamx._backend's choice,
:func:`pyamx.cpu.native.available`, so before the first native call) or when a diagnostic is asked what
native does here (``pyamx info``, ``pyamx.show_runtime()``, ``pyamx.cpu_features()``, the pytest
plugin's ``amx`` marker):

1. where every silicon stage so far said yes (CPUID, palette, XCR0, the kernel's XCOMP_SUPP): the
   permission request (ARCH_REQ_XCOMP_PERM), then the granted permission read back, then the forked
   child that executes one tile instruction, each only after the one before said yes, so that no tile
   instruction runs in this process before detection and the permission said yes (the C side refuses
   the kernels until the child or the trap's grant said so);
2. where silicon said no and ``PYAMX_TRAP_EMULATION`` asks for it: the trap mode switched on
   (pyamx.trap.enable: its handler, its guard, the hook through which the native permission request
   gets the trap's emulated grant), then that grant;
3. where silicon said yes and the variable asks for it: the complement mode for the AMX extensions the
   CPU lacks (pyamx.trap.complement).

What each action returned goes into detection's table (detect.note_start); the report judges it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional, Tuple

from .._first_use import LOCK
from . import detect

if TYPE_CHECKING:
    from ._nativelib import FFI, Lib


def start() -> None:
    """Run the native start in this process if it has not run (idempotent, under the first-use lock)."""
    if detect.started():
        return
    with LOCK:
        if not detect.started():
            detect.note_start(_outcome(detect.facts()))


def report() -> detect.Report:
    """Detection's report once the native start has run: what native does in this process."""
    start()
    return detect.report()


def _outcome(raw: detect.RawFacts) -> dict[str, object]:
    """Take each action the table allows, in order; what they returned, by RawFacts field."""
    if raw.build is None:  # no extension: nothing to start, nothing to switch on
        return {}
    from . import _nativelib

    ffi, lib = _nativelib.load()  # loaded by the readings already
    if raw.cpuid is not None:  # a build for x86-64 Linux
        raw = _silicon_start(raw, ffi, lib)
    outcome: dict[str, object] = {"perm_request": raw.perm_request, "xcomp_perm": raw.xcomp_perm, "child": raw.child}
    if detect.evaluate(raw).mode is None:
        if raw.trap is not None and raw.trap.pending:
            outcome["trap"] = switch_trap_on(lib)
    else:
        outcome["complement"], outcome["complement_error"] = complement()
    return outcome


def _silicon_start(raw: detect.RawFacts, ffi: FFI, lib: Lib) -> detect.RawFacts:
    """The permission, its read-back and the child, each only where every stage before said yes."""
    if detect.gate_passed(raw):
        raw = replace(raw, perm_request=int(lib.pyamx_request_permission()))
    if raw.perm_request is not None and detect.gate_passed(raw):
        raw = replace(raw, xcomp_perm=detect.read_u64(ffi, lib.pyamx_arch_prctl_get, detect.ARCH_GET_XCOMP_PERM))
    if raw.xcomp_perm is not None and detect.gate_passed(raw):
        status = ffi.new("int *")
        err = lib.pyamx_probe_child(status)
        raw = replace(raw, child=(int(err), int(status[0])))
    return raw


def switch_trap_on(lib: Lib) -> detect.TrapFacts:
    """Enable pyamx.trap, then ask for the permission through its hook (``lib``: pyamx._native's):
    what it did, as detection's TrapFacts."""
    from . import trap

    try:
        trap.enable()
    except Exception as exc:
        return detect.TrapFacts(available=True, requested=True, error=f"{type(exc).__name__}: {exc}")
    err = lib.pyamx_request_permission()  # enable() hooked the trap's emulated grant into this call
    if err != 0:
        return detect.TrapFacts(available=True, requested=True,
                                error=f"the trap mode's emulated permission failed: {detect.errno_name(err)}")
    active = bool(trap.active()) and bool(lib.pyamx_native_ready())
    return detect.TrapFacts(available=True, requested=True, active=active,
                            error=None if active else "the trap mode did not become active",
                            kernels=frozenset(trap.supported_kernels()), guard=trap.guard().reason)


def complement() -> Tuple[Optional[Tuple[str, ...]], Optional[str]]:
    """On silicon, the trap variable asks for the complement mode (the extensions the CPU lacks):
    (the CPUID features it emulates; the error that kept it out, or None)."""
    try:
        from . import trap

        if not trap.requested():
            return None, None
        return trap.complement(), None
    except Exception as exc:  # a bad variable, no trap module, no signal handler: reported, silicon still runs
        return None, f"{type(exc).__name__}: {exc}"
