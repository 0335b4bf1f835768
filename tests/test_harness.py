"""The tests' own helpers: tests/conftest.py's ``c_program`` and tests/childproc.py's ``pyamx_run``."""

from __future__ import annotations

import os

import pytest

from childproc import PYAMX_HOME, compiler, pyamx_run, require_pyamx_run


def test_c_program_skips_an_optional_failed_build_and_fails_a_required_one(c_program):
    if compiler() is None:
        pytest.skip("no C compiler")
    with pytest.raises(pytest.skip.Exception, match="cannot build tests/programs/no_such_program.c"):
        c_program("no_such_program", "-O1", optional=True)
    with pytest.raises(pytest.fail.Exception, match="cannot build tests/programs/no_such_program.c"):
        c_program("no_such_program", "-O1")


def test_c_program_builds_once_per_session(c_program):
    first = c_program("sigill_probes", "-O1")
    assert first.is_file() and c_program("sigill_probes", "-O1") == first


def test_pyamx_run_runs_from_the_package_parent():
    require_pyamx_run()
    proc = pyamx_run("--", "sh", "-c", "pwd -P; exit 3", timeout=60)
    assert proc.returncode == 3 and proc.stdout.strip() == os.path.realpath(PYAMX_HOME), proc.stderr
