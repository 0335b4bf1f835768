"""Type stub of a public path: ``pyamx.probe`` is ``pyamx.tools.probe`` (pyamx/_compat.py)."""

from .tools.probe import *  # noqa: F403
