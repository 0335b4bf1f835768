"""Handlers installed before ``pyamx run``'s preload was in place (tests/programs/early_handler.c).

A library's constructor can install signal handlers before the preload's constructor runs: the
loader runs constructors in dependency order, and the preload is nobody's dependency, so the
constructor of a library the program links runs first. The preload wraps those handlers at its
constructor, so each still starts in the init tile state and gives the interrupted code its tiles
back, and sigaction() still reports the library's own action. Run directly on AMX silicon, the
program checks Linux's rules themselves; under ``pyamx run`` it also checks that the library's
constructor really ran first ("order") and that its handlers are wrapped ("wrapped"). The full
trap mode runs it in the QEMU guest of docs/testing.md.
"""

from __future__ import annotations

import pytest

from childproc import pyamx_run, require_pyamx_run, run_directly_on_silicon

CASES = ["query ok", "plain ok", "info ok"]


@pytest.fixture(scope="module")
def program(c_program):
    lib = c_program("early_handler_lib", "-O1", "-shared", "-fPIC", output="libearly_handler.so")
    return c_program("early_handler", "-O1", f"-Wl,-rpath,{lib.parent}", libs=(str(lib),))


def test_handlers_installed_before_the_preload_are_wrapped(program):
    require_pyamx_run()
    proc = pyamx_run("--", program, timeout=300)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["order ok", "wrapped ok", *CASES], \
        proc.stdout + proc.stderr


def test_handlers_installed_by_a_constructor_on_silicon(program):
    proc = run_directly_on_silicon(program, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["order none", "wrapped none", *CASES], \
        proc.stdout + proc.stderr
