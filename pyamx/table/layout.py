"""The interleaved operand layouts of the dot products: src2 as the instructions read it.

A dword of src2 holds ``lanes`` values of one column from consecutive rows:
pairs for bf16/fp16 (:func:`pack_pairs`), quads for int8 (:func:`pack_quads`).
Any dtype is moved as is, so these work on bits, floats or bytes alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._validate import require_array

if TYPE_CHECKING:
    import numpy.typing as npt

    from .._types import ArrayInput

__all__ = ["pack_pairs", "unpack_pairs", "pack_quads", "unpack_quads"]


def _pack(matrix: ArrayInput, group: int, pad: bool, name: str) -> npt.NDArray[Any]:
    matrix = require_array(matrix, "b", name)
    if matrix.ndim != 2:
        raise ValueError(f"{name} expects a 2-D (rows, N) matrix, got shape {matrix.shape}")
    rows, n = matrix.shape
    if rows % group:
        if not pad:
            raise ValueError(
                f"{name}: the row count {rows} is not a multiple of {group}; pass pad=True to append zero rows"
            )
        matrix = np.concatenate([matrix, np.zeros((group - rows % group, n), dtype=matrix.dtype)])
    k = matrix.shape[0] // group
    return np.ascontiguousarray(matrix.reshape(k, group, n).transpose(0, 2, 1).reshape(k, group * n))


def _unpack(packed: ArrayInput, group: int, name: str) -> npt.NDArray[Any]:
    packed = require_array(packed, "packed", name)
    if packed.ndim != 2 or packed.shape[1] % group:
        raise ValueError(f"{name} expects a 2-D (K, {group}*N) matrix, got shape {packed.shape}")
    k, width = packed.shape
    return np.ascontiguousarray(packed.reshape(k, width // group, group).transpose(0, 2, 1).reshape(k * group, width // group))


def pack_pairs(b: ArrayInput, *, pad: bool = False) -> npt.NDArray[Any]:
    """An ordinary (2K, N) matrix -> the (K, 2N) pair-interleaved layout of tsrc2.

    Row k of the result holds (b[2k][n], b[2k+1][n]) for every column n. Any
    dtype is moved as is; ``pad=True`` appends a zero row to an odd row count.
    """
    return _pack(b, 2, pad, "pack_pairs")


def unpack_pairs(packed: ArrayInput) -> npt.NDArray[Any]:
    """The (K, 2N) pair-interleaved layout -> the ordinary (2K, N) matrix."""
    return _unpack(packed, 2, "unpack_pairs")


def pack_quads(b: ArrayInput, *, pad: bool = False) -> npt.NDArray[Any]:
    """A (4K, N) byte matrix -> the (K, 4N) quad-interleaved layout of the int8 dot products.

    Row k of the result holds (b[4k][n], ..., b[4k+3][n]) for every column n;
    ``pad=True`` appends zero rows up to a multiple of 4.
    """
    return _pack(b, 4, pad, "pack_quads")


def unpack_quads(packed: ArrayInput) -> npt.NDArray[Any]:
    """The (K, 4N) quad-interleaved layout -> the ordinary (4K, N) matrix."""
    return _unpack(packed, 4, "unpack_quads")
