"""Compat path: ``pyamx.trap`` lives in ``pyamx.cpu.trap`` (docs/architecture.md, "Where the public names live")."""

import sys

from .cpu import trap as _home
from .cpu.trap import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.trap.x patches the real one.
sys.modules[__name__] = _home
