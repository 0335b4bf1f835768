"""Compat path: ``pyamx.run`` lives in ``pyamx.tools.run`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import run as _home
from .tools.run import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.run.x patches the real one.
sys.modules[__name__] = _home
