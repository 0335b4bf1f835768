"""Backend choice: strict names, one decision per process, no silent fallback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import pyamx
from childproc import PYAMX_HOME, child_env
from pyamx import _backend
from pyamx.errors import BackendError, NativeUnavailableError

NATIVE_OK, NATIVE_REASON = _backend.native_status()


def _ops():
    return np.zeros((1, 1), np.float32), np.zeros((1, 2), np.uint16), np.zeros((1, 2), np.uint16)


def _python(code: str, **env) -> subprocess.CompletedProcess:
    # PYAMX_TRAP_EMULATION stays: the child must see native as this process does.
    full_env = child_env(drop=("PYAMX_BACKEND",), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120,
                          cwd=PYAMX_HOME)


_FIRST_USE = (
    "import pyamx, numpy as np\n"
    "print('imported')\n"
    "pyamx.tdpbf16ps(np.zeros((1,1),np.float32), np.zeros((1,2),np.uint16), np.zeros((1,2),np.uint16))\n"
)


@pytest.mark.parametrize("value", ["bogus", "Native", "EMULATOR", " auto"])
def test_unknown_env_value_fails_the_first_use_not_the_import(value):
    proc = _python(_FIRST_USE, PYAMX_BACKEND=value)
    assert proc.stdout == "imported\n" and proc.returncode != 0
    assert "EnvironmentVariableError" in proc.stderr
    assert "PYAMX_BACKEND" in proc.stderr and "auto, native, emulator" in proc.stderr


@pytest.mark.parametrize("value", ["maybe", "2", " 1"])
def test_unknown_trap_emulation_value_fails_the_first_use_not_the_import(value):
    proc = _python(_FIRST_USE, PYAMX_TRAP_EMULATION=value)
    assert proc.stdout == "imported\n" and proc.returncode != 0
    assert "PYAMX_TRAP_EMULATION" in proc.stderr and "yes/no" in proc.stderr


def test_empty_env_values_mean_unset():
    proc = _python(_FIRST_USE + "print(pyamx.backend_reason())", PYAMX_BACKEND="")
    assert proc.returncode == 0, proc.stderr
    assert "PYAMX_BACKEND=emulator" not in proc.stdout  # decided as auto


def test_env_emulator_is_the_default_and_results_say_so():
    proc = _python(
        "import pyamx, numpy as np\n"
        "r = pyamx.tdpbf16ps(np.zeros((1,1),np.float32), np.zeros((1,2),np.uint16), np.zeros((1,2),np.uint16))\n"
        "print(pyamx.backend(), r.backend, pyamx.backend_reason())",
        PYAMX_BACKEND="emulator",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["emulator", "emulator"]
    assert "PYAMX_BACKEND=emulator" in proc.stdout


def test_env_native_never_falls_back():
    code = (
        "import pyamx, numpy as np\n"
        "try:\n    print('backend', pyamx.backend())\n"
        "except pyamx.NativeUnavailableError as e:\n    print('refused', e)\n"
    )
    proc = _python(code, PYAMX_BACKEND="native")
    assert proc.returncode == 0, proc.stderr
    if NATIVE_OK:
        assert proc.stdout.startswith("backend native")
    else:
        assert proc.stdout.startswith("refused") and "PYAMX_BACKEND=native" in proc.stdout
        assert "pyamx info" in proc.stdout


def test_auto_records_why():
    proc = _python("import pyamx; print(pyamx.backend()); print(pyamx.backend_reason())", PYAMX_BACKEND="auto")
    assert proc.returncode == 0, proc.stderr
    chosen, reason = proc.stdout.splitlines()[:2]
    assert chosen == ("native" if NATIVE_OK else "emulator")
    assert reason  # "every detection stage said yes" or the detection report's reason
    if not NATIVE_OK:
        assert "native is not usable" in reason


@pytest.mark.parametrize("call", [lambda: pyamx.tdpbf16ps(*_ops(), backend="bogus"),
                                  lambda: pyamx.tile_machine(backend="bogus")])
def test_an_unknown_backend_name_is_a_value_error_and_still_a_backend_error(call):
    # Like every other bad keyword (numerics=, dtype=): `except ValueError` catches it.
    with pytest.raises(ValueError, match="backend is 'bogus'") as info:
        call()
    assert isinstance(info.value, BackendError)


def test_per_call_backend_names_are_strict():
    with pytest.raises(BackendError, match="must be one of auto, native, emulator"):
        pyamx.tdpbf16ps(*_ops(), backend="gpu")
    assert pyamx.tdpbf16ps(*_ops(), backend="emulator").backend == "emulator"
    assert pyamx.tdpbf16ps(*_ops(), backend="auto").backend == ("native" if NATIVE_OK else "emulator")


@pytest.mark.skipif(NATIVE_OK, reason="native is usable here; the refusal path needs a machine without it")
def test_named_native_raises_with_the_reason_and_never_falls_back():
    with pytest.raises(NativeUnavailableError) as info:
        pyamx.tdpbf16ps(*_ops(), backend="native")
    assert "backend='native'" in str(info.value) and NATIVE_REASON in str(info.value)
    with pytest.raises(NativeUnavailableError):
        pyamx.tile_machine(backend="native")


def test_result_label_does_not_stick_to_derived_arrays():
    result = pyamx.tdpbf16ps(*_ops(), backend="emulator")
    assert isinstance(result, pyamx.AMXResult) and result.backend == "emulator"
    assert type(result + 1) is np.ndarray and type(np.sum(result)) is not pyamx.AMXResult


# ---- backends as objects; the numerics rule (docs/semantics.md section 3) -------------------


def test_resolve_returns_a_backend_that_compares_as_its_name_and_knows_its_mode():
    chosen = _backend.resolve("emulator")
    assert chosen == "emulator" and isinstance(chosen, str) and chosen.mode is None and not chosen.is_native
    assert chosen.label == "emulator" and chosen.runs("straight") and chosen.numerics(None) == pyamx.Numerics()
    import json
    import pickle

    assert json.dumps({"backend": chosen}) == '{"backend": "emulator"}'
    assert pickle.loads(pickle.dumps(_backend.Backend("native", "trap"))).label == "native (trap mode)"


def test_native_backend_runs_only_the_default_numerics():
    native = _backend.Backend("native", "silicon")
    assert native.runs(None) and native.runs("sdm") and native.runs(pyamx.Numerics())
    assert not native.runs("straight") and not native.runs(pyamx.Numerics(tininess="before"))
    with pytest.raises(ValueError, match="emulator model"):
        native.numerics("wide")


@pytest.fixture(params=[True, False], ids=["auto-would-pick-native", "auto-would-pick-emulator"])
def forced_native(request, monkeypatch):
    """Native usable or not, forced, so the rule is checked both ways on any machine."""
    usable = request.param
    monkeypatch.setattr(_backend, "native_status", lambda group="bf16", report=None: (usable, "forced by the test"))
    monkeypatch.setattr(_backend, "native_mode", lambda: "silicon" if usable else None)
    monkeypatch.setattr(_backend, "_requested", "auto")
    # decided afresh under the forced status, not read from what an earlier test of this worker cached
    monkeypatch.setattr(_backend, "_decision", None)
    return usable


def test_auto_with_a_non_default_numerics_picks_the_emulator_whether_or_not_native_is_usable(forced_native):
    for backend in (None, "auto"):
        assert _backend.resolve(backend, numerics="straight") == "emulator"
        machine = pyamx.tile_machine(backend=backend, numerics="straight")
        assert type(machine) is pyamx.TileMachine and machine.numerics.structure == "straight"
    assert _backend.resolve("auto", numerics=pyamx.Numerics()) == ("native" if forced_native else "emulator")


def test_named_native_with_a_non_default_numerics_raises_value_error_either_way(forced_native, monkeypatch):
    with pytest.raises(ValueError, match="emulator model"):
        pyamx.tile_machine(backend="native", numerics="straight")
    monkeypatch.setattr(_backend, "_requested", "native")
    # PYAMX_BACKEND=native where native cannot run: the process-wide refusal comes first (_backend.resolve)
    expected = ValueError if forced_native else NativeUnavailableError
    with pytest.raises(expected, match="emulator model" if forced_native else "cannot run here"):
        _backend.resolve(None, numerics=pyamx.Numerics(nan="canonical"))


_SAME_SCRIPT = r"""
import pyamx
from pyamx.tools import probe
from pyamx.cpu.native import NativeMachine
m = pyamx.tile_machine(numerics="straight")
print("straight:", type(m).__name__, m.numerics.name)
print("probe:", probe.probe("auto", "straight")["backend"])
try:
    pyamx.tile_machine(backend="native", numerics="straight")
except ValueError:
    print("named native straight: ValueError")
if pyamx.backend() == "native":
    print("default numerics object:", type(pyamx.tile_machine(numerics=pyamx.Numerics())).__name__,
          type(NativeMachine(numerics=pyamx.Numerics())).__name__)
"""


def test_the_same_numerics_script_behaves_the_same_where_auto_picks_native_and_where_it_picks_the_emulator():
    """Issue 9: on a machine where auto picks native (here: the trap mode) as on one where it cannot."""
    without = _python(_SAME_SCRIPT, PYAMX_TRAP_EMULATION="0")
    assert without.returncode == 0, without.stderr
    # On AMX silicon auto already picks native (and the trap mode is refused there).
    with_native = without if NATIVE_OK and "default numerics object" in without.stdout else \
        _python(_SAME_SCRIPT, PYAMX_TRAP_EMULATION="1")
    if with_native.returncode != 0 or "default numerics object" not in with_native.stdout:
        pytest.skip(f"auto cannot pick native here, even in trap mode: {with_native.stderr[-300:]}")
    first = ["straight: TileMachine straight", "probe: emulator", "named native straight: ValueError"]
    assert without.stdout.splitlines()[:3] == first
    assert with_native.stdout.splitlines()[:3] == first
    assert with_native.stdout.splitlines()[3] == "default numerics object: NativeMachine NativeMachine"


@pytest.mark.skipif(not _backend.native_status("int8")[0], reason="the native int8 kernels cannot run here")
def test_a_native_call_asks_detection_once_and_its_backend_carries_the_answer(monkeypatch):
    from pyamx.cpu import detect

    rep = detect.report()
    asked = []
    monkeypatch.setattr(detect, "report", lambda: asked.append(1) or rep)
    c, a = np.zeros((2, 2), np.int32), np.ones((2, 8), np.int8)
    r = pyamx.tdpbssd(c, a, a[:2], backend="native")
    # at most once: none where an earlier call with these arguments already chose (pyamx._backend._chosen)
    assert len(asked) <= 1 and r.backend == "native" and r.native_mode == rep.mode
    asked.clear()
    r = pyamx.matmul(np.ones((2, 16, 64), np.int8), np.ones((64, 16), np.int8), backend="native")
    assert len(asked) <= 1 and r.backend == "native" and int(r[1, 0, 0]) == 64
    chosen = _backend.resolve("native", "int8")
    assert chosen.report is rep and chosen.library is not None
    assert chosen.mode_for(pyamx.table.isa.DOTS[0]) in ("silicon", "trap", "complement")
