"""Type stub of a public path: ``pyamx.demo`` is ``pyamx.tools.demo`` (pyamx/_compat.py)."""

from .tools.demo import *  # noqa: F403
