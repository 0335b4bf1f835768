"""The trap's decoder and semantics without a signal (``pyamx_trap_execute_direct``), against the emulator.

On AMX silicon the trap mode is refused, so its tests that run instructions through SIGILL skip
there. The direct entry runs the very code the handler runs (csrc/trap/isa/: decode, the #UD
rules, the arithmetic on both its AVX2 and scalar paths) on a tile state handed over whole, so
these tests run on every x86-64 Linux CPU, silicon included, and hold it byte for byte against
the emulator (an independent implementation: numpy and the compiled engines) on seeded random
full states: every dot product and row instruction of the table, compatible and incompatible
tile shapes, tiles 8..15, denormals, zeros of both signs, infinities, NaN payloads, int8
extremes, cancelling pairs. Where the CPU has AMX, the lock-step leg holds the emulator against
the silicon, so the two together say the trap computes what the silicon does.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

from pyamx import emulator
from pyamx.errors import GeneralProtectionFault, InvalidOpcodeFault
from pyamx.table import isa
from pyamx.table.tilecfg import TileConfig

from tile_encodings import evex_row_form, vex_register_form
from lockstep import random_config
from mxcsr import DAZ, FTZ, RZ, caller_mxcsr

if platform.machine().lower() not in ("x86_64", "amd64"):
    pytest.skip("pyamx._trap is built for x86-64 Linux only", allow_module_level=True)
_trap = pytest.importorskip("pyamx._trap", reason="the trap module is not built (x86-64 Linux only; python build.py)")
lib, ffi = _trap.lib, _trap.ffi

OP = {i.mnemonic: getattr(lib, i.c_op) for i in isa.TABLE}
DOTS = [i for i in isa.TABLE if i.is_dot]
ROWS = [i for i in isa.TABLE if i.kind == "row"]
CASES_PER_OP = 120


# -- encodings, each checked by the decoder before use --------------------------------------


def vex(insn: isa.Instruction, reg: int = 0, rm: int = 0, vvvv: int = 0) -> bytes:
    return vex_register_form(insn.encoding, reg, rm, vvvv)


def evex_row(insn: isa.Instruction, zmm: int, tile: int, gpr: int | None = None, imm: int | None = None) -> bytes:
    enc = insn.encoding if imm is None else insn.imm_encoding
    assert enc is not None
    return evex_row_form(enc, zmm, tile, gpr or 0, imm)


def decoded(code: bytes, gprs=None) -> object:
    out = ffi.new("struct pyamx_trap_insn *")
    regs = ffi.NULL if gprs is None else ffi.new("uint64_t[16]", list(gprs))
    length = lib.pyamx_trap_decode(code, len(code), regs, 0, out)
    assert length == len(code), (code.hex(), length)
    return out


# -- the two sides -----------------------------------------------------------------------------


def direct(code: bytes, cfg: bytes, tiles: np.ndarray, gprs=None):
    """``(outcome, cfg image, tiles, zmm dwords, why)`` of the direct entry; outcome "ok", "ud", "gp"."""
    image = np.frombuffer(cfg, np.uint8).copy()
    state = np.ascontiguousarray(tiles, np.uint8).copy()
    zmm = np.zeros(64, np.uint8)
    why = ffi.new("char[400]")
    regs = ffi.NULL if gprs is None else ffi.new("uint64_t[16]", list(gprs))
    rc = lib.pyamx_trap_execute_direct(code, len(code), regs, ffi.from_buffer(image), ffi.from_buffer(state),
                                       ffi.from_buffer(zmm), why, 400)
    outcome = {lib.PYAMX_TRAP_DIRECT_OK: "ok", lib.PYAMX_TRAP_DIRECT_UD: "ud", lib.PYAMX_TRAP_DIRECT_GP: "gp"}.get(rc)
    assert outcome is not None, (rc, ffi.string(why).decode())
    return outcome, bytes(image), state, zmm.view(np.uint32), ffi.string(why).decode()


def emulated(step, cfg: bytes, tiles: np.ndarray):
    """``(outcome, cfg image, tiles, zmm dwords or None)`` of ``step(machine)`` on the emulator."""
    machine = emulator.TileMachine()
    machine.ldtilecfg(cfg)
    machine._tiles[:] = tiles  # the whole state at once; the lock-step helpers set it the same way
    try:
        zmm = step(machine)
    except InvalidOpcodeFault:
        return "ud", cfg, tiles, None
    except GeneralProtectionFault:
        return "gp", cfg, tiles, None
    image, after = machine.snapshot()
    return "ok", image, after, None if zmm is None else np.asarray(zmm, np.uint32)


def assert_same(what: str, mine, reference, cfg: bytes, tiles: np.ndarray) -> None:
    outcome, image, after, zmm, why = mine
    want_outcome, want_image, want_tiles, want_zmm = reference
    context = f"{what}\ncfg {cfg.hex()}\n"
    assert outcome == want_outcome, f"{context}trap: {outcome} ({why}), emulator: {want_outcome}"
    if outcome != "ok":
        return
    assert image == want_image, f"{context}cfg after: trap {image.hex()}, emulator {want_image.hex()}"
    if not np.array_equal(after, want_tiles):
        t, r, c = (int(x[0]) for x in np.nonzero(after != want_tiles))
        dword = slice(c - c % 4, c - c % 4 + 4)
        raise AssertionError(f"{context}tmm{t} row {r} byte {c}: trap {after[t, r, dword].tobytes().hex()}, emulator "
                             f"{want_tiles[t, r, dword].tobytes().hex()}\noperands (before): "
                             + "; ".join(f"tmm{i} row {r}: {tiles[i, r, :64].tobytes().hex()}" for i in range(8)))
    if want_zmm is not None:
        assert np.array_equal(zmm, want_zmm), f"{context}zmm: trap {zmm.tolist()}, emulator {want_zmm.tolist()}"


# -- random full states ------------------------------------------------------------------------

HALF_SPECIALS = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x807F, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                          0x7FC0, 0x7F81, 0xFFC1, 0x7FFF, 0x3F80, 0xBF80,  # bf16
                          0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01, 0x3C00, 0xBC00],  # fp16
                         np.uint16)
WORD_SPECIALS = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
                          0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x3F800000, 0xBF800000,
                          0x4B000000, 0xCB000000,
                          # ties of fp32 -> fp16 (low 13 bits 0x1000) and -> bf16 (low 16 bits 0x8000), both parities,
                          # and of int32 -> fp32 (2^24 + 1, 2^24 + 3)
                          0x3F801000, 0x3F803000, 0xBF801000, 0x38801000, 0x33801000, 0x477FF000,
                          0x3F808000, 0x3F818000, 0xBF808000, 0x7F7F8000, 0x01000001, 0x01000003, 0xFEFFFFFF], np.uint32)
BYTE_SPECIALS = np.array([0x00, 0x80, 0x7F, 0xFF, 0x01, 0x81, 0x7C, 0xFC, 0x7E, 0x78, 0x04, 0x84], np.uint8)


def tile_data(rng: np.random.Generator) -> np.ndarray:
    """16 x 64 bytes, each dword from one of the families (random bits, 16-bit and 32-bit specials,
    8-bit extremes, small integers and their negatives, whose sums cancel exactly, and values near
    the bottom of each format's range)."""
    random = rng.integers(0, 256, (16, 64), dtype=np.uint8)
    halves = rng.choice(HALF_SPECIALS, (16, 32)).view(np.uint8)
    words = rng.choice(WORD_SPECIALS, (16, 16)).view(np.uint8)
    bytes_ = rng.choice(BYTE_SPECIALS, (16, 64))
    small = (np.float32(1) * rng.integers(-4, 5, (16, 32)).astype(np.float32)).view(np.uint32) >> 16
    small = small.astype(np.uint16).view(np.uint8)
    # near the bottom of the range, where products and sums underflow (FTZ, DAZ, denormal results):
    # bf16 exponents 0..70, fp16 exponents 0..3, fp32 words with exponents 0..40
    sign16 = rng.integers(0, 2, (16, 32), dtype=np.uint16) << np.uint16(15)
    tiny_bf16 = sign16 | rng.integers(0, 71, (16, 32), dtype=np.uint16) << np.uint16(7) \
        | rng.integers(0, 128, (16, 32), dtype=np.uint16)
    tiny_fp16 = sign16 | rng.integers(0, 4, (16, 32), dtype=np.uint16) << np.uint16(10) \
        | rng.integers(0, 1024, (16, 32), dtype=np.uint16)
    tiny_words = rng.integers(0, 2, (16, 16), dtype=np.uint32) << np.uint32(31) \
        | rng.integers(0, 41, (16, 16), dtype=np.uint32) << np.uint32(23) | rng.integers(0, 1 << 23, (16, 16), dtype=np.uint32)
    tiny = [tiny_bf16.view(np.uint8), tiny_fp16.view(np.uint8), tiny_words.view(np.uint8)]
    families = (random, halves, words, bytes_, small, *tiny)
    family = rng.integers(0, len(families), (16, 16, 1))
    dwords = [x.reshape(16, 16, 4) for x in families]
    return np.choose(np.broadcast_to(family, (16, 16, 4)), dwords).reshape(16, 64).astype(np.uint8)


def random_state(rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """A configuration LDTILECFG accepts (sometimes the init state) and tiles that hold data only
    inside each tile's rows x colsb, as every load and dot product leaves them."""
    if rng.random() < 0.03:
        return bytes(64), np.zeros((8, 16, 64), np.uint8)
    cfg: TileConfig = random_config(rng)
    tiles = np.zeros((8, 16, 64), np.uint8)
    for t in range(8):
        rows, colsb = cfg.rows[t], cfg.colsb[t]
        tiles[t, :rows, :colsb] = tile_data(rng)[:rows, :colsb]
    return cfg.to_bytes(), tiles


def tile_operands(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` distinct tiles of palette 1, or now and then any of 0..15 (8..15 do not exist there)."""
    if rng.random() < 0.05:
        return [int(x) for x in rng.integers(0, 16, count)]
    return [int(x) for x in rng.permutation(8)[:count]]


def compatible_triple(cfg: bytes) -> tuple[int, int, int] | None:
    rows = list(cfg[48:56])
    colsb = [int.from_bytes(cfg[16 + 2 * t : 18 + 2 * t], "little") for t in range(8)]
    for d in range(8):
        for s1 in range(8):
            for s2 in range(8):
                if len({d, s1, s2}) == 3 and rows[d] and rows[d] == rows[s1] and colsb[s1] == 4 * rows[s2] \
                        and colsb[d] == colsb[s2] and colsb[d] % 4 == 0 and colsb[s1]:
                    return d, s1, s2
    return None


# -- the instructions --------------------------------------------------------------------------


def test_the_encodings_here_decode_to_their_rows():
    for insn in DOTS:
        out = decoded(vex(insn, 1, 2, 3))
        assert (out.op, out.tdst, out.tsrc1, out.tsrc2) == (OP[insn.mnemonic], 1, 2, 3), insn.mnemonic
        out = decoded(vex(insn, 9, 10, 15))
        assert (out.op, out.tdst, out.tsrc1, out.tsrc2) == (OP[insn.mnemonic], 9, 10, 15), insn.mnemonic
    for insn in ROWS:
        gprs = list(range(100, 116))
        out = decoded(evex_row(insn, 21, 5, gpr=11), gprs)
        assert (out.op, out.zdst, out.tsrc1, out.row_gpr, out.row) == (OP[insn.mnemonic], 21, 5, 11, 111), insn.mnemonic
        out = decoded(evex_row(insn, 3, 6, imm=0x47))
        assert (out.op, out.zdst, out.tsrc1, out.imm8, out.row) == (OP[insn.mnemonic], 3, 6, 0x47, 0x47), insn.mnemonic
        # EVEX.B set: a tile 8..15 in ModRM.rm, which the decoder refuses as #UD (the emulator: no such tile)
        code = evex_row(insn, 30, 13, imm=2)
        assert lib.pyamx_trap_decode(code, len(code), ffi.NULL, 0, ffi.new("struct pyamx_trap_insn *")) \
            == lib.PYAMX_TRAP_DECODE_UD, insn.mnemonic


@pytest.mark.parametrize("insn", DOTS, ids=lambda i: i.mnemonic)
def test_every_dot_product_gives_the_emulators_bytes_on_random_full_states(insn, dot_path):
    rng = np.random.default_rng([2026, OP[insn.mnemonic], dot_path == "avx2"])
    method = getattr(emulator.TileMachine, insn.name)
    outcomes = {"ok": 0, "ud": 0, "gp": 0}
    for case in range(CASES_PER_OP):
        cfg, tiles = random_state(rng)
        triple = compatible_triple(cfg)
        d, s1, s2 = triple if triple is not None and rng.random() < 0.85 else tile_operands(rng, 3)
        code = vex(insn, d, s1, s2)
        mine = direct(code, cfg, tiles)
        assert_same(f"{insn.mnemonic} tmm{d}, tmm{s1}, tmm{s2} (case {case}, {dot_path})", mine,
                    emulated(lambda m: method(m, d, s1, s2), cfg, tiles), cfg, tiles)
        outcomes[mine[0]] += 1
    assert outcomes["ok"] >= CASES_PER_OP // 3 and outcomes["ud"] > 0, outcomes  # both sides of the rules ran
    cfg, tiles = random_state(rng)
    for d, s1, s2 in ((9, 1, 2), (0, 12, 2), (0, 1, 15)):  # a tile palette 1 does not have, in each field
        assert_same(f"{insn.mnemonic} tmm{d}, tmm{s1}, tmm{s2}", direct(vex(insn, d, s1, s2), cfg, tiles),
                    ("ud", cfg, tiles, None), cfg, tiles)
        assert emulated(lambda m: method(m, d, s1, s2), cfg, tiles)[0] == "ud"


@pytest.mark.parametrize("insn", ROWS, ids=lambda i: i.mnemonic)
def test_every_row_instruction_gives_the_emulators_zmm_on_random_full_states(insn):
    rng = np.random.default_rng([2027, OP[insn.mnemonic]])
    method = getattr(emulator.TileMachine, insn.name)
    outcomes = {"ok": 0, "ud": 0, "gp": 0}
    for case in range(CASES_PER_OP):
        cfg, tiles = random_state(rng)
        tile = tile_operands(rng, 1)[0] if rng.random() < 0.1 else int(rng.integers(0, 8))
        zmm = int(rng.integers(0, 32))
        rows = cfg[48 + tile] if tile < 8 else 0
        in_range = int(rng.integers(0, max(rows, 1)))  # a row the tile has, mostly
        if rng.random() < 0.5:
            imm = in_range | int(rng.integers(0, 4)) << 6 if rng.random() < 0.8 else int(rng.integers(0, 256))
            code, gprs, row, is_imm = evex_row(insn, zmm, tile, imm=imm), None, imm, True
        else:
            gpr = int(rng.integers(0, 16))
            row = in_range if rng.random() < 0.8 else int(rng.choice([int(rng.integers(0, 64)),
                                                                     int(rng.integers(0, 1 << 32))]))
            gprs = [int(x) for x in rng.integers(0, 1 << 63, 16, dtype=np.uint64)]
            gprs[gpr] = row | int(rng.integers(0, 1 << 31)) << 32  # the upper half is not the selector's
            code, is_imm = evex_row(insn, zmm, tile, gpr=gpr), False
        mine = direct(code, cfg, tiles, gprs)
        assert_same(f"{insn.mnemonic} zmm{zmm}, tmm{tile}, row {row:#x}{' (imm8)' if is_imm else ''} (case {case})",
                    mine, emulated(lambda m: method(m, tile, row, imm=is_imm), cfg, tiles), cfg, tiles)
        outcomes[mine[0]] += 1
    assert outcomes["ok"] >= CASES_PER_OP // 3 and outcomes["ud"] > 0, outcomes
    cfg, tiles = random_state(rng)
    for imm in (None, 0):  # tile 13 in ModRM.rm + EVEX.B, GPR and imm8 forms
        assert direct(evex_row(insn, 2, 13, gpr=1, imm=imm), cfg, tiles, [0] * 16)[0] == "ud"
        assert emulated(lambda m: method(m, 13, 0, imm=imm is not None), cfg, tiles)[0] == "ud"


def test_tilezero_and_tilerelease_as_the_emulator():
    rng = np.random.default_rng(2028)
    zero, release = isa.BY_NAME["tilezero"], isa.BY_NAME["tilerelease"]
    for case in range(60):
        cfg, tiles = random_state(rng)
        t = int(rng.integers(0, 16)) if rng.random() < 0.1 else int(rng.integers(0, 8))
        assert_same(f"TILEZERO tmm{t} (case {case})", direct(vex(zero, reg=t), cfg, tiles),
                    emulated(lambda m: m.tilezero(t), cfg, tiles), cfg, tiles)
        assert_same(f"TILERELEASE (case {case})", direct(vex(release), cfg, tiles),
                    emulated(lambda m: m.tilerelease(), cfg, tiles), cfg, tiles)


@pytest.mark.parametrize("insn", [i for i in DOTS if i.is_float], ids=lambda i: i.mnemonic)
def test_the_callers_mxcsr_changes_no_bit_and_is_kept(insn, dot_path):
    """Each float path switches MXCSR for its own arithmetic and puts the caller's back, flags too."""
    rng = np.random.default_rng([2029, OP[insn.mnemonic]])
    cases = []
    while len(cases) < 20:
        cfg, tiles = random_state(rng)
        triple = compatible_triple(cfg)
        if triple is not None:
            cases.append((vex(insn, *triple), cfg, tiles))
    want = [direct(code, cfg, tiles)[2] for code, cfg, tiles in cases]
    for value in (RZ, FTZ | DAZ, RZ | FTZ | DAZ | 0x3F):  # 0x3F: every exception flag already raised
        with caller_mxcsr(value) as native:
            got = [direct(code, cfg, tiles)[2] for code, cfg, tiles in cases]
            assert native.pyamx_get_mxcsr() == value
        for g, w in zip(got, want):
            assert np.array_equal(g, w), hex(value)


def test_what_it_does_not_take_it_refuses_saying_why():
    cfg = TileConfig(1, 0, (64,) * 8, (16,) * 8).to_bytes()
    tiles = np.zeros((8, 16, 64), np.uint8)
    image, state, zmm = (np.frombuffer(cfg, np.uint8).copy(), tiles.copy(), np.zeros(64, np.uint8))
    why = ffi.new("char[400]")

    def call(code, image=image, gprs=ffi.NULL):
        return lib.pyamx_trap_execute_direct(code, len(code), gprs, ffi.from_buffer(image), ffi.from_buffer(state),
                                             ffi.from_buffer(zmm), why, 400), ffi.string(why).decode()

    # TILELOADD tmm0, [rax + rcx*1]: a memory operand
    rc, text = call(bytes.fromhex("c4e27b4b0408"))
    assert rc == lib.PYAMX_TRAP_DIRECT_E_MEMORY and "memory operand" in text
    rc, text = call(bytes.fromhex("c4e2784900"))  # LDTILECFG [rax]
    assert rc == lib.PYAMX_TRAP_DIRECT_E_MEMORY
    rc, text = call(b"\x90")
    assert rc == lib.PYAMX_TRAP_DIRECT_E_DECODE and "not an instruction" in text
    rc, text = call(vex(isa.BY_NAME["tdpbf16ps"], 0, 1, 2)[:3])
    assert rc == lib.PYAMX_TRAP_DIRECT_E_DECODE and "end inside" in text
    bad = image.copy()
    bad[48] = 17  # rows > 16
    rc, text = call(vex(isa.BY_NAME["tdpbf16ps"], 0, 1, 2), image=bad)
    assert rc == lib.PYAMX_TRAP_DIRECT_E_CONFIG and "rows > 16" in text
    assert lib.pyamx_trap_execute_direct(b"\x90", 1, ffi.NULL, ffi.NULL, ffi.from_buffer(state), ffi.from_buffer(zmm),
                                         why, 400) == lib.PYAMX_TRAP_DIRECT_E_ARG
    # a refused instruction leaves the state as it was, and the reason is the rule's
    state[1] = 7
    rc, text = call(vex(isa.BY_NAME["tdpbf16ps"], 0, 1, 1))  # tsrc1 and tsrc2 the same tile
    assert rc == lib.PYAMX_TRAP_DIRECT_UD and text and (state[1] == 7).all() and not state[0].any()
    # a short why buffer gets a truncated, terminated line
    small = ffi.new("char[8]")
    assert lib.pyamx_trap_execute_direct(b"\x90", 1, ffi.NULL, ffi.from_buffer(image), ffi.from_buffer(state),
                                         ffi.from_buffer(zmm), small, 8) == lib.PYAMX_TRAP_DIRECT_E_DECODE
    assert len(ffi.string(small)) == 7
