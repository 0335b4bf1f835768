"""Handlers installed by a raw rt_sigaction system call (tests/programs/raw_sigaction.c).

``pyamx run``'s interposed sigaction() never sees a raw system call (an inline ``syscall``
instruction, ``syscall(SYS_rt_sigaction, ...)``, libc's internal calls). In the full trap mode the
guard's seccomp filter is notified of them and its supervisor installs the trampoline on the
program's behalf, so those handlers get a tile state frame of their own too, and the caller sees
what the kernel would answer: the action as installed, the kernel's EINVAL and EFAULT. Run directly
on AMX silicon the program checks the kernel's own answers; under ``pyamx run`` there (the
complement mode: no guard, raw calls reach the kernel as they are) it checks they stay those. The
full trap mode runs it in the QEMU guest of docs/testing.md, where it also checks that the raw
installs went through the trampoline and that a raw query of a handler installed through libc
reports libc's action.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from childproc import pyamx_run, require_a_listener_of_their_own, require_pyamx_run, \
    run_directly_on_silicon
from test_run import _cpu_has_amx

BASE = ["raw ok", "insn ok"]
REST = ["query ok", "errors ok", "cancel ok"]


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("raw_sigaction", "-O1", "-pthread")


def test_raw_rt_sigaction_under_pyamx_run(program):
    require_pyamx_run()
    if _cpu_has_amx():
        proc = pyamx_run("--", program, timeout=300)
        want = BASE + REST
    else:
        require_a_listener_of_their_own()
        proc = pyamx_run("--", program, "mixed", "wrapped", timeout=300)
        want = BASE + ["wrapped ok"] + REST + ["mixed ok"]
    assert proc.returncode == 0 and proc.stdout.splitlines() == want, proc.stdout + proc.stderr


def test_raw_rt_sigaction_on_silicon(program):
    proc = run_directly_on_silicon(program, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == BASE + REST, proc.stdout + proc.stderr
    # The case the guard answers in the full trap mode: here the kernel itself answers it.
    proc = subprocess.run([str(program), "mixed"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == BASE + REST + ["mixed ok"], proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def copied_trampoline(c_program):
    return c_program("trampoline_default", "-O1")


def test_a_copied_trampoline_does_the_default_action(copied_trampoline):
    """A raw install of the action a raw query of a wrapped signal returned (the trampoline, without
    the guard) stands for SIG_DFL where the program installed nothing: ignored for SIGWINCH, the
    end of the process for SIGTERM, as signal(7) defines SIG_DFL."""
    require_pyamx_run()
    proc = pyamx_run("--", copied_trampoline, timeout=300)
    if proc.stdout == "hidden\n" and not _cpu_has_amx():
        pytest.skip("the guard answers raw queries with the program's own handler: the trampoline cannot be copied")
    assert proc.returncode == -signal.SIGTERM and proc.stdout.splitlines() == ["winch ok"], proc.stdout + proc.stderr


def test_raw_queries_report_the_program_handler_on_silicon(copied_trampoline):
    proc = run_directly_on_silicon(copied_trampoline, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "hidden\n", proc.stdout + proc.stderr
