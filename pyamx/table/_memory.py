"""Bounds checking of the memory operand of TILELOADD(T1) / TILESTORED.

A tile row r lives at ``offset + r * stride`` bytes into a flat buffer. On
silicon a bad address is a page fault or silent corruption of unrelated
memory; every backend calls ``byte_view`` first so both are refused with a
``MemoryAccessFault`` before a single byte moves.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from typing import TYPE_CHECKING

from ..errors import MemoryAccessFault

if TYPE_CHECKING:
    from .._types import MemoryOperand


def byte_view(mnemonic: str, buf: MemoryOperand, *, writable: bool) -> npt.NDArray[np.uint8]:
    """A flat uint8 view of ``buf`` (no copy), which must be one contiguous block."""
    if isinstance(buf, np.ndarray):
        arr = buf.view(np.ndarray)  # a subclass (np.matrix) would keep its own idea of reshape/slicing
    else:
        try:
            arr = np.frombuffer(buf, dtype=np.uint8) if not writable else np.asarray(memoryview(buf))
        except TypeError:
            raise TypeError(
                f"{mnemonic}: the memory operand must be a numpy array or a buffer, not {type(buf).__name__}"
            ) from None
        except BufferError as exc:  # an exporter that cannot give one flat block (a strided memoryview)
            raise ValueError(f"{mnemonic}: the memory operand must be one contiguous buffer ({exc})") from None
    if not arr.flags.c_contiguous:
        raise ValueError(
            f"{mnemonic}: the memory operand must be C-contiguous (rows are addressed by a byte stride); "
            "pass np.ascontiguousarray(x) or a base buffer and a stride"
        )
    if writable and not arr.flags.writeable:
        raise ValueError(f"{mnemonic}: the destination buffer is read-only")
    return arr.reshape(-1).view(np.uint8)


def row_offsets(mnemonic: str, nbytes: int, offset: int, stride: int, first_row: int, rows: int,
                colsb: int) -> npt.NDArray[np.int64]:
    """Byte offsets of rows ``first_row..rows-1``, all checked to lie inside the buffer."""
    for name, value in (("offset", offset), ("stride", stride)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{mnemonic}: {name} must be an int, not {value!r}")
    offset, stride = int(offset), int(stride)
    for name, value in (("offset", offset), ("stride", stride)):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{mnemonic}: {name} {value} does not fit a 64-bit register")
    # Exact integers: int64 arithmetic would wrap for extreme offsets and
    # strides and could bring a far-away row back inside the buffer.
    starts = [offset + stride * r for r in range(first_row, rows)]
    for row, start in enumerate(starts, first_row):
        if start < 0 or start + colsb > nbytes:
            raise MemoryAccessFault(
                mnemonic,
                f"row {row} spans bytes [{start}, {start + colsb}) "
                f"of a {nbytes}-byte buffer (offset={offset}, stride={stride}, colsb={colsb})",
            )
    return np.array(starts, dtype=np.int64)
