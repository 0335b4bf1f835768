"""Compat path: ``pyamx.cli`` lives in ``pyamx.tools.cli`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import cli as _home
from .tools.cli import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.cli.x patches the real one.
sys.modules[__name__] = _home
