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


@pytest.mark.parametrize("usable, kernels", [(False, ()), (True, ("bf16", "int8")), (True, ("bf16", "int8", "fp8"))])
def test_the_lockstep_fuzz_draws_the_tables_dot_products_the_native_side_runs(monkeypatch, usable, kernels):
    """Without native every dot product of the table (the trap mode emulates them all); on silicon
    those whose kernel group the CPU and build have, so the fuzz never asks for a refused one."""
    from types import SimpleNamespace

    import lockstep
    from pyamx.cpu import detect
    from pyamx.table import isa

    monkeypatch.setattr(detect, "report", lambda: SimpleNamespace(native_usable=usable, kernels=kernels))
    names = lockstep.native_dot_names()
    if not usable:
        assert set(names) == {i.name for i in isa.DOTS} and {"tdpbf8ps", "tcmmimfp16ps"} <= set(names)
    else:
        assert set(names) == {i.name for i in isa.DOTS if i.group in kernels}


@pytest.mark.static
def test_the_preload_only_files_ci_leaves_out_exist_and_run_no_pyamx_or_numpy_in_process():
    """.ci/run's ASan and numpy-floor legs leave out PRELOAD_ONLY: files whose checks all run in C
    programs under the (never instrumented) preload library. A renamed file would silently come
    back; one that imports pyamx or numpy in-process would check something there."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = (root / ".ci" / "run").read_text(encoding="utf-8")
    listed = re.search(r"^PRELOAD_ONLY=\(([^)]*)\)", script, re.M)
    assert listed, "PRELOAD_ONLY=(...) not found in .ci/run"
    files = listed.group(1).split()
    assert files
    for name in files:
        path = root / name
        assert path.is_file(), f"{name} (PRELOAD_ONLY in .ci/run) does not exist"
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(import (pyamx|numpy)|from (pyamx|numpy)\b)", source, re.M), \
            f"{name} imports pyamx or numpy in-process: the ASan and numpy-floor legs must run it"
