"""Compat path: ``pyamx.detect`` lives in ``pyamx.cpu.detect`` (docs/architecture.md, "Where the public names live")."""

import sys

from .cpu import detect as _home
from .cpu.detect import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.detect.x patches the real one.
sys.modules[__name__] = _home
