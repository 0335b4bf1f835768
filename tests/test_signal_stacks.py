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

import pytest

from childproc import pyamx_run


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("small_sigstack", "-O1", "-pthread", needs_run=True)


# The handler's entry (its frame, the calls that switch stacks) still takes a few dozen bytes
# below the kernel's frame, which the kernel's minimum leaves no room for: margins from 64 up.
@pytest.mark.parametrize("margin", [64, 512, 4096])
def test_the_handler_never_writes_below_a_small_signal_stack(program, margin):
    proc = pyamx_run("--stats", "--", program, margin, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stdout + proc.stderr
    if "TDPHF8PS" not in proc.stderr:
        pytest.skip("this CPU runs AMX-FP8 itself: nothing was emulated on the small stack")
