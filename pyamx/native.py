"""Compat path: ``pyamx.native`` lives in ``pyamx.cpu.native`` (docs/architecture.md, "Where the public names live")."""

import sys

from .cpu import native as _home
from .cpu.native import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.native.x patches the real one.
sys.modules[__name__] = _home
