"""The C case programs of tests/programs/: each built, run as its case says, its output checked line by line.

A case program checks one rule itself and prints one line per sub-case ("CASE ok"); the runner
builds it with the C compiler (:func:`conftest.c_program`), runs it one or more ways and compares
its exit status and output with what the case declares. The ways:

* ``direct``: as it is, on any CPU (the program needs no AMX, or checks a C part of the trap alone);
* ``silicon``: straight on the CPU, the reference for Linux's rules (skips without AMX silicon);
* ``run``, ``run --no-guard``: under ``pyamx run`` (the full trap mode without AMX; on AMX silicon the
  complement mode), with or without the guard.

Why each program exists is in its own header comment; docs/testing.md ("The C case programs") says
how to add one. Programs whose checks need Python between runs (emulator comparisons, signals sent
from here, a pty) keep a test module of their own: tests/trap/test_run.py, test_new_extensions_run.py,
test_sigill_probes.py (the guest's core set), test_raw_sigaction.py, test_nested_emulated.py,
test_signal_stacks.py, test_run_signals.py, test_own_listener.py, test_static_children.py and
tests/cpu/test_silicon_rules.py.
"""

from __future__ import annotations

import errno
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import pytest

from childproc import pyamx_run, require_pyamx_run, run_directly_on_silicon
from conftest import PROGRAMS

ROOT = PROGRAMS.parent.parent
TRAP = ROOT / "csrc" / "trap"
X86_64_LINUX = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")
SKIPPED_BY_THE_PROGRAM = 77  # a program's exit status where the CPU or OS lacks what it checks


@dataclass(frozen=True)
class Program:
    """How to build tests/programs/<name>.c."""

    name: str
    flags: Tuple[str, ...] = ("-O1",)
    trap_sources: Tuple[str, ...] = ()  # files of csrc/trap/ built in, with csrc/trap/ and csrc/ on the include path
    needs_run: bool = False  # skips where ``pyamx run`` cannot work here, before building
    library: Optional[Tuple[str, str]] = None  # (program, output): a shared library built first and linked
    x86_64_linux_only: bool = False


@dataclass(frozen=True)
class Way:
    """One run of a case program and what it must give."""

    how: str  # "direct", "silicon", "run", "run --no-guard"
    timeout: int
    lines: Optional[Tuple[str, ...]] = None  # stdout, line for line
    stripped: Optional[str] = None  # stdout without its surrounding white space
    same_as_direct: bool = False  # stdout equals the program's own run directly (which must exit 0)
    env_drop: Tuple[str, ...] = ()  # run without these variables (a guard of the child's own)
    skip_when_stderr_has: Optional[Tuple[int, str, str]] = None  # (status, text, why): the program cannot run here
    check: Optional[Callable[[subprocess.CompletedProcess], None]] = None  # what a case checks beyond lines
    hang_is_failure: bool = False  # a timeout fails naming the hang instead of raising
    may_skip: bool = False  # exit status 77: the program says what this CPU or OS lacks, and the case skips


def _zmm_frame_checks(proc):
    # Both paths of pyamx_trap_set_zmm ran: components in use, and upper halves in the init state
    # (XSTATE_BV bits 2 and 6 clear).
    assert proc.stdout.splitlines()[-1] == "ok", proc.stdout
    bvs = [int(line.rsplit(" ", 1)[1], 16) for line in proc.stdout.splitlines() if "XSTATE_BV" in line]
    assert len(bvs) == 2 and bvs[0] & 0xE6 == 0xE6, proc.stdout


def _self_copy_lines():
    bad = ("bad-source", "bad-destination", "read-only-destination", "unmapped-source", "straddling-source")
    lines = []
    for how in ("direct", "pipe"):
        if how == "pipe":
            lines.append("process_vm_readv EPERM")
        lines.append(f"{how} good 0")
        lines += [f"{how} {case} {errno.EFAULT}" for case in bad]
    lines.append("descriptors left open 0")
    return tuple(lines)


SECCOMP_REFUSED = (2, "seccomp", "seccomp filters are not permitted here")
SIGINTERRUPT = ("signal ok", "interrupt_after ok", "restart_again ok", "interrupt_before ok", "sysv_signal ok",
                "sysv_reset ok", "bad_signal ok")
TASK_TILES = ("vfork ok", "clone_vm ok")
HANDLER_TILES = ("actions ok", "cfg_read ok", "longjmp ok", "bare_longjmp ok", "nested_altstack ok", "timer ok")
EARLY_CASES = ("query ok", "plain ok", "info ok")
SIGILL_FILTER = ("install denied ok", "signal denied ok", "raw install denied ok", "query allowed ok",
                 "query denied ok", "install still denied ok", "other signals allowed ok")
NO_GUARD_VARIABLES = ("PYAMX_TRAP_EMULATION", "PYAMX_TRAP_GUARD")

#: program -> the ways it runs. A new case program: a row here (docs/testing.md).
CASES = {
    # csrc/trap/frames/chain_marks.c alone: per-thread marks of calls to a program's SIGILL handler, their end by
    # return or by a jump, a mark whose word was overwritten, room after ended threads.
    Program("chain_marks", ("-O1", "-pthread"), trap_sources=("frames/chain_marks.c", "base/self_copy.c")): (
        Way("direct", 120, lines=("own ok", "per_thread ok", "jump ok", "nested ok", "stale_word ok",
                                  "ended_threads ok")),
    ),
    # csrc/trap/base/self_copy.c: a bad address is EFAULT, never SIGSEGV, with and without process_vm_readv.
    Program("self_copy", trap_sources=("base/self_copy.c",)): (
        Way("direct", 60, lines=_self_copy_lines()),
    ),
    # The emulated calls with bad pointers where a seccomp profile forbids process_vm_*: the answers
    # the program gets run directly (the kernel's) stay its answers under pyamx run.
    Program("no_process_vm", needs_run=True): (
        Way("run", 120, same_as_direct=True),
        Way("run --no-guard", 120, same_as_direct=True),
    ),
    # csrc/trap/handler/frame_zmm.c writes zmm0..31 of an interrupted context through its signal frame; malformed
    # frames are refused (AVX-512 needed: the program exits 77 without it).
    Program("zmm_frame", ("-O2", "-mavx512f", "-Wall", "-Wextra", "-Werror"), trap_sources=("handler/frame_zmm.c",),
            x86_64_linux_only=True): (
        Way("direct", 60, check=_zmm_frame_checks, may_skip=True),
    ),
    # A process ends when its own last thread does (main() left by pthread_exit while a worker computes).
    Program("main_pthread_exit", ("-O1", "-pthread"), needs_run=True): (
        Way("run", 60, stripped="worker done 32", hang_is_failure=True),
        Way("run --no-guard", 60, stripped="worker done 32", hang_is_failure=True),
    ),
    # siginterrupt() and the signal() family keep the program's SA_RESTART choices under the preload.
    Program("siginterrupt", ("-O1", "-pthread")): (
        Way("run", 300, lines=SIGINTERRUPT),
        Way("silicon", 120, lines=SIGINTERRUPT),
    ),
    # Tile state per task: vfork and clone(CLONE_VM) children start in the init state, leave the creator's.
    Program("task_tiles"): (
        Way("run", 120, lines=TASK_TILES),
        Way("silicon", 60, lines=TASK_TILES),
    ),
    # Tile state per signal frame: handlers start in the init state, the interrupted code gets its tiles back.
    Program("handler_tiles"): (
        Way("run", 300, lines=HANDLER_TILES),
        Way("silicon", 120, lines=HANDLER_TILES),
    ),
    # Handlers a library's constructor installed before the preload's: wrapped all the same, and
    # sigaction() reports the library's own action ("order", "wrapped" only mean something under run).
    Program("early_handler", library=("early_handler_lib", "libearly_handler.so")): (
        Way("run", 300, lines=("order ok", "wrapped ok", *EARLY_CASES)),
        Way("silicon", 120, lines=("order none", "wrapped none", *EARLY_CASES)),
    ),
    # A program's own seccomp filters decide its sigaction(SIGILL) calls, directly (the kernel) and
    # under pyamx run (the preload's virtual disposition asks them).
    Program("sigill_filter", x86_64_linux_only=True): (
        Way("direct", 60, lines=SIGILL_FILTER, skip_when_stderr_has=SECCOMP_REFUSED),
        Way("run", 120, lines=SIGILL_FILTER, skip_when_stderr_has=SECCOMP_REFUSED, env_drop=NO_GUARD_VARIABLES),
        Way("run --no-guard", 120, lines=SIGILL_FILTER, skip_when_stderr_has=SECCOMP_REFUSED,
            env_drop=NO_GUARD_VARIABLES),
    ),
}

MARKS = {"zmm_frame": (pytest.mark.trap,)}  # csrc/trap/handler/frame_zmm.c's own test (it was test_trap_zmm.py)


def _params():
    for program, ways in CASES.items():
        for way in ways:
            yield pytest.param(program, way, id=f"{program.name}-{way.how.replace(' ', '')}",
                               marks=MARKS.get(program.name, ()))


def build(c_program, program: Program):
    if program.x86_64_linux_only and not X86_64_LINUX:
        pytest.skip(f"tests/programs/{program.name}.c needs x86-64 Linux (signal frames, seccomp)")
    flags = list(program.flags)
    libs = ()
    if program.library:
        source, output = program.library
        lib = c_program(source, "-O1", "-shared", "-fPIC", output=output)
        flags.append(f"-Wl,-rpath,{lib.parent}")
        libs = (str(lib),)
    if program.trap_sources:
        flags += [f"-I{TRAP}", f"-I{ROOT / 'csrc'}"]
    return c_program(program.name, *flags, sources=tuple(TRAP / name for name in program.trap_sources), libs=libs,
                     needs_run=program.needs_run)


def run(path, way: Way) -> subprocess.CompletedProcess:
    if way.how == "direct":
        return subprocess.run([str(path)], capture_output=True, text=True, timeout=way.timeout)
    if way.how == "silicon":
        return run_directly_on_silicon(path, timeout=way.timeout)
    require_pyamx_run()
    env = {k: v for k, v in os.environ.items() if k not in way.env_drop} if way.env_drop else None
    options = way.how.split()[1:]
    try:
        return pyamx_run(*options, "--", path, timeout=way.timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        if way.hang_is_failure:
            pytest.fail(f"the program never exited: {exc}")
        raise


@pytest.mark.parametrize("program, way", list(_params()))
def test_case_program(c_program, program, way):
    path = build(c_program, program)
    proc = run(path, way)
    output = proc.stdout + proc.stderr
    if way.skip_when_stderr_has:
        status, text, why = way.skip_when_stderr_has
        if proc.returncode == status and text in proc.stderr:
            pytest.skip(f"{why}: {proc.stderr.strip()}")
    if way.may_skip and proc.returncode == SKIPPED_BY_THE_PROGRAM:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0, output
    if way.lines is not None:
        assert proc.stdout.splitlines() == list(way.lines), output
    if way.stripped is not None:
        assert proc.stdout.strip() == way.stripped, output
    if way.same_as_direct:
        direct = subprocess.run([str(path)], capture_output=True, text=True, timeout=60)
        assert direct.returncode == 0, direct.stdout + direct.stderr
        assert proc.stdout == direct.stdout, output
    if way.check is not None:
        way.check(proc)


def test_every_case_program_has_a_runner():
    """Each tests/programs/*.c is run here or by a module that names it; none is left unrun."""
    here = {program.name for program in CASES} | {program.library[0] for program in CASES if program.library}
    tests = ROOT / "tests"
    named_elsewhere = {path.stem for path in PROGRAMS.glob("*.c")
                       # by its name as a string, as c_program() takes it (a comment naming a C file is no run)
                       if any(f'"{path.stem}"' in module.read_text(encoding="utf-8")
                              for module in tests.glob("*/test_*.py") if module.name != "test_case_programs.py")}
    unrun = sorted({path.stem for path in PROGRAMS.glob("*.c")} - here - named_elsewhere)
    assert not unrun, f"tests/programs/ holds programs no test runs: {unrun}"
    both = sorted(here & named_elsewhere)
    assert not both, f"run here and by a module of their own (one place each): {both}"
