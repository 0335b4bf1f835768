"""CPU-feature probes (SIGILL handler + siglongjmp) work under ``pyamx run`` as without it.

tests/programs/sigill_probes.c probes with ``ud2`` five times, raises SIGILL
(from where the probes ran and from up to 256 KiB deeper on the stack), and
has a SA_NODEFER handler fault inside itself. Run directly and under
``pyamx run`` (the trap mode without AMX; the complement mode on AMX silicon
that lacks a newer extension; plain silicon otherwise) the output must be
identical: the emulation's handler hands every SIGILL it does not emulate to
the program's own handler, every time.
"""

from __future__ import annotations

import subprocess

import pytest

from childproc import pyamx_run, require_pyamx_run

EXPECTED = [f"probe {i}: SIGILL caught" for i in range(5)] + [
    "raised: SIGILL caught",
    *(f"raised {kib} KiB deeper: SIGILL caught" for kib in (4, 16, 64, 256)),
    "nested fault: handler entered 2 times",
    "after the nested fault: SIGILL caught",
]


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("sigill_probes", "-O1")


def test_probes_directly(program):
    proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "no-guard"])
def test_probes_under_pyamx_run(program, guard):
    # Without the guard the trap marks its calls to the program's handler (csrc/trap/frames/chain_marks.c);
    # a probe's siglongjmp used to leave a mark that killed the program at the deeper raises.
    require_pyamx_run()
    proc = pyamx_run(*([] if guard else ["--no-guard"]), "--", program, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == EXPECTED, proc.stderr


def test_a_fatal_sigill_is_named_with_its_address_and_bytes(program):
    # issue 18: "the line above names it" used to point at nothing for an instruction that is no
    # tile instruction; the handler now says what is at RIP before the default action.
    require_pyamx_run()
    proc = pyamx_run("--", program, "--die", timeout=60)
    assert proc.returncode == -4, proc.stderr  # SIGILL, as without pyamx run
    assert proc.stdout.splitlines() == EXPECTED
    line = next(x for x in proc.stderr.splitlines() if "SIGILL at 0x" in x)
    assert ", bytes 0f 0b" in line and "(not an AMX instruction)" in line, proc.stderr
    assert "named the instruction, its address and bytes on the line above" in proc.stderr


def test_a_fatal_sent_sigill_is_not_blamed_on_an_instruction(program):
    # raise(SIGILL) with no handler: the handler has no instruction to name, and pyamx run must not
    # point at a line above that names one.
    require_pyamx_run()
    proc = pyamx_run("--", program, "--die-sent", timeout=60)
    assert proc.returncode == -4, proc.stderr
    assert proc.stdout.splitlines() == EXPECTED
    assert "SIGILL at 0x" not in proc.stderr and "on the line above" not in proc.stderr, proc.stderr
    assert "saw no instruction fault: the signal was sent" in proc.stderr, proc.stderr
