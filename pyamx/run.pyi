"""Type stub of a public path: ``pyamx.run`` is ``pyamx.tools.run`` (pyamx/_compat.py)."""

from .tools.run import *  # noqa: F403
