"""The README's Python examples run as written, and the tile-machine example computes what the one-shot call does."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.skipif(not README.exists(), reason="the README is not beside the tests (installed elsewhere)")
def test_readme_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)
    assert np.array_equal(namespace["out"].view(np.uint32), namespace["r"].view(np.uint32))
