"""``python -m pyamx``: see :mod:`pyamx.cli`."""

import sys

from .cli import main

sys.exit(main())
