"""The package's folders are its layers (issue 16, item 4), and the public paths users import survive.

``pyamx/table/`` (the instruction table and formats), ``pyamx/emulator/`` (the emulator and its
engines), ``pyamx/cpu/`` (detection, the native kernels, trap control), ``pyamx/tools/`` (the command,
probe, vectors, bench, run, the pytest plugin); the top level keeps the public front. A module that
moved out of the top level keeps its public path: pyamx/_compat.py's finder makes ``import pyamx.detect``
the very module ``pyamx.cpu.detect`` and ``pyamx/detect.pyi`` says so to type checkers (docs/architecture.md,
"Where the public names live"). These tests keep the layout from flattening again and the public paths
from drifting into copies.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyamx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pyamx"

if not (ROOT / "build.py").exists():
    pytest.skip("the sources are not next to these tests (an installed copy of the tests)", allow_module_level=True)

#: the layers' packages under pyamx/
LAYERS = {"table", "emulator", "cpu", "tools"}

#: what stays at the top level (besides the compat modules): the public front and what every layer shares
FRONT = {
    "__init__", "__main__", "errors",                      # the names users import, the exceptions
    "_ops", "_matmul", "_matmul_complex", "_packed",       # the public functions' dispatch (and pyamx.pack)
    "_matmul_out", "_matmul_memory",                       # matmul's out=/out_dtype= and its memory bound
    "_backend", "_numerics_rule",                          # which backend and which numerics a call gets
    "_validate", "_dlpack", "_result", "_types",           # operands in (DLPack too), labelled results out, types
    "_env", "_fpenv", "_docs", "_version",                 # shared by every layer (_fpenv: bf16 and the engines)
    "_first_use",                                          # the one-time work's lock, which fork waits for
    "_convert",                                            # shared by every layer: bf16, the engines, matmul
    "_threads",                                            # threads= checked and defaulted once: engines, native, pack
    "_compat",                                             # the public paths of the modules that moved
    "_buildinfo", "_dot_types",                            # written by build.py
}

#: public path -> the module it is (a type stub each at pyamx/<name>.pyi), written out independently of
#: pyamx/_compat.py so a path dropped there fails here
COMPAT = {
    "isa": "pyamx.table.isa", "tilecfg": "pyamx.table.tilecfg", "bf16": "pyamx.table.bf16",
    "layout": "pyamx.table.layout",
    "engine": "pyamx.emulator.engine",
    "detect": "pyamx.cpu.detect", "native": "pyamx.cpu.native", "trap": "pyamx.cpu.trap",
    "cli": "pyamx.tools.cli", "probe": "pyamx.tools.probe", "vectors": "pyamx.tools.vectors",
    "bench": "pyamx.tools.bench", "run": "pyamx.tools.run", "pytest_plugin": "pyamx.tools.pytest_plugin",
    "demo": "pyamx.tools.demo", "testing": "pyamx.tools.testing",
}

#: `pyamx.` followed by a word in the docs that is no Python path: file names, URLs, the preload library
NOT_PYTHON = {"pyamx.h", "pyamx.git", "pyamx.invalid", "pyamx._amxpreload"}  # _amxpreload: no Python in it


def test_the_top_level_holds_the_front_and_the_public_paths_stubs_only():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules - FRONT == set(), "a new module belongs in one of the layers' packages"
    assert {p.stem for p in PACKAGE.glob("*.pyi")} == set(COMPAT)
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == LAYERS


def test_every_layer_package_imports_nothing():
    """Loading pyamx.cpu.trap must not load the native backend (``pyamx run`` starts without numpy), nor
    pyamx.cpu.detect the backend choice: so the layers' ``__init__`` files are docstrings only."""
    for layer in LAYERS - {"emulator"}:  # pyamx.emulator is a public face of its own
        tree = ast.parse((PACKAGE / layer / "__init__.py").read_text(encoding="utf-8"))
        assert [type(node) for node in tree.body] == [ast.Expr], layer


def test_the_finder_knows_exactly_these_paths():
    from pyamx import _compat

    assert _compat.MOVED == {f"pyamx.{name}": home for name, home in COMPAT.items()}
    assert _compat.AliasFinder.find_spec("pyamx.no_such_module") is None
    assert _compat.AliasFinder.find_spec("pyamx.errors") is None  # a real module is not the finder's


@pytest.mark.parametrize("name", sorted(COMPAT))
def test_a_public_paths_stub_names_its_home_and_nothing_else(name):
    """A docstring and a star import of the home: what type checkers see is what runs."""
    package, _, leaf = COMPAT[name].removeprefix("pyamx.").rpartition(".")
    assert leaf == name and package in LAYERS
    body = ast.parse((PACKAGE / f"{name}.pyi").read_text(encoding="utf-8")).body
    assert [ast.unparse(node) for node in body[1:]] == [f"from .{package}.{name} import *"]


@pytest.mark.parametrize("name", sorted(COMPAT))
def test_a_compat_path_is_the_very_module_of_its_home_first_import_or_not(name):
    """In a fresh interpreter, the public path imported first, then the home (and the other way round):
    every spelling gives one module object, and patching through the public path patches the home."""
    home = COMPAT[name]
    code = f"""
import importlib, sys
first, second = sys.argv[1], sys.argv[2]
a = importlib.import_module(first)
b = importlib.import_module(second)
assert a is b, (a, b)
import pyamx
from pyamx import {name} as via_from
assert via_from is a and getattr(pyamx, {name!r}) is a and sys.modules["pyamx.{name}"] is a
assert a.__name__ == {home!r}, a.__name__
import pyamx.{name}
pyamx.{name}.layout_probe = 1
assert importlib.import_module({home!r}).layout_probe == 1
print("same")
"""
    for order in ((f"pyamx.{name}", home), (home, f"pyamx.{name}")):
        proc = subprocess.run([sys.executable, "-c", code, *order], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)
        assert proc.returncode == 0 and proc.stdout.strip() == "same", (order, proc.stderr[-2000:])


def test_monkeypatching_a_public_path_patches_the_real_module(monkeypatch):
    home = importlib.import_module("pyamx.cpu.detect")
    monkeypatch.setattr("pyamx.detect.report", lambda: "patched")
    assert home.report() == "patched"


def _imports(path: Path, module: str) -> set[str]:
    """Every pyamx module a file's import statements name, relative ones resolved (TYPE_CHECKING ones too)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)] + ([node.module] if node.module else [])
            else:
                base = (node.module or "").split(".")
            found.add(".".join(base))
            found |= {".".join([*base, alias.name]) for alias in node.names}
    return {name for name in found if name.startswith("pyamx")}


def test_no_pyamx_module_imports_a_compat_path():
    """The package's own code names the homes: the public paths are for users, and an import of one
    would hide a layer's edge from tests/test_architecture.py's graph."""
    public = {f"pyamx.{name}" for name in COMPAT}
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        if hits := _imports(path, module) & public:
            offenders[module] = sorted(hits)
    assert offenders == {}


def _resolve(dotted: str) -> object:
    """``pyamx.a.b.c`` as attribute reads, importing a submodule where no attribute has the name."""
    obj: object = pyamx
    for part in dotted.split(".")[1:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            obj = importlib.import_module(f"{obj.__name__}.{part}")  # type: ignore[attr-defined]
    return obj


def test_every_pyamx_path_the_docs_and_the_metadata_name_resolves():
    """README.md, docs/*.md and pyproject.toml (entry points, the packages list): each ``pyamx.x.y`` they
    name imports or reads, so a move cannot leave a user's documented path behind."""
    texts = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").glob("*.md"))]
    named = set()
    for path in texts:
        # a trailing `*` or digit run cut short is a pattern (pyamx.tdp*), not a path
        named |= {m.group(1) for m in re.finditer(r"\b(pyamx(?:\.\w+)+)(?![\w*])", path.read_text(encoding="utf-8"))}
    named -= NOT_PYTHON
    assert {"pyamx.cli", "pyamx.pytest_plugin", "pyamx.detect"} <= named  # the scan sees them
    missing = []
    for dotted in sorted(named):
        try:
            _resolve(dotted)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{dotted}: {exc}")
    assert missing == []


def test_setuptools_ships_every_package():
    """``[tool.setuptools] packages`` is an explicit list: a package missing from it is missing from the wheel."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = re.search(r"^packages = \[(.*)\]$", text, re.M)
    assert listed is not None
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert set(re.findall(r'"([\w.]+)"', listed.group(1))) == found


def test_dir_lists_the_public_names_only():
    names = dir(pyamx)
    assert names == sorted(pyamx.__all__)
    for machinery in ("os", "importlib", "TYPE_CHECKING", "_LAZY", "_compat", "annotations", "cpu", "tools"):
        assert machinery not in names
    for name in names:  # and each one it lists is there
        getattr(pyamx, name)
