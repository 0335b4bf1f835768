"""One rule for a backend and an engine, whether each comes from an argument or a variable.

The rule (docs/guide.md, "Backends"; pyamx._backend.resolve): every engine value is validated on
every call, whatever the backend; a concrete engine (the ``engine`` argument, else PYAMX_ENGINE)
means the emulator, so ``auto`` gives the emulator and ``native`` is an error, except that a
call's ``backend="native"`` outranks PYAMX_ENGINE. The whole matrix runs on a stand-in native
backend that is usable, so it holds on every machine; the last tests run the public functions in
a child through the trap mode, where native really runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env
from conftest import native_required_by_env
from pyamx import _backend
from pyamx.emulator import engine as _engine
from pyamx.errors import EnvironmentVariableError, UnknownBackendError

_NATIVE = _backend.Backend("native", "trap")


@pytest.fixture
def settings(monkeypatch):
    """``apply(backend_env, engine_env)``: a fresh process's settings, with native usable."""
    monkeypatch.setattr(_backend, "native_status", lambda group="bf16", report=None: (True, "stand-in"))
    monkeypatch.setattr(_backend, "_native", lambda: _NATIVE)

    def apply(backend_env=None, engine_env=None):
        for name, value in (("PYAMX_BACKEND", backend_env), ("PYAMX_ENGINE", engine_env)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        monkeypatch.setattr(_backend, "_requested", None)
        monkeypatch.setattr(_backend, "_decision", None)
        _engine.reset_environment()

    yield apply
    _engine.reset_environment()


def _expected(backend, backend_from_arg, engine, engine_from_arg):
    """What the rule says: "native", "emulator", or the exception class."""
    if engine == "gpu":
        return UnknownBackendError if engine_from_arg else EnvironmentVariableError
    if backend == "emulator" or engine == "auto":
        return "native" if backend in ("native", "auto") else "emulator"
    if backend == "auto":
        return "emulator"
    if backend_from_arg and not engine_from_arg:  # backend="native" outranks PYAMX_ENGINE
        return "native"
    return ValueError


@pytest.mark.parametrize("engine", ["numpy", "auto", "gpu"])
@pytest.mark.parametrize("engine_from_arg", [True, False], ids=["engine-arg", "engine-env"])
@pytest.mark.parametrize("backend", ["auto", "native", "emulator"])
@pytest.mark.parametrize("backend_from_arg", [True, False], ids=["backend-arg", "backend-env"])
def test_every_combination_follows_the_one_rule(settings, backend, backend_from_arg, engine, engine_from_arg):
    settings(backend_env=None if backend_from_arg else backend, engine_env=None if engine_from_arg else engine)
    args = {"backend": backend if backend_from_arg else None, "engine": engine if engine_from_arg else None}
    want = _expected(backend, backend_from_arg, engine, engine_from_arg)
    if isinstance(want, str):
        assert _backend.resolve(args["backend"], engine=args["engine"]) == want
        return
    with pytest.raises(want) as caught:
        _backend.resolve(args["backend"], engine=args["engine"])
    if want is ValueError:  # the message names where each setting came from
        engine_source = f"engine='{engine}'" if engine_from_arg else f"PYAMX_ENGINE={engine}"
        backend_source = "backend='native'" if backend_from_arg else "PYAMX_BACKEND=native"
        assert engine_source in str(caught.value) and backend_source in str(caught.value)


@pytest.mark.parametrize("backend", ["auto", "native", "emulator"])
@pytest.mark.parametrize("engine", ["numpy", "auto", "gpu"])
def test_the_process_default_follows_the_same_rule(settings, backend, engine):
    settings(backend_env=backend, engine_env=engine)
    want = _expected(backend, False, engine, False)
    if isinstance(want, str):
        assert _backend.default_backend() == want
        if want == "emulator" and backend == "auto":
            assert "PYAMX_ENGINE=numpy" in _backend.default_reason()
    else:
        with pytest.raises(want):
            _backend.default_backend()


_CHILD = r"""
import json
import numpy as np
import pyamx
from pyamx.cpu import native

out = {"native": native.available()[0]}
f32 = np.zeros((1, 1), np.float32)
for name, a in (("tdpbf16ps", np.zeros((1, 2), np.uint16)), ("tdpfp16ps", np.zeros((1, 2), np.float16))):
    try:
        out[name] = getattr(pyamx, name)(f32, a, a.reshape(1, 2)).label
    except Exception as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.mark.parametrize("engine, want", [("gpu", "EnvironmentVariableError"), ("numpy", "ValueError")])
def test_native_calls_of_every_group_refuse_what_the_rule_refuses(engine, want):
    """PYAMX_ENGINE=gpu used to be ignored by native bf16 calls, and PYAMX_ENGINE=numpy with
    PYAMX_BACKEND=native ran native silently: the public functions, native really running."""
    env = child_env(drop=("PYAMX_BACKEND", "PYAMX_ENGINE", "PYAMX_TRAP_EMULATION"), PYAMX_BACKEND="native",
                    PYAMX_ENGINE=engine, PYAMX_TRAP_EMULATION="1")
    probe = subprocess.run([sys.executable, "-c", "from pyamx.cpu import native; print(native.available()[0])"],
                           capture_output=True, text=True, cwd=PYAMX_HOME, timeout=120,
                           env=child_env(drop=("PYAMX_BACKEND", "PYAMX_ENGINE", "PYAMX_TRAP_EMULATION")))
    if probe.stdout.strip() == "True":  # AMX silicon: native without the trap mode
        env.pop("PYAMX_TRAP_EMULATION")
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env,
                          cwd=PYAMX_HOME, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["native"]:
        message = "the native backend cannot run here, not even through the trap mode"
        if native_required_by_env():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    assert out["tdpbf16ps"] == want and out["tdpfp16ps"] in (want, "NativeUnavailableError"), out



def test_calls_decide_backend_and_engine_once_and_again_when_the_settings_change(monkeypatch):
    """Issue 29/30: the rule runs once per distinct arguments, not per call; reset_environment()
    (and a changed PYAMX_ENGINE read through it) makes every later call decide again."""
    import numpy as np

    import pyamx
    from pyamx.cpu import native

    rules, engines, runners = [], [], []
    rule, engine_rule, runner = _backend.backend_rule, _engine._resolve, native.oneshot_runner
    monkeypatch.setattr(_backend, "backend_rule", lambda *args: rules.append(args) or rule(*args))
    monkeypatch.setattr(_engine, "_resolve", lambda *args: engines.append(args) or engine_rule(*args))
    monkeypatch.setattr(native, "oneshot_runner", lambda *args: runners.append(args) or runner(*args))
    monkeypatch.delenv("PYAMX_ENGINE", raising=False)
    _engine.reset_environment()
    c, a, b = np.zeros((4, 4), np.float32), np.ones((4, 8), np.uint16), np.ones((4, 8), np.uint16)
    b_rows = np.ones((8, 4), np.uint16)

    def calls(default=True):
        for _ in range(20):
            if default:  # the process default: native in the trap mode, else the emulator
                pyamx.tdpbf16ps(c, a, b)
            pyamx.tdpbf16ps(c, a, b, backend="emulator")
            pyamx.matmul(a, b_rows, backend="emulator")
        return pyamx.tdpbf16ps(c, a, b, backend="emulator")

    first = calls()
    assert rules and engines  # decided during the first calls
    rules.clear(), engines.clear(), runners.clear()
    again = calls()
    assert (rules, engines, runners) == ([], [], [])  # 61 calls, no decision made again
    assert again.engine == first.engine and again.tobytes() == first.tobytes()

    monkeypatch.setenv("PYAMX_ENGINE", "numpy")
    _engine.reset_environment()
    changed = calls(default=False)  # PYAMX_BACKEND=native (the trap mode's run) refuses a named engine
    assert rules and engines and changed.engine == "numpy"
    assert changed.tobytes() == first.tobytes()
    # the process default as read (PYAMX_BACKEND) is part of the settings too
    rules.clear()
    monkeypatch.setattr(_backend, "_requested", "emulator")
    default = pyamx.tdpbf16ps(c, a, b)
    assert rules and default.backend == "emulator" and default.tobytes() == first.tobytes()
    _engine.reset_environment()
