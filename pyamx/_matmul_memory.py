"""How much memory a ``pyamx.matmul`` call needs, whether this machine has it, and how to bound it.

A product's transient copies (A padded to whole dwords, a zero accumulator, the native kernel's
output copy, the compiled engines' packed and widened A: 8 bytes per dword) grow with M. Past
:data:`BLOCK_BYTES` of them, the product runs in blocks of rows into the one result array, so
that the peak stays near the result plus one operand copy (the float operands rounded to their
format) whatever M is; rows are independent, so the bits do not change. Before anything is
allocated, the estimate of that peak is compared with the memory the system says is available
(``MemAvailable`` of /proc/meminfo, else the free physical pages), and a call that cannot fit
raises :class:`MatmulMemoryError` instead of swapping or being killed.
``PYAMX_MATMUL_MEMORY_CHECK=0`` turns the refusal off (memory the system does not count as
available, swap or an overcommitting container, may still serve).
"""

from __future__ import annotations

import os

from . import _env
from ._fpenv import default_environment
from .errors import EnvironmentVariableError

ENV_VAR = "PYAMX_MATMUL_MEMORY_CHECK"
#: the transient bytes one block of rows may take (a block has at least one row)
BLOCK_BYTES = 64 << 20
#: below this estimate nothing is asked of the system (a call's usual case costs nothing)
CHECK_FROM = 256 << 20
_MIB = 1 << 20


class MatmulMemoryError(MemoryError):
    """A matmul needs more memory than the system has available; nothing was allocated."""

    def __init__(self, message: str, needed: int, available: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available


def available_bytes() -> int | None:
    """The memory the system can give this process now without swapping, in bytes (None: unknown)."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    fields = line.split()
                    return int(fields[1]) * 1024 if fields[2:3] == [b"kB"] else None
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def row_bytes(n: int, width: int, item: int, path: str) -> int:
    """Transient bytes per row of A of one product (``width``: A's values per row padded to whole
    dwords, ``item``: bytes per value) on ``path``: "native", "compiled", "fp8" or "numpy"."""
    dwords = width * item // 4
    accumulator = 4 * n  # a zero C, or the kernel's own output copy of C
    if path == "native":
        return width * item + 2 * accumulator  # padded A, zero C, the kernel's output copy
    if path == "compiled":
        return 8 * dwords + 1 + accumulator  # A packed and widened: two words per dword; NaN flags
    if path == "fp8":
        blocks = -(-width // 64)
        return 10 * 64 * blocks + 24 * blocks + accumulator  # A as doubles, exponents, the integer path
    return width * item + 2 * accumulator + 16 * width  # numpy engine: padded A, C, its per-row scaling


def block_rows(m: int, per_row: int) -> int:
    """Rows per block: all of them when the whole product's transients fit in :data:`BLOCK_BYTES`."""
    return m if m * per_row <= BLOCK_BYTES else max(1, BLOCK_BYTES // per_row)


def check(needed: int, what: str) -> None:
    """Raise :class:`MatmulMemoryError` when ``needed`` bytes exceed what is available (unless
    ``PYAMX_MATMUL_MEMORY_CHECK`` turns the check off, or the figure is unknown)."""
    if needed < CHECK_FROM or not _env.flag(ENV_VAR, True, error=EnvironmentVariableError):
        return
    with default_environment():  # int() of a decimal string sets the caller's MXCSR precision flag
        available = available_bytes()
    if available is None or needed <= available:
        return
    raise MatmulMemoryError(
        f"matmul: {what} needs about {needed // _MIB} MiB ({needed} bytes) but only "
        f"{available // _MIB} MiB ({available} bytes) is available (MemAvailable in /proc/meminfo); "
        f"nothing was allocated. Split the product (fewer rows or a smaller batch per call), or set "
        f"{ENV_VAR}=0 where swap or an overcommitting container can serve more",
        needed, available,
    )
