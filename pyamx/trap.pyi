"""Type stub of a public path: ``pyamx.trap`` is ``pyamx.cpu.trap`` (pyamx/_compat.py)."""

from .cpu.trap import *  # noqa: F403
