"""Compat path: ``pyamx.testing`` lives in ``pyamx.tools.testing`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import testing as _home
from .tools.testing import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.testing.x patches the real one.
sys.modules[__name__] = _home
