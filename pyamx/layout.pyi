"""Type stub of a public path: ``pyamx.layout`` is ``pyamx.table.layout`` (pyamx/_compat.py)."""

from .table.layout import *  # noqa: F403
