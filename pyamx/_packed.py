"""``pyamx.pack``: a right operand laid out once, in the native kernel's own layout, for many products.

A weight used by every call (an LLM layer's B) was re-laid out on every call: interleaved into
the instructions' pairs/quads and then copied into tile order, which at M = 1 was most of the
call. :func:`pack` does it once, in C (csrc/pack_b.c), straight from the row-major bits:

- K values grouped into dwords (2 bf16/fp16 values, 4 int8/fp8 values; the last dword padded
  with +0, as docs/matmul.md pads B), dword rows in K blocks of 16, columns in block columns of
  32; each (block column, K block) is 2 KiB: its left 16 columns as one 1 KiB tile (16 rows of
  64 bytes), then its right 16. Everything outside B is zero.
- the buffer is 64-byte aligned and read-only, so one :class:`PackedB` serves any number of
  calls on any number of threads at once.

``pyamx.matmul(a, packed)`` gives the bits of ``pyamx.matmul(a, b)`` on every backend and engine:
the native kernels read the tiles directly (``pyamx_matmul_amx_packed``); the emulator engines
get the row-major bits back (``pyamx_unpack_b``, one pass over B) and run exactly the path an
unpacked ``b`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import _matmul, _matmul_memory, _validate
from .cpu import _tile_layout
from .table import isa

if TYPE_CHECKING:
    from typing import Any

    import numpy.typing as npt

    from ._backend import Backend
    from ._types import ArrayInput
    from .emulator.engine import Engine

#: the kinds pack() takes: every kind matmul takes except complex (a complex number fills its
#: dword, and pyamx._matmul_complex runs two products of its own)
KINDS = tuple(k for k in _matmul.KINDS if k != "complex")


@dataclass(frozen=True, eq=False)
class PackedB:
    """A (K, N) right operand in the native kernel's tile layout, made by :func:`pack`; immutable.

    ``kind`` (``"bf16"``, ``"fp16"``, ``"int8"``, ``"fp8"``), ``format`` (b's own format:
    ``"bf16"``, ``"fp16"``, ``"int8"``, ``"uint8"``, ``"bf8"``, ``"hf8"``), ``k`` and ``n``;
    ``rounded_to`` names the format float values were rounded to (None for bits); ``tiles`` is
    the read-only, 64-byte aligned layout (module docstring).
    """

    kind: str
    format: str
    k: int
    n: int
    rounded_to: "str | None"
    tiles: npt.NDArray[np.uint8]
    _bits_dtype: np.dtype[Any]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    @property
    def k_dwords(self) -> int:
        return _tile_layout.dwords(self.k, self._bits_dtype.itemsize)

    def __repr__(self) -> str:
        rounded = f", rounded_to={self.rounded_to!r}" if self.rounded_to else ""
        return f"<pyamx.PackedB {self.format} K={self.k} N={self.n}{rounded}, {self.tiles.nbytes} bytes>"

    def unpack(self) -> np.ndarray:
        """B's bits (uint16 for 16-bit formats, 8-bit items otherwise) as a new (K, N) row-major array."""
        return _tile_layout.unpack(self.tiles, self.k, self.n, self._bits_dtype)

    @property
    def item_bytes(self) -> int:
        """Bytes of one of B's values (2 for bf16/fp16, 1 for the 8-bit formats)."""
        return self._bits_dtype.itemsize

    def packed_operand(self) -> _matmul._Operand:
        """B as ``pyamx.matmul``'s checks see an operand (pyamx._matmul.check): its format, and a
        (K, N) array of its bits' dtype that occupies no memory (the bits are in the tiles)."""
        return _matmul._Operand(np.broadcast_to(np.zeros((), self._bits_dtype), (self.k, self.n)),
                                isa.FORMATS[self.format], False)

    def product_bits(self, call: _matmul.Call, a_bits: np.ndarray, eng: Engine | None, threads: int | None,
                     chosen: Backend) -> np.ndarray:
        """The result bits of a checked ``pyamx.matmul`` call (pyamx._matmul.check) with this b: B's
        tiles straight to the native kernel (``eng`` None), or its row-major bits on the engine's
        own path; a stack of a times this b as one 2-D product on all of a's rows."""
        return _product_bits(self, call, a_bits, eng, threads, chosen)


def pack(b: "ArrayInput", kind: "str | None" = None, *, threads: "int | None" = None) -> PackedB:
    """``b`` (K, N) packed once for ``pyamx.matmul(a, packed)``: the same bits as passing ``b``.

    ``b`` and ``kind`` follow :func:`pyamx.matmul`'s rules for its right operand (bf16 bits,
    float16, int8/uint8, fp8; float32/float64 with ``kind="bf16"``/``"fp16"``, rounded once
    here, to nearest even). ``threads``: packing threads (None: one per MiB of the layout, at
    most :func:`pyamx.emulator.engine.default_threads`). Returns an immutable :class:`PackedB`, safe to
    share between calls and threads.
    """
    threads = _matmul._check_threads(threads)
    try:
        kind = _matmul._check_kind(kind)
        imported = _matmul.intake(b, "b")  # a DLPack tensor (torch.bfloat16 too) is read once, in place
        if kind == "complex" or np.iscomplexobj(imported.array):
            raise TypeError("pack: complex operands are not packed; pass them to pyamx.matmul as they are")
        op = _matmul._operand(imported, "b", kind)
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc).replace("matmul:", "pack:", 1)) from None
    if op.array.ndim != 2:
        raise ValueError(f"pack: b must be 2-D (K, N), got shape {op.array.shape}")
    k, n = op.array.shape
    if min(k, n) < 1:
        raise ValueError(f"pack: K={k}, N={n}; both must be at least 1")
    return packed_from(op, next(g for g in KINDS if op.format in isa.VIEWS.group_formats[g]), threads)


def packed_from(op: _matmul._Operand, group: str, threads: int | None) -> PackedB:
    """A checked (K, N) operand of kind ``group`` laid out: :func:`pack` after its checks, and
    ``pyamx.matmul``'s float b, which its own check() has already checked."""
    k, n = op.array.shape
    if op.rounds:  # float values rounded once, while they are packed: no rounded copy of b
        return PackedB(group, op.format.name, k, n, op.format.name,
                       _tile_layout.pack_rounded(op.array, op.format.name, threads), np.dtype(np.uint16))
    bits = _validate.contiguous_bits(op.array)
    return PackedB(group, op.format.name, k, n, None, _tile_layout.pack(bits, threads), bits.dtype)


# -- pyamx.matmul(a, packed): checked by pyamx._matmul.check like any b, computed here ----------


def _product_bits(packed: PackedB, call: _matmul.Call, a_all: np.ndarray, eng: Engine | None, threads: int | None,
                  chosen: Backend) -> np.ndarray:
    row = isa.get(call.mnemonic)
    k, n, batch = call.k, packed.n, call.batch
    shape = batch + (call.m, n)
    b_rows = None if eng is None else packed.unpack()
    acc_dtype, group = _matmul._acc_dtype(row), call.group

    def product(a_bits: np.ndarray, c_one: np.ndarray | None, into: np.ndarray) -> None:
        """One 2-D product into ``into`` (in blocks of rows where the transients would be large)."""
        if eng is None:
            step = _matmul_memory.block_rows(a_bits.shape[0], _matmul._row_bytes(row.name, k, n, None))
            for start in range(0, a_bits.shape[0], step):
                stop = min(start + step, a_bits.shape[0])
                c_block = (_matmul._zero_accumulator(stop - start, n, row) if c_one is None
                           else np.ascontiguousarray(c_one[start:stop]))
                into[start:stop] = np.asarray(_matmul.native_packed(
                    row, np.ascontiguousarray(a_bits[start:stop]), packed.tiles, c_block, threads,
                    chosen)).view(acc_dtype)
        else:
            assert b_rows is not None  # unpacked above for an engine
            ops = _matmul.Operands(row.name, group, _validate.contiguous_bits(a_bits), b_rows,
                                   None if c_one is None else _validate.contiguous_bits(c_one))
            _matmul._product(ops, eng, threads, chosen, out=into)

    bits = np.empty(shape, acc_dtype)
    a_rows = _matmul._stacked_rows(a_all) if batch else a_all
    c_rows = None
    if batch and a_rows is not None and call.c is not None:
        c_rows = np.ascontiguousarray(np.broadcast_to(call.c, shape)).reshape(-1, n)
    if a_rows is not None:  # a stack times one packed b: one 2-D product on all of a's rows
        product(a_rows, c_rows if batch else call.c, bits.reshape(-1, n))
    else:
        c_all = None if call.c is None else np.broadcast_to(call.c, shape)
        for index in np.ndindex(*batch):
            product(a_all[index], None if c_all is None else c_all[index], bits[index])
    return bits
