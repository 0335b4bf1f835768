"""One parser for every PYAMX_* variable: empty means unset, booleans are lenient in spelling only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from childproc import PYAMX_HOME, child_env
from pyamx import _env
from pyamx.errors import BackendError, EnvironmentVariableError


@pytest.mark.parametrize("value", ["1", "true", "True", "YES", "yes"])
def test_true_spellings(value):
    assert _env.flag("PYAMX_X", environ={"PYAMX_X": value}) is True


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "No"])
def test_false_spellings(value):
    assert _env.flag("PYAMX_X", True, environ={"PYAMX_X": value}) is False


@pytest.mark.parametrize("default", [False, True])
def test_empty_and_unset_mean_the_default(default):
    assert _env.flag("PYAMX_X", default, environ={"PYAMX_X": ""}) is default
    assert _env.flag("PYAMX_X", default, environ={}) is default
    assert _env.choice("PYAMX_X", ("a", "b"), "b", environ={"PYAMX_X": ""}) == "b"


@pytest.mark.parametrize("value", ["2", "01", " 1", "1 ", "y", "on", "off", "enabled", "tru"])
def test_unknown_booleans_are_refused_naming_variable_value_and_choices(value):
    with pytest.raises(_env.EnvVarError) as info:
        _env.flag("PYAMX_X", environ={"PYAMX_X": value})
    message = str(info.value)
    assert "PYAMX_X" in message and repr(value) in message and "yes/no" in message


def test_names_are_exact_like_the_python_argument():
    assert _env.choice("PYAMX_X", ("auto", "native"), "auto", environ={"PYAMX_X": "native"}) == "native"
    for value in ("Native", " native", "nat"):
        with pytest.raises(_env.EnvVarError, match="auto, native"):
            _env.choice("PYAMX_X", ("auto", "native"), "auto", environ={"PYAMX_X": value})


def test_integers():
    assert _env.integer("PYAMX_X", 7, environ={}) == 7
    assert _env.integer("PYAMX_X", 7, environ={"PYAMX_X": ""}) == 7
    assert _env.integer("PYAMX_X", 7, environ={"PYAMX_X": "42"}) == 42
    for value in ("-1", "1.5", " 3", "0x10", "1_000", "two"):
        with pytest.raises(_env.EnvVarError, match="decimal integer"):
            _env.integer("PYAMX_X", 7, environ={"PYAMX_X": value})


def test_the_error_class_is_chosen_by_the_caller():
    with pytest.raises(EnvironmentVariableError) as info:
        _env.flag("PYAMX_X", environ={"PYAMX_X": "2"}, error=EnvironmentVariableError)
    assert isinstance(info.value, BackendError) and isinstance(info.value, ValueError)


def test_loads_by_path_without_numpy_or_cffi():
    """build.py loads the parser before numpy/cffi exist; blocking both proves it needs neither."""
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        sys.modules["numpy"] = None; sys.modules["cffi"] = None
        spec = importlib.util.spec_from_file_location("pyamx_env", {os.path.join(PYAMX_HOME, "pyamx", "_env.py")!r})
        env = importlib.util.module_from_spec(spec); spec.loader.exec_module(env)
        print(env.flag("PYAMX_DISABLE_AMX_KERNELS"))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=child_env(PYAMX_DISABLE_AMX_KERNELS="yes"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def _pytest_child(tmp_path, **env):
    (tmp_path / "test_one.py").write_text("def test_a(native):\n    pass\n\ndef test_b(native):\n    pass\n")
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "conftest.py"), encoding="utf-8") as f:
        (tmp_path / "conftest.py").write_text(f.read())
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=child_env(**env))


def test_require_native_is_parsed_once_at_startup(tmp_path):
    proc = _pytest_child(tmp_path, PYAMX_REQUIRE_NATIVE="maybe")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage-error status, before any test
    output = proc.stdout + proc.stderr
    assert output.count("PYAMX_REQUIRE_NATIVE='maybe'") == 1 and "test_a" not in output


def test_require_native_accepts_yes(tmp_path):
    from pyamx.cpu import native

    proc = _pytest_child(tmp_path, PYAMX_REQUIRE_NATIVE="yes")
    usable = native.available()[0]
    assert proc.returncode == (0 if usable else 1), proc.stdout + proc.stderr
    if not usable:
        assert "PYAMX_REQUIRE_NATIVE is set but the native backend is unavailable" in proc.stdout


@pytest.mark.parametrize("variable, value", [("PYAMX_ENGINE", "fast"), ("PYAMX_ENGINE_THREADS", "0"),
                                             ("PYAMX_ENGINE_THREADS", "two")])
def test_engine_variables_go_through_the_same_parser(monkeypatch, variable, value):
    from pyamx.emulator import engine

    monkeypatch.setenv(variable, value)
    engine.reset_environment()
    try:
        with pytest.raises(EnvironmentVariableError, match=variable):
            engine.resolve() if variable == "PYAMX_ENGINE" else engine.default_threads()
        monkeypatch.setenv(variable, "")  # empty means unset
        assert engine.requested() == "auto" and engine.default_threads() >= 1
    finally:
        monkeypatch.delenv(variable)
        engine.reset_environment()


def _modules_spelling(name: str) -> set:
    """The pyamx modules, _env's registry aside, whose code holds ``name`` as a whole string literal."""
    import ast
    from pathlib import Path

    package = Path(_env.__file__).resolve().parent
    found = set()
    for path in package.rglob("*.py"):
        if path.name == "_env.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.Constant) and node.value == name for node in ast.walk(tree)):
            found.add(path.relative_to(package).as_posix())
    return found


@pytest.mark.parametrize("name", sorted(_env.VARIABLES))
def test_each_variable_name_has_one_owning_module(name):
    # A name spelled in two modules drifts apart on the first rename; the others import the owner's constant.
    owners = _modules_spelling(name)
    assert len(owners) <= 1, f"{name} is spelled in {sorted(owners)}; keep it in one and import it in the rest"
