"""Compat path: ``pyamx.layout`` lives in ``pyamx.table.layout`` (docs/architecture.md, "Where the public names live")."""

import sys

from .table import layout as _home
from .table.layout import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.layout.x patches the real one.
sys.modules[__name__] = _home
