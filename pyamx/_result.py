"""Arrays that say which backend produced them."""

from __future__ import annotations

import numpy as np


class AMXResult(np.ndarray):
    """An ordinary ndarray with one extra attribute, ``backend``.

    ``backend`` is ``"emulator"`` or ``"native"`` (``native_mode`` then says
    ``"silicon"`` or ``"trap"``). Arithmetic on the result gives plain arrays,
    so the label never sticks to numbers pyamx did not compute.
    """

    backend: str | None
    native_mode: str | None

    def __array_finalize__(self, obj):
        self.backend = getattr(obj, "backend", None)
        self.native_mode = getattr(obj, "native_mode", None)

    def __array_wrap__(self, array, context=None, return_scalar=False):
        plain = np.asarray(array).view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __repr__(self):
        label = self.backend if self.native_mode is None else f"{self.backend}/{self.native_mode}"
        return f"{np.asarray(self)!r} (backend={label})"


def label(array: np.ndarray, backend: str, native_mode: str | None = None) -> AMXResult:
    result = np.ascontiguousarray(array).view(AMXResult)
    result.backend = backend
    result.native_mode = native_mode
    return result
