"""Type stub of a public path: ``pyamx.native`` is ``pyamx.cpu.native`` (pyamx/_compat.py)."""

from .cpu.native import *  # noqa: F403
