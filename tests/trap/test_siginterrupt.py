"""siginterrupt() and the signal() family under ``pyamx run`` (tests/programs/siginterrupt.c).

While the preload wraps the program's handlers it rebuilds signal(), bsd_signal() and sysv_signal()
on its interposed sigaction(), since glibc's call an internal one it cannot see. glibc's signal()
leaves SA_RESTART out for a signal that siginterrupt(sig, 1) made interrupting, before or after the
handler was installed, so the preload interposes siginterrupt() too and keeps that choice: a read()
interrupted by the handler's signal then fails with EINTR, as when the program runs directly on
this silicon (the reference).
"""

from __future__ import annotations

import pytest

from childproc import pyamx_run, require_pyamx_run, run_directly_on_silicon

EXPECTED = ["signal ok", "interrupt_after ok", "restart_again ok", "interrupt_before ok", "sysv_signal ok",
            "sysv_reset ok", "bad_signal ok"]


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("siginterrupt", "-O1", "-pthread")


def test_siginterrupt_under_pyamx_run(program):
    require_pyamx_run()
    proc = pyamx_run("--", program, timeout=300)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr


def test_siginterrupt_on_silicon(program):
    proc = run_directly_on_silicon(program, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr
