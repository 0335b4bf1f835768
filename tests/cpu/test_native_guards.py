"""The C tile machine's own guards (csrc/kernels.c), tested without the Python layer in front.

The guards are the safety guarantee of the native tile machine: each call
reads the configuration from the tile registers and refuses, without
executing anything, an instruction that would fault or touch memory outside
its buffer. Their pure forms (``pyamx_check_*``, on a 64-byte STTILECFG
image) must agree with the emulator's rules on every input, extreme 64-bit
offsets and strides included; the instruction entry points must return the
same codes and leave registers and memory untouched.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lockstep import GUARD, GuardedBuffer, random_config
from pyamx.table import _memory
from pyamx.cpu import _nativelib
from pyamx.errors import GeneralProtectionFault, InvalidOpcodeFault, MemoryAccessFault
from pyamx.table.tilecfg import TileConfig, check_dot_product, check_memory_tile

I64 = (-(2**63), 2**63 - 1)
EXTREMES = [I64[0], I64[0] + 1, -(2**62), -(2**32), -65, -1, 0, 1, 63, 64, 2**32, 2**62, 2**63 - 65, I64[1]]


@pytest.fixture
def c():
    try:
        return _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"the C extension is not built: {exc}")


def _image(cfg: TileConfig) -> bytes:
    image = bytearray(cfg.to_bytes())
    if cfg.configured:
        image[1] = cfg.start_row  # STTILECFG reports a pending start_row
    return bytes(image)


def _code(lib, fault) -> int:
    if fault is None:
        return lib.PYAMX_OK
    if isinstance(fault, MemoryAccessFault):
        return lib.PYAMX_E_MEMORY
    if isinstance(fault, InvalidOpcodeFault):
        if "not configured (palette 0" in fault.rule:
            return lib.PYAMX_E_UD_UNCONFIGURED
        if "palette 1 has tmm0..tmm7" in fault.rule:
            return lib.PYAMX_E_UD_REGISTER
        return lib.PYAMX_E_UD_SHAPE
    raise AssertionError(f"unexpected {fault!r}")


def _memory_rule(cfg: TileConfig, tmm, size, offset, stride):
    try:
        check_memory_tile("TILELOADD", "tile", cfg, tmm)
        _memory.row_offsets("TILELOADD", size, offset, stride, cfg.start_row, cfg.rows[tmm], cfg.colsb[tmm])
    except (InvalidOpcodeFault, MemoryAccessFault) as fault:
        return fault
    return None


def test_c_memory_guard_agrees_with_the_emulator_rule_on_extreme_operands(c):
    ffi, lib = c
    rng = np.random.default_rng(11)
    seen = set()
    for i in range(6000):
        cfg = TileConfig() if i % 50 == 0 else random_config(rng, start_row_chance=0.2)
        tmm = int(rng.integers(-1, 10)) if rng.random() < 0.1 else int(rng.integers(0, 8))
        size = int(rng.choice([0, 1, 63, 64, 1024, int(rng.integers(0, 4096)), 2**40, I64[1]]))
        offset = int(rng.choice(EXTREMES)) if rng.random() < 0.4 else int(rng.integers(-200, 1200))
        stride = int(rng.choice(EXTREMES)) if rng.random() < 0.4 else int(rng.integers(-200, 200))
        want = _code(lib, _memory_rule(cfg, tmm, size, offset, stride))
        got = lib.pyamx_check_memory_operand(_image(cfg), tmm, size, offset, stride)
        assert got == want, (cfg, tmm, size, offset, stride)
        seen.add(got)
    assert seen == {
        lib.PYAMX_OK, lib.PYAMX_E_MEMORY, lib.PYAMX_E_UD_UNCONFIGURED, lib.PYAMX_E_UD_REGISTER, lib.PYAMX_E_UD_SHAPE
    }


def test_c_memory_guard_catches_wrapped_row_arithmetic(c):
    ffi, lib = c
    cfg = _image(TileConfig.make({0: (16, 64)}))
    # Row 1 at offset + stride wraps around 2^64 back to 0: inside the buffer in
    # modular arithmetic, 2^64 - 2^63 bytes away in fact.
    assert lib.pyamx_check_memory_operand(cfg, 0, 2**20, 2**63 - 1, 2**63 - 1) == lib.PYAMX_E_MEMORY
    assert lib.pyamx_check_memory_operand(cfg, 0, 2**20, 0, 2**62) == lib.PYAMX_E_MEMORY
    assert lib.pyamx_check_memory_operand(cfg, 0, 2**20, 2**63 - 1, -(2**63)) == lib.PYAMX_E_MEMORY
    assert lib.pyamx_check_memory_operand(cfg, 0, 16 * 64, 0, 64) == lib.PYAMX_OK
    assert lib.pyamx_check_memory_operand(cfg, 0, 16 * 64 - 1, 0, 64) == lib.PYAMX_E_MEMORY
    assert lib.pyamx_check_memory_operand(cfg, 0, 16 * 64, 15 * 64, -64) == lib.PYAMX_OK
    assert lib.pyamx_check_memory_operand(cfg, 0, 16 * 64, 15 * 64 - 1, -64) == lib.PYAMX_E_MEMORY


def test_c_dot_guard_agrees_with_check_dot_product(c):
    ffi, lib = c
    rng = np.random.default_rng(12)
    seen = set()
    for i in range(6000):
        cfg = TileConfig() if i % 50 == 0 else random_config(rng)
        if rng.random() < 0.5:
            tiles = [int(t) for t in rng.integers(0, 8, 3)]
        else:
            # The triple random_config made dot-compatible, when there is one.
            tiles = [int(t) for t in rng.permutation(8)[:3]]
        if rng.random() < 0.05:
            tiles[int(rng.integers(0, 3))] = int(rng.choice([-1, 8, 15]))
        try:
            check_dot_product("TDPBF16PS", cfg, *tiles)
            fault = None
        except InvalidOpcodeFault as exc:
            fault = exc
        got = lib.pyamx_check_dot_product(_image(cfg), *tiles)
        assert got == _code(lib, fault), (cfg, tiles, fault)
        seen.add(got)
    assert seen == {lib.PYAMX_OK, lib.PYAMX_E_UD_SHAPE, lib.PYAMX_E_UD_UNCONFIGURED, lib.PYAMX_E_UD_REGISTER}


def _in_own_thread(fn):
    """Run ``fn`` on a fresh thread: its own tile registers, untouched by other tests' machines."""
    errors = []

    def main():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the test's thread
            errors.append(exc)

    t = threading.Thread(target=main)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def test_c_tile_machine_refuses_what_the_loaded_config_forbids_and_runs_nothing(native, c):
    ffi, lib = c
    rng = np.random.default_rng(13)

    def state():
        cfg, tiles = ffi.new("uint8_t[64]"), np.zeros(8192, np.uint8)
        assert lib.pyamx_save_tiles(cfg, ffi.from_buffer(tiles)) == lib.PYAMX_OK
        return bytes(ffi.buffer(cfg)), tiles

    def body():
        native._before_entry()
        small = GuardedBuffer(64, rng)
        base = ffi.from_buffer(small.view)
        cfg = TileConfig.make({0: (4, 16), 1: (2, 8), 2: (2, 8), 3: (2, 12)})
        assert lib.pyamx_load_config(cfg.to_bytes()) == lib.PYAMX_OK
        assert lib.pyamx_load_tile(0, base, 64, 0, 16, 0) == lib.PYAMX_OK  # exactly the whole buffer
        before = state()
        refused = {
            "row 3 one byte past the end": lib.pyamx_load_tile(0, base, 64, 1, 16, 0),
            "negative offset": lib.pyamx_store_tile(0, base, 64, -1, 16),
            "len smaller than the buffer's rows": lib.pyamx_store_tile(0, base, 63, 0, 16),
            "stride wrapping to row 0": lib.pyamx_store_tile(0, base, 64, 0, 2**62),
            "t1 form": lib.pyamx_load_tile(0, base, 64, 48, 16, 1),
        }
        assert set(refused.values()) == {lib.PYAMX_E_MEMORY}, refused
        assert lib.pyamx_store_tile(8, base, 64, 0, 16) == lib.PYAMX_E_UD_REGISTER
        assert lib.pyamx_zero_tile(-1) == lib.PYAMX_E_UD_REGISTER
        bf16 = lib.PYAMX_OP_TDPBF16PS
        # Each of these is a #UD on silicon (SIGILL, and in trap mode too): the process survives.
        assert lib.pyamx_tdp(bf16, 1, 1, 2) == lib.PYAMX_E_UD_SHAPE  # not distinct
        assert lib.pyamx_tdp(bf16, 1, 2, 4) == lib.PYAMX_E_UD_SHAPE  # tmm4 not configured
        assert lib.pyamx_tdp(bf16, 1, 2, 3) == lib.PYAMX_E_UD_SHAPE  # colsb 8 != 12
        assert lib.pyamx_tdp(bf16, 0, 1, 2) == lib.PYAMX_E_UD_SHAPE  # rows 4 != 2
        assert lib.pyamx_tdp(bf16, 1, 2, 9) == lib.PYAMX_E_UD_REGISTER
        assert state()[0] == before[0] and np.array_equal(state()[1], before[1])
        assert small.damage() is None
        assert lib.pyamx_load_config(bytes([1, 0, 1]) + bytes(61)) == lib.PYAMX_E_GP_CONFIG  # reserved byte
        assert state()[0] == before[0]
        assert lib.pyamx_tdp(bf16, 1, 2, 0) == lib.PYAMX_E_UD_SHAPE  # colsb(tmm1)/4 = 2 != rows(tmm0) = 4
        assert lib.pyamx_release_tiles() == lib.PYAMX_OK
        for rc in (lib.pyamx_load_tile(0, base, 64, 0, 16, 0), lib.pyamx_store_tile(0, base, 64, 0, 16),
                   lib.pyamx_zero_tile(0), lib.pyamx_tdp(bf16, 1, 2, 3)):
            assert rc == lib.PYAMX_E_UD_UNCONFIGURED
        assert small.damage() is None and GUARD > 0

    _in_own_thread(body)


def test_c_fault_codes_map_to_the_emulator_fault_classes(native, c):
    ffi, lib = c
    for name, cls in [("PYAMX_E_UD_UNCONFIGURED", InvalidOpcodeFault), ("PYAMX_E_UD_REGISTER", InvalidOpcodeFault),
                      ("PYAMX_E_UD_SHAPE", InvalidOpcodeFault), ("PYAMX_E_GP_CONFIG", GeneralProtectionFault),
                      ("PYAMX_E_MEMORY", MemoryAccessFault)]:
        with pytest.raises(cls, match="checked in C"):
            native._check(getattr(lib, name), "TEST")


def test_a_refusal_by_the_c_guard_is_worded_from_the_registers(native):
    # Code outside the machine reloads this thread's registers behind its back;
    # the machine's kept copy says the store fits, the registers say it does not.
    def body():
        machine = native.NativeMachine()
        machine.ldtilecfg(TileConfig.make({0: (1, 4)}))
        ffi, lib = _nativelib.load()
        assert lib.pyamx_load_config(TileConfig.make({0: (16, 64)}).to_bytes()) == lib.PYAMX_OK
        buf = bytearray(4)
        with pytest.raises(MemoryAccessFault, match=r"row 0 spans bytes \[0, 64\) of a 4-byte buffer"):
            machine.tilestored(0, buf, 4)
        assert machine.config.rows[0] == 16  # resynchronized from the registers

    _in_own_thread(body)


def test_the_emulator_rule_does_not_wrap_64_bit_row_arithmetic():
    # Row 2 at 10 + 2 * (2^63 - 1) = 2^64 + 8: in int64 arithmetic that wraps to 8,
    # inside the 64-byte buffer; in fact it is 2^64 bytes away.
    from pyamx.emulator import TileMachine

    machine = TileMachine()
    machine.ldtilecfg(TileConfig.make({0: (3, 4)}, start_row=2))
    with pytest.raises(MemoryAccessFault, match="row 2 spans bytes"):
        machine.tileloadd(0, np.zeros(64, np.uint8), 2**63 - 1, offset=10)
