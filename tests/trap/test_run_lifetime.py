"""A program under ``pyamx run`` ends when its own last thread does, as on silicon.

tests/programs/main_pthread_exit.c leaves main() with pthread_exit() while a
worker still computes a TDPBF16PS; the process must then end when the worker
returns, with status 0 and the worker's buffered output flushed. The guard's
supervisor thread (full trap mode) used to keep such a process alive forever,
with every signal blocked.
"""

from __future__ import annotations

import subprocess

import pytest

from childproc import pyamx_run


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("main_pthread_exit", "-O1", "-pthread", needs_run=True)


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "no-guard"])
def test_process_ends_with_its_last_own_thread(program, guard):
    try:
        proc = pyamx_run(*([] if guard else ["--no-guard"]), "--", program, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the program never exited after its last thread ended: {exc}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "worker done 32", proc.stdout + proc.stderr
