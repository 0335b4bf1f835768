"""``pyamx.cpu.trap.emulate_process()`` and the pytest plugin, on AMX code pyamx did not build.

The "other extension module" is tests/programs/amx_prog.c compiled as a shared
library (its main() renamed), loaded with ctypes into a Python process: it
asks the kernel for AMX permission itself and runs its tile instructions; the
results are compared bit for bit with pyamx's emulator as in test_run.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest

from childproc import PYAMX_HOME
from test_run import _cpu_has_amx, check_blocks, pytestmark  # noqa: F401  (same platform skip)


@pytest.fixture(scope="module")
def amx_lib(c_program):
    # optional: a compiler without AMX intrinsics cannot build it
    return c_program("amx_prog", "-O1", "-pthread", "-shared", "-fPIC", "-Dmain=amx_prog_main", libs=("-ldl",),
                     output="libamx_prog.so", optional=True)


CALL = """
import ctypes, sys
lib = ctypes.CDLL({lib!r})
argv = (ctypes.c_char_p * 4)(b"amx_prog", {path!r}.encode(), {what!r}.encode(), None)
sys.exit(lib.amx_prog_main(3, argv))
"""


def python(code, timeout=240):
    env = dict(os.environ)
    env.pop("PYAMX_TRAP_EMULATION", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=PYAMX_HOME, env=env)


def test_without_emulation_the_module_sees_no_amx(amx_lib):
    if _cpu_has_amx():
        pytest.skip("this CPU has AMX")
    proc = python(CALL.format(lib=str(amx_lib), path="syscall", what="basic"))
    assert proc.returncode == 3 and "ARCH_GET_XCOMP_SUPP does not offer AMX" in proc.stderr


@pytest.mark.parametrize("path", ["syscall", "symbol", "raw"])
def test_emulate_process_serves_another_modules_permission_request_and_tiles(amx_lib, path):
    code = "import pyamx.cpu.trap\nprint('mode', pyamx.cpu.trap.emulate_process(), flush=True)\n"
    code += CALL.format(lib=str(amx_lib), path=path, what="basic")
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    # On AMX silicon that lacks a newer extension, the complement mode emulates just that one.
    assert any(f"mode {m}" in proc.stdout for m in (("silicon", "complement") if _cpu_has_amx() else ("emulated",)))
    check_blocks(proc.stdout, ["main0", "main1"])


def test_emulate_process_with_threads_and_signals(amx_lib):
    code = "import pyamx.cpu.trap\npyamx.cpu.trap.emulate_process()\n"
    code += CALL.format(lib=str(amx_lib), path="syscall", what="threads")
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    check_blocks(proc.stdout, [f"t{i}.{j}" for i in range(4) for j in range(3)])


def test_module_tile_instruction_before_its_own_request_still_dies(amx_lib):
    if _cpu_has_amx():
        pytest.skip("this CPU has AMX")
    code = "import pyamx.cpu.trap\npyamx.cpu.trap.emulate_process()\n"
    code += CALL.format(lib=str(amx_lib), path="none", what="noperm")
    proc = python(code)
    assert proc.returncode == -4 and "no AMX permission yet" in proc.stderr


# ---- the pytest plugin ----

DOWNSTREAM_TEST = """
import ctypes, os
import pytest

@pytest.mark.amx
def test_my_amx_kernel(capfd):
    lib = ctypes.CDLL({lib!r})
    argv = (ctypes.c_char_p * 4)(b"amx_prog", b"raw", b"basic", None)
    assert lib.amx_prog_main(3, argv) == 0
    with open(os.environ["OUT"], "w") as f:
        f.write(capfd.readouterr().out)


# TDPBF8PS: no shipping Xeon executes it, so this needs the emulation on every CPU (the complement
# mode on AMX silicon), where TDPFP16PS runs on some CPUs that do not report AMX-FP16.
@pytest.mark.amx
def test_my_fp8_kernel(capfd):
    lib = ctypes.CDLL({lib!r})
    argv = (ctypes.c_char_p * 4)(b"amx_prog", b"raw", b"fp8", None)
    assert lib.amx_prog_main(3, argv) == 0
    assert "info fp8 ok" in capfd.readouterr().out
"""


def downstream_pytest(tmp_path, amx_lib, *args):
    (tmp_path / "test_downstream.py").write_text(DOWNSTREAM_TEST.format(lib=str(amx_lib)))
    env = dict(os.environ, OUT=str(tmp_path / "out.txt"))
    env.pop("PYAMX_TRAP_EMULATION", None)
    plugin = []
    if not any(ep.value == "pyamx.tools.pytest_plugin" for ep in metadata.entry_points(group="pytest11")):
        plugin = ["-p", "pyamx.tools.pytest_plugin"]  # a checkout not (re)installed since the entry point came
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin, "-rs",
                           "-q", *args, str(tmp_path)], capture_output=True, text=True, cwd=str(tmp_path),
                          env=env, timeout=240)


def test_plugin_amx_emulate_runs_a_downstream_suite(tmp_path, amx_lib):
    proc = downstream_pytest(tmp_path, amx_lib, "--amx=emulate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    check_blocks((tmp_path / "out.txt").read_text(), ["main0", "main1"])


def test_plugin_amx_marker_skips_with_the_reason(tmp_path, amx_lib):
    if _cpu_has_amx():
        pytest.skip("this CPU has AMX")
    proc = downstream_pytest(tmp_path, amx_lib)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 skipped" in proc.stdout and "needs AMX:" in proc.stdout


def test_plugin_amx_require_fails_the_session_without_amx(tmp_path, amx_lib):
    if _cpu_has_amx():
        pytest.skip("this CPU has AMX")
    proc = downstream_pytest(tmp_path, amx_lib, "--amx=require")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert "--amx=require: no AMX here" in proc.stderr


def test_plugin_amx_require_accepts_pyamx_run(tmp_path, amx_lib):
    (tmp_path / "test_downstream.py").write_text(DOWNSTREAM_TEST.format(lib=str(amx_lib)))
    env = dict(os.environ, OUT=str(tmp_path / "out.txt"))
    env.pop("PYAMX_TRAP_EMULATION", None)
    plugin = [] if any(ep.value == "pyamx.tools.pytest_plugin" for ep in metadata.entry_points(group="pytest11")) \
        else ["-p", "pyamx.tools.pytest_plugin"]
    proc = subprocess.run([sys.executable, "-m", "pyamx", "run", "--", sys.executable, "-m", "pytest", "-p",
                           "no:cacheprovider", *plugin, "-q", "--amx=require", str(tmp_path)],
                          capture_output=True, text=True, cwd=PYAMX_HOME, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    check_blocks((tmp_path / "out.txt").read_text(), ["main0", "main1"])


@pytest.mark.parametrize("through_shell", [False, True], ids=["direct", "forked-by-sh"])
def test_python_program_under_pyamx_run_keeps_emulating_through_faulthandler_and_signal(amx_lib, through_shell):
    """faulthandler toggled and a Python SIGILL handler set: the trap's handler stays the real one.

    Directly, the guard answers; forked and exec'd by a preloaded shell (whose guard holds the one
    seccomp listener the kernel allows per process tree) the preload's sigaction/signal do.
    """
    code = ("import faulthandler, signal\nfaulthandler.enable()\nfaulthandler.disable()\nfaulthandler.enable()\n"
            "signal.signal(signal.SIGILL, lambda *a: None)\nsignal.signal(signal.SIGILL, signal.SIG_DFL)\n"
            "faulthandler.enable()\n")
    code += CALL.format(lib=str(amx_lib), path="raw", what="threads")
    env = dict(os.environ)
    env.pop("PYAMX_TRAP_EMULATION", None)
    argv = [sys.executable, "-c", code]
    if through_shell:
        argv = ["sh", "-c", '"$0" "$@"; exit $?', *argv]  # sh forks, the child execs python
    proc = subprocess.run([sys.executable, "-m", "pyamx", "run", "--stats", "--", *argv],
                          capture_output=True, text=True, cwd=PYAMX_HOME, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    check_blocks(proc.stdout, [f"t{i}.{j}" for i in range(4) for j in range(3)])
