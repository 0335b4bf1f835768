"""The emulated AMX tile machine: TILECFG, eight 1 KiB tiles, one method per instruction.

Faults are raised exactly where docs/semantics.md sections 1-2 say silicon raises
them (section 6), before any state changes, so a faulting instruction leaves the machine
as it was (as a fault does on silicon).

Where the SDM is silent, pyamx follows its pseudo-code (docs/semantics.md section 7): TILELOADD,
TILESTORED and TILEZERO need configured tiles (palette 1) and a register
below 8, but not a configured operand tile (rows = 0 loads and stores
nothing; the load still zeroes the whole tile).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import numpy.typing as npt

from ..table import _memory, isa
from ..errors import InvalidOpcodeFault
from ..table.tilecfg import (
    MAX_COLSB,
    MAX_ROWS,
    NUM_TILES,
    TileConfig,
    check_dot_product,
    check_memory_tile,
    check_tile_index,
    check_tile_usable,
    parse_tilecfg,
)
from . import engine as _engine
from . import rows as _rows
from ..table.numerics import Numerics, resolve

if TYPE_CHECKING:
    from .._types import MemoryOperand
    from ..table.tilecfg import ConfigInput

#: (M, K, N) of a dot product on the current configuration
Shape = tuple[int, int, int]


class TileMachine:
    """Architectural AMX state and the instructions that act on it.

    ``numerics`` is a preset name (``"sdm"``, ``"straight"``, ...) or a
    :class:`~pyamx.emulator.numerics.Numerics` object; it applies to the
    floating-point dot products and (its ``row_`` fields) to the AMX-AVX512
    row instructions, which return their zmm result as 16 uint32 dwords.
    Memory operands are numpy arrays (or buffers) addressed with a byte
    ``offset`` and a byte ``stride`` between rows, as the instruction's base
    and index registers would address them.
    ``engine`` names the arithmetic engine (:func:`pyamx.emulator.engine.choose_engine`:
    None for ``PYAMX_ENGINE``, default auto); ``self.engine`` is the one chosen.
    """

    backend = "emulator"

    def __init__(self, numerics: str | Numerics = "sdm", engine: str | None = None) -> None:
        self.numerics = resolve(numerics)
        self._engine = _engine.choose_engine(engine, self.numerics)
        self._engine_request = engine  # the rows no compiled engine implements resolve their own (_engine_for)
        self.engine = self._engine.name
        self._config = TileConfig()
        self._tiles: npt.NDArray[np.uint8] = np.zeros((NUM_TILES, MAX_ROWS, MAX_COLSB), dtype=np.uint8)
        # name -> the engine's tile_call (None on the numpy engine)
        self._runs: dict[str, Callable[..., object] | None] = {}
        # (name, dst, src1, src2) -> (M, K, N), valid for _shapes_config
        self._shapes: dict[tuple[str, int, int, int], Shape] = {}
        self._shapes_config: TileConfig | None = None

    # -- inspection ---------------------------------------------------------

    @property
    def config(self) -> TileConfig:
        """The current TILECFG (palette 0 means the init state)."""
        return self._config

    def tile(self, tmm: int) -> npt.NDArray[np.uint8]:
        """A copy of all 16 x 64 bytes of tile ``tmm``."""
        tile: npt.NDArray[np.uint8] = self._tiles[check_tile_index("tile", "tmm", tmm)].copy()
        return tile

    def snapshot(self) -> tuple[bytes, npt.NDArray[np.uint8]]:
        """``(sttilecfg image, (8, 16, 64) uint8 copy of every tile)``, for byte-for-byte comparisons."""
        return self._config.to_bytes(), self._tiles.copy()

    # -- configuration ------------------------------------------------------

    # The public methods (one per config or memory row) are bound from the table at the end of
    # this module (pyamx.table.isa.add_state_methods); each passes its row's name for the messages.

    def _load_config(self, mnemonic: str, cfg: ConfigInput) -> None:
        self._config = parse_tilecfg(cfg)
        self._tiles[:] = 0

    def _store_config(self, mnemonic: str) -> bytes:
        return self._config.to_bytes()

    def _release(self, mnemonic: str) -> None:
        self._config = TileConfig()
        self._tiles[:] = 0

    # -- data movement ------------------------------------------------------

    def _row_offsets(self, mnemonic: str, tmm: int, memory: npt.NDArray[np.uint8], stride: int,
                     offset: int) -> tuple[int, int, int, npt.NDArray[np.int64]]:
        tmm = check_memory_tile(mnemonic, "tile", self._config, tmm)
        rows, colsb = self._config.rows[tmm], self._config.colsb[tmm]
        starts = _memory.row_offsets(mnemonic, memory.size, offset, stride, self._config.start_row, rows, colsb)
        return tmm, rows, colsb, starts

    def _load_tile(self, mnemonic: str, tmm: int, buf: MemoryOperand, stride: int, offset: int) -> None:
        # Every load hint has the same architectural effect: one implementation for all of them.
        memory = _memory.byte_view(mnemonic, buf, writable=False)
        tmm, rows, colsb, starts = self._row_offsets(mnemonic, tmm, memory, stride, offset)
        start_row = self._config.start_row
        tile = self._tiles[tmm].copy()  # built aside, so a failure leaves the machine untouched
        tile[start_row:] = 0  # the pseudo-code's zero_upper_rows(tdest, start): earlier rows are kept
        for row, start in zip(range(start_row, rows), starts):
            tile[row, :colsb] = memory[start : start + colsb]
        self._tiles[tmm] = tile
        self._config = self._config.with_start_row(0)

    def _store_tile(self, mnemonic: str, tmm: int, buf: MemoryOperand, stride: int, offset: int) -> None:
        memory = _memory.byte_view(mnemonic, buf, writable=True)
        tmm, rows, colsb, starts = self._row_offsets(mnemonic, tmm, memory, stride, offset)
        for row, start in zip(range(self._config.start_row, rows), starts):
            memory[start : start + colsb] = self._tiles[tmm, row, :colsb]
        self._config = self._config.with_start_row(0)

    def _zero_tile(self, mnemonic: str, tmm: int) -> None:
        self._tiles[check_tile_usable(mnemonic, "tdest", self._config, tmm)] = 0
        self._config = self._config.with_start_row(0)

    # -- row instructions (AMX-AVX512) -----------------------------------------

    def _row(self, name: str, tmm: int, row: int, imm: bool) -> np.ndarray:
        insn = isa.BY_NAME[name]
        tmm = check_tile_usable(insn.mnemonic, "tsrc", self._config, tmm)
        index, chunk = _rows.decode_selector(check_row_selector(insn.mnemonic, row, imm), imm)
        source = row_source(insn.mnemonic, self.numerics, index, self._config.rows[tmm])
        if source is None:
            out = np.zeros(_rows.LANES, dtype=np.uint32)
        else:
            out = _rows.COMPUTE[name](self._tiles[tmm, source], self._config.colsb[tmm], chunk, self.numerics)
        if not insn.moves_raw or self.numerics.row_movrow_start_row:
            self._config = self._config.with_start_row(0)
        return out

    # -- dot products -------------------------------------------------------

    def _dot(self, name: str, dst: int, src1: int, src2: int) -> None:
        config = self._config
        if type(dst) is int and type(src1) is int and type(src2) is int:  # the cache keys need exact ints
            if self._shapes_config is not config:
                self._shapes.clear()
                self._shapes_config = config
            key = (name, dst, src1, src2)
            shape = self._shapes.get(key)
            if shape is None:  # a config only changes by LDTILECFG/TILERELEASE, so the #UD rules run once
                shape = self._shapes[key] = self._check_dot(name, config, dst, src1, src2)
        else:
            shape = self._check_dot(name, config, dst, src1, src2)
        m, k, n = shape
        tiles = self._tiles
        try:
            run = self._runs[name]
        except KeyError:  # the first time on this machine
            run = self._runs[name] = self._engine_for(name).tile_call(name)
        # The new tile is built aside (a compiled engine's output may not overlap its inputs);
        # its bytes past N*4 and rows past M stay zero.
        out = np.zeros((MAX_ROWS, MAX_COLSB // 4), dtype=np.uint32)
        if run is not None:
            # A compiled engine reads the tiles in place (64-byte rows).
            run(tiles[src1], MAX_COLSB, tiles[src2], MAX_COLSB, tiles[dst], MAX_COLSB // 4, out, MAX_COLSB // 4,
                m, n, k)
        else:
            # Views of the tiles, not copies: an engine never modifies its inputs.
            c_dtype, ab_dtype = _DTYPES[name]
            c = tiles[dst, :m, : 4 * n].view(c_dtype)
            a = tiles[src1, :m, : 4 * k].view(ab_dtype)
            b = tiles[src2, :k, : 4 * n].view(ab_dtype)
            out[:m, :n] = self._engine_for(name).dot(name, c, a, b, k).view(np.uint32)
        tiles[dst] = out.view(np.uint8)
        if config.start_row:
            self._config = config.with_start_row(0)

    def _engine_for(self, name: str) -> _engine.Engine:
        """The machine's engine, or for a row only the numpy engine computes (AMX-FP8) that one
        (ValueError where the machine was built with a compiled engine named explicitly)."""
        if name in _engine.NUMPY_ONLY and self._engine.compiled:
            return _engine.choose_engine(self._engine_request, self.numerics, op=name)
        return self._engine

    @staticmethod
    def _check_dot(name: str, config: TileConfig, dst: object, src1: object, src2: object) -> Shape:
        """(M, K, N) of the instruction, or the #UD fault (pyamx.table.tilecfg.check_dot_product)."""
        shape = check_dot_product(_DOTS[name].mnemonic, config, dst, src1, src2)
        return shape.m, shape.k, shape.n


#: name -> pyamx.table.isa row
_DOTS = {insn.name: insn for insn in isa.DOTS}
#: name -> (C, A/B) dtypes of its operands as the tiles hold them
_DTYPES = {insn.name: (np.dtype(insn.c_dtype), np.dtype(insn.ab_dtype)) for insn in isa.DOTS}


def check_row_selector(mnemonic: str, row: object, imm: bool) -> int:
    """The selector as an int: an imm8 (0..255) or a 32-bit GPR value (0..2**32-1); TypeError/ValueError else."""
    if isinstance(row, (bool, np.bool_)) or not isinstance(row, (int, np.integer)):
        raise TypeError(f"{mnemonic}: the row selector is an int, not {row!r}")
    row, limit = int(row), 0xFF if imm else 0xFFFFFFFF
    if not 0 <= row <= limit:
        raise ValueError(f"{mnemonic}: the row selector {row} does not fit {'an imm8' if imm else 'a 32-bit register'} "
                         f"(0..{limit})")
    return row


def row_source(mnemonic: str, numerics: Numerics, index: int, rows: int) -> int | None:
    """The storage row a row instruction reads under ``numerics.row_index``, None for an all-zero
    result, or the #UD (docs/semantics.md section 9)."""
    rule = numerics.row_index
    if rule == "bochs":
        index &= MAX_ROWS - 1
    if rule in ("zero", "bochs") and index >= rows:
        return None
    if (rule == "ud" and index >= rows) or index >= MAX_ROWS:
        raise InvalidOpcodeFault(mnemonic, f"row index {index} is past the tile's {rows if rule == 'ud' else MAX_ROWS} rows "
                                 f"(numerics row_index={rule!r})")
    return index


isa.add_state_methods(TileMachine, "method")
isa.add_dot_methods(TileMachine, "method")
isa.add_row_methods(TileMachine, "method")
