"""Type stub of a public path: ``pyamx.bench`` is ``pyamx.tools.bench`` (pyamx/_compat.py)."""

from .tools.bench import *  # noqa: F403
