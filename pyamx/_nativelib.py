"""Loading the C extension ``pyamx._native`` and refusing a stale build.

The extension carries the package version it was built from; a module left
over from an older checkout would run C code that disagrees with the Python
around it, so it is refused with the command that fixes it.
"""

from __future__ import annotations

import functools

from ._version import __version__

REBUILD_HINT = "rebuild it with `pip install .` (or `python build.py` in a source checkout)"


class StaleBuildError(ImportError):
    """``pyamx._native`` was built from a different pyamx version than the one importing it."""


def stale_build_message(built_version: str, package_version: str):
    """``None`` when the versions match, else the error message to raise (pure)."""
    if built_version == package_version:
        return None
    return (
        f"pyamx._native was built for pyamx {built_version} but this is pyamx {package_version} "
        f"(a stale build): {REBUILD_HINT}"
    )


@functools.lru_cache(maxsize=None)
def load():
    """``(ffi, lib)`` of the extension; ImportError (or StaleBuildError) with a clear message."""
    try:
        from . import _native
    except ImportError as exc:
        raise ImportError(f"the C extension pyamx._native is not built ({exc}); {REBUILD_HINT}") from exc
    built = _native.ffi.string(_native.lib.pyamx_build_version()).decode()
    message = stale_build_message(built, __version__)
    if message:
        raise StaleBuildError(message)
    return _native.ffi, _native.lib
