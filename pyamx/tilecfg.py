"""Compat path: ``pyamx.tilecfg`` lives in ``pyamx.table.tilecfg`` (docs/architecture.md, "Where the public names live")."""

import sys

from .table import tilecfg as _home
from .table.tilecfg import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.tilecfg.x patches the real one.
sys.modules[__name__] = _home
