"""A program under ``pyamx run`` ends when its own last thread does, as on silicon.

tests/programs/main_pthread_exit.c leaves main() with pthread_exit() while a
worker still computes a TDPBF16PS; the process must then end when the worker
returns, with status 0 and the worker's buffered output flushed. The guard's
supervisor thread (full trap mode) used to keep such a process alive forever,
with every signal blocked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pyamx
import pyamx.run

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "programs" / "main_pthread_exit.c"
PKG_PARENT = str(Path(pyamx.__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build tests/programs/main_pthread_exit.c")
    try:
        pyamx.run.preload_file()
    except pyamx.run.RunError as exc:
        pytest.skip(f"pyamx run is unavailable here: {exc}")
    out = tmp_path_factory.mktemp("programs") / "main_pthread_exit"
    proc = subprocess.run([cc, "-O1", "-pthread", "-o", str(out), str(PROGRAM)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{cc} cannot build {PROGRAM.name}: {proc.stderr.strip()[:300]}")
    return out


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "no-guard"])
def test_process_ends_with_its_last_own_thread(program, guard):
    argv = [sys.executable, "-m", "pyamx", "run", *([] if guard else ["--no-guard"]), "--", str(program)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=PKG_PARENT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the program never exited after its last thread ended: {exc}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "worker done 32", proc.stdout + proc.stderr
