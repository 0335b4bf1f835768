"""Type stub of a public path: ``pyamx.pytest_plugin`` is ``pyamx.tools.pytest_plugin`` (pyamx/_compat.py)."""

from .tools.pytest_plugin import *  # noqa: F403
