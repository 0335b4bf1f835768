"""The package's folders are its layers (issue 16, item 4), and each module has one import path (issue 30, item 4).

``pyamx/table/`` (the instruction table and formats), ``pyamx/emulator/`` (the emulator and its
engines), ``pyamx/cpu/`` (detection, the native kernels, trap control), ``pyamx/tools/`` (the command,
probe, vectors, bench, run, the pytest plugin); the top level keeps the public front. A module's one
path is its home: 0.1's paths (``pyamx.detect`` for ``pyamx.cpu.detect``) import nothing, and what the
README and the guide show (``pyamx.trap.emulate_process()``) is a lazy attribute of the package bound to
the home (docs/architecture.md, "Where the public names live"). These tests keep the layout from
flattening again and the docs' names from drifting.
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

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pyamx"

if not (ROOT / "build.py").exists():
    pytest.skip("the sources are not next to these tests (an installed copy of the tests)", allow_module_level=True)

#: the layers' packages under pyamx/
LAYERS = {"table", "emulator", "cpu", "tools"}

#: what stays at the top level: the public front and what every layer shares
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
    "_buildinfo", "_dot_types",                            # written by build.py
}

#: 0.1's path -> the module's one home, written out independently of the package
OLD_PATHS = {
    "isa": "pyamx.table.isa", "tilecfg": "pyamx.table.tilecfg", "bf16": "pyamx.table.bf16",
    "layout": "pyamx.table.layout",
    "engine": "pyamx.emulator.engine",
    "detect": "pyamx.cpu.detect", "native": "pyamx.cpu.native", "trap": "pyamx.cpu.trap",
    "cli": "pyamx.tools.cli", "probe": "pyamx.tools.probe", "vectors": "pyamx.tools.vectors",
    "bench": "pyamx.tools.bench", "run": "pyamx.tools.run", "pytest_plugin": "pyamx.tools.pytest_plugin",
    "demo": "pyamx.tools.demo", "testing": "pyamx.tools.testing",
}

#: the modules the README and the guide show as attributes of the package (``pyamx.trap.emulate_process()``)
DOCUMENTED_ATTRIBUTES = {"isa", "bf16", "layout", "engine", "trap"}

#: `pyamx.` followed by a word in the docs that is no Python path: file names, URLs, the preload library
NOT_PYTHON = {"pyamx.h", "pyamx.git", "pyamx.invalid", "pyamx._amxpreload"}  # _amxpreload: no Python in it


def test_the_top_level_holds_the_front_only_and_no_type_stubs():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules - FRONT == set(), "a new module belongs in one of the layers' packages"
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == LAYERS
    # type checkers read the sources (py.typed): a stub could only be a second path or a second copy
    stubs = {p.relative_to(PACKAGE).with_suffix("").as_posix() for p in PACKAGE.rglob("*.pyi")}
    assert stubs == set(), stubs


def test_every_layer_package_imports_nothing():
    """Loading pyamx.cpu.trap must not load the native backend (``pyamx run`` starts without numpy), nor
    pyamx.cpu.detect the backend choice: so the layers' ``__init__`` files are docstrings only."""
    for layer in LAYERS - {"emulator"}:  # pyamx.emulator is a public face of its own
        tree = ast.parse((PACKAGE / layer / "__init__.py").read_text(encoding="utf-8"))
        assert [type(node) for node in tree.body] == [ast.Expr], layer


@pytest.mark.parametrize("name", sorted(OLD_PATHS))
def test_an_old_path_imports_nothing_and_its_home_is_the_module(name):
    """In a fresh interpreter (no module cached yet): ``import pyamx.<old>`` fails, no finder was installed,
    the home imports under its own name only, and a documented attribute is the home's very module."""
    home = OLD_PATHS[name]
    code = f"""
import importlib, sys
finders = list(sys.meta_path)
import pyamx
assert sys.meta_path == finders, sys.meta_path
try:
    importlib.import_module("pyamx.{name}")
except ModuleNotFoundError as exc:
    assert exc.name == "pyamx.{name}", exc.name
else:
    raise AssertionError("pyamx.{name} imports")
module = importlib.import_module({home!r})
assert module.__name__ == {home!r}
assert [n for n, m in sys.modules.items() if m is module] == [{home!r}]
if {name in DOCUMENTED_ATTRIBUTES!r}:
    assert getattr(pyamx, {name!r}) is module
    assert "pyamx.{name}" not in sys.modules
print("one path")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "one path", proc.stderr[-2000:]


def test_the_documented_attributes_are_the_homes_modules_and_patch_them(monkeypatch):
    for name in sorted(DOCUMENTED_ATTRIBUTES):
        assert getattr(pyamx, name) is importlib.import_module(OLD_PATHS[name])
        assert name in pyamx.__all__
    from pyamx import trap  # the guide's spelling: an attribute, found before any submodule import

    assert trap is importlib.import_module("pyamx.cpu.trap")
    monkeypatch.setattr("pyamx.trap.process_emulated", lambda: "patched")
    assert importlib.import_module("pyamx.cpu.trap").process_emulated() == "patched"
    # as a reader of the README runs them: a fresh interpreter, `import pyamx` and nothing else
    code = ("import sys, pyamx\n"
            "pyamx.trap.emulate_process, pyamx.engine.reset_environment, pyamx.bf16.from_float32, pyamx.isa.DOTS\n"
            "from pyamx import bf16, trap\n"
            "assert trap is sys.modules['pyamx.cpu.trap'] and bf16 is sys.modules['pyamx.table.bf16']\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


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


def test_no_pyamx_module_imports_an_old_path():
    """The package's own code names the homes: an import through an attribute of the package
    (``from pyamx import trap``) would hide a layer's edge from tests/repo/test_architecture.py's graph."""
    public = {f"pyamx.{name}" for name in OLD_PATHS}
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
    assert {"pyamx.tools.cli", "pyamx.tools.pytest_plugin", "pyamx.trap.emulate_process"} <= named  # the scan sees them
    missing = []
    for dotted in sorted(named):
        try:
            _resolve(dotted)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{dotted}: {exc}")
    assert missing == []


def test_every_import_statement_the_readme_and_the_docs_show_runs():
    """``import pyamx.x`` and ``from pyamx.x import y`` as the docs write them (code blocks and inline):
    the statements a reader copies, so a short name used as an import path fails here."""
    statements = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        statements |= {("import", m.group(1), "") for m in re.finditer(r"^\s*import (pyamx(?:\.\w+)*)\b", text, re.M)}
        statements |= {("import", m.group(1), "") for m in re.finditer(r"`import (pyamx(?:\.\w+)*)[;`]", text)}
        statements |= {("from", m.group(1), m.group(2))
                       for m in re.finditer(r"\bfrom (pyamx(?:\.\w+)*) import (\w+)", text)}
    assert ("from", "pyamx", "bf16") in statements  # the README's, so the scan sees them
    failed = []
    for kind, module, name in sorted(statements):
        code = f"import {module}" if kind == "import" else f"from {module} import {name}"
        try:
            exec(code, {})
        except ImportError as exc:
            failed.append(f"{code}: {exc}")
    assert failed == []


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
    for machinery in ("os", "importlib", "TYPE_CHECKING", "_LAZY", "annotations", "cpu", "tools"):
        assert machinery not in names
    for name in names:  # and each one it lists is there
        getattr(pyamx, name)
