"""Compat path: ``pyamx.pytest_plugin`` lives in ``pyamx.tools.pytest_plugin`` (docs/architecture.md, "Where the public names live")."""

import sys

from .tools import pytest_plugin as _home
from .tools.pytest_plugin import *  # noqa: F403  (its public names, for type checkers)

# The very module, not a copy: objects are identical and monkeypatching pyamx.pytest_plugin.x patches the real one.
sys.modules[__name__] = _home
