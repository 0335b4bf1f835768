"""B in the native matmul's tile-contiguous layout: packed from row-major bits and read back.

The layout (docs/matmul.md, "Packed operands"; csrc/pack_b.c): K values grouped into dwords
(L = 2 bf16/fp16 values, 4 int8/fp8 values; the last dword padded with +0), dword rows in K
blocks of 16, columns in block columns of 32; each (block column, K block) is 2 KiB, its left
16 columns as one 1 KiB tile (16 rows of 64 bytes), then its right 16; zero outside B. The
buffer is 64-byte aligned. C packs it (by the pool's threads); a build without the C
extension gets the same bytes from numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ._nativelib import FFI, Lib

#: packed bytes one packing thread gets at least: packing streams memory at several GB/s per
#: thread, so below about a MiB waking another thread costs more than it saves
PACK_BYTES_PER_THREAD = 1 << 20


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def dwords(k: int, item: int) -> int:
    """K values of ``item`` bytes as whole dwords."""
    return _ceil_div(k * item, 4)


def layout_bytes(item: int, k: int, n: int) -> int:
    return _ceil_div(n, 32) * _ceil_div(dwords(k, item), 16) * 2048


def aligned_empty(nbytes: int, dtype: npt.DTypeLike = np.uint8, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """A new array of ``nbytes`` whose first byte is 64-byte aligned."""
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    out: np.ndarray = raw[start:start + nbytes].view(dtype)
    return out if shape is None else out.reshape(shape)


def _axes(k: int, n: int, item: int) -> tuple[int, int, int, int, int]:
    """(kblocks, nbn, lanes, padded K, padded N) of the layout."""
    lanes = 4 // item
    kblocks, nbn = _ceil_div(dwords(k, item), 16), _ceil_div(n, 32)
    return kblocks, nbn, lanes, kblocks * 16 * lanes, nbn * 32


def numpy_tiles(bits: np.ndarray) -> np.ndarray:
    """The layout's bytes from (K, N) bits in numpy (a build without the C extension)."""
    (k, n), item = bits.shape, bits.itemsize
    kblocks, nbn, lanes, kp, np_ = _axes(k, n, item)
    padded = np.zeros((kp, np_), dtype=np.dtype(f"u{item}"))
    padded[:k, :n] = bits.view(padded.dtype)
    # (kb, r, lane, bj, half, c) -> (bj, kb, half, r, c, lane)
    grid = padded.reshape(kblocks, 16, lanes, nbn, 2, 16).transpose(3, 0, 4, 1, 5, 2)
    tiles: npt.NDArray[np.uint8] = np.ascontiguousarray(grid).reshape(-1).view(np.uint8)
    return tiles


def numpy_rows(tiles: np.ndarray, k: int, n: int, item: int) -> np.ndarray:
    """(K, N) unsigned items read back from the layout in numpy (a view where numpy can)."""
    kblocks, nbn, lanes, kp, np_ = _axes(k, n, item)
    grid = tiles.view(np.dtype(f"u{item}")).reshape(nbn, kblocks, 2, 16, 16, lanes)
    rows: np.ndarray = grid.transpose(1, 3, 5, 0, 2, 4).reshape(kp, np_)[:k, :n]
    return rows


# [(ffi, lib) or None], decided on the first pack: no import or lookup per call
_C_LIBRARY: list[tuple[FFI, Lib] | None] = []


def _c_library() -> tuple[FFI, Lib] | None:
    """``(ffi, lib)`` of pyamx._native, or None where it is not built (numpy packs then)."""
    if _C_LIBRARY:
        return _C_LIBRARY[0]
    from ._nativelib import load

    try:
        library = load()
    except ImportError:
        return None  # not kept: the next call looks again, as before
    _C_LIBRARY.append(library)  # load() refuses a stale build: every entry of this tree's pyamx.h is there
    return library


def _default_threads() -> int:
    from .._threads import default

    return default()


def pack(bits: np.ndarray, threads: int | None = None) -> npt.NDArray[np.uint8]:
    """C-contiguous (K, N) bits (1- or 2-byte items) in the layout: a new, read-only uint8 array.

    ``threads``: packing threads (None: one per :data:`PACK_BYTES_PER_THREAD` of the layout, at
    most :func:`pyamx.emulator.engine.default_threads`).
    """
    (k, n), item = bits.shape, bits.itemsize
    nbytes = layout_bytes(item, k, n)
    tiles = aligned_empty(nbytes)
    loaded = _c_library()
    if loaded is None:
        tiles[...] = numpy_tiles(bits)
    else:
        ffi, lib = loaded
        if threads is None:
            threads = max(1, min(_default_threads(), nbytes // PACK_BYTES_PER_THREAD))
        rc = lib.pyamx_pack_b(item, ffi.from_buffer(bits), n * item, k, n, ffi.from_buffer(tiles), nbytes, min(threads, lib.PYAMX_MATMUL_MAX_THREADS))
        if rc != 0:
            raise RuntimeError(f"pyamx: pyamx_pack_b refused a checked operand ({rc}); this is a bug in pyamx")
    tiles.flags.writeable = False
    return tiles


def pack_rounded(values: np.ndarray, fmt: str, threads: int | None = None) -> npt.NDArray[np.uint8]:
    """(K, N) float32/float64 ``values`` rounded to ``fmt`` ("bf16" or "fp16", pyamx._convert's
    rules) and laid out, as :func:`pack` lays out the rounded bits: a new, read-only uint8 array.

    In one pass in C where the extension has it (B read once, in place, through any strides; no
    rounded copy of it); else rounded first (pyamx._convert.round_floats), then packed.
    """
    from .. import _convert  # its rounding ops (enum pyamx_convert_op), or its rounding where C is missing

    loaded = _c_library()
    if loaded is None:
        return pack(np.ascontiguousarray(_convert.round_floats(values, fmt)), threads)
    ffi, lib = loaded
    item = values.itemsize
    if not values.flags.aligned or not values.dtype.isnative or any(s % item for s in values.strides):
        values = np.require(values, dtype=values.dtype.newbyteorder("="), requirements=("C", "A"))
    (k, n), op = values.shape, getattr(lib, _convert.OPS[(values.dtype.name, fmt)][0])
    nbytes = layout_bytes(2, k, n)
    tiles = aligned_empty(nbytes)
    if threads is None:
        threads = max(1, min(_default_threads(), max(nbytes, values.nbytes) // PACK_BYTES_PER_THREAD))
    rc = lib.pyamx_pack_b_rounded(op, ffi.cast("const void *", values.__array_interface__["data"][0]),
                                  values.strides[0], values.strides[1], k, n, ffi.from_buffer(tiles), nbytes,
                                  min(threads, lib.PYAMX_MATMUL_MAX_THREADS))
    if rc != 0:
        raise RuntimeError(f"pyamx: pyamx_pack_b_rounded refused a checked operand ({rc}); this is a bug in pyamx")
    tiles.flags.writeable = False
    return tiles


def unpack(tiles: np.ndarray, k: int, n: int, dtype: npt.DTypeLike) -> np.ndarray:
    """The (K, N) bits of ``dtype`` (1- or 2-byte items) back out of the layout, as a new row-major array."""
    out = np.empty((k, n), dtype=dtype)
    item = out.itemsize
    loaded = _c_library()
    if loaded is None:
        out.view(np.dtype(f"u{item}"))[...] = numpy_rows(tiles, k, n, item)
        return out
    ffi, lib = loaded
    rc = lib.pyamx_unpack_b(item, ffi.from_buffer(tiles), tiles.nbytes, k, n, ffi.cast("void *", out.ctypes.data),
                            n * item)
    if rc != 0:
        raise RuntimeError(f"pyamx: pyamx_unpack_b refused a checked operand ({rc}); this is a bug in pyamx")
    return out
