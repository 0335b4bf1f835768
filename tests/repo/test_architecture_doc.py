"""docs/architecture.md names every product file: its path, or its name in a row of its own folder.

A newcomer reads that page for the module plan; a file it does not name is one nobody explained.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
#: files of the product: the package's Python modules and the C sources and headers
PRODUCT = ("pyamx/", "csrc/")
SUFFIXES = (".py", ".c", ".h")

pytestmark = pytest.mark.static


def _product_files() -> list:
    try:
        listed = subprocess.run(["git", "ls-files", *PRODUCT], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [p.relative_to(ROOT).as_posix() for d in PRODUCT for p in (ROOT / d).rglob("*") if p.is_file()]
    return sorted(p for p in listed if p.endswith(SUFFIXES) and not p.endswith("__init__.py"))


def _named(path: str, text: str) -> bool:
    if f"`{path}`" in text:
        return True
    folder, name = path.rsplit("/", 1)
    # a grouped row: "| `csrc/trap/isa/fp8_dot.c`, `row_ops.c` |" names row_ops.c in its folder's row
    return any(f"`{folder}/" in line and f"`{name}`" in line for line in text.splitlines())


@pytest.mark.skipif(not DOC.exists(), reason="docs/ is not beside the tests (installed elsewhere)")
def test_architecture_names_every_product_file():
    text = DOC.read_text(encoding="utf-8")
    missing = [p for p in _product_files() if not _named(p, text)]
    assert not missing, f"docs/architecture.md does not name: {' '.join(missing)}"
