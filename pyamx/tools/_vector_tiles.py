"""Vector cases of the instructions that are not dot products: the row instructions and the loads.

A row case is a tile's contents (rows x colsb bytes, loaded with TILELOADD)
and a row selector (a 32-bit GPR value, or an imm8), answered by the 64-byte
zmm result. A load case is a buffer, a stride and an offset, answered by all
16 x 64 bytes of the loaded tile (the bytes past colsb and the rows past
``rows`` must be zero too). Which instructions take which case comes from
the kinds of :mod:`pyamx.table.isa`, so a new row or load row is recorded without
a change here. :mod:`pyamx.tools.vectors` reads and writes the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, NoReturn, Optional, Union

import numpy as np
import numpy.typing as npt

from ..table import isa
from ..table.tilecfg import MAX_COLSB, MAX_ROWS, NUM_TILES, TileConfig

if TYPE_CHECKING:
    from ..cpu.native import NativeMachine
    from ..emulator import TileMachine

#: a case as its file holds it: a JSON object
Json = dict[str, Any]
#: raises for a bad field of a vector file, naming the problem
Fail = Callable[[str], NoReturn]

#: dwords of a zmm result
LANES = 16
#: cases per row instruction and per load instruction in a recording
ROW_CASES = 16
LOAD_CASES = 10


def case_kind(insn: isa.Instruction) -> Optional[str]:
    """``"dot"``, ``"row"`` or ``"load"``: the case shape a vector file records ``insn`` with; None
    for the rows a case cannot capture on its own (configuration, stores, TILEZERO)."""
    if insn.is_dot:
        return "dot"
    if insn.is_row:
        return "row"
    if insn.kind == "memory" and ("src", "sibmem") in insn.encoding.roles:
        return "load"
    return None


@dataclass
class RowCase:
    """One row instruction: tile ``rows`` x ``colsb`` holding ``data``, selector ``selector``
    (an imm8 where ``imm``); ``out`` the 16 result dwords."""

    instruction: str
    label: str
    rows: int
    colsb: int
    data: np.ndarray  # (rows, colsb) uint8
    selector: int
    imm: bool
    out: np.ndarray | None = None  # (16,) <u4

    def to_json(self) -> Json:
        assert self.out is not None  # recorded
        return {"instruction": self.instruction, "label": self.label, "tile": [self.rows, self.colsb],
                "data": self.data.tobytes().hex(), "selector": self.selector, "imm": self.imm,
                "out": self.out.astype("<u4").tobytes().hex()}

    def mismatch_lines(self, index: int, got: np.ndarray) -> list[str]:
        assert self.out is not None  # a recorded case
        bad = np.flatnonzero(got != self.out)
        lane = int(bad[0])
        form = "imm8" if self.imm else "r32"
        return [f"  case {index} ({self.instruction}, {self.label}): {len(bad)} lanes differ; first lane {lane}: "
                f"recorded {int(self.out[lane]):08x}, got {int(got[lane]):08x}",
                f"    tile {self.rows}x{self.colsb} = {self.data.tobytes().hex()}\n"
                f"    selector ({form}) = {self.selector:#x}"]


@dataclass
class LoadCase:
    """One load into tile ``tmm`` (``rows`` x ``colsb``) from ``memory`` at ``offset + r * stride``;
    ``out`` the whole tile afterwards, 16 x 64 bytes."""

    instruction: str
    label: str
    tmm: int
    rows: int
    colsb: int
    stride: int
    offset: int
    memory: np.ndarray  # (n,) uint8
    out: np.ndarray | None = None  # (16, 64) uint8

    def to_json(self) -> Json:
        assert self.out is not None  # recorded
        return {"instruction": self.instruction, "label": self.label, "tmm": self.tmm, "tile": [self.rows, self.colsb],
                "stride": self.stride, "offset": self.offset, "memory": self.memory.tobytes().hex(),
                "out": self.out.tobytes().hex()}

    def mismatch_lines(self, index: int, got: np.ndarray) -> list[str]:
        assert self.out is not None  # a recorded case
        bad = np.argwhere(got != self.out)
        r, b = (int(x) for x in bad[0])
        return [f"  case {index} ({self.instruction}, {self.label}): {len(bad)} bytes differ; first (row {r}, "
                f"byte {b}): recorded {int(self.out[r, b]):02x}, got {int(got[r, b]):02x}",
                f"    tmm{self.tmm} {self.rows}x{self.colsb}, stride {self.stride}, offset {self.offset}, "
                f"memory = {self.memory.tobytes().hex()}"]


# -- generation ---------------------------------------------------------------------------------


def _float_dwords(rng: np.random.Generator, source: isa.Format, target: isa.Format, n: int) -> npt.NDArray[np.uint32]:
    """fp32 words that test a conversion to ``target``: the source's specials, then words whose
    exponents sit at the target's edges (overflow, denormals, flush) and whose dropped mantissa
    bits are exact ties, just above or just below one, or random."""
    drop = source.mantissa - target.mantissa  # mantissa bits the conversion rounds away
    # the target's largest finite value, then half a step above it (a tie that rounds up to infinity)
    # and just below that, both signs
    top = (source.bias + target.bias) << source.mantissa | ((1 << target.mantissa) - 1) << drop
    near_top = [top, top + (1 << (drop - 1)), top + (1 << (drop - 1)) - 1] if drop > 0 else [top]
    fixed = np.array(list(source.special_values) + near_top + [w | 1 << 31 for w in near_top], np.uint32)
    edges = (source.bias - target.bias - target.mantissa - 2, source.bias - target.bias - target.mantissa,
             source.bias + 1 - target.bias, source.bias, source.bias + target.bias, source.bias + target.bias + 1)
    exps = np.clip(rng.choice(edges, n) + rng.integers(-1, 2, n), 0, 2 * source.bias + 1).astype(np.uint32)
    words = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    if drop > 0:
        half = np.uint32(1 << (drop - 1))
        low = np.uint32((1 << drop) - 1)
        tails = np.array([half, half + 1, half - 1, 0], np.uint32)
        pick = rng.integers(0, 5, n)  # 4: keep the random tail
        tail = np.where(pick < 4, tails[np.minimum(pick, 3)], words & low)
        words = (words & ~low) | tail
    mant_mask = np.uint32((1 << source.mantissa) - 1)
    words = (words & np.uint32(0x80000000)) | (exps << np.uint32(source.mantissa)) | (words & mant_mask)
    dwords: npt.NDArray[np.uint32] = np.concatenate([fixed, words])
    return dwords


def _int_dwords(rng: np.random.Generator, source: isa.Format, target: isa.Format, n: int) -> npt.NDArray[np.uint32]:
    """int32 words that test a conversion to ``target``: the specials, then values just past the
    target's exact integers (ties, both neighbours, both signs), then random words."""
    fixed = np.array(source.special_values, np.uint32)
    edge = 1 << (target.mantissa + 1)  # the first integer a float of this mantissa cannot hold
    shifts = rng.integers(0, 31 - target.mantissa - 1, n)
    near = (edge << shifts) + rng.integers(-3, 4, n)
    near = np.where(rng.random(n) < 0.5, -near, near)
    rand = rng.integers(-(2**31), 2**31, n, dtype=np.int64)
    words = np.where(rng.random(n) < 0.6, near, rand).astype(np.int64) & 0xFFFFFFFF
    return np.concatenate([fixed, words.astype(np.uint32)])


def _row_bytes(rng: np.random.Generator, insn: isa.Instruction, rows: int, colsb: int) -> npt.NDArray[np.uint8]:
    """rows x colsb tile bytes of the instruction's source format, rich in its hard cases."""
    src, dst = insn.source_format, insn.acc
    per_row = (colsb + 3) // 4
    if src.is_float and dst.is_float and src.bits == "<u4":
        make = _float_dwords
    elif src.signed is not None and src.bits == "<i4":
        make = _int_dwords
    else:
        data = rng.integers(0, 256, (rows, colsb), dtype=np.uint8)
        special = np.array(src.special_values or (0,), np.uint8)
        sprinkled: npt.NDArray[np.uint8] = np.where(rng.random(data.shape) < 0.2, rng.choice(special, data.shape),
                                                    data).astype(np.uint8)
        return sprinkled
    # An instruction reads one row: every row gets its own shuffle of the specials and edge words.
    words = np.stack([rng.permutation(make(rng, src, dst, per_row))[:per_row] for _ in range(rows)])
    tile: npt.NDArray[np.uint8] = words.astype("<u4").view(np.uint8).reshape(rows, -1)[:, :colsb].copy()
    return tile


def _selector(rng: np.random.Generator, rows: int, imm: bool) -> int:
    """A row index inside the tile; the 64-byte chunk 0 mostly, otherwise one past every tile's bytes
    (colsb is at most 64: those lanes are zero), up to the field's largest value."""
    index = int(rng.integers(0, rows))
    chunk = 0 if rng.random() < 0.7 else int(rng.choice([1, 3] if imm else [1, 2, 0xFFFF]))
    return (chunk << 6 | index) if imm else (chunk << 16 | index)


def _colsb(rng: np.random.Generator) -> int:
    # a multiple of 4: the loads #UD on any other colsb (docs/semantics.md section 1)
    return 4 * int(rng.integers(1, MAX_COLSB // 4 + 1))


def row_cases(rng: np.random.Generator, insn: isa.Instruction, count: int = ROW_CASES) -> list[RowCase]:
    """Seeded cases of one row instruction: both selector forms, full and partial tile shapes."""
    cases = []
    for i in range(count):
        rows = int(rng.integers(1, MAX_ROWS + 1)) if i % 4 else MAX_ROWS
        colsb = MAX_COLSB if i % 3 == 0 else _colsb(rng)
        imm = bool(i % 2)
        data = _row_bytes(rng, insn, rows, colsb)
        selector = _selector(rng, rows, imm)
        form = "imm8" if imm else "r32"
        cases.append(RowCase(insn.name, f"{form} tile {rows}x{colsb} selector {selector:#x}", rows, colsb, data,
                             selector, imm))
    return cases


def load_cases(rng: np.random.Generator, insn: isa.Instruction, count: int = LOAD_CASES) -> list[LoadCase]:
    """Seeded cases of one load: strides equal to colsb, to 64, zero, overlapping, wide and negative."""
    cases = []
    for i in range(count):
        rows = int(rng.integers(1, MAX_ROWS + 1)) if i % 3 else MAX_ROWS
        colsb = _colsb(rng) if i % 2 else MAX_COLSB
        stride = (colsb, MAX_COLSB, 0, max(colsb // 2, 1), colsb + int(rng.integers(1, 40)), -colsb)[i % 6]
        offset = int(rng.integers(0, 8)) + (-stride * (rows - 1) if stride < 0 else 0)
        size = max(offset + stride * r + colsb for r in range(rows)) + int(rng.integers(0, 8))
        memory = rng.integers(0, 256, size, dtype=np.uint8)
        tmm = int(rng.integers(0, NUM_TILES))
        cases.append(LoadCase(insn.name, f"tile {rows}x{colsb} stride {stride} offset {offset}", tmm, rows, colsb,
                              stride, offset, memory))
    return cases


def generate(seed: int, instructions: Collection[str]) -> list[Union[RowCase, LoadCase]]:
    """The row and load cases of ``instructions`` (names), in table order, from generators of their own
    so the dot-product cases of a seed stay what they were."""
    cases: list[Union[RowCase, LoadCase]] = []
    for insn in isa.TABLE:
        if insn.name not in instructions:
            continue
        kind = case_kind(insn)
        # one generator per instruction: adding a row leaves every other row's cases as they were
        rng = np.random.default_rng([seed, 2, *insn.mnemonic.encode()])
        if kind == "row":
            cases += row_cases(rng, insn)
        elif kind == "load":
            cases += load_cases(rng, insn)
    return cases


# -- running ------------------------------------------------------------------------------------


def _machine(backend: str) -> Union[TileMachine, NativeMachine]:
    if backend == "native":
        from ..cpu.native import NativeMachine

        return NativeMachine()
    from ..emulator import TileMachine

    return TileMachine("sdm")


def run(case: Union[RowCase, LoadCase], backend: str) -> np.ndarray:
    """The backend's answer to a row case ((16,) <u4) or a load case ((16, 64) uint8)."""
    machine = _machine(backend)
    # the machine's methods of the rows that set up a case, found by what they do
    configure, load = (getattr(machine, isa.of_action(a).name) for a in ("load-config", "load"))
    try:
        if isinstance(case, RowCase):
            configure(TileConfig.make({0: (case.rows, case.colsb)}))
            load(0, np.ascontiguousarray(case.data), case.colsb)
            out = getattr(machine, case.instruction)(0, case.selector, imm=case.imm)
            return np.asarray(out, dtype=np.uint32).astype("<u4")
        configure(TileConfig.make({case.tmm: (case.rows, case.colsb)}))
        getattr(machine, case.instruction)(case.tmm, case.memory, case.stride, case.offset)
        return np.asarray(machine.tile(case.tmm), dtype=np.uint8)
    finally:
        getattr(machine, isa.of_action("release").name)()


# -- reading ------------------------------------------------------------------------------------


def parse(raw: Json, kind: str, fail: Fail) -> Union[RowCase, LoadCase]:
    """A RowCase or LoadCase from its JSON object; ``fail(problem)`` raises for a bad field."""
    tile = raw.get("tile")
    # type() and not isinstance(): JSON's true is a Python bool, which isinstance counts as an int.
    if not (isinstance(tile, list) and len(tile) == 2 and all(type(x) is int for x in tile)
            and 1 <= tile[0] <= MAX_ROWS and 1 <= tile[1] <= MAX_COLSB):
        fail(f"has a bad tile {tile!r} (two ints: rows 1..{MAX_ROWS}, colsb 1..{MAX_COLSB})")
    rows, colsb = tile
    label = str(raw.get("label", ""))
    if kind == "row":
        imm = raw.get("imm")
        if type(imm) is not bool:
            fail(f"field 'imm' is {imm!r}; it must be true or false")
        limit = 0xFF if imm else 0xFFFFFFFF
        selector = _int_field(raw, "selector", 0, limit, fail)
        data = _hex_field(raw, "data", rows * colsb, fail).reshape(rows, colsb)
        out = _hex_field(raw, "out", 4 * LANES, fail).view("<u4")
        return RowCase(raw["instruction"], label, rows, colsb, data, selector, imm, out)
    tmm = _int_field(raw, "tmm", 0, NUM_TILES - 1, fail)
    stride = _int_field(raw, "stride", -(2**63), 2**63 - 1, fail)
    offset = _int_field(raw, "offset", -(2**63), 2**63 - 1, fail)
    memory = _hex_field(raw, "memory", None, fail)
    bad = [r for r in range(rows) if offset + r * stride < 0 or offset + r * stride + colsb > memory.size]
    if bad:
        fail(f"reads row {bad[0]} outside its {memory.size}-byte memory (offset {offset}, stride {stride})")
    out = _hex_field(raw, "out", MAX_ROWS * MAX_COLSB, fail).reshape(MAX_ROWS, MAX_COLSB)
    return LoadCase(raw["instruction"], label, tmm, rows, colsb, stride, offset, memory, out)


def _int_field(raw: Json, name: str, low: int, high: int, fail: Fail) -> int:
    value = raw.get(name)
    if type(value) is not int or not low <= value <= high:
        fail(f"field {name!r} is {value!r}; it must be an integer {low}..{high}")
    return value


def _hex_field(raw: Json, name: str, size: Optional[int], fail: Fail) -> npt.NDArray[np.uint8]:
    text = raw.get(name)
    if not isinstance(text, str):
        fail(f"field {name!r} is not a hex string")
    try:
        data = bytes.fromhex(text)
    except ValueError:
        fail(f"field {name!r} is not a hex string")
    if size is not None and len(data) != size:
        fail(f"field {name!r} holds {len(data)} bytes; it needs {size}")
    return np.frombuffer(data, dtype=np.uint8)
