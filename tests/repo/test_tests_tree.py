"""The tests' own tree: every test file in a layer's folder that docs/testing.md names, none lost to pytest.

docs/testing.md, "Where a test goes", says which folder of tests/ holds the tests of which part of
the package; the shared helpers stay at tests/ (on sys.path through pyproject's ``pythonpath``).
A test file left at tests/ or in a folder the page does not name has no layer; one in a folder
whose name pytest skips while recursing (``build``, ``dist``, ``venv``, ...) would never run.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TESTING_MD = ROOT / "docs" / "testing.md"
# Folders of tests/ that hold no tests: the C sources the tests compile, and the committed data.
NOT_LAYERS = {"csrc", "programs", "data", "__pycache__"}


def documented_layers() -> set:
    """The folders named in the first column of docs/testing.md's table of layers."""
    text = TESTING_MD.read_text(encoding="utf-8")
    section = text.split("## Where a test goes", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `tests/([a-z_]+)/` \|", section, re.M))


def test_no_test_file_sits_at_the_root_of_tests():
    stray = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not stray, f"move these into the layer's folder that docs/testing.md names: {stray}"


def test_every_test_folder_is_a_documented_layer_and_every_layer_has_tests():
    layers = documented_layers()
    assert layers, "docs/testing.md has no table of layers under '## Where a test goes'"
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(".")} - NOT_LAYERS
    assert folders == layers, f"folders without a row in docs/testing.md: {sorted(folders - layers)}; " \
                              f"rows without a folder: {sorted(layers - folders)}"
    for layer in layers:
        assert list((TESTS / layer).glob("test_*.py")), f"tests/{layer}/ holds no test file"
    nested = sorted(str(p.relative_to(TESTS)) for p in TESTS.glob("*/*/test_*.py"))
    assert not nested, f"one folder level only (the layer): {nested}"


def test_pytest_recurses_into_every_layer(pytestconfig):
    # pytest's default norecursedirs holds `build`: a tests/build/ folder was silently never collected.
    skipped = [pattern for pattern in pytestconfig.getini("norecursedirs")]
    for layer in documented_layers():
        hits = [pattern for pattern in skipped if fnmatch.fnmatch(layer, pattern)]
        assert not hits, f"pytest does not recurse into tests/{layer}/ (norecursedirs {hits}): rename the folder"
