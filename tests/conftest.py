"""Shared pytest fixtures of pyamx's tests."""

from __future__ import annotations

import gc

import pytest

from pyamx import _env

# ---- native backend (issue 3): skip, or fail under PYAMX_REQUIRE_NATIVE=1 ----------
# One place decides what a test that needs the native backend does where it
# cannot run: skip with the detection report's reason, or fail when the run
# demands native (CI on AMX silicon, or in trap mode).

REQUIRE_NATIVE_ENV = "PYAMX_REQUIRE_NATIVE"
_require_native = False  # parsed once, in pytest_configure

def pytest_configure(config):
    global _require_native
    try:
        _require_native = _env.flag(REQUIRE_NATIVE_ENV)
    except _env.EnvVarError as exc:  # once, at start-up, not once per test
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if {"native", "native_family"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.native)
        if item.path.name.startswith("test_trap"):
            item.add_marker(pytest.mark.trap)


def native_required_by_env() -> bool:
    """Whether ``PYAMX_REQUIRE_NATIVE`` demands the native backend (parsed once at start-up)."""
    return _require_native


def _cpu_lacks_family(native, family) -> bool:
    """Silicon whose CPU lacks this family's extension (AMX-FP16 on a Sapphire Rapids): no promise broken."""
    from pyamx import detect

    return family is not None and native.available()[0] and detect.report().mode == "silicon"


def _native_or_skip(family=None):
    from pyamx import native

    usable, reason = native.available(family)
    if not usable:
        if native_required_by_env() and not _cpu_lacks_family(native, family):
            pytest.fail(f"{REQUIRE_NATIVE_ENV} is set but the native backend is unavailable: {reason}", pytrace=False)
        pytest.skip(f"native backend unavailable: {reason}")
    return native


@pytest.fixture
def native():
    """The ``pyamx.native`` module where it can run; skip (or fail, see above) elsewhere."""
    module = _native_or_skip()
    # A machine an earlier test dropped inside a reference cycle (an exception raised from a
    # signal handler holds its frame) still owns this thread's tile state until the collector
    # runs; with a pending start_row that state cannot be saved, and the next test's first
    # switch is refused. Tests that count on a fresh thread state get one.
    gc.collect()
    return module


@pytest.fixture
def native_family():
    """A function ``(family) -> pyamx.native`` that skips/fails when that kernel family cannot run."""
    return _native_or_skip

# ---- end of the native backend block ---------------------------------------------
