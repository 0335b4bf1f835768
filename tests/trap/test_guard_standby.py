"""The guard's listener outlives the emulating image: its standby process (csrc/trap/guard/standby.c).

Without it, a program the emulating process execs *in place* (a shell's last command,
``env -u LD_PRELOAD prog``) and a fork that outlives its emulating parent got ENOSYS for the AMX
``arch_prctl`` codes: the listener was closed with the image and nobody answered. Now the standby
keeps it: a static program must print exactly what it prints when run on its own (the kernel's
answer), a fork still running the emulated image gets the emulated answer its parent would have
given (as on silicon), a preloaded program exec'd in place still gets a guard of its own, and the
standby leaves nothing behind: ``subprocess.run(capture_output=True)`` returns, no ``pyamx-guard``
process remains, ``wait()`` never sees it.

Full trap mode only: on AMX silicon these skip (docs/testing.md runs them in a guest without AMX).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from childproc import PYAMX_HOME, pyamx_run
from test_run import pytestmark  # noqa: F401  (same platform skip)
import test_static_children
from test_static_children import _clean_env, _on_its_own

static_program = test_static_children.static_program  # the same module-scoped fixture


@pytest.mark.parametrize("how", [("sh", "-c", 'exec "$0"'), ("env", "-u", "LD_PRELOAD")], ids=["sh-exec", "env"])
def test_a_static_program_execd_in_place_gets_the_kernels_answer(static_program, how):
    expected = _on_its_own(static_program)
    proc = pyamx_run("--", *how, static_program, timeout=300, env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == expected, proc.stdout + proc.stderr


def test_a_preloaded_program_execd_in_place_gets_a_guard_of_its_own(static_program):
    # The inner shell replaces the outer one; its guard must take the listener over (else the
    # kernel refuses it with EBUSY, the trap filter answers instead, and its static child dies of
    # SIGSYS): the static child then gets the kernel's answer.
    expected = _on_its_own(static_program)
    inner = '"$0"; status=$?; exit $status'
    proc = pyamx_run("--", "sh", "-c", 'exec sh -c "$1" "$0"', static_program, inner, timeout=300,
                     env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == expected, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def orphan_program(c_program):
    return c_program("orphan_xcomp", "-O1", needs_run=True)


def test_a_fork_that_outlives_its_emulating_parent(static_program, orphan_program):
    expected = _on_its_own(static_program)
    proc = pyamx_run("--", orphan_program, static_program, timeout=300, env=_clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Still the emulated program: answered as its parent's emulation (and silicon) answers.
    assert proc.stdout.startswith("orphan ARCH_REQ_XCOMP_PERM 0 errno=0\n"
                                  "orphan ARCH_GET_XCOMP_PERM 0 errno=0 xtiledata=1\n"), proc.stdout + proc.stderr
    # Then a static program in its place: the kernel's answer.
    assert proc.stdout.split("\n", 2)[2] == expected, proc.stdout + proc.stderr


def _standbys_tagged(tag: str) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", encoding="utf-8") as comm:
                if comm.read().strip() != "pyamx-guard":
                    continue
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if tag.encode() in environ.read():
                    found.append(int(entry))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


NO_CHILDREN = textwrap.dedent("""
    import os
    import pyamx.cpu.trap
    print(pyamx.cpu.trap.emulate_process(), pyamx.cpu.trap.guard().active, flush=True)
    try:
        print("wait", os.wait(), flush=True)
    except ChildProcessError:
        print("no children", flush=True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            if ppid != os.getpid():
                continue
            with open(f"/proc/{entry}/comm") as comm, open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                # The kernel shows the whole argument area: the name, then NULs.
                print("child", comm.read().strip(), cmdline.read().rstrip(b"\\0"), flush=True)
            fds = os.listdir(f"/proc/{entry}/fd")
            print("descriptors", sorted(os.readlink(f"/proc/{entry}/fd/{fd}").split(":")[0] for fd in fds), flush=True)
        except (OSError, IndexError, ValueError):
            continue
""")


def test_the_standby_leaves_nothing_behind(static_program, tmp_path):
    tag = f"PYAMX_TEST_STANDBY_TAG={uuid.uuid4().hex}"
    env = _clean_env()
    name, value = tag.split("=")
    env[name] = value
    script = tmp_path / "no_children.py"
    script.write_text(NO_CHILDREN)
    # capture_output waits for every writer of the pipes: a standby that kept one would hang it.
    started = time.monotonic()
    proc = pyamx_run("--", "sh", "-c", 'exec "$0"', static_program, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    child = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           cwd=PYAMX_HOME, env=env)
    assert child.returncode == 0, child.stdout + child.stderr
    if child.stdout.split("\n")[0] != "emulated True":
        pytest.skip(f"no guard in an emulating Python here: {child.stdout.strip()}")
    lines = child.stdout.splitlines()
    assert lines[1] == "no children", child.stdout + child.stderr
    # wait() does not see it, but it is there: named, its own command line, holding only /dev/null,
    # its socket to this process and the listener.
    assert lines[2:] == ["child pyamx-guard b'pyamx-guard'",
                         "descriptors ['/dev/null', '/dev/null', '/dev/null', 'anon_inode', 'socket']"], \
        child.stdout + child.stderr
    # Each standby exits once no task uses its filter; let init reap them.
    deadline = time.monotonic() + 30
    while _standbys_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _standbys_tagged(tag) == [], f"pyamx-guard processes remain ({time.monotonic() - started:.1f} s)"
