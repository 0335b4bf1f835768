"""``python -m pyamx``: see :mod:`pyamx.cli`."""

import sys

from .tools.cli import main

sys.exit(main())
