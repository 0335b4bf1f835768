"""The emulated tile machine: every #GP/#UD rule, every zeroing rule, start_row, init state."""

from __future__ import annotations

import numpy as np
import pytest

from pyamx import GeneralProtectionFault, InvalidOpcodeFault, MemoryAccessFault, TileConfig, TileMachine
from pyamx.table import isa
from pyamx.errors import AMXFault


def image(palette=1, start_row=0, shapes=None, poke=None) -> bytearray:
    """A TILECFG image built from the byte layout of docs/semantics.md section 1 (not from TileConfig)."""
    raw = bytearray(64)
    raw[0], raw[1] = palette, start_row
    for tmm, (rows, colsb) in (shapes or {}).items():
        raw[16 + 2 * tmm : 18 + 2 * tmm] = colsb.to_bytes(2, "little")
        raw[48 + tmm] = rows
    for offset, value in (poke or {}).items():
        raw[offset] = value
    return raw


def configured(shapes, **kw) -> TileMachine:
    machine = TileMachine()
    machine.ldtilecfg(image(shapes=shapes, **kw))
    return machine


# ---- LDTILECFG / STTILECFG / TILERELEASE ----------------------------------


@pytest.mark.parametrize(
    "raw, words",
    [
        (image(palette=2), "palette_id"),
        (image(palette=255), "palette_id"),
        *[(image(shapes={0: (1, 4)}, poke={i: 1}), f"reserved byte {i}") for i in (2, 9, 15, 32, 40, 47, 56, 63)],
        (image(shapes={3: (1, 65)}), "tmm3 colsb"),
        (image(shapes={0: (1, 4), 7: (1, 0x100)}), "tmm7 colsb"),
        (image(shapes={5: (17, 4)}), "tmm5 rows"),
        (image(shapes={2: (4, 0)}), "tmm2 has rows=4 and colsb=0"),
        (image(shapes={6: (0, 8)}), "tmm6 has rows=0 and colsb=8"),
    ],
)
def test_ldtilecfg_gp_rules(raw, words):
    machine = configured({0: (2, 8)})
    machine.tilezero(0)
    before = machine.snapshot()
    with pytest.raises(GeneralProtectionFault, match=words) as info:
        machine.ldtilecfg(raw)
    assert info.value.vector == "#GP" and info.value.mnemonic == "LDTILECFG"
    after = machine.snapshot()
    assert before[0] == after[0] and np.array_equal(before[1], after[1]), "a faulting LDTILECFG changed state"


def test_ldtilecfg_limits_are_legal():
    machine = configured({t: (16, 64) for t in range(8)}, start_row=15)
    assert machine.config.rows == (16,) * 8 and machine.config.colsb == (64,) * 8
    assert machine.sttilecfg() == bytes(image(shapes={t: (16, 64) for t in range(8)}, start_row=15))


def test_ldtilecfg_zeroes_tiles_and_palette_zero_is_init_state():
    machine = configured({0: (16, 64)})
    machine.tileloadd(0, np.full(1024, 0xAB, np.uint8), 64)
    machine.ldtilecfg(image(shapes={0: (16, 64)}))
    assert not machine.snapshot()[1].any()
    machine.tileloadd(0, np.full(1024, 0xAB, np.uint8), 64)
    machine.ldtilecfg(image(palette=0, poke={5: 7}))  # palette 0: reserved bytes are not checked
    assert machine.sttilecfg() == bytes(64)
    assert not machine.snapshot()[1].any()
    with pytest.raises(InvalidOpcodeFault, match="not configured"):
        machine.tilezero(0)


def test_sttilecfg_of_init_state_is_zero_and_tilerelease_returns_there():
    machine = TileMachine()
    assert machine.sttilecfg() == bytes(64)
    machine.ldtilecfg(image(shapes={1: (3, 12)}, start_row=2))
    assert machine.sttilecfg()[1] == 2
    machine.tileloadd(1, np.ones(64, np.uint8), 12)
    machine.tilerelease()
    assert machine.sttilecfg() == bytes(64)
    assert not machine.snapshot()[1].any()


def test_config_accepts_tileconfig_and_rejects_wrong_size():
    machine = TileMachine()
    machine.ldtilecfg(TileConfig.make({0: (2, 8)}))
    assert machine.config.rows[0] == 2
    with pytest.raises(ValueError, match="64 bytes"):
        machine.ldtilecfg(bytes(63))
    with pytest.raises(TypeError):
        machine.ldtilecfg(12)


# ---- TILELOADD / TILESTORED / TILEZERO ------------------------------------


@pytest.mark.parametrize("load", ["tileloadd", "tileloaddt1"])
def test_load_zeroes_row_tails_and_upper_rows(load):
    machine = configured({4: (3, 12)})
    memory = np.arange(256, dtype=np.uint8)
    getattr(machine, load)(4, memory, 20, offset=5)
    tile = machine.tile(4)
    for r in range(3):
        assert list(tile[r, :12]) == list(range(5 + 20 * r, 17 + 20 * r))
    assert not tile[:3, 12:].any() and not tile[3:].any()


def test_load_with_stride_zero_and_negative_stride():
    machine = configured({0: (4, 8), 1: (3, 4)})
    memory = np.arange(64, dtype=np.uint8)
    machine.tileloadd(0, memory, 0, offset=8)
    assert all(list(machine.tile(0)[r, :8]) == list(range(8, 16)) for r in range(4))
    machine.tileloadd(1, memory, -16, offset=40)
    assert [list(machine.tile(1)[r, :4]) for r in range(3)] == [list(range(40 - 16 * r, 44 - 16 * r)) for r in range(3)]


def test_store_writes_only_configured_bytes():
    machine = configured({2: (2, 8)})
    machine.tileloadd(2, np.arange(1, 65, dtype=np.uint8), 12)
    out = np.full(32, 0xEE, np.uint8)
    machine.tilestored(2, out, 16, offset=1)
    assert list(out[1:9]) == [1, 2, 3, 4, 5, 6, 7, 8] and list(out[17:25]) == [13, 14, 15, 16, 17, 18, 19, 20]
    untouched = np.ones(32, bool)
    untouched[1:9] = untouched[17:25] = False
    assert (out[untouched] == 0xEE).all()


def test_start_row_restarts_load_and_store_then_resets():
    machine = configured({0: (4, 4)}, start_row=2)
    machine.tileloadd(0, np.arange(64, dtype=np.uint8), 4)
    tile = machine.tile(0)
    assert not tile[:2].any(), "rows before start_row are not loaded"
    assert list(tile[2, :4]) == [8, 9, 10, 11] and list(tile[3, :4]) == [12, 13, 14, 15]
    assert machine.config.start_row == 0
    out = np.zeros(16, np.uint8)
    machine.tilestored(0, out, 4)  # start_row is 0 again: all four rows
    assert list(out) == [0] * 8 + list(range(8, 16))

    machine = configured({0: (4, 4)}, start_row=3)
    out = np.full(16, 0xEE, np.uint8)
    machine.tilestored(0, out, 4)  # restart at row 3: rows 0..2 untouched in memory
    assert list(out) == [0xEE] * 12 + [0] * 4 and machine.config.start_row == 0


def test_tilezero_zeroes_the_whole_tile():
    machine = configured({0: (2, 4), 1: (16, 64)})
    machine.tileloadd(1, np.full(1024, 3, np.uint8), 64)
    machine.tilezero(1)
    assert not machine.tile(1).any()
    with pytest.raises(InvalidOpcodeFault, match="tmm5 is not configured"):
        machine.tilezero(5)  # Sapphire Rapids faults, though the SDM's AMX-E5 class does not say so


@pytest.mark.parametrize("op", ["tileloadd", "tileloaddt1", "tilestored"])
def test_load_store_ud_rules_and_bounds(op):
    machine = TileMachine()
    with pytest.raises(InvalidOpcodeFault, match="not configured"):
        getattr(machine, op)(0, np.zeros(64, np.uint8), 4)
    machine.ldtilecfg(image(shapes={0: (4, 16)}))
    with pytest.raises(InvalidOpcodeFault, match="tmm8"):
        getattr(machine, op)(8, np.zeros(64, np.uint8), 16)
    with pytest.raises(MemoryAccessFault, match="row 3"):
        getattr(machine, op)(0, np.zeros(63, np.uint8), 16)
    with pytest.raises(MemoryAccessFault, match="row 0"):
        getattr(machine, op)(0, np.zeros(64, np.uint8), 16, offset=-1)
    with pytest.raises(ValueError, match="C-contiguous"):
        getattr(machine, op)(0, np.zeros((16, 8), np.uint8)[:, ::2], 16)
    with pytest.raises(TypeError, match="stride"):
        getattr(machine, op)(0, np.zeros(64, np.uint8), 16.0)


@pytest.mark.parametrize("op", ["tileloadd", "tileloaddt1", "tilestored"])
def test_load_store_ud_rules_that_sapphire_rapids_adds(op):
    """#UD where the SDM's class AMX-E3 is silent, as silicon faults (docs/semantics.md section 7)."""
    memory = np.zeros(1024, np.uint8)
    machine = configured({0: (4, 16), 1: (4, 10)})
    with pytest.raises(InvalidOpcodeFault, match="tmm2 is not configured"):
        getattr(machine, op)(2, memory, 64)
    with pytest.raises(InvalidOpcodeFault, match="colsb=10 is not a multiple of 4"):
        getattr(machine, op)(1, memory, 64)
    for start_row in (4, 5, 16, 255):
        machine = configured({0: (4, 16)}, start_row=start_row)
        with pytest.raises(InvalidOpcodeFault, match=f"start_row={start_row} is not below the rows"):
            getattr(machine, op)(0, memory, 64)
        assert machine.config.start_row == start_row, "a faulting instruction changes nothing"
    machine = configured({0: (4, 16)}, start_row=3)
    getattr(machine, op)(0, memory, 64)  # the last row: still legal
    assert machine.config.start_row == 0


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix is the subclass at hand
def test_ndarray_subclasses_are_plain_byte_buffers_and_offsets_fit_64_bits():
    machine = configured({0: (2, 8)})
    data = np.arange(32, dtype=np.uint8)
    machine.tileloadd(0, np.asmatrix(data.reshape(4, 8)), 16)
    assert list(machine.tile(0)[1, :8]) == list(range(16, 24))
    before = machine.snapshot()[1]
    with pytest.raises(ValueError, match="offset .* does not fit a 64-bit register"):
        machine.tileloadd(0, data, 16, offset=2**64)
    assert np.array_equal(before, machine.snapshot()[1])


def test_store_refuses_read_only_buffers():
    machine = configured({0: (1, 4)})
    frozen = np.zeros(4, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        machine.tilestored(0, frozen, 4)
    with pytest.raises(ValueError, match="read-only"):
        machine.tilestored(0, b"\0\0\0\0", 4)


# ---- TDPBF16PS and friends: #UD and zeroing --------------------------------

GOOD = {0: (2, 8), 1: (2, 12), 2: (3, 8)}  # C 2x2 fp32, A 2x3 pairs, B 3x2 pairs


@pytest.mark.parametrize("mnemonic", isa.DOT_NAMES)
@pytest.mark.parametrize(
    "shapes, operands, words",
    [
        (GOOD, (0, 0, 2), "three different tiles"),
        (GOOD, (0, 1, 1), "three different tiles"),
        (GOOD, (0, 1, 3), "tsrc2 tmm3 is not configured"),
        (GOOD, (8, 1, 2), "tmm8"),
        ({**GOOD, 0: (2, 6), 2: (3, 6)}, (0, 1, 2), "not a multiple of 4"),
        ({**GOOD, 1: (2, 10)}, (0, 1, 2), "not a multiple of 4"),
        ({**GOOD, 0: (2, 12)}, (0, 1, 2), "differs from tsrc2"),
        ({**GOOD, 2: (4, 8)}, (0, 1, 2), "rows=4"),
        ({**GOOD, 1: (3, 12)}, (0, 1, 2), "rows=2 differs from tsrc1"),
    ],
)
def test_dot_product_ud_rules(mnemonic, shapes, operands, words):
    machine = configured(shapes)
    with pytest.raises(InvalidOpcodeFault, match=words) as info:
        getattr(machine, mnemonic)(*operands)
    assert info.value.vector == "#UD" and info.value.mnemonic == mnemonic.upper()


def test_dot_product_needs_configured_tiles():
    with pytest.raises(InvalidOpcodeFault, match="not configured"):
        TileMachine().tdpbf16ps(0, 1, 2)


def test_k_at_tmul_maxk_runs_and_k_above_it_cannot_be_configured():
    # K is src2's rows, and LDTILECFG refuses rows > 16 (#GP), so tmul_maxk=16 is reached exactly
    # at the edge: the #UD for K > tmul_maxk can never fire, and K = 16 must compute every dword.
    machine = configured({0: (16, 64), 1: (16, 64), 2: (16, 64)})
    ones = np.full((16, 32), 0x3F80, np.uint16)  # bf16 1.0 in every lane of A and B
    machine.tileloadd(1, ones, 64)
    machine.tileloadd(2, ones, 64)
    machine.tdpbf16ps(0, 1, 2)
    out = machine.tile(0).copy().view(np.float32)
    assert out.shape == (16, 16) and (out == 32.0).all()  # 16 dwords x 2 products of 1.0 each
    with pytest.raises(GeneralProtectionFault, match="tmm2 rows"):
        machine.ldtilecfg(image(shapes={0: (16, 64), 1: (16, 64), 2: (17, 64)}))


def test_dot_product_zeroes_tail_bytes_and_upper_rows_and_start_row():
    machine = configured({0: (2, 8), 1: (2, 4), 2: (1, 8)}, start_row=1)
    one = np.array([0x3F80, 0x3F80], np.uint16).view(np.uint8)
    machine.tileloadd(1, np.tile(one, 2), 4)  # start_row=1: loads row 1 of A only, then resets
    machine.tileloadd(2, np.tile(one, 2), 8)
    # No instruction sequence leaves bytes outside a tile's rows x colsb non-zero, so plant them
    # directly (white-box) to prove the instruction itself zeroes them.
    machine._tiles[0] = 0xFF
    machine._tiles[0, :2, :8] = 0
    machine._config = machine.config.with_start_row(5)
    machine.tdpbf16ps(0, 1, 2)
    tile = machine.tile(0)
    assert tile[:2, :8].copy().view(np.float32).tolist() == [[0.0, 0.0], [2.0, 2.0]]
    assert not tile[:, 8:].any() and not tile[2:].any()
    assert machine.config.start_row == 0


def test_int8_machine_matches_reference():
    import reference

    machine = configured({0: (2, 8), 1: (2, 8), 2: (2, 8)})
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (2, 8), dtype=np.uint8)
    b = rng.integers(0, 256, (2, 8), dtype=np.uint8)
    c = rng.integers(-(2**31), 2**31, (2, 2), dtype=np.int64).astype(np.int32)
    for mnemonic in (i.name for i in isa.DOTS if i.group == "int8"):
        machine.tileloadd(0, c, 8)
        machine.tileloadd(1, a, 8)
        machine.tileloadd(2, b, 8)
        getattr(machine, mnemonic)(0, 1, 2)
        got = machine.tile(0)[:2, :8].copy().view(np.int32)
        # signedness from the reference, not from pyamx.table.isa: the table is what is under test
        want = np.array(reference.tdpb_int8(*reference.int8_signedness(mnemonic), c, a, b), np.int32)
        assert np.array_equal(got, want), mnemonic


def test_faults_are_one_family():
    assert issubclass(GeneralProtectionFault, AMXFault) and issubclass(InvalidOpcodeFault, AMXFault)
    assert not issubclass(GeneralProtectionFault, InvalidOpcodeFault)
