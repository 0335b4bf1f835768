"""Compat path: ``pyamx.vectors`` lives in ``pyamx.tools.vectors`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import vectors as _home
from .tools.vectors import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.vectors.x patches the real one.
sys.modules[__name__] = _home
