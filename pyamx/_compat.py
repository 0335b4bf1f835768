"""The public paths of the modules that moved into a layer's package: ``import pyamx.detect`` is ``pyamx.cpu.detect``.

A finder, not a file per path: ``pyamx/detect.py`` kept as a shim would make git see an edit of the
old file instead of a move, so work on the old path could not follow the module to its new home.
Each ``pyamx/<name>.pyi`` tells type checkers the same thing. ``importlib`` only: ``pyamx run`` loads this.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys

#: public path -> the module it is (docs/architecture.md, "Where the public names live")
MOVED = {
    "pyamx.isa": "pyamx.table.isa",
    "pyamx.tilecfg": "pyamx.table.tilecfg",
    "pyamx.bf16": "pyamx.table.bf16",
    "pyamx.layout": "pyamx.table.layout",
    "pyamx.engine": "pyamx.emulator.engine",
    "pyamx.detect": "pyamx.cpu.detect",
    "pyamx.native": "pyamx.cpu.native",
    "pyamx.trap": "pyamx.cpu.trap",
    "pyamx.cli": "pyamx.tools.cli",
    "pyamx.probe": "pyamx.tools.probe",
    "pyamx.vectors": "pyamx.tools.vectors",
    "pyamx.bench": "pyamx.tools.bench",
    "pyamx.run": "pyamx.tools.run",
    "pyamx.pytest_plugin": "pyamx.tools.pytest_plugin",
    "pyamx.demo": "pyamx.tools.demo",
    "pyamx.testing": "pyamx.tools.testing",
}


class _Alias:
    """Loads a public path as the very module of its home: one object, so patching either patches both."""

    def __init__(self, home: str) -> None:
        self.home = home

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default placeholder, replaced in exec_module

    def exec_module(self, module: object) -> None:
        # The import system hands back whatever sys.modules holds under the name after this call.
        sys.modules[module.__name__] = importlib.import_module(self.home)  # type: ignore[attr-defined]


class AliasFinder:
    """The meta path finder of :data:`MOVED` (last on ``sys.meta_path``: a real file always wins)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        """The spec of a public path that moved, else None (not ours)."""
        home = MOVED.get(name)
        # _Alias is a loader by its two methods; subclassing importlib.abc.Loader would cost `pyamx run` that import
        return None if home is None else importlib.machinery.ModuleSpec(name, _Alias(home))  # type: ignore[arg-type]


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (a second import of pyamx must not add another)."""
    if not any(type(f).__qualname__ == "AliasFinder" and type(f).__module__ == __name__ for f in sys.meta_path):
        sys.meta_path.append(AliasFinder())
