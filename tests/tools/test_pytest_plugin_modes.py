"""The pytest plugin's decisions for each mode ``emulate_process()`` can return, on any machine.

The complement mode (AMX silicon lacking some extensions) cannot run where there is no AMX, so its
paths are driven here with pyamx.cpu.trap's answers replaced: the handler must be put back on top of
faulthandler's in every mode where pyamx's handler is this process's ("emulated", "complement"), and
the ``amx`` marker must see the complement mode as AMX that is there, saying why truthfully.
tests/trap/test_emulate_process.py runs a real downstream suite in the mode this machine has.
"""

from __future__ import annotations

import types

import pytest

from pyamx.cpu import detect, trap
from pyamx.tools import pytest_plugin

MODES = {"emulated": True, "complement": True, "preload": False, "silicon": False}


@pytest.mark.parametrize("how", sorted(MODES))
def test_which_modes_keep_the_handler_on_top(how):
    assert pytest_plugin.keeps_handler_on_top(how) is MODES[how]


class _Config:
    def __init__(self, option):
        self.option = option

    def getoption(self, name):
        assert name == "pyamx_amx"
        return self.option

    def addinivalue_line(self, *args):
        pass


def _configured(monkeypatch, how):
    reinstalls = []
    monkeypatch.setattr(trap, "emulate_process", lambda: how)
    monkeypatch.setattr(trap, "ensure_installed", lambda: reinstalls.append(1) or True)
    config = _Config("emulate")
    pytest_plugin.pytest_configure(config)
    assert pytest_plugin.pytest_report_header(config) == f"AMX: {trap.describe_emulation(how)}"
    return config, reinstalls


@pytest.mark.parametrize("how", sorted(MODES))
def test_emulate_restores_the_handler_before_each_test(monkeypatch, how):
    """faulthandler's sigaction(SIGILL) comes after pytest_configure; the hooks after it reinstall."""
    config, reinstalls = _configured(monkeypatch, how)
    pytest_plugin.pytest_runtest_setup(types.SimpleNamespace(config=config, get_closest_marker=lambda name: None))
    assert len(reinstalls) == MODES[how]


@pytest.mark.parametrize("how", sorted(MODES))
def test_emulate_restores_the_handler_before_collection(monkeypatch, how):
    """Collection imports the suite's modules, which may run tile instructions at import."""
    config, reinstalls = _configured(monkeypatch, how)
    pytest_plugin.pytest_sessionstart(types.SimpleNamespace(config=config))
    assert len(reinstalls) == MODES[how]


def _process(monkeypatch, *, emulated=False, complementing=False, active=False, env=None, cpu_runs_amx=False):
    monkeypatch.setattr(trap, "process_emulated", lambda: emulated)
    monkeypatch.setattr(trap, "complementing", lambda: complementing, raising=False)
    monkeypatch.setattr(trap, "active", lambda: active)
    monkeypatch.setattr(detect, "report", lambda: types.SimpleNamespace(cpu_runs_amx=cpu_runs_amx,
                                                                       reason="the CPU's own words"))
    if env is None:
        monkeypatch.delenv(trap.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(trap.ENV_VAR, env)


def test_the_complement_mode_is_amx_that_is_there(monkeypatch):
    # Its handler is installed (trap.active() is true) and nobody set PYAMX_TRAP_EMULATION.
    _process(monkeypatch, complementing=True, active=True, cpu_runs_amx=True)
    ok, reason = pytest_plugin.amx_available()
    assert ok, reason
    assert "complement" in reason and trap.ENV_VAR not in reason


def test_the_complement_mode_displaced_by_faulthandler_is_still_amx_that_is_there(monkeypatch):
    _process(monkeypatch, complementing=True, active=False, cpu_runs_amx=True)
    assert pytest_plugin.amx_available()[0]


@pytest.mark.parametrize("env", [None, "0", "1"])
def test_the_trap_mode_alone_names_the_variable_only_when_it_is_set(monkeypatch, env):
    _process(monkeypatch, active=True, env=env)
    ok, reason = pytest_plugin.amx_available()
    assert not ok and "--amx=emulate" in reason
    assert (f"{trap.ENV_VAR}=1" in reason) is (env == "1"), reason
    if env != "1":
        assert "pyamx.cpu.trap.enable()" in reason


def test_the_other_modes_answer_as_before(monkeypatch):
    _process(monkeypatch, emulated=True)
    assert pytest_plugin.amx_available() == (True, "emulated by pyamx for this whole process")
    _process(monkeypatch, cpu_runs_amx=True)
    assert pytest_plugin.amx_available() == (True, "silicon: the CPU's own words")
    _process(monkeypatch)
    assert pytest_plugin.amx_available() == (False, "the CPU's own words")


@pytest.mark.parametrize("complementing", [False, True])
def test_availability_is_the_same_decision_as_a_pure_function(complementing):
    ok, reason = pytest_plugin.availability(process_emulated=False, complementing=complementing, trap_active=True,
                                            trap_env_set=False, cpu_runs_amx=True, cpu_reason="r")
    assert ok is complementing
    assert trap.ENV_VAR not in reason
