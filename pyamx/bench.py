"""Compat path: ``pyamx.bench`` lives in ``pyamx.tools.bench`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import bench as _home
from .tools.bench import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.bench.x patches the real one.
sys.modules[__name__] = _home
