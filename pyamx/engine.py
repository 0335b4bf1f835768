"""Compat path: ``pyamx.engine`` lives in ``pyamx.emulator.engine`` (docs/architecture.md, "Where the public names live")."""

import sys

from .emulator import engine as _home
from .emulator.engine import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.engine.x patches the real one.
sys.modules[__name__] = _home
