"""csrc/trap/base/self_copy.c: the copy the guard and the arch_prctl emulation make for a caller in
their own process answers EFAULT for a bad address, never SIGSEGV.

Where a seccomp profile forbids process_vm_readv (Docker's default one does), it used to fall back
to a plain memcpy, which crashed the supervisor (the whole process) on a pointer the kernel would
have refused with EFAULT. tests/programs/self_copy.c calls it directly, before and after forbidding
process_vm_* to itself, anywhere; tests/programs/no_process_vm.c makes the emulated calls with bad
pointers under ``pyamx run`` (the full trap mode needs a CPU without AMX; on silicon the kernel
answers them and the test only checks that nothing else does).
"""

from __future__ import annotations

import errno
import subprocess

import pytest

from childproc import pyamx_run
from conftest import PROGRAMS

ROOT = PROGRAMS.parent.parent


def test_bad_addresses_are_efault_with_and_without_process_vm(c_program):
    program = c_program("self_copy", "-O1", f"-I{ROOT / 'csrc' / 'trap'}", f"-I{ROOT / 'csrc'}",
                        sources=(ROOT / "csrc" / "trap" / "base" / "self_copy.c",))
    proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = ("bad-source", "bad-destination", "read-only-destination", "unmapped-source", "straddling-source")
    expected = []
    for how in ("direct", "pipe"):
        if how == "pipe":
            expected.append("process_vm_readv EPERM")
        expected.append(f"{how} good 0")
        expected += [f"{how} {case} {errno.EFAULT}" for case in bad]
    expected.append("descriptors left open 0")
    assert proc.stdout.splitlines() == expected, proc.stdout + proc.stderr


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "no-guard"])
def test_bad_pointers_under_pyamx_run_without_process_vm(c_program, guard):
    # The same calls, answered by the emulation (full trap mode: the guard's supervisor or the
    # SIGSYS handler) where a seccomp profile forbids process_vm_*: the program's own answers.
    program = c_program("no_process_vm", "-O1", needs_run=True)
    direct = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert direct.returncode == 0, direct.stdout + direct.stderr
    proc = pyamx_run(*([] if guard else ["--no-guard"]), "--", program, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == direct.stdout, proc.stdout + proc.stderr
