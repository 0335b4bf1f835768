"""Type stub of a public path: ``pyamx.cli`` is ``pyamx.tools.cli`` (pyamx/_compat.py)."""

from .tools.cli import *  # noqa: F403
