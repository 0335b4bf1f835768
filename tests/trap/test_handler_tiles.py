"""Tile state per signal frame, as Linux keeps it, under ``pyamx run`` (tests/programs/handler_tiles.c).

A signal handler starts with the init tile state (STTILECFG reads all zeros) and the interrupted
code has its configuration and tiles back after the handler returns, whatever the handler loaded,
computed or released; a handler that leaves by siglongjmp leaves its own state to the code it
jumps to. The full trap mode keeps one emulated state per thread, so ``pyamx run`` calls the
program's handlers through a trampoline that gives each one a frame of its own (docs/run.md); what
sigaction() reports stays the program's own. Run directly on AMX silicon, the program checks
Linux's rules themselves; under ``pyamx run`` there it runs in the complement mode, with the
trampoline in place. The full trap mode runs it in the QEMU guest of docs/testing.md.
"""

from __future__ import annotations


import pytest

from childproc import pyamx_run, require_pyamx_run, run_directly_on_silicon

EXPECTED = ["actions ok", "cfg_read ok", "longjmp ok", "bare_longjmp ok", "nested_altstack ok", "timer ok"]


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("handler_tiles", "-O1")


def test_tile_state_is_per_signal_frame_under_pyamx_run(program):
    require_pyamx_run()
    proc = pyamx_run("--", program, timeout=300)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr


def test_tile_state_is_per_signal_frame_on_silicon(program):
    proc = run_directly_on_silicon(program, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr
