"""csrc/trap/handler/frame_zmm.c writes zmm0..31 of an interrupted context through its signal frame, for real.

tests/programs/zmm_frame.c (built here with the system C compiler, with frame_zmm.c itself) loads all
32 zmm registers, faults, has its handler write three of them through pyamx_trap_set_zmm, and
checks after sigreturn that exactly those changed, bit for bit; also that malformed frames are
refused with an error. Needs x86-64 Linux with AVX-512 (this test skips elsewhere).
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = 77  # the program's exit code where the CPU or OS has no AVX-512


@pytest.fixture(scope="module")
def program(c_program):
    if platform.machine().lower() not in ("x86_64", "amd64") or platform.system() != "Linux":
        pytest.skip("signal frames of x86-64 Linux only")
    return c_program("zmm_frame", "-O2", "-mavx512f", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'csrc' / 'trap'}",
                     sources=(ROOT / "csrc" / "trap" / "handler" / "frame_zmm.c",))


def test_set_zmm_reaches_the_registers_after_sigreturn(program):
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    if ran.returncode == SKIPPED:
        pytest.skip(ran.stdout.strip())
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines()[-1] == "ok"
    # Both paths ran: components in use, and upper halves in the init state (bits 2 and 6 clear).
    bvs = [int(line.rsplit(" ", 1)[1], 16) for line in ran.stdout.splitlines() if "XSTATE_BV" in line]
    assert len(bvs) == 2 and bvs[0] & 0xE6 == 0xE6, ran.stdout
