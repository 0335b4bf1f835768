"""Loading the compiled modules ``pyamx._native`` and ``pyamx._trap`` and refusing a stale build.

The one loader of both: each module carries the package version it was
built from; a module left over from an older checkout would run C code that
disagrees with the Python around it, so it is refused with the command that
fixes it. Callers put their own contract on top (None, BackendError,
NativeUnavailableError), never a second way to load.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import sys
import warnings
from types import FrameType, ModuleType
from typing import TYPE_CHECKING

from .._first_use import LOCK
from .._version import __version__

if TYPE_CHECKING:
    from typing import Any

    #: a cffi module's ``ffi`` and ``lib``: their C declarations become attributes only when it loads
    #: (and cffi ships no types)
    FFI = Any
    Lib = Any
    #: a value cffi made (``ffi.new``, ``ffi.from_buffer``): a C pointer, array or struct
    CData = Any

REBUILD_HINT = "rebuild it with `pip install .` (or `python build.py` in a source checkout)"


class StaleBuildError(ImportError):
    """``pyamx._native`` was built from a different pyamx version than the one importing it."""


def stale_build_message(built_version: str, package_version: str, module: str = "pyamx._native") -> str | None:
    """``None`` when the versions match, else the error message to raise (pure)."""
    if built_version == package_version:
        return None
    return (
        f"{module} was built for pyamx {built_version} but this is pyamx {package_version} "
        f"(a stale build): {REBUILD_HINT}"
    )


def build_info() -> ModuleType | None:
    """``pyamx._buildinfo`` (what the build decided and why), or None where no build wrote it."""
    try:
        return importlib.import_module(".._buildinfo", __package__)
    except ImportError:
        return None


#: what rebuilds an install that pip made without the extension. A plain reinstall gets the pure
#: wheel pip cached from that build back, and so does --no-binary; --no-cache-dir builds afresh.
REINSTALL_HINT = ("install a C compiler (GCC >= 11 or clang >= 12 for the AMX kernels), then reinstall past "
                  "pip's cache of the pure wheel: `pip install --force-reinstall --no-cache-dir pyamx` "
                  "(or the path or URL you installed from)")


def source_checkout(package_dir: str = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) -> str | None:
    """The root of the source checkout this pyamx is imported from, or None for an installed one."""
    root = os.path.dirname(package_dir)
    if os.path.isfile(os.path.join(root, "build.py")) and os.path.isdir(os.path.join(root, "csrc")):
        return root
    return None


def not_built_message(info: ModuleType | None, import_error: ImportError | str,
                      checkout: str | None = None) -> str:
    """Why ``pyamx._native`` cannot be imported, from the build's record when there is one (pure).

    ``checkout``: the source checkout pyamx was imported from, if any; a script started in its
    root imports that folder, built or not, before any installed pyamx.
    """
    if info is not None and not info.EXTENSION:
        return (f"pyamx was built without the C extension because {info.CAUSE}; the emulator works, "
                f"the native backend and the trap mode need the extension: {REINSTALL_HINT}")
    if checkout is not None:
        return (f"pyamx is imported from the source checkout {checkout}, whose C extension is not built, so "
                "the emulator runs on its numpy engine and the native backend and the trap mode are off "
                "(a script started in the checkout's root imports this folder before any installed pyamx). "
                f"Build it in place: `pip install -e .` or `python build.py` in {checkout}")
    return f"the C extension pyamx._native is not built ({import_error}); {REBUILD_HINT}"


def _outside_pyamx() -> int:
    """The ``stacklevel`` of the first caller outside the pyamx package (the user's line)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def warn_once(message: str) -> None:
    """The :class:`~pyamx.errors.ExtensionWarning`, once per process, at the user's line."""
    global _warned
    if _warned:
        return
    _warned = True
    from ..errors import ExtensionWarning

    try:
        warnings.warn(message, ExtensionWarning, stacklevel=_outside_pyamx())
    except ExtensionWarning:
        pass  # `-W error`: a missing extension must not fail the (emulator) call that noticed it


_warned = False


@functools.lru_cache(maxsize=None)
def load() -> tuple[FFI, Lib]:
    """``(ffi, lib)`` of the extension; ImportError (or StaleBuildError) with a clear message.

    An install built without the extension, or a source checkout not built
    yet, also warns once, on the first use that needs it: pip hides the
    build's own warning, and a checkout would silently run the numpy engine.
    """
    with LOCK:  # an import and the library's own start-up: not to be split by a fork
        return _load_native()


def _load_native() -> tuple[FFI, Lib]:
    try:
        from .. import _native  # type: ignore[attr-defined]  # compiled by build.py (cffi): no stub
    except ImportError as exc:
        info = build_info()
        checkout = source_checkout()
        message = not_built_message(info, exc, checkout)
        if (info is not None and not info.EXTENSION) or checkout is not None:
            warn_once(message)
        raise ImportError(message) from exc
    built = _native.ffi.string(_native.lib.pyamx_build_version()).decode()
    stale = stale_build_message(built, __version__)
    if stale:
        raise StaleBuildError(stale)
    # The kernels' worker pool is joined before the interpreter finalizes, so no worker is
    # left parked inside the library while Python tears itself down.
    atexit.register(_native.lib.pyamx_pool_shutdown)
    return _native.ffi, _native.lib


@functools.lru_cache(maxsize=None)
def load_trap() -> tuple[FFI, Lib]:
    """``(ffi, lib)`` of the trap mode's module pyamx._trap; ImportError (or StaleBuildError) saying why not."""
    with LOCK:
        return _load_trap()


def _load_trap() -> tuple[FFI, Lib]:
    try:
        from .. import _trap  # type: ignore[attr-defined]  # compiled by build.py (cffi): no stub
    except ImportError as exc:
        raise ImportError(f"the trap mode's C extension pyamx._trap is not built ({exc}); {REBUILD_HINT}") from exc
    built = _trap.ffi.string(_trap.lib.pyamx_trap_build_version()).decode()
    message = stale_build_message(built, __version__, "pyamx._trap")
    if message:
        raise StaleBuildError(message)
    return _trap.ffi, _trap.lib
