"""The types of the public signatures, for type checkers (``mypy --strict`` on user code).

Imported only under ``TYPE_CHECKING`` (the annotations are never evaluated),
so nothing here costs an import at run time.
"""

from __future__ import annotations

from array import array
from mmap import mmap
from typing import Any, Protocol, Sequence, Union

import numpy as np
import numpy.typing as npt


class SupportsArray(Protocol):
    """What numpy converts through ``__array__``: a JAX array, a CPU torch tensor, a CuPy array on host."""

    def __array__(self) -> npt.NDArray[Any]: ...


#: an operand: what pyamx._validate.require_array takes (a scalar is not one: numpy's ArrayLike would allow it)
ArrayInput = Union[npt.NDArray[Any], SupportsArray, memoryview, bytearray, Sequence[Any]]
#: a raw bits array as the conversions return it
UInt16Array = npt.NDArray[np.uint16]
#: the memory operand of TILELOADD/TILESTORED: an array or any flat buffer (one contiguous block)
MemoryOperand = Union[npt.NDArray[Any], bytes, bytearray, memoryview, mmap, "array[Any]"]
