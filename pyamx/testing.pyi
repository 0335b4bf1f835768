"""Type stub of a public path: ``pyamx.testing`` is ``pyamx.tools.testing`` (pyamx/_compat.py)."""

from .tools.testing import *  # noqa: F403
