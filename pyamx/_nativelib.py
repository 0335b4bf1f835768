"""Loading the C extension ``pyamx._native`` and refusing a stale build.

The extension carries the package version it was built from; a module left
over from an older checkout would run C code that disagrees with the Python
around it, so it is refused with the command that fixes it.
"""

from __future__ import annotations

import functools
import importlib
import warnings

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


def build_info():
    """``pyamx._buildinfo`` (what the build decided and why), or None where no build wrote it."""
    try:
        return importlib.import_module(f"{__package__}._buildinfo")
    except ImportError:
        return None


def not_built_message(info, import_error) -> str:
    """Why ``pyamx._native`` cannot be imported, from the build's record when there is one (pure)."""
    if info is not None and not info.EXTENSION:
        return (f"pyamx was built without the C extension because {info.CAUSE}; the emulator works, "
                "the native backend and the trap mode need the extension: install a C compiler "
                "(GCC >= 11 or clang >= 12 for the AMX kernels) and reinstall (`pip install .`)")
    return f"the C extension pyamx._native is not built ({import_error}); {REBUILD_HINT}"


_warned = False


@functools.lru_cache(maxsize=None)
def load():
    """``(ffi, lib)`` of the extension; ImportError (or StaleBuildError) with a clear message.

    An install built without the extension also warns once, on the first use
    that needs it: pip hides the build's own warning.
    """
    global _warned
    try:
        from . import _native
    except ImportError as exc:
        info = build_info()
        message = not_built_message(info, exc)
        if info is not None and not info.EXTENSION and not _warned:
            _warned = True
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        raise ImportError(message) from exc
    built = _native.ffi.string(_native.lib.pyamx_build_version()).decode()
    message = stale_build_message(built, __version__)
    if message:
        raise StaleBuildError(message)
    return _native.ffi, _native.lib
