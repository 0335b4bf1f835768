"""A fork while another thread makes pyamx's first call gives a child that can use pyamx.

The first call imports modules, runs detection and loads the extension, holding Python's import
locks (and detection's) for tens of milliseconds; a child forked in that window used to inherit
them held and wait forever on its own first call (pyamx._first_use). Each trial is a fresh
interpreter, so the call really is the first: a thread starts it, the main thread forks a moment
later, and the child must finish its own call within a deadline, with nothing on stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env
from conftest import native_required_by_env

_TRIAL = r"""
import json, os, sys, threading, time
import numpy as np
import pyamx

entry, delay = sys.argv[1], float(sys.argv[2])
c = np.zeros((16, 16), np.float32)
a = np.full((16, 32), 0x3F80, np.uint16)  # bf16 1.0
b = np.full((16, 32), 0x3F80, np.uint16)


def call():
    if entry == "instruction":
        return float(pyamx.tdpbf16ps(c, a, b)[0, 0])
    if entry == "matmul":
        return float(pyamx.matmul(a, b.T.copy())[0, 0])
    machine = pyamx.tile_machine()
    machine.ldtilecfg(pyamx.TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}))
    machine.tileloadd(1, a, 64)
    machine.tileloadd(2, b, 64)
    machine.tilezero(0)
    machine.tdpbf16ps(0, 1, 2)
    out = np.zeros((16, 16), np.float32)
    machine.tilestored(0, out, 64)
    machine.tilerelease()
    return float(out[0, 0])


started = threading.Event()
parent_result = []


def first_call():
    started.set()
    parent_result.append(call())


worker = threading.Thread(target=first_call)
worker.start()
started.wait()
time.sleep(delay)
pid = os.fork()
if pid == 0:
    try:
        os.write(1, (json.dumps({"child": call()}) + "\n").encode())
        os._exit(0)
    except BaseException as exc:
        os.write(2, f"child: {type(exc).__name__}: {exc}\n".encode())
        os._exit(1)
worker.join()
deadline = time.monotonic() + 30  # a few seconds at most when it works
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        outcome = os.waitstatus_to_exitcode(status)
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        outcome = "hung"
        break
    time.sleep(0.01)
print(json.dumps({"parent": parent_result[0], "outcome": outcome, "backend": pyamx.backend().label}))
"""

_BACKENDS = {
    "trap": {"PYAMX_TRAP_EMULATION": "1", "PYAMX_BACKEND": "native"},
    "emulator": {"PYAMX_BACKEND": "emulator"},
}


def _native_runs_in_trap_mode() -> tuple:
    code = "from pyamx.cpu import native; print(native.available())"
    env = child_env(drop=("PYAMX_BACKEND", "PYAMX_TRAP_EMULATION"), **_BACKENDS["trap"])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=PYAMX_HOME, timeout=120)
    return proc.returncode == 0 and proc.stdout.startswith("(True"), proc.stdout + proc.stderr


@pytest.mark.parametrize("delay", [0.0, 0.01])
@pytest.mark.parametrize("entry", ["instruction", "matmul", "tile machine"])
@pytest.mark.parametrize("backend", list(_BACKENDS))
def test_a_child_forked_during_the_first_call_finishes_its_own(backend, entry, delay):
    if backend == "trap":
        usable, why = _native_runs_in_trap_mode()
        if not usable:
            message = f"the trap mode cannot run here: {why[-500:]}"
            if native_required_by_env():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    env = child_env(drop=("PYAMX_BACKEND", "PYAMX_TRAP_EMULATION", "PYAMX_ENGINE"), **_BACKENDS[backend])
    # Python >= 3.12 warns at every fork() of a threaded process, which this trial is on purpose: that
    # warning is the one stderr line expected, so it is silenced by its message alone.
    quiet_fork = ["-W", "ignore:This process:DeprecationWarning"]
    proc = subprocess.run([sys.executable, *quiet_fork, "-c", _TRIAL, entry, str(delay)], capture_output=True, text=True,
                          env=env, cwd=PYAMX_HOME, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    summary = lines[-1]
    assert summary["outcome"] == 0, f"the child {summary['outcome']}: {proc.stderr[-3000:]}"
    assert {"child": 32.0} in lines and summary["parent"] == 32.0, lines
    assert summary["backend"].startswith("native" if backend == "trap" else "emulator"), summary
    assert proc.stderr == "", proc.stderr[-3000:]  # no at-fork hook ran half (pyamx._first_use)
