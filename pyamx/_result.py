"""Arrays that say which backend produced them, and the words every report uses for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

#: how every output (repr, info, probe, replay, demo) names where a result came from
MODE_WORDS = {"silicon": "silicon", "trap": "trap mode", "complement": "complement mode"}


def backend_label(backend: str | None, native_mode: str | None = None) -> str:
    """``"emulator"``, ``"native (silicon)"``, ``"native (trap mode)"`` or ``"native (complement
    mode)"``: the one vocabulary.

    ``native_mode`` is what :func:`pyamx._backend.native_mode` returns
    (``"silicon"``, ``"trap"`` or None), or ``"complement"`` for an instruction the
    complement mode emulates on silicon (``pyamx.cpu.detect.Report.mode_for``).
    """
    if backend is None:
        return "none"
    if backend == "native" and native_mode is not None:
        return f"native ({MODE_WORDS.get(native_mode, native_mode)})"
    return str(backend)


class AMXResult(np.ndarray):
    """An ordinary ndarray with labels: ``backend``, ``native_mode`` (and any other set on it).

    ``backend`` is ``"emulator"`` or ``"native"`` (``native_mode`` then says
    ``"silicon"`` or ``"trap"``; on the emulator ``engine`` names the
    arithmetic engine, see :mod:`pyamx.emulator.engine`); ``label`` is the readable form. Arithmetic
    on the result gives plain arrays, so the labels never stick to numbers
    pyamx did not compute; views, copies and pickles keep them.
    """

    # Class defaults; the labels a result carries live in the instance __dict__,
    # so attributes added later (an engine name) travel without changes here.
    backend: str | None = None
    native_mode: str | None = None
    engine: str | None = None  # the emulator's arithmetic engine, where one is named (pyamx.emulator.engine)
    rounded_to: str | None = None  # "bf16"/"fp16" where pyamx.matmul rounded float operands to that format

    def __array_finalize__(self, obj: object) -> None:
        labels = getattr(obj, "__dict__", None)
        if isinstance(obj, AMXResult) and labels:
            self.__dict__.update(labels)

    def __array_wrap__(self, array: npt.NDArray[Any], context: object = None,  # type: ignore[override]
                       return_scalar: bool = False) -> npt.NDArray[Any] | np.generic:
        # override: the result is a plain ndarray (or scalar), never an AMXResult
        plain = np.asarray(array).view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __reduce__(self) -> tuple[Any, ...]:
        # ndarray's reduce value is always the (rebuild, args, state) triple, never a global's name
        rebuild, args, state = cast("tuple[object, object, object]", super().__reduce__())
        return rebuild, args, (state, dict(self.__dict__))

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            array_state, labels = state
            super().__setstate__(array_state)
            self.__dict__.update(labels)
        else:  # a plain ndarray state
            super().__setstate__(state)

    @property
    def label(self) -> str:
        """Where the numbers came from, in the words ``pyamx info`` uses."""
        return backend_label(self.backend, self.native_mode)

    def __repr__(self) -> str:
        extras = "".join(f", {k}={v}" for k, v in self.__dict__.items()
                         if k not in ("backend", "native_mode") and v is not None)
        return f"{np.asarray(self)!r} (backend={self.label}{extras})"


def label(array: np.ndarray, backend: str, native_mode: str | None = None, engine: str | None = None,
          **labels: object) -> AMXResult:
    """``array`` as a C-contiguous AMXResult carrying ``backend``, ``native_mode``, ``engine`` and ``labels``."""
    result = tag(np.ascontiguousarray(array).view(AMXResult), backend, native_mode, engine)
    for name, value in labels.items():
        setattr(result, name, value)
    return result


def new_result(shape: tuple[int, ...], dtype: npt.DTypeLike) -> AMXResult:
    """An uninitialised C-contiguous AMXResult for a backend to write into; :func:`tag` it afterwards.

    Cheaper than :func:`label` on a finished array (no copy, no second view):
    the per-instruction fast paths spend most of their few microseconds here otherwise.
    """
    result: AMXResult = AMXResult(shape, dtype)  # ndarray.__new__ is declared to return ndarray[Any, ...]
    return result


def tag(result: AMXResult, backend: str, native_mode: str | None = None, engine: str | None = None) -> AMXResult:
    """Set the labels :func:`label` sets, on an AMXResult made by :func:`new_result`."""
    labels = result.__dict__
    labels["backend"] = backend
    labels["native_mode"] = native_mode
    if engine is not None:
        labels["engine"] = engine
    return result
