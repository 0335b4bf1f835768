"""Type stub of a public path: ``pyamx.engine`` is ``pyamx.emulator.engine`` (pyamx/_compat.py)."""

from .emulator.engine import *  # noqa: F403
