"""The trap mode's instruction decoder (csrc/trap/decode.c, pyamx_trap_decode), tested pure.

Two sources of bytes: hand-assembled sequences with the expected fields
spelled out, and a grid of every addressing form assembled by the real GNU
assembler at test time and checked against objdump's own disassembly.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess

import pytest

_trap = pytest.importorskip("pyamx._trap", reason="the trap module is not built (x86-64 Linux only; python build.py)")
lib, ffi = _trap.lib, _trap.ffi

from pyamx import isa  # noqa: E402 - after the skip: the table's ids come from the module

OP = {i.mnemonic: getattr(lib, i.c_op) for i in isa.TABLE}
NOT_AMX, TRUNCATED, UD = (lib.PYAMX_TRAP_DECODE_NOT_AMX, lib.PYAMX_TRAP_DECODE_TRUNCATED,
                          lib.PYAMX_TRAP_DECODE_UD)
REGS = ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
        "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"]
# Distinct, recognisable register values: reg i holds 0x1000_0000 * (i + 1) + i.
GPRS = [0x1000_0000 * (i + 1) + i for i in range(16)]
RIP = 0x7F00_0000_1000
M64 = (1 << 64) - 1


def decode(code: bytes, gprs=GPRS, rip=RIP):
    buf = ffi.new("uint8_t[]", code or b"\0")
    regs = ffi.new("uint64_t[16]", gprs)
    out = ffi.new("struct pyamx_trap_insn *")
    rc = lib.pyamx_trap_decode(buf, len(code), regs, rip, out)
    return rc, out


def fields(out):
    return {k: getattr(out, k) for k in ("op", "length", "tdst", "tsrc1", "tsrc2", "has_mem", "base_reg",
                                         "index_reg", "scale", "disp", "rip_relative", "addr", "stride")}


# (bytes, expected fields) -- hand-assembled; bytes checked against objdump once by hand.
HAND = [
    ("ldtilecfg (%rdi)", "c4 e2 78 49 07",
     dict(op="LDTILECFG", base_reg=7, index_reg=-1, disp=0, addr=GPRS[7])),
    ("sttilecfg (%rdi)", "c4 e2 79 49 07", dict(op="STTILECFG", base_reg=7, addr=GPRS[7])),
    ("sttilecfg 0x10(%rip)", "c4 e2 79 49 05 10 00 00 00",
     dict(op="STTILECFG", base_reg=16, rip_relative=1, disp=0x10, addr=RIP + 9 + 0x10)),
    ("ldtilecfg -0x20(%rip)", "c4 e2 78 49 05 e0 ff ff ff",
     dict(op="LDTILECFG", rip_relative=1, disp=-0x20, addr=RIP + 9 - 0x20)),
    ("ldtilecfg -0x48(%rsp)", "c4 e2 78 49 44 24 b8",
     dict(op="LDTILECFG", base_reg=4, index_reg=-1, disp=-0x48, addr=GPRS[4] - 0x48)),
    ("ldtilecfg 0x100(%rsp)", "c4 e2 78 49 84 24 00 01 00 00",
     dict(op="LDTILECFG", base_reg=4, disp=0x100, addr=GPRS[4] + 0x100)),
    ("ldtilecfg (%r12)", "c4 c2 78 49 04 24", dict(op="LDTILECFG", base_reg=12, index_reg=-1, addr=GPRS[12])),
    ("ldtilecfg 0x0(%r13)", "c4 c2 78 49 45 00", dict(op="LDTILECFG", base_reg=13, disp=0, addr=GPRS[13])),
    ("ldtilecfg 0x10(%r8,%r9,4)", "c4 82 78 49 44 88 10",
     dict(op="LDTILECFG", base_reg=8, index_reg=9, scale=4, disp=16, addr=GPRS[8] + 4 * GPRS[9] + 16)),
    ("tilerelease", "c4 e2 78 49 c0", dict(op="TILERELEASE", has_mem=0)),
    ("tilezero %tmm3", "c4 e2 7b 49 d8", dict(op="TILEZERO", tdst=3, has_mem=0)),
    ("tileloadd (%rsi,%rdx,1),%tmm1", "c4 e2 7b 4b 0c 16",
     dict(op="TILELOADD", tdst=1, base_reg=6, index_reg=2, scale=1, addr=GPRS[6], stride=GPRS[2])),
    ("tileloaddt1 (%rsi,%rdx,1),%tmm2", "c4 e2 79 4b 14 16",
     dict(op="TILELOADDT1", tdst=2, base_reg=6, index_reg=2, stride=GPRS[2])),
    ("tilestored %tmm1,(%rcx,%rdx,1)", "c4 e2 7a 4b 0c 11",
     dict(op="TILESTORED", tsrc1=1, base_reg=1, index_reg=2, addr=GPRS[1], stride=GPRS[2])),
    ("tileloadd (%r12,%r13,1),%tmm3", "c4 82 7b 4b 1c 2c",
     dict(op="TILELOADD", tdst=3, base_reg=12, index_reg=13, addr=GPRS[12], stride=GPRS[13])),
    ("tileloadd 0x0(%r13,%r12,1),%tmm3", "c4 82 7b 4b 5c 25 00",
     dict(op="TILELOADD", tdst=3, base_reg=13, index_reg=12, disp=0, addr=GPRS[13], stride=GPRS[12])),
    ("tilestored %tmm7,-0x1000(%rsp,%r15,8)", "c4 a2 7a 4b bc fc 00 f0 ff ff",
     dict(op="TILESTORED", tsrc1=7, base_reg=4, index_reg=15, scale=8, disp=-0x1000,
          addr=GPRS[4] - 0x1000, stride=8 * GPRS[15])),
    ("tileloadd 0x12345678(,%rax,1),%tmm1", "c4 e2 7b 4b 0c 05 78 56 34 12",
     dict(op="TILELOADD", tdst=1, base_reg=-1, index_reg=0, disp=0x12345678, addr=0x12345678, stride=GPRS[0])),
    # SIB base 101 with mod 00 means "no base" even when VEX.B makes it r13.
    ("tileloadd 0x100(,%riz) with VEX.B", "c4 c2 7b 4b 0c 25 00 01 00 00",
     dict(op="TILELOADD", tdst=1, base_reg=-1, index_reg=-1, disp=0x100, addr=0x100, stride=0)),
    # Index 100 without VEX.X: no index, stride 0.
    ("tileloadd (%r11),%tmm2", "c4 c2 7b 4b 14 23",
     dict(op="TILELOADD", tdst=2, base_reg=11, index_reg=-1, addr=GPRS[11], stride=0)),
    # Index 100 with VEX.X: r12.
    ("tileloadd (%rsi,%r12,1),%tmm1", "c4 a2 7b 4b 0c 26",
     dict(op="TILELOADD", tdst=1, base_reg=6, index_reg=12, stride=GPRS[12])),
    ("tileloadd 0x7f(%rbp,%rcx,2),%tmm6", "c4 e2 7b 4b 74 4d 7f",
     dict(op="TILELOADD", tdst=6, base_reg=5, index_reg=1, scale=2, disp=0x7F, addr=GPRS[5] + 0x7F,
          stride=2 * GPRS[1])),
    ("tdpbf16ps %tmm2,%tmm1,%tmm0", "c4 e2 6a 5c c1", dict(op="TDPBF16PS", tdst=0, tsrc1=1, tsrc2=2, has_mem=0)),
    ("tdpfp16ps %tmm2,%tmm1,%tmm0", "c4 e2 6b 5c c1", dict(op="TDPFP16PS", tdst=0, tsrc1=1, tsrc2=2)),
    ("tdpbssd %tmm7,%tmm6,%tmm5", "c4 e2 43 5e ee", dict(op="TDPBSSD", tdst=5, tsrc1=6, tsrc2=7)),
    ("tdpbsud %tmm7,%tmm6,%tmm5", "c4 e2 42 5e ee", dict(op="TDPBSUD", tdst=5, tsrc1=6, tsrc2=7)),
    ("tdpbusd %tmm7,%tmm6,%tmm5", "c4 e2 41 5e ee", dict(op="TDPBUSD", tdst=5, tsrc1=6, tsrc2=7)),
    ("tdpbuud %tmm7,%tmm6,%tmm5", "c4 e2 40 5e ee", dict(op="TDPBUUD", tdst=5, tsrc1=6, tsrc2=7)),
    # Tile numbers 8..15 encode (VEX.R, VEX.B, vvvv) and decode; executing them is #UD.
    ("tilezero %tmm11 (VEX.R)", "c4 62 7b 49 d8", dict(op="TILEZERO", tdst=11)),
    ("tdpbf16ps %tmm9,%tmm1,%tmm0 (vvvv)", "c4 e2 32 5c c1", dict(op="TDPBF16PS", tdst=0, tsrc1=1, tsrc2=9)),
    ("tdpbf16ps %tmm2,%tmm9,%tmm8 (VEX.R/B)", "c4 42 6a 5c c1", dict(op="TDPBF16PS", tdst=8, tsrc1=9, tsrc2=2)),
    # A DS segment prefix is legal (and meaningless) before VEX.
    ("ds tilezero %tmm3", "3e c4 e2 7b 49 d8", dict(op="TILEZERO", tdst=3, length=6)),
]


def _hex(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


@pytest.mark.parametrize("text,code,expect", HAND, ids=[h[0] for h in HAND])
def test_hand_assembled(text, code, expect):
    raw = _hex(code)
    rc, out = decode(raw + b"\x90" * 8)  # trailing bytes must not be consumed
    assert rc == len(raw), text
    got = fields(out)
    expect = dict(expect)
    expect["op"] = OP[expect["op"]]
    expect.setdefault("length", len(raw))
    for key, value in expect.items():
        if key in ("addr",):
            value &= M64
        assert got[key] == value, f"{text}: {key} = {got[key]!r}, expected {value!r}"


@pytest.mark.parametrize("text,code,expect", HAND, ids=[h[0] for h in HAND])
def test_truncated_never_reads_past_the_end(text, code, expect):
    raw = _hex(code)
    for n in range(len(raw)):
        rc, _ = decode(raw[:n])
        assert rc == TRUNCATED, f"{text}: {n} of {len(raw)} bytes gave {rc}"


def test_without_registers_addresses_hold_the_displacement():
    buf = ffi.new("uint8_t[]", _hex("c4 a2 7a 4b bc fc 00 f0 ff ff"))
    out = ffi.new("struct pyamx_trap_insn *")
    assert lib.pyamx_trap_decode(buf, 10, ffi.NULL, 0, out) == 10
    assert out.addr == (-0x1000) & M64 and out.stride == 0 and out.index_reg == 15


UD_CASES = [
    ("VEX.W=1 ldtilecfg", "c4 e2 f8 49 07"),
    ("VEX.L=1 ldtilecfg", "c4 e2 7c 49 07"),
    ("vvvv != 1111 on ldtilecfg", "c4 e2 70 49 07"),
    ("vvvv != 1111 on tileloadd", "c4 e2 73 4b 0c 16"),
    ("ModRM.reg != 0 on ldtilecfg", "c4 e2 78 49 0f"),
    ("tileloadd without SIB", "c4 e2 7b 4b 0e"),
    ("tileloadd RIP-relative", "c4 e2 7b 4b 0d 00 00 00 00"),
    ("tileloadd register form", "c4 e2 7b 4b c1"),
    ("tdpbf16ps memory form", "c4 e2 6a 5c 01"),
    ("tilezero rm != 0", "c4 e2 7b 49 d9"),
    ("tilerelease other ModRM", "c4 e2 78 49 c1"),
    ("NP 0F38 4B (no such AMX instruction)", "c4 e2 78 4b 0c 16"),
    ("66 0F38 5C (no such AMX instruction)", "c4 e2 69 5c c1"),
    ("W=1 tdpbssd", "c4 e2 c3 5e ee"),
]


@pytest.mark.parametrize("text,code", UD_CASES, ids=[u[0] for u in UD_CASES])
def test_invalid_amx_encodings_are_ud(text, code):
    rc, _ = decode(_hex(code) + b"\x90" * 8)
    assert rc == UD, text


NOT_AMX_CASES = [
    ("ud2", "0f 0b"),
    ("nop", "90"),
    ("2-byte VEX (vzeroupper)", "c5 f8 77"),
    ("3-byte VEX, map 0F", "c4 e1 78 49 07"),
    ("3-byte VEX, map 0F3A", "c4 e3 78 49 07"),
    ("0F38 opcode outside AMX (vbroadcastss)", "c4 e2 7d 18 07"),
    ("66 prefix before VEX (#UD on silicon too)", "66 c4 e2 78 49 07"),
    ("REX before VEX", "48 c4 e2 78 49 07"),
    ("FS segment override (not emulated)", "64 c4 e2 78 49 07"),
]


@pytest.mark.parametrize("text,code", NOT_AMX_CASES, ids=[n[0] for n in NOT_AMX_CASES])
def test_not_amx(text, code):
    rc, _ = decode(_hex(code) + b"\x90" * 8)
    assert rc == NOT_AMX, text


def test_empty_input():
    buf = ffi.new("uint8_t[1]")
    out = ffi.new("struct pyamx_trap_insn *")
    assert lib.pyamx_trap_decode(buf, 0, ffi.NULL, 0, out) == TRUNCATED


def test_op_names():
    # The AMX-AVX512 and AMX-MOVRS rows get their trap names on the trap decoder's own branch.
    pending = {i.mnemonic for i in isa.TABLE if i.feature.name in ("AMX-AVX512", "AMX-MOVRS")}
    for name, op in OP.items():
        if name in pending:
            continue
        assert ffi.string(lib.pyamx_trap_op_name(op)).decode() == name


# ---------------------------------------------------------------------------------------------
# Bytes from the real assembler, checked against objdump's disassembly.


def _grid():
    """Every addressing form: each base (and none, and RIP for the config ops), each
    index (and none), each scale, disp none/8/32 (negative too)."""
    disps = ["", "0x7f", "-0x80", "0x1000", "-0x12345678", "0x8"]
    lines = []
    n = 0
    bases = REGS + [None]
    indexes = [r for r in REGS if r != "rsp"] + [None]
    for bi, base in enumerate(bases):
        for ii, index in enumerate(indexes):
            scale = [1, 2, 4, 8][(bi + ii) % 4]
            disp = disps[(bi * 3 + ii) % len(disps)]
            if base is None and index is None:
                continue
            if base is None and not disp:
                disp = "0x40"
            inside = f"%{base}" if base else ""
            if index:
                inside += f",%{index},{scale}"
            mem = f"{disp}({inside})"
            t = n % 8
            n += 1
            lines.append(f"tileloadd {mem}, %tmm{t}")
            lines.append(f"tilestored %tmm{(t + 3) % 8}, {mem}")
            lines.append(f"tileloaddt1 {mem}, %tmm{(t + 5) % 8}")
        if base:
            for disp in ("", "0x7f", "-0x1000"):
                lines.append(f"ldtilecfg {disp}(%{base})")
                lines.append(f"sttilecfg {disp}(%{base})")
    lines += ["ldtilecfg 0x40(%rip)", "sttilecfg -0x40(%rip)", "ldtilecfg 0x10(%r8,%r9,4)",
              "sttilecfg 0x100(,%r14,8)", "tilerelease"]
    for t in range(8):
        lines.append(f"tilezero %tmm{t}")
    for dst, s1, s2 in itertools.permutations(range(8), 3):
        if (dst + 2 * s1 + 3 * s2) % 5:
            continue
        for mnem in isa.DOT_NAMES:
            lines.append(f"{mnem} %tmm{s2}, %tmm{s1}, %tmm{dst}")
    return lines


_MEM = re.compile(r"^(?P<disp>-?0x[0-9a-f]+|-?\d+)?\((?P<base>%\w+)?(?:,(?P<index>%\w+)(?:,(?P<scale>\d))?)?\)$")


def _parse_mem(text):
    m = _MEM.match(text)
    assert m, text
    disp = int(m["disp"], 0) if m["disp"] else 0
    base = m["base"][1:] if m["base"] else None
    index = m["index"][1:] if m["index"] else None
    if index == "riz":
        index = None
    return disp, base, index, int(m["scale"] or 1)


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    gas = shutil.which("as")
    objdump = shutil.which("objdump")
    if not gas or not objdump:
        pytest.skip("GNU as/objdump not installed; the hand-assembled cases still ran")
    tmp = tmp_path_factory.mktemp("asm")
    src = tmp / "forms.s"
    src.write_text(".text\n" + "\n".join(_grid()) + "\n")
    obj = tmp / "forms.o"
    res = subprocess.run([gas, "--64", "-o", str(obj), str(src)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"this assembler does not know AMX (binutils >= 2.36 needed; amx-fp16 >= 2.40): "
                    f"{res.stderr.strip().splitlines()[:2]}")
    insns = _disassemble(objdump, obj)
    assert len(insns) == len(_grid())
    return insns


def _disassemble(objdump, obj):
    dis = subprocess.run([objdump, "-d", "--insn-width=16", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    insns = []
    for line in dis.splitlines():
        m = re.match(r"^\s*[0-9a-f]+:\t((?:[0-9a-f]{2} )+)\s*\t(\S+)\s*(.*)$", line)
        if m:
            insns.append((bytes.fromhex(m[1].replace(" ", "")), m[2], m[3].split("#")[0].strip()))
    return insns


def _split_operands(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur:
        parts.append(cur)
    return [p.strip() for p in parts]


def test_assembler_grid(assembled):
    seen, mods = _check_against_objdump(assembled)
    # The grid really covered every base (r12/r13/rsp/rbp included), no base, and every mod.
    assert set(REGS) | {None, "rip"} <= seen
    assert {0, 1, 2, "rip"} <= mods


def _check_against_objdump(insns):
    seen = set()
    mods = set()
    for code, mnem, ops in insns:
        rc, out = decode(code + b"\xcc" * 8)
        where = f"{code.hex(' ')}  {mnem} {ops}"
        assert rc == len(code), where
        assert ffi.string(lib.pyamx_trap_op_name(out.op)).decode().lower() == mnem, where
        operands = _split_operands(ops)
        tiles = [int(o[4:]) for o in operands if o.startswith("%tmm")]
        mems = [o for o in operands if "(" in o]
        if mnem.startswith("tdp"):
            s2, s1, dst = tiles
            assert (out.tdst, out.tsrc1, out.tsrc2) == (dst, s1, s2), where
        elif mnem in ("tileloadd", "tileloaddt1", "tilezero"):
            assert out.tdst == tiles[0], where
        elif mnem == "tilestored":
            assert out.tsrc1 == tiles[0], where
        if not mems:
            assert out.has_mem == 0, where
            continue
        disp, base, index, scale = _parse_mem(mems[0])
        assert out.has_mem == 1 and out.disp == disp, where
        if base == "rip":
            assert out.rip_relative == 1 and out.base_reg == 16, where
            assert out.addr == (RIP + len(code) + disp) & M64, where
            seen.add("rip")
            mods.add("rip")
            continue
        assert out.base_reg == (REGS.index(base) if base else -1), where
        assert out.index_reg == (REGS.index(index) if index else -1), where
        base_v = GPRS[REGS.index(base)] if base else 0
        index_v = GPRS[REGS.index(index)] if index else 0
        if mnem in ("ldtilecfg", "sttilecfg"):
            assert out.addr == (base_v + index_v * scale + disp) & M64, where
        else:
            assert out.addr == (base_v + disp) & M64, where
            assert out.stride == (index_v * scale if index else 0), where
            assert out.scale == (scale if index else out.scale), where
        seen.add(base)
        mods.add(code[4] >> 6)  # ModRM.mod: 0 no disp (or disp32 without base), 1 disp8, 2 disp32
    return seen, mods


# What the compilers themselves emit for the intrinsics: gcc's asm-based ones and
# clang's register-allocated ones (including its __tile1024i API, which configures
# the tiles from a stack slot).
_INTRINSICS_SOURCE = r"""
#include <immintrin.h>
static unsigned char gcfg[64];
void k(const void *cfg, const void *a, const void *b, void *c, long s) {
  _tile_loadconfig(cfg);
  _tile_loadd(2, a, s); _tile_loadd(3, b, 64); _tile_zero(0);
  _tile_stream_loadd(4, (const char *)a + 128, s * 2);
  _tile_dpbf16ps(0, 2, 3); _tile_dpbssd(5, 2, 3); _tile_dpbsud(5, 2, 3);
  _tile_dpbusd(5, 2, 3); _tile_dpbuud(5, 2, 3);
  _tile_stored(0, c, s); _tile_storeconfig((void *)cfg); _tile_release();
}
void g(void) { _tile_loadconfig(gcfg); _tile_storeconfig(gcfg); }
void h(void) { unsigned char c[64] = {1}; _tile_loadconfig(c); }
#ifdef __clang__
void k2(short m, short n, short kk, const void *a, const void *b, void *c, long s) {
  __tile1024i ta = {m, kk}, tb = {kk / 4, n}, tc = {m, n};
  __tile_loadd(&ta, a, s); __tile_loadd(&tb, b, s); __tile_loadd(&tc, c, s);
  __tile_dpbf16ps(&tc, ta, tb);
  __tile_stored(c, s, tc);
}
#endif
"""


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_compiler_emitted_forms(compiler, tmp_path):
    cc, objdump = shutil.which(compiler), shutil.which("objdump")
    if not cc or not objdump:
        pytest.skip(f"{compiler} or objdump not installed")
    src = tmp_path / "k.c"
    src.write_text(_INTRINSICS_SOURCE)
    obj = tmp_path / "k.o"
    res = subprocess.run([cc, "-O2", "-mamx-tile", "-mamx-bf16", "-mamx-int8", "-c", str(src), "-o", str(obj)],
                         capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"{compiler} cannot compile AMX intrinsics: {res.stderr.strip().splitlines()[:2]}")
    amx = [i for i in _disassemble(objdump, obj) if i[1].startswith(("tile", "tdp", "ldtile", "sttile"))]
    assert len(amx) >= 15
    seen, _ = _check_against_objdump(amx)
    assert "rip" in seen and "rsp" in seen  # global and stack tile configs
