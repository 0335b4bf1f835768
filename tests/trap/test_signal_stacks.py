"""The emulating handler uses no more of the program's signal stack than the kernel's frame.

tests/programs/small_sigstack.c gives a thread the smallest alternate signal
stack the kernel accepts (plus a margin), runs an AMX-FP8 dot product on it
under ``pyamx run`` (emulated: the complement mode on AMX silicon without
AMX-FP8, the trap mode without AMX) and checks that the 64 KiB below the
stack kept their pattern and the results are right. Silicon needs no signal
stack for a tile instruction; before the handler had stacks of its own
(csrc/trap/handler/own_stack.c) and was bound at load time, it wrote up to 3 KiB below,
and before its entry was written in assembly (it now moves to its own stack
before it pushes anything), a process with libasan preloaded, as in CI's
ASan leg, wrote 8 bytes below a stack of exactly the kernel's minimum.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from childproc import pyamx_run


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("small_sigstack", "-O1", "-pthread", needs_run=True)


# Margin 0 is exactly the smallest size the kernel accepts (AT_MINSIGSTKSZ, searched byte by byte
# from there): the handler's entry moves to its own stack before it writes anything.
@pytest.mark.parametrize("margin", [0, 64, 512, 4096])
def test_the_handler_never_writes_below_a_small_signal_stack(program, margin):
    proc = pyamx_run("--stats", "--", program, margin, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stdout + proc.stderr
    if "TDPHF8PS" not in proc.stderr:
        pytest.skip("this CPU runs AMX-FP8 itself: nothing was emulated on the small stack")


def _libasan():
    """The compiler's libasan.so (what CI's ASan leg preloads), or None."""
    from childproc import compiler

    cc = compiler()
    if not cc:
        return None
    try:
        path = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return path if os.path.isabs(path) and os.path.isfile(path) else None


# ASan's interceptors (mmap, syscall) are what made the C entry's few dozen bytes reach below the
# minimum: the same check with the runtime preloaded, under CI's ASAN_OPTIONS.
@pytest.mark.parametrize("margin", [0, 64])
def test_the_handler_never_writes_below_a_small_signal_stack_with_asan_preloaded(program, margin):
    libasan = _libasan()
    if libasan is None:
        pytest.skip("the C compiler has no libasan.so to preload")
    env = dict(os.environ, LD_PRELOAD=libasan,
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:handle_segv=0:handle_sigbus=0:"
                            "use_sigaltstack=0")
    proc = pyamx_run("--stats", "--", program, margin, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stdout + proc.stderr
    if "TDPHF8PS" not in proc.stderr:
        pytest.skip("this CPU runs AMX-FP8 itself: nothing was emulated on the small stack")
