"""Type stub of a public path: ``pyamx.tilecfg`` is ``pyamx.table.tilecfg`` (pyamx/_compat.py)."""

from .table.tilecfg import *  # noqa: F403
