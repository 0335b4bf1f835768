"""pytest plugin: run a project's own AMX code under pyamx's emulation (registered as ``pytest11``).

Inactive unless asked. It adds:

* ``--amx=emulate``: at session start, :func:`pyamx.cpu.trap.emulate_process`
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


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pyamx", "AMX (pyamx)")
    group.addoption("--amx", choices=MODES, default=None, dest="pyamx_amx",
                    help="emulate: emulate AMX for the whole test process where the CPU lacks it "
                         "(pyamx.cpu.trap.emulate_process); require: fail unless AMX (silicon or emulated) is there")


# What emulate_process() returned -> whether pyamx's SIGILL handler is this process's and must stay
# the real disposition. pytest enables faulthandler after this plugin's pytest_configure, and
# faulthandler's sigaction(SIGILL) replaces the handler wherever nothing answers it on the handler's
# behalf: in the complement mode always (no guard, no preload in a Python process), in the full trap
# mode where this pytest has no guard of its own (it runs under another guarded process). "preload"
# (pyamx run's library interposes sigaction) and "silicon" (nothing installed) need nothing.
_HANDLER_MODES = ("emulated", "complement")


def keeps_handler_on_top(how: str) -> bool:
    """Whether, after ``emulate_process()`` returned ``how``, the plugin must put pyamx's handler back
    on top (chaining to whatever replaced it) before the session's code runs."""
    return how in _HANDLER_MODES


def pytest_configure(config: pytest.Config) -> None:
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
        # attributes of our own on the config (read back with getattr): pytest.Config declares none such
        setattr(config, "_pyamx_amx", f"AMX: {describe_emulation(how)}")
        setattr(config, "_pyamx_keep_handler", keeps_handler_on_top(how))
    else:
        ok, reason = amx_available()
        if not ok:
            raise pytest.UsageError(f"--amx=require: no AMX here (neither silicon nor emulation): {reason}")
        setattr(config, "_pyamx_amx", f"AMX: {reason}")


def pytest_report_header(config: pytest.Config) -> str | None:
    header: str | None = getattr(config, "_pyamx_amx", None)
    return header


def availability(*, process_emulated: bool, complementing: bool, trap_active: bool, trap_env_set: bool,
                 cpu_runs_amx: bool, cpu_reason: str) -> tuple[bool, str]:
    """``(available, reason)`` from what this process is: the decision of :func:`amx_available`, pure."""
    if process_emulated:
        return True, "emulated by pyamx for this whole process"
    if complementing:
        # The CPU runs its own AMX instructions and the kernel grants the permission to any code.
        return True, ("silicon, with the AMX extensions this CPU lacks emulated by pyamx (complement mode): "
                      f"{cpu_reason}")
    if trap_active:
        from ..cpu import trap

        how = f"{trap.ENV_VAR}=1" if trap_env_set else "pyamx.cpu.trap.enable() was called"
        return False, (f"pyamx's own trap mode is on ({how}) but other code's arch_prctl permission "
                       "request is not emulated; use --amx=emulate")
    if cpu_runs_amx:  # other code's kernels need the CPU, not pyamx's own kernels
        return True, f"silicon: {cpu_reason}"
    return False, cpu_reason


def amx_available() -> tuple[bool, str]:
    """``(available, reason)``: usable AMX silicon, or pyamx emulating AMX for the whole process."""
    import os

    from ..cpu import trap

    if trap.process_emulated():
        return availability(process_emulated=True, complementing=False, trap_active=False, trap_env_set=False,
                            cpu_runs_amx=False, cpu_reason="")
    try:
        from ..cpu import _native_start

        rep = _native_start.report()  # after the permission and the forked child: whether the CPU runs AMX
        return availability(process_emulated=False, complementing=trap.complementing(), trap_active=trap.active(),
                            trap_env_set=os.environ.get(trap.ENV_VAR) == "1", cpu_runs_amx=rep.cpu_runs_amx,
                            cpu_reason=rep.reason)
    except Exception as exc:  # the report must not break collection
        return False, f"AMX detection failed: {exc}"


def _keep_handler_on_top(config: pytest.Config) -> None:
    if getattr(config, "_pyamx_keep_handler", False):
        from ..cpu.trap import ensure_installed

        ensure_installed()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # Collection may import code that runs tile instructions: faulthandler is on by now.
    _keep_handler_on_top(session.config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # faulthandler, enabled after pytest_configure, displaces the handler where nothing answers its
    # sigaction (keeps_handler_on_top): put it back on top, chaining to faulthandler.
    _keep_handler_on_top(item.config)
    if item.get_closest_marker("amx") is None:
        return
    ok, reason = amx_available()
    if not ok:
        pytest.skip(f"needs AMX: {reason}")
