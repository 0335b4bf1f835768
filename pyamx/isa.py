"""Compat path: ``pyamx.isa`` lives in ``pyamx.table.isa`` (docs/architecture.md, "Where the public names live")."""

import sys

from .table import isa as _home
from .table.isa import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.isa.x patches the real one.
sys.modules[__name__] = _home
