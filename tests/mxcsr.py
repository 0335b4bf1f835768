"""The caller's MXCSR in a test, through the extension's pyamx_get_mxcsr/pyamx_set_mxcsr
(csrc/fpenv.c): the tests that show a result ignores the caller's rounding mode, FTZ and DAZ, and
that each path puts the caller's MXCSR back, set it with :func:`caller_mxcsr`."""

from __future__ import annotations

import contextlib
import platform
from typing import Any, Iterator

import pytest

DEFAULT = 0x1F80  # every exception masked, round to nearest even, no FTZ, no DAZ
RZ = DEFAULT | 0x6000
ROUND_DOWN = DEFAULT | 0x2000
ROUND_UP = DEFAULT | 0x4000
FTZ = DEFAULT | 0x8000
DAZ = DEFAULT | 0x0040


def library() -> Any:
    """pyamx._native's lib where a test can set MXCSR; elsewhere the test (or the module, when called
    at import) is skipped, saying why."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("MXCSR is an x86-64 register", allow_module_level=True)
    try:
        from pyamx.cpu import _nativelib

        lib = _nativelib.load()[1]
    except ImportError as exc:
        pytest.skip(f"setting MXCSR in a test needs the extension: {exc}", allow_module_level=True)
    if not lib.pyamx_fpenv_supported():
        pytest.skip("this build cannot reach MXCSR", allow_module_level=True)
    return lib


@contextlib.contextmanager
def caller_mxcsr(value: int) -> Iterator[Any]:
    """This thread's MXCSR is ``value`` inside the block (as a caller that changed its own has it),
    and what it was before after the block; yields the lib."""
    lib = library()
    saved = lib.pyamx_get_mxcsr()
    assert lib.pyamx_set_mxcsr(value) == 0
    try:
        yield lib
    finally:
        lib.pyamx_set_mxcsr(saved)
