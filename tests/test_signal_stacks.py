"""The emulating handler uses no more of the program's signal stack than the kernel's frame.

tests/programs/small_sigstack.c gives a thread the smallest alternate signal
stack the kernel accepts (plus a margin), runs an AMX-FP8 dot product on it
under ``pyamx run`` (emulated: the complement mode on AMX silicon without
AMX-FP8, the trap mode without AMX) and checks that the 64 KiB below the
stack kept their pattern and the results are right. Silicon needs no signal
stack for a tile instruction; before the handler had stacks of its own
(csrc/trap/hstack.c) and was bound at load time, it wrote up to 3 KiB below.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pyamx
import pyamx.run

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "programs" / "small_sigstack.c"
# -m runs from the installed package's parent: a checkout's root holds an unbuilt pyamx/
PKG_PARENT = str(Path(pyamx.__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build tests/programs/small_sigstack.c")
    try:
        pyamx.run.preload_file()
    except pyamx.run.RunError as exc:
        pytest.skip(f"pyamx run is unavailable here: {exc}")
    out = tmp_path_factory.mktemp("programs") / "small_sigstack"
    proc = subprocess.run([cc, "-O1", "-pthread", "-o", str(out), str(PROGRAM)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{cc} cannot build {PROGRAM.name}: {proc.stderr.strip()[:300]}")
    return out


@pytest.mark.parametrize("margin", [0, 64, 512, 4096])
def test_the_handler_never_writes_below_a_small_signal_stack(program, margin):
    proc = subprocess.run([sys.executable, "-m", "pyamx", "run", "--stats", "--", str(program), str(margin)],
                          capture_output=True, text=True, timeout=120, cwd=PKG_PARENT)
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stdout + proc.stderr
    if "TDPHF8PS" not in proc.stderr:
        pytest.skip("this CPU runs AMX-FP8 itself: nothing was emulated on the small stack")
