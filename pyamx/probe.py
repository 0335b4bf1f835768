"""Compat path: ``pyamx.probe`` lives in ``pyamx.tools.probe`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import probe as _home
from .tools.probe import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.probe.x patches the real one.
sys.modules[__name__] = _home
