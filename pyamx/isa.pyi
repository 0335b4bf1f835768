"""Type stub of a public path: ``pyamx.isa`` is ``pyamx.table.isa`` (pyamx/_compat.py)."""

from .table.isa import *  # noqa: F403
