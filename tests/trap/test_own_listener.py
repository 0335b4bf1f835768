"""A program's own seccomp listener under the guard: the kernel's EBUSY, and a line that says why.

While the guard (the trap mode's seccomp listener, docs/trap.md) holds the
process tree's one listener, a program's
``seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, ...)``
gets EBUSY from the kernel; filters cannot be removed, so that cannot be
avoided while the guard is on. The guard's filter is notified of that call,
its supervisor prints one line naming the cause and the remedy, and lets the
call through, so the program still gets the kernel's EBUSY; ``--stats`` counts
it. With ``--no-guard`` the listener is the program's
(tests/programs/own_listener.c).

Only the full trap mode has a guard: on AMX silicon (the complement mode) the
tests skip.
"""

from __future__ import annotations

import os

import pytest

from childproc import pyamx_run, require_a_listener_of_their_own
from test_run import _cpu_has_amx, pytestmark  # noqa: F401  (same platform skip)

LINE = "asked seccomp for a listener of its own: it gets EBUSY"


@pytest.fixture(scope="module")
def program(c_program):
    path = c_program("own_listener", "-O1", needs_run=True)
    if _cpu_has_amx():
        pytest.skip("this CPU has usable AMX: the complement mode installs no guard")
    require_a_listener_of_their_own()
    return path


def _env():
    env = dict(os.environ)
    for name in ("PYAMX_TRAP_EMULATION", "PYAMX_TRAP_GUARD"):
        env.pop(name, None)
    return env


def test_without_the_guard_the_listener_is_the_programs(program):
    proc = pyamx_run("--no-guard", "--", program, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if proc.stdout.startswith("unsupported"):
        pytest.skip(f"no seccomp listener is permitted here at all: {proc.stdout.strip()}")
    assert proc.stdout == "listener ok\n", proc.stdout + proc.stderr
    assert LINE not in proc.stderr


def test_under_the_guard_the_program_gets_ebusy_and_the_reason(program):
    proc = pyamx_run("--stats", "--", program, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if proc.stdout.startswith("unsupported"):
        pytest.skip(f"no seccomp listener is permitted here at all: {proc.stdout.strip()}")
    if proc.stdout == "listener ok\n":
        pytest.skip("no guard here (seccomp listeners with TSYNC unavailable): the listener was the program's")
    assert proc.stdout == "listener EBUSY\n", proc.stdout + proc.stderr
    assert proc.stderr.count(LINE) == 1, proc.stderr
    assert "--no-guard" in proc.stderr and "PYAMX_TRAP_GUARD=0" in proc.stderr
    assert "1 request(s) of the program for a seccomp listener got EBUSY" in proc.stderr, proc.stderr


def test_stats_report_the_refused_listeners_only_when_there_were_some():
    from pyamx.tools.run import RunStats, format_stats

    quiet = format_stats(RunStats(1, 1, 0, 0, {}, {}, ""))
    assert "seccomp listener" not in quiet
    loud = format_stats(RunStats(1, 1, 0, 0, {}, {}, "", listeners_refused=2))
    assert "2 request(s) of the program for a seccomp listener got EBUSY" in loud
    assert "--no-guard" in loud
