"""Type stub of a public path: ``pyamx.detect`` is ``pyamx.cpu.detect`` (pyamx/_compat.py)."""

from .cpu.detect import *  # noqa: F403
