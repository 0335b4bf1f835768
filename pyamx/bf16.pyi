"""Type stub of a public path: ``pyamx.bf16`` is ``pyamx.table.bf16`` (pyamx/_compat.py)."""

from .table.bf16 import *  # noqa: F403
