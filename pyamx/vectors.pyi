"""Type stub of a public path: ``pyamx.vectors`` is ``pyamx.tools.vectors`` (pyamx/_compat.py)."""

from .tools.vectors import *  # noqa: F403
