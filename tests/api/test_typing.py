"""``mypy --strict`` on user code sees pyamx's real types: wrong calls are reported, right ones are not.

The user scripts are written to tmp_path and checked as a user's project
would be: pyamx's own modules are followed silently (their internals are
not what is tested), the scripts' errors are the result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyamx
from pyamx.table import isa

# Reads the source tree only: CI runs it once per Python, not under every backend (.ci/run).
pytestmark = pytest.mark.static

pytest.importorskip("mypy", reason="mypy is not installed (the test extra brings it: pip install -e '.[test]')")
pytest.importorskip("typing_extensions", reason="the script's assert_type needs typing_extensions (a mypy dependency)")

# Calls that are right: every one also runs (below), and assert_type fails on Any, so a type that
# degrades to Any is reported as an error here.
GOOD = """
import numpy as np
import numpy.typing as npt
from typing_extensions import assert_type

import pyamx
from pyamx.table import bf16, layout

a32 = np.ones((4, 6), np.float32)
a: npt.NDArray[np.uint16] = bf16.from_float32(a32)
assert_type(bf16.to_float32(a), npt.NDArray[np.float32])
assert_type(bf16.widen_bits(a), npt.NDArray[np.uint32])
r = pyamx.matmul(a, a.T, kind="bf16", backend="emulator", threads=1)
assert_type(r, pyamx.AMXResult)
assert_type(r.backend, str | None)
assert_type(pyamx.matmul(a32, a32.T, kind="bf16", backend="emulator").rounded_to, str | None)
w = pyamx.pack(a.T, threads=1)
assert_type(w, pyamx.PackedB)
assert_type(pyamx.matmul(a, w, backend="emulator"), pyamx.AMXResult)
c = np.zeros((4, 3), np.float32)
assert_type(pyamx.tdpbf16ps(c, a, layout.pack_pairs(a.T[:, :3]), backend="emulator"), pyamx.AMXResult)
assert_type(pyamx.emulator.tdpbf16ps(c, a, a[:3], numerics="straight"), pyamx.AMXResult)
q = np.zeros((4, 4), np.int8)
for f in (pyamx.tdpbssd, pyamx.tdpbsud, pyamx.tdpbusd, pyamx.tdpbuud):
    assert_type(f(np.zeros((4, 1), np.int32), q, q[:1], engine="numpy"), pyamx.AMXResult)
h = np.ones((4, 2), np.float16)
assert_type(pyamx.tdpfp16ps(c[:, :1], h, h[:1], backend="emulator"), pyamx.AMXResult)
m = pyamx.TileMachine("sdm", engine="numpy")
m.ldtilecfg(pyamx.TileConfig.make({0: (4, 8), 1: (4, 8), 2: (2, 8)}))
m.tdpbf16ps(0, 1, 2)
assert_type(m.tile(0), npt.NDArray[np.uint8])
assert_type(pyamx.tile_machine(backend="emulator"), pyamx.TileMachine)
"""

# line -> what mypy must say about it
BAD = {
    "pyamx.matmul(1, 2)": 'Argument 1 to "matmul" has incompatible type "int"',
    "pyamx.tdpbf16ps(1.0, 2, 3)": 'Argument 1 to "tdpbf16ps" has incompatible type "float"',
    "pyamx.emulator.tdpbssd(None, [[1]], [[1]])": 'Argument 1 to "tdpbssd" has incompatible type "None"',
    "pyamx.matmul([[1]], [[2]], kind=3)": 'Argument "kind" to "matmul" has incompatible type "int"',
    "pyamx.table.bf16.from_float32(None)": 'Argument 1 to "from_float32" has incompatible type "None"',
    "pyamx.TileMachine().tdpbf16ps('0', 1, 2)": 'Argument 1 to "tdpbf16ps" of "TileMachine"',
    "pyamx.matmull": 'Module has no attribute "matmull"',
}


def _mypy(tmp_path: Path, *scripts: Path) -> str:
    root = Path(pyamx.__file__).resolve().parent.parent
    env = dict(os.environ)
    if root.name not in ("site-packages", "dist-packages"):  # a source checkout or an editable install
        env["MYPYPATH"] = str(root)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(tmp_path / ".mypy_cache"), *map(str, scripts)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert "Cannot find implementation or library stub" not in run.stdout, run.stdout
    return run.stdout + run.stderr


def _good_script() -> str:
    # The dot products are generated from pyamx.table.isa at import; their declarations for type checkers
    # are written out, so every row must be seen by mypy under each of its three names.
    names = "".join(f"_{n} = (pyamx.{n}, pyamx.emulator.{n}, pyamx.TileMachine.{n})\n" for n in isa.DOT_NAMES)
    return textwrap.dedent(GOOD) + names


def test_mypy_strict_reports_wrong_calls_and_accepts_right_ones(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(_good_script())
    bad.write_text("import pyamx\n" + "".join(f"{line}\n" for line in BAD))
    out = _mypy(tmp_path, good, bad)
    assert not [line for line in out.splitlines() if line.startswith("good.py")], out
    reported: dict = {}  # line number -> every error mypy gives for it
    for number, text in re.findall(r"^bad\.py:(\d+): error: (.*)$", out, re.M):
        reported.setdefault(int(number), []).append(text)
    for number, (line, message) in enumerate(BAD.items(), start=2):
        assert any(message in text for text in reported.get(number, [])), f"{line!r} is not reported:\n{out}"


def test_the_right_calls_are_right_at_run_time_too(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(_good_script())
    env = dict(os.environ, PYAMX_BACKEND="emulator")
    run = subprocess.run([sys.executable, str(good)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


# -- pyamx's own modules under `mypy --strict` (the configuration in pyproject.toml) -----------------

_CHECKOUT = Path(__file__).resolve().parents[2]

#: the modules pyproject.toml may exempt from the strict check: none (the last six left it with issue 30)
_NOT_YET_STRICT: set[str] = set()


def _mypy_config() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11 (tomllib)")
    return tomllib.loads((_CHECKOUT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_pyamx_is_clean_under_mypy_strict(tmp_path):
    if not (_CHECKOUT / "pyproject.toml").is_file():
        pytest.skip("not a source checkout: the mypy configuration is in pyproject.toml")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(_CHECKOUT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / ".mypy_cache")],
        cwd=_CHECKOUT, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_strict_check_covers_pyamx_and_exempts_no_new_module():
    config = _mypy_config()
    assert config["strict"] is True and config["files"] == ["pyamx"], config
    exempt = {m for o in config.get("overrides", []) if o.get("ignore_errors") for m in o["module"]}
    assert exempt <= _NOT_YET_STRICT, f"newly exempt from mypy --strict: {sorted(exempt - _NOT_YET_STRICT)}"
    # a strict module may call into these untyped: as good as exempting them
    untyped_callees = set(config.get("untyped_calls_exclude", []))
    assert untyped_callees <= _NOT_YET_STRICT, f"untyped calls allowed into: {sorted(untyped_callees - _NOT_YET_STRICT)}"
