"""The shape of the code, checked: which product files name an instruction, and which import which.

Issue 16's rules: the code of at most three product files names a mnemonic (the table and a kernel
per backend: everything else reads the row), and the pyamx modules import each other without a
circle. Comments, docstrings and generated files do not count: they explain or are derived.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from pyamx.table import generate, isa

# Reads the source tree only: CI runs it once per Python, not under every backend (.ci/run).
pytestmark = pytest.mark.static

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pyamx"

if not (ROOT / "build.py").exists():
    pytest.skip("the sources are not next to these tests (an installed copy of the tests)", allow_module_level=True)

#: what pyamx/table/generate.py writes from the table (derived, so naming the rows there is the point of them)
GENERATED = {rel.as_posix() for rel in generate.FILES}
MAX_FILES = 3


def product_files() -> list[str]:
    """Every product source file: the package's Python, the C sources but the generated ones, build.py."""
    found = [*PACKAGE.rglob("*.py"), *(ROOT / "csrc").rglob("*.c"), *(ROOT / "csrc").rglob("*.h"), ROOT / "build.py"]
    rels = (p.relative_to(ROOT).as_posix() for p in found)
    return sorted(r for r in rels if r not in GENERATED)


def python_code(text: str) -> dict[int, str]:
    """Line number -> the code tokens of that line: comments dropped, and docstrings (a string token that
    is a statement by itself); a string inside an expression is code and stays."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    starts = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    lines: dict[int, list[str]] = {}
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING:
            before = next((t for t in reversed(tokens[:i]) if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
            after = next(t for t in tokens[i + 1:] if t.type != tokenize.COMMENT)
            if (before is None or before.type in starts) and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
        lines.setdefault(tok.start[0], []).append(tok.string)
    return {n: " ".join(parts) for n, parts in lines.items()}


def c_code(text: str) -> dict[int, str]:
    """Line number -> the line with /* */ and // comments blanked (line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return dict(enumerate(text.split("\n"), 1))


def code_lines(rel: str) -> dict[int, str]:
    text = (ROOT / rel).read_text(encoding="utf-8")
    return python_code(text) if rel.endswith(".py") else c_code(text)


def mnemonic_pattern(mnemonic: str) -> re.Pattern[str]:
    """The mnemonic in either case as a whole word, where a word ends at anything but a letter or digit:
    ``tdpbssd``, ``PYAMX_OP_TDPBSSD`` and ``emulate_tdpbssd`` name it; TILELOADDT1 does not name TILELOADD."""
    return re.compile(rf"(?<![A-Za-z0-9]){mnemonic}(?![A-Za-z0-9])", re.I)


def naming_files(mnemonic: str, sources: dict[str, dict[int, str]]) -> dict[str, list[int]]:
    """File -> the code lines that name ``mnemonic``."""
    pattern = mnemonic_pattern(mnemonic)
    hits = {rel: [n for n, line in lines.items() if pattern.search(line)] for rel, lines in sources.items()}
    return {rel: numbers for rel, numbers in hits.items() if numbers}


@pytest.fixture(scope="module")
def sources() -> dict[str, dict[int, str]]:
    return {rel: code_lines(rel) for rel in product_files()}


def test_the_scanner_sees_code_and_skips_comments_and_docstrings():
    lines = python_code('"""TDPBSSD."""\nx = "tdpbssd"  # TDPBUUD\ndef f():\n    """TDPBUSD"""\n    return g(tdpbsud)\n')
    found = {m: [n for n, line in lines.items() if mnemonic_pattern(m).search(line)]
             for m in ("TDPBSSD", "TDPBUUD", "TDPBUSD", "TDPBSUD")}
    assert found == {"TDPBSSD": [2], "TDPBUUD": [], "TDPBUSD": [], "TDPBSUD": [5]}
    c = c_code("/* TDPBSSD\n */ int PYAMX_OP_TDPBUUD; // TDPBUSD\n")
    assert [n for n, line in c.items() if "TDPBUUD" in line] == [2] and "TDPBSSD" not in "".join(c.values())
    assert not mnemonic_pattern("TILELOADD").search("tileloaddt1")


def test_isa_and_its_kernels_are_the_only_code_that_names_an_instruction(sources):
    too_many = []
    for insn in isa.TABLE:
        files = naming_files(insn.mnemonic, sources)
        if len(files) > MAX_FILES:
            where = "; ".join(f"{rel}:{','.join(map(str, lines))}" for rel, lines in sorted(files.items()))
            too_many.append(f"{insn.mnemonic} in {len(files)} files: {where}")
    assert not too_many, "\n".join(too_many)


# -- the import graph --------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (its level counts from the importing package)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level, inside-functions) import graphs over the pyamx modules: module -> pyamx modules it imports.

    ``from . import x`` counts as importing ``pyamx.x`` where that is a module, else ``pyamx`` itself;
    an import under ``if TYPE_CHECKING:`` is not run, so it counts in neither graph. Importing
    ``pyamx.a.b`` runs ``pyamx.a`` first, so the parent packages count too.
    """
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p): p for p in paths}
    top: dict[str, set[str]] = {m: set() for m in modules}
    inner: dict[str, set[str]] = {m: set() for m in modules}

    def targets(name: str, node: ast.AST, is_package: bool) -> set[str]:
        found = set()
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            base = _resolve(name, is_package, node)
            candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for c in candidates:
            while c and c not in modules:  # `import pyamx.x.y` of a name: the module that holds it
                c = c.rpartition(".")[0]
            while c and c.startswith("pyamx"):
                if c != name and not name.startswith(c + "."):  # a package's own parents are already running
                    found.add(c)
                c = c.rpartition(".")[0]
        return found

    def walk(name: str, body: list, is_package: bool, in_function: bool) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                walk(name, node.orelse, is_package, in_function)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top)[name] |= targets(name, node, is_package)
            nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    walk(name, children, is_package, in_function or nested)
            if isinstance(node, ast.ClassDef):
                continue

    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        walk(name, tree.body, path.name == "__init__.py", False)
    return top, inner


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), each as its modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_circle_and_only_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_relative_imports_and_skips_type_checking_ones():
    top, inner = import_graphs()
    assert "pyamx.table.isa" in top["pyamx._ops"] and "pyamx.emulator" in top["pyamx._ops"]
    assert "pyamx.table" in top["pyamx._ops"]  # importing pyamx.table.isa runs its package first
    assert "pyamx._dot_types" not in top["pyamx._ops"]  # imported under TYPE_CHECKING only
    assert "pyamx.emulator.machine" in top["pyamx.emulator"]


def test_no_import_circle_among_pyamx_modules_at_module_level():
    top, _ = import_graphs()
    assert cycles(top) == []


#: Circles that close only through an import inside a function (run at call time, when both ends are
#: loaded), each with why it stays; listed exactly, so a new one fails and a removed one must go. None
#: is left: the last (the numerics rule -> the emulator package -> its engine -> the rule) went when
#: the numerics options moved to pyamx/table/numerics.py.
KNOWN_FUNCTION_LEVEL_CYCLES: list[list[str]] = []


def test_import_circles_through_functions_are_the_known_ones():
    top, inner = import_graphs()
    both = {m: top[m] | inner[m] for m in top}
    assert cycles(both) == KNOWN_FUNCTION_LEVEL_CYCLES


def test_detect_only_detects():
    """detect.py reads and judges; the native start (the permission, the child, the trap switch) and the
    runtime report (which asks the backend choice, which asks detection) are other modules'."""
    top, inner = import_graphs()
    assert not {"pyamx._backend", "pyamx.cpu.native", "pyamx.emulator", "pyamx.emulator.engine",
                "pyamx.cpu._runtime", "pyamx.cpu._native_start"} & (top["pyamx.cpu.detect"] | inner["pyamx.cpu.detect"])
    # nor does it act itself: no permission request, no child, no trap or complement mode switched on
    tree = ast.parse((ROOT / "pyamx" / "cpu" / "detect.py").read_text())
    called = {node.func.attr for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert not called & {"pyamx_request_permission", "pyamx_probe_child", "enable", "complement",
                         "emulate_process", "pyamx_set_trap_hook", "pyamx_set_complemented"}
