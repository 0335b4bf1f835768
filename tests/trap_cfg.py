"""Tile configurations and pointers for the trap tests, in the pytest process and in their children.

tests/trap/test_trap.py imports these, and so does the prelude of every child Python it starts
(run_py puts this directory on the child's PYTHONPATH): one definition for both.
"""

from __future__ import annotations

import numpy as np
from pyamx._trap import ffi


def make_cfg(shapes, palette=1, start_row=0):
    """The 64-byte LDTILECFG image of ``{tile: (rows, colsb)}``."""
    c = np.zeros(64, np.uint8)
    c[0] = palette
    c[1] = start_row
    for t, (rows, colsb) in shapes.items():
        c[16 + 2 * t] = colsb & 0xFF
        c[17 + 2 * t] = colsb >> 8
        c[48 + t] = rows
    return c


def u8p(a):
    return ffi.cast("uint8_t *", a.ctypes.data)


def vp(a):
    return ffi.cast("void *", a.ctypes.data)
