"""AMX-AVX512's row instructions and AMX-MOVRS's loads on the emulator's tile machine, against
tests/reference_rows.py (exact, from Intel's pseudo-code), as uint32 bit patterns."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import reference_rows as ref
from mxcsr import caller_mxcsr
from pyamx import emulator
from pyamx.table import isa
from pyamx.emulator.numerics import ROW_BF16_RULES, ROW_FP16_RULES, ROW_INDEX_RULES, Numerics
from pyamx.errors import InvalidOpcodeFault, MemoryAccessFault
from pyamx.table.tilecfg import TileConfig

ROWS = [insn.mnemonic for insn in isa.ROWS]
CONVERTS = [m for m in ROWS if m != "TILEMOVROW"]


def _f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


# fp32 bit patterns every conversion must get right: zeros, denormals, the fp16 and bf16 boundaries,
# ties both ways, overflow, infinities, NaNs with payloads.
ADVERSARIAL_FP32 = [
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001, 0x7FC00000, 0xFFC00000,
    0x7FBFFFFF, 0x7F810000, 0x7FFF0000, 0x7F80FFFF, 0x7FE00001, 0xFFA5A5A5,
    0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x3F80FFFF, 0x7F7F8000, 0x7F7F7FFF,  # bf16 ties, overflow
    _f32(65504.0), _f32(65519.99), _f32(65520.0), _f32(-65520.0), _f32(65536.0), _f32(1e10),  # fp16 top
    _f32(2.0**-14), _f32(-(2.0**-14)), _f32(2.0**-24), _f32(2.0**-25), _f32(2.0**-25 * 1.5), _f32(2.0**-26),
    _f32(2.0**-14 - 2.0**-25), _f32(2.0**-14 - 2.0**-26), _f32(2.0**-14 - 2.0**-27), _f32(3 * 2.0**-25),
    _f32(1.0 + 2.0**-11), _f32(1.0 + 3 * 2.0**-11), _f32(1.0 + 2.0**-11 + 2.0**-20), _f32(2049.0), _f32(2051.0),
    _f32(1.0), _f32(-1.5), _f32(0.1), _f32(-0.3333333),
]
ADVERSARIAL_INT32 = [0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x80000001, 2**24, 2**24 + 1, 2**24 + 3, 2**25 + 2,
                     2**25 + 6, 2**31 - 64, 2**31 - 65, (-(2**24) - 1) & 0xFFFFFFFF, (-(2**24) - 3) & 0xFFFFFFFF,
                     0x7FFFFFC0, 0x7FFFFF80, 0x7FFFFFBF, 12345678, 0xDEADBEEF]


def _data(rng, mnemonic: str, n: int) -> np.ndarray:
    """n dwords: the adversarial patterns of the instruction's source format, then random ones."""
    fixed = ADVERSARIAL_INT32 if mnemonic == "TCVTROWD2PS" else ADVERSARIAL_FP32
    rand = rng.integers(0, 2**32, max(n - len(fixed), 0), dtype=np.uint64).astype(np.uint32)
    if mnemonic != "TCVTROWD2PS":  # many exponents near fp16's and bf16's edges
        exps = rng.integers(90, 160, rand.size).astype(np.uint32)
        rand = (rand & np.uint32(0x807FFFFF)) | (exps << np.uint32(23))
    return np.concatenate([np.array(fixed, np.uint32), rand])[:n].astype(np.uint32)


def _loaded(rows: int, colsb: int, words: np.ndarray, numerics="sdm"):
    """A machine with tmm3 of rows x colsb loaded from ``words`` (stride 64), and the reference's storage."""
    m = emulator.TileMachine(numerics)
    m.ldtilecfg(TileConfig.make({3: (rows, colsb), 1: (2, 8)}))
    buf = words.astype("<u4").view(np.uint8)
    m.tileloadd(3, buf, 64)
    storage = [[int(buf[r * 64 + c]) if r < rows and c < colsb else 0 for c in range(64)] for r in range(16)]
    return m, storage


def _run(m, mnemonic, selector, imm):
    try:
        return [int(x) for x in getattr(m, mnemonic.lower())(3, selector, imm=imm)]
    except InvalidOpcodeFault:
        return "#UD"


SELECTORS_R32 = sorted({i | c << 16 for i in (0, 1, 2, 3, 14, 15, 16, 17, 63, 64, 0x8000, 0xFFFF)
                        for c in (0, 1, 2, 3, 0x100, 0xFFFF)})


@pytest.mark.parametrize("row_index", ROW_INDEX_RULES)
@pytest.mark.parametrize("mnemonic", ROWS)
@pytest.mark.parametrize("shape", [(16, 64), (4, 48), (3, 52), (1, 4), (7, 60)])
def test_every_selector_matches_the_reference(mnemonic, shape, row_index):
    rows, colsb = shape
    rng = np.random.default_rng(hash((mnemonic, shape)) & 0xFFFF)
    m, storage = _loaded(rows, colsb, _data(rng, mnemonic, 16 * 16), Numerics(row_index=row_index))
    cases = [(s, False) for s in SELECTORS_R32] + [(s, True) for s in range(256)]
    for selector, imm in cases:
        want = ref.row_instruction(mnemonic, storage, rows, colsb, selector, imm, row_index=row_index)
        assert _run(m, mnemonic, selector, imm) == want, (mnemonic, hex(selector), imm)


@pytest.mark.parametrize("rules", [(b, f) for b in ROW_BF16_RULES for f in ROW_FP16_RULES])
@pytest.mark.parametrize("mnemonic", CONVERTS)
def test_conversions_of_adversarial_and_random_data_match_the_reference(mnemonic, rules):
    bf16_rule, fp16_rule = rules
    rng = np.random.default_rng(7)
    words = _data(rng, mnemonic, 16 * 16 * 8)
    for block in words.reshape(8, 256):
        m, storage = _loaded(16, 64, block, Numerics(row_bf16=bf16_rule, row_fp16=fp16_rule))
        for r in range(16):
            want = ref.row_instruction(mnemonic, storage, 16, 64, r, False, row_bf16=bf16_rule, row_fp16=fp16_rule)
            assert _run(m, mnemonic, r, False) == want, (mnemonic, r, [hex(x) for x in block[16 * r: 16 * r + 16]])


def test_every_fp16_and_bf16_code_round_trips_through_fp32():
    """Each finite fp16 / bf16 value, widened exactly to fp32, converts back to itself (every code of
    the small formats, denormals and both zeros included); a NaN comes back quieted."""
    from pyamx.emulator import rows

    for code in range(1 << 16):
        sign, e, f = code >> 15, (code >> 10) & 31, code & 0x3FF
        if e == 31:
            continue
        value = (f * 2.0**-24) if e == 0 else (1024 + f) * 2.0 ** (e - 25)
        bits = _f32(-value if sign else value)
        assert rows.fp32_to_fp16(bits) == ref.fp32_to_fp16(bits, "ieee") == code
        assert rows.fp32_to_bf16(code << 16) == ref.fp32_to_bf16(code << 16, "ieee") == (
            code | (0x40 if (code & 0x7F80) == 0x7F80 and code & 0x7F else 0))


def test_the_options_give_the_documented_bits():
    """One value per option, computed by hand: the discriminating cases docs/semantics.md names."""
    from pyamx.emulator import rows

    assert rows.fp32_to_bf16(0x00400000) == 0x0040 and rows.fp32_to_bf16(0x00400000, "vcvtneps2bf16") == 0
    assert rows.fp32_to_bf16(0x80400000, "vcvtneps2bf16") == 0x8000
    assert rows.fp32_to_fp16(_f32(2.0**-24)) == 0x0001 and rows.fp32_to_fp16(_f32(2.0**-24), "daz_ftz") == 0
    assert rows.fp32_to_fp16(_f32(-(2.0**-15))) == 0x8200 and rows.fp32_to_fp16(_f32(-(2.0**-15)), "daz_ftz") == 0x8000
    assert rows.fp32_to_fp16(_f32(2.0**-14 - 2.0**-26)) == 0x0400 == rows.fp32_to_fp16(_f32(2.0**-14 - 2.0**-26), "daz_ftz")
    assert rows.fp32_to_fp16(_f32(2.0**-14 - 2.0**-25)) == 0x0400 and rows.fp32_to_fp16(_f32(2.0**-14 - 2.0**-25), "daz_ftz") == 0
    assert rows.fp32_to_fp16(_f32(65520.0)) == 0x7C00 and rows.fp32_to_fp16(_f32(65519.99)) == 0x7BFF
    assert rows.fp32_to_fp16(0x7F800001) == 0x7E00 and rows.fp32_to_fp16(0xFFBFE000) == 0xFFFF
    assert rows.int32_to_fp32(2**24 + 1) == 0x4B800000 and rows.int32_to_fp32(2**24 + 3) == 0x4B800002
    assert rows.int32_to_fp32(0x7FFFFFFF) == 0x4F000000 and rows.int32_to_fp32(0x80000000) == 0xCF000000


MXCSR_CASES = {"RZ": 0x1F80 | 0x6000, "round-up": 0x1F80 | 0x4000, "FTZ|DAZ": 0x1F80 | 0x8040,
               "FTZ|DAZ|RZ": 0x1F80 | 0xE040}


@pytest.mark.parametrize("mode", MXCSR_CASES)
def test_the_callers_mxcsr_changes_no_bit(mode):
    rng = np.random.default_rng(11)
    for mnemonic in CONVERTS:
        m, storage = _loaded(16, 64, _data(rng, mnemonic, 256))
        with caller_mxcsr(MXCSR_CASES[mode]):
            got = [_run(m, mnemonic, r, False) for r in range(16)]
        assert got == [ref.row_instruction(mnemonic, storage, 16, 64, r, False) for r in range(16)], mnemonic


@pytest.mark.parametrize("mnemonic", ROWS)
def test_start_row_resets_and_the_movrow_option_keeps_it(mnemonic):
    words = np.arange(256, dtype=np.uint32)
    for keep in (True, False):
        m, _ = _loaded(8, 64, words, Numerics(row_movrow_start_row=keep))
        m.ldtilecfg(TileConfig.make({3: (8, 64)}, start_row=5))
        getattr(m, mnemonic.lower())(3, 0)
        expected = 5 if (mnemonic == "TILEMOVROW" and not keep) else 0
        assert m.sttilecfg()[1] == expected, (mnemonic, keep)


@pytest.mark.parametrize("mnemonic", ROWS)
def test_row_faults(mnemonic):
    m = emulator.TileMachine()
    method = getattr(m, mnemonic.lower())
    with pytest.raises(InvalidOpcodeFault, match="not configured"):
        method(0, 0)
    m.ldtilecfg(TileConfig.make({0: (2, 64)}))
    with pytest.raises(InvalidOpcodeFault, match="tmm1 is not configured"):
        method(1, 0)
    with pytest.raises(InvalidOpcodeFault, match="tmm8"):
        method(8, 0)
    with pytest.raises(InvalidOpcodeFault, match="row index 16"):
        method(0, 16)
    with pytest.raises(ValueError, match="imm8"):
        method(0, 256, imm=True)
    with pytest.raises(ValueError, match="32-bit"):
        method(0, 2**32)
    with pytest.raises(TypeError):
        method(0, 1.0)
    before = m.snapshot()
    assert m.sttilecfg() == before[0]


@pytest.mark.parametrize("pair", [("tileloaddrs", "tileloadd"), ("tileloaddrst1", "tileloaddt1")])
def test_movrs_loads_equal_tileloadd_including_faults_and_start_row(pair):
    movrs, plain = pair
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, 4096, dtype=np.uint8)
    cases = [((16, 64), 0, 64, 0), ((5, 12), 2, 100, 7), ((3, 8), 0, -16, 2000), ((4, 64), 3, 64, 0),
             ((4, 64), 0, 64, 4000), ((4, 6), 0, 64, 0), ((4, 64), 4, 64, 0)]
    for (rows, colsb), start_row, stride, offset in cases:
        results = []
        for name in (movrs, plain):
            m = emulator.TileMachine()
            m.ldtilecfg(TileConfig.make({2: (rows, colsb)}, start_row=start_row))
            try:
                getattr(m, name)(2, buf, stride, offset)
                results.append(("ok", m.sttilecfg(), m.tile(2).tobytes()))
            except (InvalidOpcodeFault, MemoryAccessFault) as exc:
                results.append((type(exc).__name__, m.sttilecfg(), m.tile(2).tobytes()))
        assert results[0] == results[1], (movrs, rows, colsb, start_row, stride, offset)
    m = emulator.TileMachine()
    with pytest.raises(InvalidOpcodeFault, match="not configured"):
        getattr(m, movrs)(0, buf, 64)


@pytest.mark.parametrize("mnemonic", ROWS)
def test_a_tile_whose_colsb_is_not_a_multiple_of_4_reads_as_zeros_without_a_fault(mnemonic):
    """No load can fill such a tile (loads #UD on it), so it holds LDTILECFG's zeros; the pseudo-code
    has no colsb rule for the row instructions, and pyamx adds none."""
    m = emulator.TileMachine()
    m.ldtilecfg(TileConfig.make({4: (3, 7)}))
    assert [int(x) for x in getattr(m, mnemonic.lower())(4, 1)] == [0] * 16


@pytest.mark.parametrize("point, values", [("row_index", ROW_INDEX_RULES), ("row_bf16", ROW_BF16_RULES),
                                           ("row_fp16", ROW_FP16_RULES), ("row_movrow_start_row", (True, False))])
def test_the_row_probe_names_every_option_back(point, values):
    from pyamx.tools import probe

    for value in values:
        report = probe.probe_rows("emulator", Numerics().replace(**{point: value}))
        assert report[point]["candidates"] == [value], (point, value, report[point])
        assert all(r["verdict"] == getattr(Numerics(), p) for p, r in report.items() if p != point)


def test_every_row_instruction_is_a_method_of_both_machines_with_the_tables_docstring():
    import inspect

    from pyamx.cpu import native

    for insn in isa.ROWS:
        for machine in (emulator.TileMachine, native.NativeMachine):
            method = getattr(machine, insn.name)
            assert list(inspect.signature(method).parameters) == ["self", "tmm", "row", "imm"]
            assert method.__doc__.startswith(insn.mnemonic) and insn.feature.name in method.__doc__
        for name in ("tileloaddrs", "tileloaddrst1"):
            assert callable(getattr(machine, name))


def test_row_options_are_validated_and_leave_the_dot_products_engine_alone():
    from pyamx.emulator import engine

    with pytest.raises(ValueError, match="row_index"):
        Numerics(row_index="wrap")
    with pytest.raises(TypeError, match="row_movrow_start_row"):
        Numerics(row_movrow_start_row=1)
    rows_only = Numerics(row_index="ud", row_bf16="vcvtneps2bf16", row_fp16="daz_ftz", row_movrow_start_row=False)
    assert rows_only.dot_model() == Numerics() and rows_only.name.startswith("sdm+row_index='ud'")
    assert engine.resolve("auto", rows_only).name == engine.resolve("auto", "sdm").name
