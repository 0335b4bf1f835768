"""The runtime report (``pyamx.show_runtime()``, ``pyamx info``, ``pyamx.cpu_features()``): versions,
the backend decision, the settings, the emulator's engines, then detection's stages.

Apart from pyamx.cpu.detect on purpose: this report asks the backend choice (pyamx._backend), which
itself asks detection, so living in detect.py made the two import each other. It is asked what
native does here, so it reports after the native start (pyamx.cpu._native_start), whatever backend
PYAMX_BACKEND chooses: the permission, the child and the trap mode, as the first native call has them.
"""

from __future__ import annotations

import os
import platform

from .. import _backend, _env, _fpenv
from . import _native_start, detect
from .._result import backend_label
from .._version import __version__


def runtime_lines() -> list[str]:
    """What a bug report needs first: versions, platform, the backend decision and any bad setting."""
    import numpy

    rep = _native_start.report()
    try:
        backend, why = _backend.default_backend(), _backend.default_reason()
        label = backend_label(backend, rep.mode if backend == "native" else None)
    except Exception as exc:  # PYAMX_BACKEND=native where native cannot run, or a bad variable
        label, why = "none", f"{type(exc).__name__}: {exc}"
    settings = [f"{name}={os.environ[name]!r}" for name in _env.VARIABLES if name in os.environ]
    return [
        f"pyamx {__version__} (python {platform.python_version()}, numpy {numpy.__version__}, "
        f"{platform.system()} {platform.machine()})",
        f"backend: {label} ({why})",
        f"environment: {', '.join(settings) or 'no PYAMX_* variable set'}",
        f"emulator floating-point environment (MXCSR): {_fpenv.describe()}",
        *engine_lines(),
    ]


def engine_lines() -> list[str]:
    """The emulator's engines (pyamx.emulator.engine): which one runs by default, with what SIMD level."""
    from ..emulator import engine

    return engine.describe_lines()


def show_runtime() -> None:
    """Print versions, the backend decision and the detection report: every stage, kernels, compiler, verdict."""
    print("\n".join(runtime_lines()))
    print(detect.format_report(_native_start.report()))


def cpu_features() -> dict[str, object]:
    """Every detection stage and fact as a plain dict, after the native start (``pyamx.cpu_features()``)."""
    _native_start.start()
    return detect.cpu_features()
