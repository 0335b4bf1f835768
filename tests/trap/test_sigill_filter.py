"""A program's own seccomp filter decides its sigaction(SIGILL) calls under ``pyamx run`` too.

tests/programs/sigill_filter.c installs filters that answer EPERM to installing a SIGILL handler and
EACCES to querying one, then calls sigaction(), signal() and a raw rt_sigaction. Run directly, the
kernel answers (no AMX involved: the reference on any machine). Under ``pyamx run`` the preload
answers libc's SIGILL calls on the trap's virtual disposition: before it asked the filters, every
such call succeeded where the program's sandbox forbade it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from childproc import pyamx_run
from test_run import pytestmark  # noqa: F401  (same platform skip)

WANT = ["install denied ok", "signal denied ok", "raw install denied ok", "query allowed ok", "query denied ok",
        "install still denied ok", "other signals allowed ok"]


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("sigill_filter", "-O1")


def _checked(proc):
    if proc.returncode == 2 and "seccomp" in proc.stderr:
        pytest.skip(f"seccomp filters are not permitted here: {proc.stderr.strip()}")
    assert proc.returncode == 0 and proc.stdout.splitlines() == WANT, proc.stdout + proc.stderr


def test_the_kernel_lets_the_filters_decide(program):
    _checked(subprocess.run([str(program)], capture_output=True, text=True, timeout=60))


@pytest.mark.parametrize("guard", ["guard", "no-guard"])
def test_pyamx_run_lets_the_program_filters_decide(program, c_program, guard):
    c_program("sigill_filter", "-O1", needs_run=True)  # skips where pyamx run cannot work
    env = {k: v for k, v in os.environ.items() if k not in ("PYAMX_TRAP_EMULATION", "PYAMX_TRAP_GUARD")}
    args = ["--no-guard"] if guard == "no-guard" else []
    _checked(pyamx_run(*args, "--", program, timeout=120, env=env))
