"""The 64-byte TILECFG image and the fault rules that depend on it.

Shared by every backend: the emulator enforces these rules, and the native
backend checks them in Python *before* the instruction runs, because on
silicon an illegal configuration is a fatal signal, not an exception.
Layout and rules: docs/semantics.md section 1 (palette 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Union, cast

import numpy as np

from . import isa
from ..errors import GeneralProtectionFault, InvalidOpcodeFault

if TYPE_CHECKING:
    import numpy.typing as npt

#: what LDTILECFG takes: a TileConfig or the 64-byte image in any buffer
ConfigInput = Union["TileConfig", bytes, bytearray, memoryview, "npt.NDArray[np.generic]"]
#: ``{tmm: (rows, colsb)}``, as TileConfig.make takes it (or its items)
TileShapes = Union[Mapping[int, "tuple[int, int]"], Iterable["tuple[int, tuple[int, int]]"]]

NUM_TILES = 8
MAX_ROWS = 16
MAX_COLSB = 64
TMUL_MAXK = 16  # CPUID.1E.0:EBX[7:0], in rows of src2
TMUL_MAXN = 64  # CPUID.1E.0:EBX[23:8], in bytes
TILECFG_BYTES = 64

_RESERVED_RANGES = ((2, 16), (32, 48), (56, 64))


@dataclass(frozen=True)
class TileConfig:
    """A decoded TILECFG. ``palette == 0`` is the init (unconfigured) state."""

    palette: int = 0
    start_row: int = 0
    colsb: tuple[int, ...] = field(default=(0,) * NUM_TILES)
    rows: tuple[int, ...] = field(default=(0,) * NUM_TILES)

    def __post_init__(self) -> None:
        # Only what the 64-byte image can encode is checked here: an image
        # that LDTILECFG refuses (rows=17, palette 2) is a legitimate value,
        # used to test the #GP rules, and faults where the instruction runs.
        p, s, c, r = self.palette, self.start_row, self.colsb, self.rows
        if (type(p) is int and type(s) is int and type(c) is tuple and type(r) is tuple
                and len(c) == NUM_TILES and len(r) == NUM_TILES and set(map(type, c + r)) == {int}
                and 0 <= p <= 0xFF and 0 <= s <= 0xFF and 0 <= min(c) and max(c) <= 0xFFFF
                and 0 <= min(r) and max(r) <= 0xFF):
            return  # already normal: the path every instruction's bookkeeping takes
        set_field = object.__setattr__  # frozen: normalize once, at construction
        set_field(self, "palette", _field_int("palette", self.palette, 0xFF, "byte 0"))
        set_field(self, "start_row", _field_int("start_row", self.start_row, 0xFF, "byte 1"))
        set_field(self, "colsb", _field_tuple("colsb", self.colsb, 0xFFFF, "a 16-bit word at bytes 16-31"))
        set_field(self, "rows", _field_tuple("rows", self.rows, 0xFF, "a byte at bytes 48-55"))

    @property
    def configured(self) -> bool:
        return self.palette != 0

    def to_bytes(self) -> bytes:
        """The image STTILECFG stores: 64 zero bytes in the init state."""
        image = bytearray(TILECFG_BYTES)
        if not self.configured:
            return bytes(image)
        image[0] = self.palette
        image[1] = self.start_row
        for t in range(NUM_TILES):
            image[16 + 2 * t : 18 + 2 * t] = int(self.colsb[t]).to_bytes(2, "little")
            image[48 + t] = self.rows[t]
        return bytes(image)

    def with_start_row(self, start_row: int) -> "TileConfig":
        if start_row == self.start_row:  # every instruction resets it to 0: keep that path free
            return self
        return TileConfig(self.palette, start_row, self.colsb, self.rows)

    @classmethod
    def make(cls, shapes: TileShapes, *, palette: int = 1, start_row: int = 0) -> "TileConfig":
        """Build a palette-1 config from ``{tmm: (rows, colsb)}``; others unconfigured."""
        rows = [0] * NUM_TILES
        colsb = [0] * NUM_TILES
        try:
            items = dict(shapes).items()
        except (TypeError, ValueError):
            raise TypeError(
                f"TileConfig.make takes a mapping {{tmm: (rows, colsb)}}, not {type(shapes).__name__}"
            ) from None
        for tmm, shape in items:
            if isinstance(tmm, (bool, np.bool_)) or not isinstance(tmm, (int, np.integer)):
                raise TypeError(f"TileConfig.make: a tile register is an int 0..{NUM_TILES - 1}, not {tmm!r}")
            if not 0 <= int(tmm) < NUM_TILES:
                # Never wrap: -1 indexing a list would silently configure tmm7.
                raise ValueError(
                    f"TileConfig.make: there is no tile register tmm{int(tmm)}; palette 1 has tmm0..tmm{NUM_TILES - 1}"
                )
            try:
                r, c = shape
            except (TypeError, ValueError):
                raise TypeError(f"TileConfig.make: tmm{int(tmm)} needs a (rows, colsb) pair, not {shape!r}") from None
            rows[int(tmm)] = _field_int(f"rows of tmm{int(tmm)}", r, 0xFF, "a byte at bytes 48-55")
            colsb[int(tmm)] = _field_int(f"colsb of tmm{int(tmm)}", c, 0xFFFF, "a 16-bit word at bytes 16-31")
        return cls(palette, start_row, tuple(colsb), tuple(rows))


def _field_int(name: str, value: object, limit: int, where: str) -> int:
    """An image field as an int, or TypeError/ValueError naming the field and what it can hold."""
    if type(value) is int and 0 <= value <= limit:
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"TileConfig {name} must be an int, not {value!r}")
    value = int(value)
    if not 0 <= value <= limit:
        raise ValueError(f"TileConfig {name} is {value}; the image stores it in {where} (0..{limit})")
    return value


def _field_tuple(name: str, values: Iterable[object], limit: int, where: str) -> tuple[int, ...]:
    if type(values) is tuple and len(values) == NUM_TILES and all(type(v) is int and 0 <= v <= limit for v in values):
        return cast("tuple[int, ...]", values)  # the common case (parse_tilecfg, make): already normal
    try:
        values = tuple(values)
    except TypeError:
        raise TypeError(f"TileConfig {name} must be a sequence of {NUM_TILES} ints, not {values!r}") from None
    if len(values) != NUM_TILES:
        raise ValueError(f"TileConfig {name} has {len(values)} entries; palette 1 has {NUM_TILES} tiles")
    return tuple(_field_int(f"{name}[{t}]", v, limit, where) for t, v in enumerate(values))


def as_config_bytes(cfg: ConfigInput) -> bytes:
    """Accept a TileConfig or any 64-byte buffer; return the 64 raw bytes."""
    if isinstance(cfg, TileConfig):
        return cfg.to_bytes()
    try:
        # numpy < 2.5 declares ndarray a buffer to type checkers only for Python >= 3.12 (its __buffer__);
        # unused-ignore: numpy 2.5's stubs declare it everywhere
        view = memoryview(cfg)  # type: ignore[arg-type, unused-ignore]
    except (TypeError, ValueError, BufferError):
        raise TypeError(
            f"a tile config must be a TileConfig or a 64-byte buffer, not {type(cfg).__name__}"
        ) from None
    with view:
        if view.nbytes != TILECFG_BYTES:  # before any copy: the buffer may be huge
            raise ValueError(f"a tile config image is exactly 64 bytes, got {view.nbytes}")
        if not view.c_contiguous:
            raise ValueError("a tile config image must be one contiguous 64-byte block")
        return view.tobytes()


#: the instruction that loads a configuration, named in the faults it raises and the hint to run it
_CONFIGURING = isa.of_action("load-config").mnemonic


def parse_tilecfg(cfg: ConfigInput) -> TileConfig:
    """Decode a 64-byte image the way LDTILECFG does, raising #GP where it would."""
    raw = as_config_bytes(cfg)
    palette = raw[0]
    if palette == 0:
        return TileConfig()
    if palette > 1:
        raise GeneralProtectionFault(
            _CONFIGURING, f"palette_id (byte 0) is {palette}; only 0 and 1 exist"
        )
    for lo, hi in _RESERVED_RANGES:
        for i in range(lo, hi):
            if raw[i]:
                raise GeneralProtectionFault(
                    _CONFIGURING, f"reserved byte {i} is 0x{raw[i]:02x}; reserved bytes must be zero"
                )
    colsb = tuple(int.from_bytes(raw[16 + 2 * t : 18 + 2 * t], "little") for t in range(NUM_TILES))
    rows = tuple(raw[48 + t] for t in range(NUM_TILES))
    for t in range(NUM_TILES):
        if colsb[t] > MAX_COLSB:
            raise GeneralProtectionFault(
                _CONFIGURING, f"tmm{t} colsb (bytes {16 + 2 * t}-{17 + 2 * t}) is {colsb[t]} > {MAX_COLSB}"
            )
        if rows[t] > MAX_ROWS:
            raise GeneralProtectionFault(
                _CONFIGURING, f"tmm{t} rows (byte {48 + t}) is {rows[t]} > {MAX_ROWS}"
            )
        if (rows[t] == 0) != (colsb[t] == 0):
            raise GeneralProtectionFault(
                _CONFIGURING,
                f"tmm{t} has rows={rows[t]} and colsb={colsb[t]}; both must be zero or both non-zero",
            )
    return TileConfig(palette, raw[1], colsb, rows)


def check_tile_index(mnemonic: str, operand: str, tmm: object) -> int:
    """#UD for a register that palette 1 does not name (tmm8..tmm15 encode, but fault)."""
    if isinstance(tmm, (bool, np.bool_)) or not isinstance(tmm, (int, np.integer)):
        raise TypeError(f"{mnemonic} {operand}: a tile register is an int 0..7, not {tmm!r}")
    tmm = int(tmm)
    if not 0 <= tmm < NUM_TILES:
        raise InvalidOpcodeFault(mnemonic, f"{operand} is tmm{tmm}; palette 1 has tmm0..tmm7")
    return tmm


def check_configured(mnemonic: str, cfg: TileConfig) -> None:
    if not cfg.configured:
        raise InvalidOpcodeFault(
            mnemonic, f"tiles are not configured (palette 0, init state); run {_CONFIGURING} first"
        )


def check_tile_usable(mnemonic: str, operand: str, cfg: TileConfig, tmm: object) -> int:
    """#UD unless tiles are configured and ``tmm`` is a configured tile."""
    check_configured(mnemonic, cfg)
    tmm = check_tile_index(mnemonic, operand, tmm)
    if cfg.rows[tmm] == 0:
        raise InvalidOpcodeFault(mnemonic, f"{operand} tmm{tmm} is not configured (rows=0, colsb=0)")
    return tmm


def check_memory_tile(mnemonic: str, operand: str, cfg: TileConfig, tmm: object) -> int:
    """#UD rules of TILELOADD(T1)/TILESTORED's tile, as Sapphire Rapids enforces them.

    The SDM's exception class (AMX-E3) lists only the configuration and the
    register; silicon also faults on an unconfigured tile, a colsb that is
    not a multiple of 4 and a start_row at or past the tile's rows
    (docs/semantics.md section 7).
    """
    tmm = check_tile_usable(mnemonic, operand, cfg, tmm)
    if cfg.colsb[tmm] % 4:
        raise InvalidOpcodeFault(mnemonic, f"{operand} tmm{tmm} colsb={cfg.colsb[tmm]} is not a multiple of 4")
    if cfg.start_row >= cfg.rows[tmm]:
        raise InvalidOpcodeFault(
            mnemonic, f"start_row={cfg.start_row} is not below the rows of {operand} tmm{tmm} (rows={cfg.rows[tmm]})"
        )
    return tmm


@dataclass(frozen=True)
class DotShape:
    """M x K x N of a tile dot product, K counted in dwords (pairs or quads)."""

    m: int
    k: int
    n: int


def check_dot_product(mnemonic: str, cfg: TileConfig, dst: object, src1: object, src2: object) -> DotShape:
    """The #UD rules shared by TDPBF16PS, TDPFP16PS and TDPB[SU][SU]D (docs/semantics.md section 2)."""
    dst = check_tile_usable(mnemonic, "tsrcdest", cfg, dst)
    src1 = check_tile_usable(mnemonic, "tsrc1", cfg, src1)
    src2 = check_tile_usable(mnemonic, "tsrc2", cfg, src2)
    if len({dst, src1, src2}) != 3:
        raise InvalidOpcodeFault(
            mnemonic, f"operands tmm{dst}, tmm{src1}, tmm{src2} must be three different tiles"
        )
    for operand, t in (("tsrcdest", dst), ("tsrc1", src1), ("tsrc2", src2)):
        if cfg.colsb[t] % 4:
            raise InvalidOpcodeFault(
                mnemonic, f"{operand} tmm{t} colsb={cfg.colsb[t]} is not a multiple of 4"
            )
    if cfg.colsb[dst] != cfg.colsb[src2]:
        raise InvalidOpcodeFault(
            mnemonic,
            f"tsrcdest tmm{dst} colsb={cfg.colsb[dst]} differs from tsrc2 tmm{src2} colsb={cfg.colsb[src2]}",
        )
    if cfg.colsb[src1] // 4 != cfg.rows[src2]:
        raise InvalidOpcodeFault(
            mnemonic,
            f"tsrc1 tmm{src1} colsb/4={cfg.colsb[src1] // 4} differs from tsrc2 tmm{src2} rows={cfg.rows[src2]}",
        )
    if cfg.rows[dst] != cfg.rows[src1]:
        raise InvalidOpcodeFault(
            mnemonic,
            f"tsrcdest tmm{dst} rows={cfg.rows[dst]} differs from tsrc1 tmm{src1} rows={cfg.rows[src1]}",
        )
    k, n = cfg.rows[src2], cfg.colsb[dst] // 4
    if k > TMUL_MAXK:
        raise InvalidOpcodeFault(mnemonic, f"K={k} rows of tsrc2 exceeds tmul_maxk={TMUL_MAXK}")
    if cfg.colsb[dst] > TMUL_MAXN:
        raise InvalidOpcodeFault(mnemonic, f"N={n} exceeds tmul_maxn={TMUL_MAXN} bytes")
    return DotShape(cfg.rows[dst], k, n)
