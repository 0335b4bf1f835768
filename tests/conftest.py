"""Shared pytest fixtures of pyamx's tests."""

from __future__ import annotations

import os

import pytest

# ---- native backend (issue 3): skip, or fail under PYAMX_REQUIRE_NATIVE=1 ----------
# One place decides what a test that needs the native backend does where it
# cannot run: skip with the detection report's reason, or fail when the run
# demands native (CI on AMX silicon, or in trap mode).

REQUIRE_NATIVE_ENV = "PYAMX_REQUIRE_NATIVE"


def native_required_by_env() -> bool:
    """Whether ``PYAMX_REQUIRE_NATIVE`` demands the native backend (strict: unset, "0" or "1")."""
    value = os.environ.get(REQUIRE_NATIVE_ENV, "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(f"{REQUIRE_NATIVE_ENV} must be 0 or 1, not {value!r}")
    return value == "1"


def _native_or_skip(family=None):
    from pyamx import native

    usable, reason = native.available(family)
    if not usable:
        message = f"native backend unavailable: {reason}"
        if native_required_by_env():
            pytest.fail(f"{REQUIRE_NATIVE_ENV}=1 but the {message}", pytrace=False)
        pytest.skip(message)
    return native


@pytest.fixture
def native():
    """The ``pyamx.native`` module where it can run; skip (or fail, see above) elsewhere."""
    return _native_or_skip()


@pytest.fixture
def native_family():
    """A function ``(family) -> pyamx.native`` that skips/fails when that kernel family cannot run."""
    return _native_or_skip

# ---- end of the native backend block ---------------------------------------------
