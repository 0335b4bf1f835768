"""The numerics options' documented path: the module is :mod:`pyamx.table.numerics` (the options of
the rules' open points belong to the table, which native reads too); this path is that very module."""

import sys

from ..table import numerics as _home
from ..table.numerics import *  # noqa: F401,F403  (what type checkers read)

sys.modules[__name__] = _home
