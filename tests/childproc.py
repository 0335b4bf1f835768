"""Where child Pythons of the tests find pyamx.

Children must import the very pyamx under test: the installed one in CI
(whose extension was built by pip), the source tree in a development run
with an in-place build. Running them with that directory first on
PYTHONPATH and as their working directory keeps ``-c``/``-m`` from picking up
an unbuilt ``pyamx/`` from the repository root instead.
"""

from __future__ import annotations

import os

import pyamx

PYAMX_HOME = os.path.dirname(os.path.dirname(os.path.abspath(pyamx.__file__)))


def child_env(base=None, drop=(), **extra) -> dict:
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    env["PYTHONPATH"] = PYAMX_HOME + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def compiler():
    """The C compiler the tests build their programs with: $CC, else cc or gcc; None without one."""
    import shutil

    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def require_pyamx_run() -> str:
    """The preload library of ``pyamx run``, or skip the test saying why run cannot work here."""
    import pytest

    import pyamx.tools.run

    try:
        return pyamx.tools.run.preload_file()
    except pyamx.tools.run.RunError as exc:
        pytest.skip(f"pyamx run is unavailable here: {exc}")


def pyamx_run(*args, timeout=240, **kwargs):
    """``python -m pyamx run ARGS`` as a user types it, from :data:`PYAMX_HOME`; the CompletedProcess
    (text, output captured). Keyword arguments go to subprocess.run (``input``, ``env``)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "pyamx", "run", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=PYAMX_HOME, **kwargs)


def require_a_listener_of_their_own():
    """Skip unless children of this process can hold a seccomp listener of their own.

    The kernel allows one listener per filter chain and children inherit the chain: a test process
    that already sits under a filter (this pytest worker's own trap-mode guard, with
    PYAMX_TRAP_EMULATION=1 on a CPU without AMX, or an outer sandbox) makes every child's guard
    refuse with EBUSY, so what these tests check cannot happen in its children.
    """
    import re

    import pytest

    try:
        with open("/proc/self/status", encoding="ascii") as status:
            found = re.search(r"^Seccomp_filters:\s+(\d+)", status.read(), re.M)
    except OSError:
        return
    if found and int(found.group(1)) > 0:
        pytest.skip(f"this test process already sits under {found.group(1)} seccomp filter(s) (its own trap-mode "
                    "guard, or a sandbox): its children cannot hold a listener of their own")


def run_directly_on_silicon(program, timeout):
    """Run a test program straight on the CPU (the reference for Linux's rules), or skip without AMX silicon."""
    import subprocess

    import pytest

    from pyamx.cpu import native

    if not native.report().cpu_runs_amx:
        pytest.skip("no AMX silicon here to run the program on directly")
    return subprocess.run([str(program)], capture_output=True, text=True, timeout=timeout)
