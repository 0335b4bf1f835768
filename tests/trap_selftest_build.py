"""Builds the trap mode's test-only kernels (tests/csrc/trap_selftest.c).

They execute real AMX instructions (and one of them swaps the SIGILL
disposition), so they are never part of the package: the tests compile them
with cffi into a throwaway module ``_pyamx_trap_selftest`` in a temporary
directory. Where that is impossible -- not x86-64 Linux, no C compiler, a
compiler or assembler without the AMX target attributes and mnemonics --
:func:`build` says why, and the tests that need the kernels skip with it.

``python tests/trap_selftest_build.py DIR`` builds into DIR (for
benchmarks/bench_trap.py).
"""

from __future__ import annotations

import importlib.util
import io
import platform
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODULE = "_pyamx_trap_selftest"
SOURCE = HERE / "csrc" / "trap_selftest.c"
HEADER = HERE / "csrc" / "trap_selftest.h"


def _declarations(path: Path) -> str:
    return "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                     if not line.lstrip().startswith("#"))


def _cdef() -> str:
    # The op ids come from the project's shared header, which the C file includes too.
    return _declarations(ROOT / "csrc" / "pyamx_ops.h") + "\n" + _declarations(HEADER)


def missing_build_tools():
    """Why cffi cannot compile anything here, or None: from Python 3.12 on it compiles through
    setuptools, and there is no distutils left to fall back on."""
    if sys.version_info >= (3, 12) and importlib.util.find_spec("setuptools") is None:
        return ("cffi needs setuptools to compile the trap self-test kernels and Python "
                f"{sys.version_info[0]}.{sys.version_info[1]} has no distutils to fall back on: "
                "pip install setuptools (the test extra has it: pip install 'pyamx[test]')")
    return None


def build(directory) -> tuple:
    """``(True, directory)`` once ``_pyamx_trap_selftest`` is built there, else ``(False, why)``."""
    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        return False, f"the trap self-test kernels need x86-64 Linux; this is {sys.platform}/{platform.machine()}"
    missing = missing_build_tools()
    if missing:  # before the compile, whose own error would blame the compiler
        return False, missing
    try:
        from cffi import FFI
    except ImportError as exc:  # pragma: no cover - cffi is a dependency
        return False, f"cffi is missing: {exc}"
    directory = Path(directory)
    builder = FFI()
    builder.cdef(_cdef())
    builder.set_source(
        MODULE,
        '#include "trap_selftest.h"\n',
        sources=[str(SOURCE)],
        include_dirs=[str(HERE / "csrc"), str(ROOT / "csrc")],
        extra_compile_args=["-O2", "-std=gnu11"],
    )
    log = io.StringIO()
    try:
        with redirect_stdout(log), redirect_stderr(log):
            built = Path(builder.compile(tmpdir=str(directory / "work"), verbose=False))
    except Exception as exc:  # no compiler, or one without AMX support
        text = " ".join(str(exc).split())[:300]
        return False, (f"cannot build the trap self-test kernels (needs a C compiler with AMX support, "
                       f"GCC >= 11 or clang >= 12): {type(exc).__name__}: {text}")
    target = directory / built.name
    built.replace(target)
    return True, str(directory)


_built = None


def selftest_dir() -> str:
    """For the tests: the directory holding the built module (built once per process), or skip."""
    global _built
    if _built is None:
        import atexit
        import shutil
        import tempfile

        directory = tempfile.mkdtemp(prefix="pyamx-trap-selftest-")
        atexit.register(shutil.rmtree, directory, True)
        _built = build(directory)
    ok, where = _built
    if not ok:
        import pytest

        pytest.skip(where)
    return where


def selftest_lib():
    """For the tests: the self-test kernels' cffi ``lib`` in this process, or skip."""
    directory = selftest_dir()
    if directory not in sys.path:
        sys.path.insert(0, directory)
    import _pyamx_trap_selftest

    return _pyamx_trap_selftest.lib


if __name__ == "__main__":
    ok, where = build(sys.argv[1] if len(sys.argv) > 1 else ".")
    print(where)
    sys.exit(0 if ok else 1)
