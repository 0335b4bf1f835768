"""The trap side of the native decision: the facts detection judges about pyamx.trap.

Detection reads the machine; this module is where it consults the trap and
(where silicon said no and the trap was asked for) switches it on, so that
pyamx.detect itself only reads and judges. It imports nothing from detect:
detect imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Tuple

if TYPE_CHECKING:
    from ._nativelib import Lib


@dataclass(frozen=True)
class TrapFacts:
    """The trap-and-emulate mode, consulted only when silicon said no."""

    available: bool  # pyamx.trap could be imported
    requested: bool = False
    error: Optional[str] = None  # why requested() / enable() / the grant failed
    active: bool = False
    kernels: Optional[frozenset[str]] = None  # families the trap emulates; None = all built ones
    guard: Optional[str] = None  # pyamx.trap.guard().reason: whether other SIGILL handlers are kept out


def trap_facts(lib: Lib, errno_name: Callable[[int], str]) -> TrapFacts:
    """Consult pyamx.trap and enable it if requested (``lib``: pyamx._native's; ``errno_name`` names a
    failed permission's code as detection does)."""
    from . import trap

    try:
        requested = bool(trap.requested())
    except Exception as exc:  # a strict env parser refusing a value
        return TrapFacts(available=True, requested=False, error=f"{type(exc).__name__}: {exc}")
    if not requested:
        return TrapFacts(available=True, requested=False)
    try:
        trap.enable()
    except Exception as exc:
        return TrapFacts(available=True, requested=True, error=f"{type(exc).__name__}: {exc}")
    err = lib.pyamx_request_permission()  # enable() hooked the trap's emulated grant into this call
    if err != 0:
        return TrapFacts(available=True, requested=True,
                         error=f"the trap mode's emulated permission failed: {errno_name(err)}")
    active = bool(trap.active()) and bool(lib.pyamx_native_ready())
    kernels = frozenset(trap.supported_kernels())
    return TrapFacts(available=True, requested=True, active=active,
                     error=None if active else "the trap mode did not become active", kernels=kernels,
                     guard=trap.guard().reason)


def complement_facts() -> Tuple[Optional[Tuple[str, ...]], Optional[str]]:
    """On silicon, the trap variable asks for the complement mode (the extensions the CPU lacks):
    (the CPUID features it emulates, or None where not asked for; the error that kept it out, or None)."""
    try:
        from . import trap

        if not trap.requested():
            return None, None
        return trap.complement(), None
    except Exception as exc:  # a bad variable, no trap module, no signal handler: reported, silicon still runs
        return None, f"{type(exc).__name__}: {exc}"


def env_var() -> str:
    """The trap variable's name (pyamx.trap owns it), for detection's stage names."""
    from .trap import ENV_VAR

    return ENV_VAR
