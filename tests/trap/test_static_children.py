"""Programs no preload reaches get the kernel's answer about AMX, not SIGSYS.

A static program (tests/programs/static_xcomp.c) started by an emulating
process (``pyamx run`` through a shell, or a Python after
``pyamx.cpu.trap.emulate_process()``) asks ``arch_prctl`` about AMX. With the
guard on, those calls reach the guard's listener, whose supervisor answers
only for the tasks it emulates and lets everyone else's through to the kernel:
the program must print exactly what it prints when run on its own (the
kernel's answer, on a CPU without AMX EOPNOTSUPP for the request), where it
used to die of SIGSYS. A fork of the emulating process that still runs its
image is emulated: its request is granted to it and to no other process.

Only the full trap mode installs these filters: on AMX silicon (the
complement mode) the tests skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from childproc import PYAMX_HOME, compiler, pyamx_run, require_a_listener_of_their_own, require_pyamx_run
from test_run import _cpu_has_amx, pytestmark  # noqa: F401  (same platform skip)


@pytest.fixture(scope="module")
def static_program(tmp_path_factory):
    cc = compiler()
    if not cc:
        pytest.skip("no C compiler")
    require_pyamx_run()
    if _cpu_has_amx():
        pytest.skip("this CPU has usable AMX: the trap mode and its arch_prctl filters are refused here")
    require_a_listener_of_their_own()
    out = tmp_path_factory.mktemp("static") / "static_xcomp"
    proc = subprocess.run([cc, "-O1", "-static", "-o", str(out),
                           os.path.join(os.path.dirname(os.path.dirname(__file__)), "programs", "static_xcomp.c")],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"{cc} cannot link a static program here (no static libc?): {proc.stderr.strip()[:300]}")
    return out


def _on_its_own(program) -> str:
    proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _clean_env():
    env = dict(os.environ)
    for name in ("PYAMX_TRAP_EMULATION", "PYAMX_TRAP_GUARD", "LD_PRELOAD"):
        env.pop(name, None)
    return env


def test_static_child_of_pyamx_run_gets_the_kernels_answer(static_program):
    expected = _on_its_own(static_program)
    assert "ARCH_REQ_XCOMP_PERM" in expected
    # A command after the program makes the shell fork rather than exec it: the preloaded shell
    # holds the guard's listener, which an exec in place would close (docs/run.md).
    proc = pyamx_run("--", "sh", "-c", '"$0"; status=$?; exit $status', static_program, timeout=300,
                     env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == expected, proc.stdout + proc.stderr


def test_static_child_without_the_guard_still_dies_of_sigsys(static_program):
    # The documented limit where no listener can answer (docs/run.md): the trap filter stays.
    proc = pyamx_run("--no-guard", "--", "sh", "-c", '"$0"; exit $?', static_program, timeout=300,
                     env=_clean_env())
    assert proc.returncode == 128 + signal.SIGSYS, proc.stdout + proc.stderr


EMULATING_PARENT = textwrap.dedent("""
    import ctypes, os, subprocess, sys
    import pyamx.cpu.trap
    print("mode", pyamx.cpu.trap.emulate_process(), flush=True)
    print("guard", pyamx.cpu.trap.guard().active, flush=True)
    child = subprocess.run([sys.argv[1]], capture_output=True, text=True)
    print("child", child.returncode, flush=True)
    sys.stdout.write(child.stdout)
    sys.stdout.flush()
    libc = ctypes.CDLL(None, use_errno=True)
    lib = pyamx.cpu.trap._load()[1]
    pid = os.fork()
    if pid == 0:
        before = lib.pyamx_trap_permission_granted()
        r = libc.syscall(158, 0x1023, 18)  # arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)
        print("fork", before, r, lib.pyamx_trap_permission_granted(), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print("parent", lib.pyamx_trap_permission_granted(), flush=True)
""")


def test_static_child_of_emulate_process_and_a_fork_that_asks(static_program, tmp_path):
    expected = _on_its_own(static_program)
    script = tmp_path / "parent.py"
    script.write_text(EMULATING_PARENT)
    proc = subprocess.run([sys.executable, str(script), str(static_program)], capture_output=True, text=True,
                          timeout=300, cwd=PYAMX_HOME, env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines(keepends=True)
    assert lines[0] == "mode emulated\n", proc.stdout + proc.stderr
    if lines[1] != "guard True\n":
        pytest.skip("no guard here (seccomp listeners unavailable): the static child dies of SIGSYS, documented")
    assert lines[2] == "child 0\n", proc.stdout + proc.stderr
    n = expected.count("\n")
    assert "".join(lines[3:3 + n]) == expected, proc.stdout + proc.stderr
    tail = lines[3 + n:]
    # The fork was not granted before it asked, is after, and the parent never asked.
    assert tail == ["fork 0 0 1\n", "parent 0\n"], proc.stdout + proc.stderr

