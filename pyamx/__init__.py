"""pyamx: Intel AMX tile instructions from Python, on silicon or in a bit-exact emulator.

The backend is chosen once per process from ``PYAMX_BACKEND`` (``auto``,
``native``, ``emulator``; read on first use, so a bad value never breaks the
import) and can be overridden per call with ``backend=``;
:func:`backend` says which one the default is and :func:`show_runtime`
reports every detection stage.
"""

from __future__ import annotations

from . import _ops, bf16, emulator, errors, isa
from ._backend import default_backend as backend
from ._backend import default_reason as backend_reason
from ._ops import tile_machine
from ._result import AMXResult
from ._version import __version__
from .matmul import matmul
from .emulator import Numerics, TileMachine
from .errors import (
    AMXError,
    AMXFault,
    BackendError,
    EnvironmentVariableError,
    GeneralProtectionFault,
    InvalidOpcodeFault,
    MemoryAccessFault,
    NativeUnavailableError,
    ReentrantUseError,
    WrongThreadError,
)
from .tilecfg import TileConfig


# The one-instruction functions, one per dot product of pyamx.isa: tdpbf16ps, tdpfp16ps,
# tdpbssd, tdpbsud, tdpbusd, tdpbuud.
globals().update({name: getattr(_ops, name) for name in isa.DOT_NAMES})


def cpu_features() -> dict:
    """Every detection stage as a dict (see :mod:`pyamx.detect`)."""
    from .detect import cpu_features as _cpu_features

    return _cpu_features()


def show_runtime() -> None:
    """Print what a bug report needs: pyamx/python/numpy versions, the backend decision and why,
    the PYAMX_* settings, how the emulator controls MXCSR, then every detection stage and the kernels."""
    from .detect import show_runtime as _show_runtime

    _show_runtime()


__all__ = [
    "__version__", "backend", "backend_reason", "cpu_features", "show_runtime",
    *isa.DOT_NAMES, "tile_machine", "isa", "matmul",
    "TileMachine", "TileConfig", "Numerics", "AMXResult", "bf16", "emulator", "errors",
    "AMXError", "AMXFault", "BackendError", "EnvironmentVariableError", "GeneralProtectionFault",
    "InvalidOpcodeFault", "MemoryAccessFault", "NativeUnavailableError", "ReentrantUseError", "WrongThreadError",
]
