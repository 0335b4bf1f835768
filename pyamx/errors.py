"""Exception classes of pyamx.

Every fault an AMX instruction can raise on silicon (#GP, #UD, a bad memory
operand) becomes an ``AMXFault`` subclass here, so the emulator, the native
backend and the trap mode report the same rule violations the same way.
Operand errors of the array-level functions are plain ``TypeError`` /
``ValueError``, as numpy users expect.
"""

from __future__ import annotations

from ._env import EnvVarError


class AMXError(Exception):
    """Base class of every error pyamx raises on its own account."""


class AMXFault(AMXError):
    """An instruction faulted, as it would on silicon.

    ``mnemonic`` is the instruction (``"TDPBF16PS"``), ``vector`` the
    architectural exception (``"#GP"``, ``"#UD"``, ``"#PF"``) and ``rule``
    a short sentence naming the rule, the operand and the value seen.
    """

    vector = "?"

    def __init__(self, mnemonic: str, rule: str) -> None:
        self.mnemonic = mnemonic
        self.rule = rule
        super().__init__(f"{mnemonic} raises {self.vector}: {rule}")


class GeneralProtectionFault(AMXFault):
    """#GP: an illegal tile configuration (LDTILECFG)."""

    vector = "#GP"


class InvalidOpcodeFault(AMXFault):
    """#UD: the instruction is not valid in the current tile state."""

    vector = "#UD"


class MemoryAccessFault(AMXFault, IndexError):
    """A tile load or store would touch bytes outside the given buffer.

    On silicon this is a page fault or silent corruption; pyamx refuses it
    before any byte moves.
    """

    vector = "#PF"


class BackendError(AMXError):
    """A backend was named that does not exist or cannot run here."""


class UnknownBackendError(BackendError, ValueError):
    """A backend (or engine) was named that does not exist: bad input, so a ValueError like every
    other bad keyword, and still a BackendError for code written against older pyamx."""


class EnvironmentVariableError(BackendError, EnvVarError):
    """A ``PYAMX_*`` environment variable holds a value pyamx does not accept.

    Raised on first use of the setting, never by ``import pyamx``; the
    message names the variable, the value and the allowed values.
    """


class NativeUnavailableError(BackendError):
    """The native backend was asked for by name but cannot run here.

    The message carries the detection report's reason and what to do;
    ``reason`` holds the reason alone (None when there is none), so a front
    end (the command line) can word its own advice.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[AMXError], tuple[str, str | None]]:
        return type(self), (str(self), self.reason)


class WrongThreadError(AMXError):
    """A native tile machine was used from a thread other than its owner.

    Tile registers belong to one OS thread; using them from another thread
    would read that thread's (unrelated) registers.
    """


class ReentrantUseError(AMXError, RuntimeError):
    """A native tile machine was used while one was already executing on this thread.

    That happens only from code that runs inside another call: a signal
    handler, a finalizer (``__del__``, weakref callback) or a trace/profile
    hook. The thread has one set of tile registers; letting the inner call
    switch them would make the interrupted instruction run on the wrong
    machine's configuration, so the inner call is refused before it starts.
    """


class ExtensionWarning(RuntimeWarning):
    """pyamx runs without its C extension: the emulator works (on its numpy engine), the native
    backend and the trap mode do not. Emitted once per process, on the first use that needs the
    extension, pointing at the caller's line.

    Under ``-W error`` it is never raised into that call (a matmul must not fail for it); filter
    it by category: ``-W ignore::pyamx.errors.ExtensionWarning`` or
    ``warnings.filterwarnings("ignore", category=pyamx.errors.ExtensionWarning)``.
    """
