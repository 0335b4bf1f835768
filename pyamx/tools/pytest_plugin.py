"""pytest plugin: run a project's own AMX code under pyamx's emulation (registered as ``pytest11``).

Inactive unless asked. It adds:

* ``--amx=emulate``: at session start, :func:`pyamx.trap.emulate_process`
  (nothing on AMX silicon); the session fails at once when that is
  impossible, saying why.
* ``--amx=require``: the session fails at once unless AMX is there, on
  silicon or already emulated (``pyamx run -- pytest ...``).
* the ``amx`` marker: such a test is skipped with the detection report's
  reason when AMX is not available (neither silicon nor emulation).

docs/downstream.md shows the recipe: installing pyamx from git or an sdist, then these options.
"""

from __future__ import annotations

import pytest

MODES = ("emulate", "require")


def pytest_addoption(parser):
    group = parser.getgroup("pyamx", "AMX (pyamx)")
    group.addoption("--amx", choices=MODES, default=None, dest="pyamx_amx",
                    help="emulate: emulate AMX for the whole test process where the CPU lacks it "
                         "(pyamx.trap.emulate_process); require: fail unless AMX (silicon or emulated) is there")


def pytest_configure(config):
    config.addinivalue_line("markers", "amx: the test runs AMX code; skipped with the reason where no AMX "
                                       "(silicon or pyamx emulation) is available")
    mode = config.getoption("pyamx_amx")
    if mode is None:
        return
    from ..errors import BackendError

    if mode == "emulate":
        from ..cpu.trap import describe_emulation, emulate_process

        try:
            how = emulate_process()
        except BackendError as exc:
            raise pytest.UsageError(f"--amx=emulate: {exc}") from exc
        config._pyamx_amx = f"AMX: {describe_emulation(how)}"
        config._pyamx_emulating = how == "emulated"
    else:
        ok, reason = amx_available()
        if not ok:
            raise pytest.UsageError(f"--amx=require: no AMX here (neither silicon nor emulation): {reason}")
        config._pyamx_amx = f"AMX: {reason}"


def pytest_report_header(config):
    return getattr(config, "_pyamx_amx", None)


def amx_available():
    """``(available, reason)``: usable AMX silicon, or pyamx emulating AMX for the whole process."""
    from ..cpu import trap

    if trap.process_emulated():
        return True, "emulated by pyamx for this whole process"
    try:
        from ..cpu import detect

        rep = detect.report()
        if trap.active():
            return False, (f"pyamx's own trap mode is on ({trap.ENV_VAR}=1) but other code's "
                           "arch_prctl permission request is not emulated; use --amx=emulate")
        if rep.cpu_runs_amx:  # other code's kernels need the CPU, not pyamx's own kernels
            return True, f"silicon: {rep.reason}"
        return False, rep.reason
    except Exception as exc:  # the report must not break collection
        return False, f"AMX detection failed: {exc}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if getattr(item.config, "_pyamx_emulating", False):
        # Where the trap's guard is unavailable (this pytest runs under another guarded process:
        # the kernel allows one seccomp listener per tree), faulthandler, enabled after
        # pytest_configure, has displaced the handler: put it back on top, chaining to it.
        from ..cpu.trap import ensure_installed

        ensure_installed()
    if item.get_closest_marker("amx") is None:
        return
    ok, reason = amx_available()
    if not ok:
        pytest.skip(f"needs AMX: {reason}")
