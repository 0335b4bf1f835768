"""``python -m pyamx``: see :mod:`pyamx.tools.cli`."""

import sys

from .tools.cli import main

sys.exit(main())
