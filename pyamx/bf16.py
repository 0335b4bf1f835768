"""Compat path: ``pyamx.bf16`` lives in ``pyamx.table.bf16`` (docs/architecture.md, "Where the public names live")."""

import sys

from .table import bf16 as _home
from .table.bf16 import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.bf16.x patches the real one.
sys.modules[__name__] = _home
