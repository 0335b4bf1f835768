"""Compat path: ``pyamx.demo`` lives in ``pyamx.tools.demo`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import demo as _home
from .tools.demo import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.demo.x patches the real one.
sys.modules[__name__] = _home
