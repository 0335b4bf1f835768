"""Every ```python block of the README (and of docs/torch.md, the page users copy products from)
runs on its own, as a reader pastes it, on the emulator.

Each block gets a fresh interpreter, so a block that leans on names from an earlier one fails
here. Blocks that need PyTorch or JAX are fenced ```py and are not run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from childproc import PYAMX_HOME, child_env

README = Path(__file__).resolve().parents[2] / "README.md"
PAGES = (README, README.parent / "docs" / "torch.md")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
# py: needs a framework the tests do not install; sh: commands; "": printed output.
NOT_RUN = {"py", "sh", ""}

pytestmark = pytest.mark.skipif(not README.exists(), reason="the README is not beside the tests (installed elsewhere)")


def fenced_blocks(text: str) -> list:
    """``(info string, first line number of the code, code)`` of every fenced block."""
    return [(m.group(1).strip(), text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in FENCE.finditer(text)]


def _python_blocks() -> list:
    return [pytest.param(code, id=f"{page.name}:{line}")
            for page in PAGES if page.exists()
            for lang, line, code in fenced_blocks(page.read_text(encoding="utf-8")) if lang == "python"]


def test_every_block_is_run_or_marked_as_not_run():
    # A block fenced ```Python or ```python3 would otherwise be skipped without anyone noticing.
    blocks = fenced_blocks(README.read_text(encoding="utf-8"))
    odd = [(lang, line) for lang, line, _ in blocks if lang != "python" and lang not in NOT_RUN]
    assert not odd, f"README blocks fenced neither python nor one of {sorted(NOT_RUN)}: {odd}"
    assert any(lang == "python" for lang, _, _ in blocks), "the README has no ```python block to run"


def test_fenced_blocks_report_the_line_of_their_code():
    text = "intro\n```python\nx = 1\n```\n\n```sh\nls\n```\n"
    assert fenced_blocks(text) == [("python", 3, "x = 1\n"), ("sh", 7, "ls\n")]


@pytest.mark.parametrize("code", _python_blocks())
def test_readme_python_block_runs_alone(code):
    env = child_env(PYAMX_BACKEND="emulator")  # the same bits on every machine, AMX or not
    proc = subprocess.run([sys.executable, "-c", code], cwd=PYAMX_HOME, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the block failed on its own:\n{code}\n--- stderr ---\n{proc.stderr}"


def test_the_readme_stays_short():
    # The README says what pyamx is and how to start; the detail belongs in docs/ (its last section).
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 150, f"README.md has {lines} lines; keep it <= 150 and move the rest into docs/"
