"""The numerics rule: which :class:`~pyamx.Numerics` models each backend and engine computes.

One place for it, read by the backend choice (pyamx._backend), the native
machine (pyamx.cpu.native) and the engine choice (pyamx.emulator.engine):

* the emulator's numpy engine runs every :class:`~pyamx.Numerics` option;
* the compiled engines run the default ``"sdm"`` model's dot-product
  arithmetic only (the ``row_*`` fields never reach an engine);
* native runs what the silicon (or, in trap mode, the trap handler)
  computes, which pyamx holds to the default model (docs/semantics.md,
  section 3); so it accepts ``numerics`` only when it is None or equal to
  the default ``"sdm"`` model (``"sdm"``, ``Numerics()``), whole.

What a caller does when a model is refused (``auto`` falls back to the
emulator or numpy, a named backend or engine raises) is the caller's.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's parser loads this module)
if TYPE_CHECKING:
    from typing import Callable

    from .table.numerics import Numerics


def choose_numerics(numerics: Numerics | str) -> Numerics:
    """The :class:`~pyamx.Numerics` of a preset name or a Numerics (ValueError for an unknown name).

    Called once at a public entry; what it returns is passed down, so the backend and engine
    choices recognise the default model by identity instead of comparing fields again.
    """
    global _table_resolve
    if _table_resolve is None:  # imported on first use, then kept (the CLI builds its parser without it)
        from .table.numerics import resolve

        _table_resolve = resolve
    return _table_resolve(numerics)


_table_resolve: Callable[[Numerics | str], Numerics] | None = None


resolve = choose_numerics  # the older name


_DEFAULT: Numerics | None = None


def default() -> Numerics:
    """The default model, ``"sdm"``: the one silicon and the compiled engines compute."""
    global _DEFAULT
    if _DEFAULT is None:
        from .table.numerics import PRESETS

        _DEFAULT = PRESETS["sdm"]
    return _DEFAULT


def native_runs(numerics: Numerics | str | None) -> bool:
    """Whether the native backend computes ``numerics`` (None: whatever the backend computes)."""
    return numerics is None or numerics is default() or choose_numerics(numerics) == default()


def native_numerics_error(numerics: Numerics | str) -> ValueError:
    """The refusal of a model native does not compute, naming the way to run it."""
    name = resolve(numerics).name
    return ValueError(
        f"numerics={name!r} selects an emulator model; the native backend computes what the silicon "
        "computes (held to the default 'sdm' model). Use backend='emulator' (or backend='auto', which "
        "picks the emulator for such a model) to run it"
    )


def compiled_runs(numerics: Numerics) -> bool:
    """Whether the compiled engines compute ``numerics`` (a Numerics): its dot-product model is the default's."""
    return numerics.dot_model() == default()
