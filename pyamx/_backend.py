"""Which backend runs: the process default and per-call choices, as objects.

Like python-zstandard's import policy: one environment variable with strict
values, read once at import. ``auto`` picks native only when every detection
stage said yes and records why not otherwise; a backend asked for by name is
used or the call fails, never silently replaced. Where native is a candidate, the choice is where
the process starts it (pyamx.cpu._native_start: the AMX permission and the probe child, or the trap
mode where ``PYAMX_TRAP_EMULATION`` asks), before the first native call: detection only reads.

What :func:`resolve` returns is a :class:`Backend`: a ``str`` (``"native"``
or ``"emulator"``, so comparisons and JSON keep working) that also knows its
mode (``"silicon"``/``"trap"`` for native) and which numerics it runs, by
the numerics rule of :mod:`pyamx._numerics_rule` (native: the default
model only). What this module adds to that rule:

* ``auto`` (the argument, or the process default ``PYAMX_BACKEND=auto``)
  with another model picks the emulator, on every machine, so a script that
  asks for ``numerics="straight"`` behaves the same on a laptop and on a
  Sapphire Rapids server; ``native`` named by the call or by
  ``PYAMX_BACKEND`` with another model raises ValueError.
"""

from __future__ import annotations

from . import _env
from ._first_use import LOCK, module
from ._numerics_rule import native_numerics_error, native_runs
from ._numerics_rule import default as _default_numerics
from ._numerics_rule import resolve as resolve_numerics
from .errors import EnvironmentVariableError, NativeUnavailableError, UnknownBackendError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's parser loads this module)
if TYPE_CHECKING:
    from types import ModuleType

    from .cpu._nativelib import FFI, Lib
    from .cpu.detect import Report
    from .table.isa import Instruction
    from .table.numerics import Numerics

ENV_VAR = "PYAMX_BACKEND"
CHOICES = ("auto", "native", "emulator")


def parse_choice(value: object, source: str) -> str:
    """Validate a backend name; ``source`` says where it came from, for the message."""
    if not isinstance(value, str) or value not in CHOICES:
        raise UnknownBackendError(f"{source} is {value!r}; it must be one of {', '.join(CHOICES)}")
    return value


_requested: str | None = None  # PYAMX_BACKEND's choice, read once per process (on first use)


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
        with LOCK:  # an import (pyamx._first_use)
            return _read_requested()
    return _requested


def _read_requested() -> str:
    global _requested
    if _requested is None:
        from .cpu import trap  # pure environment parsing; the C module is not loaded here

        choice = _env.choice(ENV_VAR, CHOICES, "auto", error=EnvironmentVariableError)
        trap.requested()  # a typo must not quietly leave native off
        _requested = choice
    return _requested


def __getattr__(name: str) -> str:
    if name == "REQUESTED":  # the old module constant, now read when asked for
        return requested()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")



class Backend(str):
    """A resolved backend: its name as the string value, plus ``mode`` and the numerics rule.

    ``mode``: ``"silicon"`` or ``"trap"`` for native, None for the emulator.
    ``report``: the detection report native was resolved from (None for the
    emulator), so one call asks detection once; ``library``: the compiled
    module's ``(ffi, lib)`` it runs.
    """

    mode: str | None
    report: Report | None
    _modes: dict[str, str | None]
    _library: tuple[FFI, Lib] | None

    def __new__(cls, name: str, mode: str | None = None, report: Report | None = None) -> Backend:
        self = super().__new__(cls, name)
        self.mode = mode
        self.report = report
        self._modes = {}  # isa row name -> mode_for's answer: a kept Backend serves many calls
        self._library = None
        return self

    def mode_for(self, insn: Instruction) -> str | None:
        """How this backend runs ``insn`` (an isa row): None on the emulator, else ``"silicon"``,
        ``"trap"`` or ``"complement"`` (the complement mode emulates its feature on this silicon)."""
        if not self.is_native:
            return None
        mode = self._modes.get(insn.name)
        if mode is None:
            if self.report is None:  # unpickled: the report stays in the process that resolved it
                self.report = _started_report()
            mode = self._modes[insn.name] = self.report.mode_for(insn)
        return mode

    @property
    def library(self) -> tuple[FFI, Lib] | None:
        """``(ffi, lib)`` of pyamx._native for native (loaded once per process); None for the emulator."""
        if not self.is_native:
            return None
        library = self._library
        if library is None:
            loaded: tuple[FFI, Lib] = module(".cpu._nativelib", __package__).load()
            library = self._library = loaded
        return library

    @property
    def name(self) -> str:
        return str(self)

    @property
    def is_native(self) -> bool:
        return str.__eq__(self, "native")

    @property
    def label(self) -> str:
        """``"emulator"``, ``"native (silicon)"`` or ``"native (trap mode)"`` (pyamx._result.backend_label)."""
        from ._result import backend_label

        return backend_label(str(self), self.mode)

    def runs(self, numerics: Numerics | str | None) -> bool:
        """Whether this backend computes the ``numerics`` option (a name, a Numerics, or None)."""
        return not self.is_native or native_runs(numerics)

    def numerics(self, numerics: Numerics | str | None) -> Numerics:
        """The :class:`Numerics` this backend runs for the request (None: its default); ValueError if it cannot."""
        if numerics is not None and not self.runs(numerics):  # every backend runs None (its default)
            raise native_numerics_error(numerics)
        return _default_numerics() if numerics is None else resolve_numerics(numerics)

    def __repr__(self) -> str:
        return f"Backend({self.label!r})"

    def __reduce__(self) -> tuple[type[Backend], tuple[str, str | None]]:
        return (Backend, (str(self), self.mode))


EMULATOR = Backend("emulator")  # the one emulator backend: resolve() returns this object


def native_status(group: str = "bf16", report: Report | None = None) -> tuple[bool, str]:
    """``(usable, reason)`` of the native ``group`` kernels (bf16, int8, fp16), from ``report`` (None:
    the cached one)."""
    native = module(".cpu.native", __package__)
    status: tuple[bool, str] = native.available(group) if report is None else native.availability(report, group)
    return status


def native_mode() -> str | None:
    """``"silicon"`` or ``"trap"`` when native is usable, else None (starts native, as the choice does)."""
    return _started_report().mode


def _started_report() -> Report:
    """Detection's report once the native start ran: the choice of native is where this process asks
    for the AMX permission, forks the probe child or switches the trap mode on (pyamx.cpu._native_start),
    before the first native call; detection itself only reads."""
    report: Report = module(".cpu._native_start", __package__).report()
    return report


def _native() -> Backend:
    rep = _started_report()
    return Backend("native", rep.mode, rep)


_decision: tuple[Backend | None, str] | None = None  # (backend, reason), decided on first use


def _decide() -> tuple[Backend | None, str]:
    wanted = requested()  # raises for a bad variable at every use
    if _decision is None:
        with LOCK:  # detection and the extension's loading (pyamx._first_use)
            return _decide_once(wanted)
    return _decision


def _decide_once(wanted: str) -> tuple[Backend | None, str]:
    global _decision
    decision = _decision
    if decision is None:
        if wanted == "emulator":
            decision = (EMULATOR, f"{ENV_VAR}=emulator")
        else:
            usable, reason = native_status()
            if usable:
                decision = (_native(), f"native is usable: {reason}")
            elif wanted == "native":
                decision = (None, reason)
            else:
                decision = (EMULATOR, f"native is not usable: {reason}")
        _decision = decision
    return decision


def _unavailable(reason: str, source: str) -> NativeUnavailableError:
    return NativeUnavailableError(
        f"the native backend was requested ({source}) but cannot run here: {reason}. "
        "Run `pyamx info` for every detection stage; run the bit-exact emulator instead with "
        "backend='emulator' (command line: --backend emulator; environment: PYAMX_BACKEND=emulator).",
        reason=reason,
    )


def default_backend() -> Backend:
    """The process default backend, decided once: native or the emulator.

    By the rule of :func:`resolve` for a call that names neither backend nor engine: a concrete
    ``PYAMX_ENGINE`` makes ``auto`` the emulator, and ``PYAMX_BACKEND=native`` with it an error.
    """
    backend, reason = _decide()
    if backend is None:
        raise _unavailable(reason, f"{ENV_VAR}=native")
    named_engine = _named_engine(None)
    if named_engine is not None:
        if backend.is_native and requested() == "native":
            raise native_engine_error(named_engine[0], f"{ENV_VAR}=native")
        return EMULATOR
    return backend


def default_reason() -> str:
    """Why the process default is what it is."""
    backend, reason = _decide()
    named_engine = _named_engine(None) if backend is not None and backend.is_native else None
    if named_engine is not None and requested() != "native":
        return f"{named_engine[0]} names an emulator engine"
    return reason


def native_engine_error(engine_source: str, backend_source: str = "backend='native'") -> ValueError:
    return ValueError(
        f"{engine_source} selects the emulator's arithmetic engine, but {backend_source} asks for the native "
        "backend, which computes on AMX tiles. Name one of them: the emulator (backend='emulator', "
        "PYAMX_BACKEND=emulator; 'auto' picks the emulator when an engine is named) or native with the "
        "engine left out (engine=None or 'auto', PYAMX_ENGINE unset)"
    )


def _named_engine(engine: object) -> tuple[str, bool] | None:
    """The concrete emulator engine that applies to a call, as ``(source, from_variable)``, or None.

    The ``engine`` argument, else ``PYAMX_ENGINE``; ``auto`` is no engine. Both are validated on
    every call whatever the backend: a bad value raises here, never only where the emulator runs.
    """
    module = _engine_module()
    if engine is not None:
        return None if module.parse_name(engine, "engine") == "auto" else (f"engine={engine!r}", False)
    name = module.variable()
    return None if name == "auto" else (f"{module.ENV_VAR}={name}", True)


def _engine_module() -> ModuleType:
    # Imported on first use (pyamx.emulator.engine needs numpy; the CLI builds its parser from this module)
    # and kept: this runs on every call.
    global _engine_mod
    if _engine_mod is None:
        _engine_mod = module(".emulator.engine", __package__)
    return _engine_mod


_engine_mod: ModuleType | None = None


#: The choices already made for calls of the default numerics: (backend, group, engine) -> Backend. A
#: call decides its backend once (the rule below costs microseconds: detection's report, the engine
#: setting) and a later call with the same arguments takes it from here while :func:`_settings` says
#: the same; a failure is never kept, so a bad argument or variable raises at every call.
_chosen: dict[tuple[object, str, object], Backend] = {}
_chosen_under: tuple[object, ...] = ()


def _settings() -> tuple[object, ...]:
    """What a choice depends on besides the call's arguments: PYAMX_BACKEND and the process default
    as read, PYAMX_ENGINE as read (until pyamx.emulator.engine.reset_environment()), and the functions that
    ask detection (tests stand in for them). Any change makes every kept choice be made again."""
    engine_module = _engine_mod or _engine_module()
    return (_requested, _decision, native_status, _native, engine_module.settings_generation)


def choose_backend(backend: str | None = None, group: str = "bf16", numerics: Numerics | str | None = None,
                   engine: str | None = None) -> Backend:
    """The backend a call of the ``group`` kernels runs on, by the rule of :func:`backend_rule`,
    decided once per distinct arguments and settings and then kept.

    ``numerics``: None or a :class:`~pyamx.Numerics` chosen at the call's entry
    (:func:`pyamx._numerics_rule.choose_numerics`); a choice is kept only for the default model.
    """
    global _chosen_under
    if numerics is not None and numerics is not _default_numerics():
        return backend_rule(backend, group, numerics, engine)
    under = _settings()
    if under != _chosen_under:
        _chosen.clear()
        _chosen_under = under
    key = (backend, group, engine)
    try:
        chosen = _chosen.get(key)
    except TypeError:  # an unhashable argument: the rule refuses it
        return backend_rule(backend, group, numerics, engine)
    if chosen is None:
        chosen = backend_rule(backend, group, numerics, engine)
        if type(backend) in (str, type(None)) and type(engine) in (str, type(None)):
            _chosen[key] = chosen  # only plain values: a str subclass could compare equal and mean more
    return chosen


def backend_rule(backend: str | None, group: str = "bf16", numerics: Numerics | str | None = None,
                 engine: str | None = None) -> Backend:
    """The backend a call of the ``group`` kernels runs on: ``None`` means the process default.

    ``auto`` decides per group (a Sapphire Rapids has AMX-BF16 but not
    AMX-FP16, so its fp16 calls run on the emulator and say so), per
    ``numerics`` (see the module docstring) and per engine: a concrete engine
    (the ``engine`` argument, else ``PYAMX_ENGINE``) means the emulator, just
    as a non-default model does. A backend named by the call or by
    PYAMX_BACKEND is used or the call fails; named together with a concrete
    engine it is an error, except that ``backend="native"`` in a call
    outranks ``PYAMX_ENGINE``, which is the engine of the calls that run the
    emulator (docs/guide.md, "Backends and engines").
    """
    named_engine = _named_engine(engine)  # validated first: a bad engine is an error on every backend
    if backend is None:
        choice, source = requested(), f"{ENV_VAR}=native"
        if choice == "native":
            default_backend()  # the process-wide refusal comes first
    else:
        choice, source = parse_choice(backend, "backend"), "backend='native'"
    if choice == "emulator":
        return EMULATOR
    if numerics is not None and not native_runs(numerics):
        if choice == "native":
            raise native_numerics_error(numerics)
        return EMULATOR
    if named_engine is not None:
        engine_source, from_variable = named_engine
        if choice != "native":
            return EMULATOR
        if not (from_variable and backend is not None):
            raise native_engine_error(engine_source, source)
    native = _native()  # the one detection report of this call
    usable, reason = native_status(group, native.report)
    if choice == "native" and not usable:
        raise _unavailable(reason, source)
    return native if usable else EMULATOR


resolve = choose_backend  # the name pyamx's tools and tests have long called it by
