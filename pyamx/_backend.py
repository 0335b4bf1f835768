"""Which backend runs: the process default and per-call choices.

Like python-zstandard's import policy: one environment variable with strict
values, read once at import. ``auto`` picks native only when every detection
stage said yes and records why not otherwise; a backend asked for by name is
used or the call fails, never silently replaced.
"""

from __future__ import annotations

from . import _env
from .errors import BackendError, EnvironmentVariableError, NativeUnavailableError

ENV_VAR = "PYAMX_BACKEND"
CHOICES = ("auto", "native", "emulator")


def parse_choice(value, source: str) -> str:
    """Validate a backend name; ``source`` says where it came from, for the message."""
    if value not in CHOICES:
        raise BackendError(f"{source} is {value!r}; it must be one of {', '.join(CHOICES)}")
    return value


_requested = None  # PYAMX_BACKEND's choice, read once per process (on first use)


def requested() -> str:
    """The backend ``PYAMX_BACKEND`` asks for (empty or unset: ``auto``), read once per process.

    Read on first use, not at import, so that ``import pyamx`` (and ``pyamx
    info``, ``pyamx --help``) work whatever the environment holds; a bad
    value of PYAMX_BACKEND or PYAMX_TRAP_EMULATION raises
    :class:`~pyamx.errors.EnvironmentVariableError` at every use instead
    (a failure is not remembered; a success is).
    """
    global _requested
    if _requested is None:
        from . import trap  # pure environment parsing; the C module is not loaded here

        choice = _env.choice(ENV_VAR, CHOICES, "auto", error=EnvironmentVariableError)
        trap.requested()  # a typo must not quietly leave native off
        _requested = choice
    return _requested


def __getattr__(name):
    if name == "REQUESTED":  # the old module constant, now read when asked for
        return requested()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_decision = None  # (backend, reason), decided on first use


def native_status(family: str = "bf16"):
    """``(usable, reason)`` of the native ``family`` kernels (bf16, int8, fp16), from the cached report."""
    try:
        from . import native
    except ImportError as exc:  # the extension was not built on this install
        return False, f"the native module is not available: {exc}"
    return native.available(family)


def native_mode():
    """``"silicon"`` or ``"trap"`` when native is usable, else None."""
    try:
        from .detect import report
    except ImportError:
        return None
    return report().mode


def _decide():
    global _decision
    wanted = requested()  # raises for a bad variable at every use
    if _decision is None:
        if wanted == "emulator":
            _decision = ("emulator", f"{ENV_VAR}=emulator")
        else:
            usable, reason = native_status()
            if usable:
                _decision = ("native", f"native is usable: {reason}")
            elif wanted == "native":
                _decision = (None, reason)
            else:
                _decision = ("emulator", f"native is not usable: {reason}")
    return _decision


def _unavailable(reason: str, source: str) -> NativeUnavailableError:
    return NativeUnavailableError(
        f"the native backend was requested ({source}) but cannot run here: {reason}. "
        "Run `pyamx info` for every detection stage; run the bit-exact emulator instead with "
        "backend='emulator' (command line: --backend emulator; environment: PYAMX_BACKEND=emulator).",
        reason=reason,
    )


def default_backend() -> str:
    """The process default backend, decided once: ``"native"`` or ``"emulator"``."""
    backend, reason = _decide()
    if backend is None:
        raise _unavailable(reason, f"{ENV_VAR}=native")
    return backend


def default_reason() -> str:
    """Why the process default is what it is."""
    return _decide()[1]


def resolve(backend, family: str = "bf16") -> str:
    """The backend a call of the ``family`` kernels runs on: ``None`` means the process default.

    ``auto`` decides per family (a Sapphire Rapids has AMX-BF16 but not
    AMX-FP16, so its fp16 calls run on the emulator and say so); a backend
    named by the call or by PYAMX_BACKEND is used or the call fails.
    """
    if backend is None:
        choice, source = requested(), f"{ENV_VAR}=native"
        if choice == "native":
            default_backend()  # the process-wide refusal comes first
    else:
        choice, source = parse_choice(backend, "backend"), "backend='native'"
    if choice == "emulator":
        return "emulator"
    usable, reason = native_status(family)
    if choice == "native" and not usable:
        raise _unavailable(reason, source)
    return "native" if usable else "emulator"
