"""CPU-feature probes (SIGILL handler + siglongjmp) work under ``pyamx run`` as without it.

tests/programs/sigill_probes.c probes with ``ud2`` five times, raises SIGILL,
and has a SA_NODEFER handler fault inside itself. Run directly and under
``pyamx run`` (the trap mode without AMX; the complement mode on AMX silicon
that lacks a newer extension; plain silicon otherwise) the output must be
identical: the emulation's handler hands every SIGILL it does not emulate to
the program's own handler, every time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pyamx.run

PROGRAM = Path(__file__).resolve().parent / "programs" / "sigill_probes.c"
EXPECTED = [f"probe {i}: SIGILL caught" for i in range(5)] + [
    "raised: SIGILL caught",
    "nested fault: handler entered 2 times",
    "after the nested fault: SIGILL caught",
]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build tests/programs/sigill_probes.c")
    out = tmp_path_factory.mktemp("programs") / "sigill_probes"
    subprocess.run([cc, "-O1", "-o", str(out), str(PROGRAM)], check=True, capture_output=True)
    return out


def test_probes_directly(program):
    proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED


def test_probes_under_pyamx_run(program):
    try:
        pyamx.run.preload_file()
    except pyamx.run.RunError as exc:
        pytest.skip(f"pyamx run is unavailable here: {exc}")
    # from the installed package's parent: a checkout's root holds an unbuilt pyamx/ that -m would import
    proc = subprocess.run([sys.executable, "-m", "pyamx", "run", "--", str(program)],
                          capture_output=True, text=True, timeout=60,
                          cwd=str(Path(pyamx.run.__file__).resolve().parent.parent))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == EXPECTED, proc.stderr


def test_a_fatal_sigill_is_named_with_its_address_and_bytes(program):
    # issue 18: "the line above names it" used to point at nothing for an instruction that is no
    # tile instruction; the handler now says what is at RIP before the default action.
    try:
        pyamx.run.preload_file()
    except pyamx.run.RunError as exc:
        pytest.skip(f"pyamx run is unavailable here: {exc}")
    proc = subprocess.run([sys.executable, "-m", "pyamx", "run", "--", str(program), "--die"],
                          capture_output=True, text=True, timeout=60,
                          cwd=str(Path(pyamx.run.__file__).resolve().parent.parent))
    assert proc.returncode == -4, proc.stderr  # SIGILL, as without pyamx run
    assert proc.stdout.splitlines() == EXPECTED
    line = next(x for x in proc.stderr.splitlines() if "SIGILL at 0x" in x)
    assert ", bytes 0f 0b" in line and "(not an AMX instruction)" in line, proc.stderr
    assert "named the instruction, its address and bytes on the line above" in proc.stderr
