"""Arrays that say which backend produced them."""

from __future__ import annotations

import numpy as np


class AMXResult(np.ndarray):
    """An ordinary ndarray with one extra attribute, ``backend``.

    ``backend`` is ``"emulator"`` or ``"native"`` (``native_mode`` then says
    ``"silicon"`` or ``"trap"``; on the emulator ``engine`` names the
    arithmetic engine, see :mod:`pyamx.engine`). Arithmetic on the result gives plain arrays,
    so the label never sticks to numbers pyamx did not compute.
    """

    backend: str | None
    native_mode: str | None
    engine: str | None

    def __array_finalize__(self, obj):
        self.backend = getattr(obj, "backend", None)
        self.native_mode = getattr(obj, "native_mode", None)
        self.engine = getattr(obj, "engine", None)

    def __array_wrap__(self, array, context=None, return_scalar=False):
        plain = np.asarray(array).view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __repr__(self):
        label = self.backend if self.native_mode is None else f"{self.backend}/{self.native_mode}"
        engine = "" if self.engine is None else f", engine={self.engine}"
        return f"{np.asarray(self)!r} (backend={label}{engine})"


def label(array: np.ndarray, backend: str, native_mode: str | None = None, engine: str | None = None) -> AMXResult:
    result = np.ascontiguousarray(array).view(AMXResult)
    result.backend = backend
    result.native_mode = native_mode
    result.engine = engine
    return result
