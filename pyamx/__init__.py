"""pyamx: Intel AMX tile instructions from Python, on silicon or in a bit-exact emulator.

The backend is chosen once per process from ``PYAMX_BACKEND`` (``auto``,
``native``, ``emulator``; read on first use, so a bad value never breaks the
import) and can be overridden per call with ``backend=``;
:func:`backend` says which one the default is and :func:`show_runtime`
reports every detection stage.
"""

from __future__ import annotations

import importlib
import os

from . import _first_use  # first: the fork hook must exist before any one-time work can start
from . import errors as errors
from ._version import __version__ as __version__
from .errors import (  # "X as X": re-exported for type checkers (mypy --strict)
    AMXError as AMXError,
    AMXFault as AMXFault,
    BackendError as BackendError,
    EnvironmentVariableError as EnvironmentVariableError,
    GeneralProtectionFault as GeneralProtectionFault,
    InvalidOpcodeFault as InvalidOpcodeFault,
    MemoryAccessFault as MemoryAccessFault,
    NativeUnavailableError as NativeUnavailableError,
    ReentrantUseError as ReentrantUseError,
    WrongThreadError as WrongThreadError,
)

# typing.TYPE_CHECKING without importing typing (it is not otherwise loaded by `pyamx run`);
# type checkers treat any TYPE_CHECKING name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    # What the lazy names below resolve to, so a type checker sees real types instead of Any.
    from . import _backend
    from .table import bf16 as bf16
    from . import emulator as emulator
    from .table import isa as isa
    from .table import layout as layout
    from .cpu import trap as trap
    from .emulator import engine as engine
    from ._dot_types import *  # noqa: F403  (the one-instruction functions, generated from the table)
    from ._matmul import matmul as matmul
    from ._packed import PackedB as PackedB
    from ._packed import pack as pack
    from ._ops import tile_machine as tile_machine
    from ._result import AMXResult as AMXResult
    from .emulator import Numerics as Numerics
    from .emulator import TileMachine as TileMachine
    from .table.tilecfg import TileConfig as TileConfig

    backend = _backend.default_backend
    backend_reason = _backend.default_reason

# Everything that needs numpy is bound on first use (PEP 562), so commands that need none of it
# (`pyamx run`, `pyamx --version`) start in milliseconds: name -> (module, attribute or None).
# pyamx.isa too (dataclasses and typing cost `pyamx run` ~15 ms): the one-instruction functions
# it names (isa.DOT_NAMES) resolve in
# __getattr__, and so does __all__, which lists them.
# The modules the README and the guide show are attributes here (`pyamx.trap.emulate_process()`), each
# the module of its one import path (pyamx.cpu.trap): an attribute, never a second module path
# (docs/architecture.md, "Where the public names live").
_LAZY = {
    "isa": ("table.isa", None),
    "bf16": ("table.bf16", None),
    "layout": ("table.layout", None),
    "emulator": ("emulator", None),
    "engine": ("emulator.engine", None),
    "trap": ("cpu.trap", None),
    "backend": ("_backend", "default_backend"),
    "backend_reason": ("_backend", "default_reason"),
    "tile_machine": ("_ops", "tile_machine"),
    "AMXResult": ("_result", "AMXResult"),
    "matmul": ("_matmul", "matmul"),
    "pack": ("_packed", "pack"),
    "PackedB": ("_packed", "PackedB"),
    "Numerics": ("emulator", "Numerics"),
    "TileMachine": ("emulator", "TileMachine"),
    "TileConfig": ("table.tilecfg", "TileConfig"),
}


def _dot_names() -> tuple[str, ...]:
    names: tuple[str, ...] = importlib.import_module(".table.isa", __name__).DOT_NAMES
    return names


def _is_submodule(name: str) -> bool:
    """``from pyamx import cpu`` asks this module for ``cpu`` before importing it: not a reason to load isa."""
    return any(os.path.exists(os.path.join(d, name + ".py")) or os.path.isdir(os.path.join(d, name))
               for d in __path__)  # noqa: F405  (the package path, not a star import's name)


if not TYPE_CHECKING:  # hidden from type checkers: a misspelt name is their error, not Any

    def __getattr__(name: str) -> object:
        with _first_use.LOCK:  # imports: a fork must not land in the middle of one (pyamx._first_use)
            return _load(name)

    def _load(name: str) -> object:
        if name == "__all__":
            value = [*_ALL_HEAD, *_dot_names(), *_ALL_TAIL]
        else:
            if name in _LAZY:
                module, attribute = _LAZY[name]
            elif not name.startswith("_") and not _is_submodule(name) and name in _dot_names():
                module, attribute = "_ops", name
            else:
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
            loaded = importlib.import_module(f".{module}", __name__)
            value = loaded if attribute is None else getattr(loaded, attribute)
        globals()[name] = value  # later lookups are plain attribute reads
        return value


def __dir__() -> list[str]:
    # The public names (__all__), not this module's own machinery (os, importlib, TYPE_CHECKING,
    # the lazy table) nor submodules an import happened to bind.
    return sorted({*_ALL_HEAD, *_dot_names(), *_ALL_TAIL})


def cpu_features() -> dict[str, object]:
    """Every detection stage as a dict (see :mod:`pyamx.cpu.detect`)."""
    from .cpu._runtime import cpu_features as _cpu_features

    return _cpu_features()


def show_runtime() -> None:
    """Print what a bug report needs: pyamx/python/numpy versions, the backend decision and why,
    the PYAMX_* settings, how the emulator controls MXCSR, then every detection stage and the kernels."""
    from .cpu._runtime import show_runtime as _show_runtime

    _show_runtime()


_ALL_HEAD = ("__version__", "backend", "backend_reason", "cpu_features", "show_runtime")
_ALL_TAIL = (
    "tile_machine", "isa", "matmul", "pack", "PackedB",
    "TileMachine", "TileConfig", "Numerics", "AMXResult", "bf16", "layout", "emulator", "engine", "trap", "errors",
    "AMXError", "AMXFault", "BackendError", "EnvironmentVariableError", "GeneralProtectionFault",
    "InvalidOpcodeFault", "MemoryAccessFault", "NativeUnavailableError", "ReentrantUseError", "WrongThreadError",
)
