"""The trap mode's instruction decoder (csrc/trap/isa/decode.c, pyamx_trap_decode), tested pure.

Two sources of bytes: hand-assembled sequences with the expected fields
spelled out, and a grid of every row of pyamx.table.isa.TABLE in every form
(every addressing form, register combinations) assembled by a real
assembler at test time (clang 22 from the ``ziglang`` package, which knows
every AMX extension; else GNU as, which may know only the older ones) and
checked against the assembly text it was made from. The grid's mnemonics
come from the table, so a new row the decoder cannot read fails here.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shutil
import subprocess
import sys

import pytest

_trap = pytest.importorskip("pyamx._trap", reason="the trap module is not built (x86-64 Linux only; python build.py)")
lib, ffi = _trap.lib, _trap.ffi

from pyamx.table import isa  # noqa: E402 - after the skip: the table's ids come from the module

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
                                         "index_reg", "scale", "disp", "rip_relative", "addr", "stride",
                                         "zdst", "row_gpr", "imm8", "row")}


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
    # The newer extensions: bytes from clang 22.1 (python -m ziglang cc -c), the same as
    # ../shared/amx-family.md (beside the checkout) section 2 lists from clang and GNU as 2.47.
    ("tcmmimfp16ps %tmm4,%tmm5,%tmm6", "c4 e2 59 6c f5", dict(op="TCMMIMFP16PS", tdst=6, tsrc1=5, tsrc2=4)),
    ("tcmmrlfp16ps %tmm4,%tmm5,%tmm6", "c4 e2 58 6c f5", dict(op="TCMMRLFP16PS", tdst=6, tsrc1=5, tsrc2=4)),
    ("tdpbf8ps %tmm4,%tmm5,%tmm6", "c4 e5 58 fd f5", dict(op="TDPBF8PS", tdst=6, tsrc1=5, tsrc2=4)),
    ("tdpbhf8ps %tmm4,%tmm5,%tmm6", "c4 e5 5b fd f5", dict(op="TDPBHF8PS", tdst=6, tsrc1=5, tsrc2=4)),
    ("tdphbf8ps %tmm4,%tmm5,%tmm6", "c4 e5 5a fd f5", dict(op="TDPHBF8PS", tdst=6, tsrc1=5, tsrc2=4)),
    ("tdphf8ps %tmm4,%tmm5,%tmm6", "c4 e5 59 fd f5", dict(op="TDPHF8PS", tdst=6, tsrc1=5, tsrc2=4)),
    ("tcvtrowd2ps %edx,%tmm5,%zmm22", "62 e2 6e 48 4a f5",
     dict(op="TCVTROWD2PS", zdst=22, tsrc1=5, row_gpr=2, imm8=-1, row=GPRS[2] & 0xFFFFFFFF, tdst=-1, tsrc2=-1)),
    ("tcvtrowd2ps $123,%tmm5,%zmm22", "62 e3 7e 48 07 f5 7b",
     dict(op="TCVTROWD2PS", zdst=22, tsrc1=5, row_gpr=-1, imm8=123, row=123)),
    ("tcvtrowps2bf16h %edx,%tmm5,%zmm22", "62 e2 6f 48 6d f5", dict(op="TCVTROWPS2BF16H", zdst=22, row_gpr=2)),
    ("tcvtrowps2bf16h $123,%tmm5,%zmm22", "62 e3 7f 48 07 f5 7b", dict(op="TCVTROWPS2BF16H", imm8=123)),
    ("tcvtrowps2bf16l %edx,%tmm5,%zmm22", "62 e2 6e 48 6d f5", dict(op="TCVTROWPS2BF16L", row_gpr=2)),
    ("tcvtrowps2bf16l $123,%tmm5,%zmm22", "62 e3 7e 48 77 f5 7b", dict(op="TCVTROWPS2BF16L", imm8=123)),
    ("tcvtrowps2phh %edx,%tmm5,%zmm22", "62 e2 6c 48 6d f5", dict(op="TCVTROWPS2PHH", row_gpr=2)),
    ("tcvtrowps2phh $123,%tmm5,%zmm22", "62 e3 7c 48 07 f5 7b", dict(op="TCVTROWPS2PHH", imm8=123)),
    ("tcvtrowps2phl %edx,%tmm5,%zmm22", "62 e2 6d 48 6d f5", dict(op="TCVTROWPS2PHL", row_gpr=2)),
    ("tcvtrowps2phl $123,%tmm5,%zmm22", "62 e3 7f 48 77 f5 7b", dict(op="TCVTROWPS2PHL", imm8=123)),
    ("tilemovrow %edx,%tmm5,%zmm22", "62 e2 6d 48 4a f5", dict(op="TILEMOVROW", zdst=22, tsrc1=5, row_gpr=2)),
    ("tilemovrow $123,%tmm5,%zmm22", "62 e3 7d 48 07 f5 7b", dict(op="TILEMOVROW", zdst=22, tsrc1=5, imm8=123)),
    ("tilemovrow %r15d,%tmm7,%zmm31 (R, R', vvvv 0000)", "62 62 05 48 4a ff",
     dict(op="TILEMOVROW", zdst=31, tsrc1=7, row_gpr=15, row=GPRS[15] & 0xFFFFFFFF)),
    ("tilemovrow $0,%tmm0,%zmm0", "62 f3 7d 48 07 c0 00", dict(op="TILEMOVROW", zdst=0, tsrc1=0, imm8=0, row=0)),
    ("tileloaddrs 0x10000000(%rbp,%r14,8),%tmm6", "c4 a2 7b 4a b4 f5 00 00 00 10",
     dict(op="TILELOADDRS", tdst=6, base_reg=5, index_reg=14, scale=8, disp=0x10000000,
          addr=GPRS[5] + 0x10000000, stride=8 * GPRS[14])),
    ("tileloaddrst1 0x10000000(%rbp,%r14,8),%tmm6", "c4 a2 79 4a b4 f5 00 00 00 10",
     dict(op="TILELOADDRST1", tdst=6, base_reg=5, index_reg=14, scale=8, stride=8 * GPRS[14])),
    ("tileloaddrs (%r9,%riz,1),%tmm3", "c4 c2 7b 4a 1c 21",
     dict(op="TILELOADDRS", tdst=3, base_reg=9, index_reg=-1, addr=GPRS[9], stride=0)),
]


def _hex(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


@pytest.mark.parametrize("text,code,expect", HAND, ids=[h[0] for h in HAND])
def test_hand_assembled(text, code, expect):
    _needs(expect["op"])
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
    _needs(expect["op"])
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
    # VEX map 5 and AMX-COMPLEX: W1, L1, a memory operand, a pp no row has
    ("W=1 tdpbf8ps", "c4 e5 d8 fd f5", "TDPBF8PS"),
    ("VEX.L=1 tdpbf8ps", "c4 e5 5c fd f5", "TDPBF8PS"),
    ("tdpbf8ps memory form", "c4 e5 58 fd 30", "TDPBF8PS"),
    ("W=1 tcmmimfp16ps", "c4 e2 d9 6c f5", "TCMMIMFP16PS"),
    ("VEX.L=1 tcmmrlfp16ps", "c4 e2 5c 6c f5", "TCMMRLFP16PS"),
    ("tcmmimfp16ps memory form", "c4 e2 59 6c 35 00 00 00 00", "TCMMIMFP16PS"),
    ("F3 0F38 6C (withdrawn TTDPBF16PS)", "c4 e2 5a 6c f5", "TCMMIMFP16PS"),
    # AMX-MOVRS: as TILELOADD
    ("tileloaddrs W=1", "c4 e2 fb 4a 0c 18", "TILELOADDRS"),
    ("tileloaddrs VEX.L=1", "c4 e2 7f 4a 0c 18", "TILELOADDRS"),
    ("tileloaddrs vvvv != 1111", "c4 e2 73 4a 0c 18", "TILELOADDRS"),
    ("tileloaddrst1 vvvv != 1111", "c4 e2 49 4a 0c 18", "TILELOADDRST1"),
    ("tileloaddrs without SIB", "c4 e2 7b 4a 0e", "TILELOADDRS"),
    ("tileloaddrs RIP-relative", "c4 e2 7b 4a 0d 00 00 00 00", "TILELOADDRS"),
    ("tileloaddrs register form", "c4 e2 7b 4a c1", "TILELOADDRS"),
    ("NP 0F38 4A", "c4 e2 78 4a 0c 18", "TILELOADDRS"),
    # AMX-AVX512 (tilemovrow %edx,%tmm5,%zmm22 = 62 e2 6d 48 4a f5, imm form 62 e3 7d 48 07 f5 7b), one field off:
    ("tilemovrow EVEX.W=1 (ACE v1 tilemovrow zmm->tmm)", "62 e2 ed 48 4a f5", "TILEMOVROW"),
    ("tilemovrow imm EVEX.W=1", "62 e3 fd 48 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow L'L=128", "62 e2 6d 08 4a f5", "TILEMOVROW"),
    ("tilemovrow L'L=256", "62 e2 6d 28 4a f5", "TILEMOVROW"),
    ("tilemovrow L'L=11", "62 e2 6d 68 4a f5", "TILEMOVROW"),
    ("tilemovrow imm L'L=128", "62 e3 7d 08 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow {%k1}", "62 e2 6d 49 4a f5", "TILEMOVROW"),
    ("tilemovrow {%k7}", "62 e2 6d 4f 4a f5", "TILEMOVROW"),
    ("tilemovrow imm {%k2}", "62 e3 7d 4a 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow EVEX.z=1", "62 e2 6d c8 4a f5", "TILEMOVROW"),
    ("tilemovrow imm EVEX.z=1", "62 e3 7d c8 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow EVEX.b=1", "62 e2 6d 58 4a f5", "TILEMOVROW"),
    ("tilemovrow imm EVEX.b=1", "62 e3 7d 58 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow imm vvvv != 1111", "62 e3 6d 48 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow imm EVEX.V'=0", "62 e3 7d 40 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow EVEX.B=1 (tmm13)", "62 c2 6d 48 4a f5", "TILEMOVROW"),
    ("tilemovrow EVEX.X=1 (tmm21)", "62 a2 6d 48 4a f5", "TILEMOVROW"),
    ("tilemovrow imm EVEX.B=1", "62 c3 7d 48 07 f5 7b", "TILEMOVROW"),
    ("tilemovrow EVEX P0[3]=1 (APX B4)", "62 ea 6d 48 4a f5", "TILEMOVROW"),
    ("tilemovrow EVEX P1[2]=0 (APX X4)", "62 e2 69 48 4a f5", "TILEMOVROW"),
    ("tilemovrow memory rm", "62 e2 6d 48 4a 30", "TILEMOVROW"),
    ("tilemovrow imm memory rm", "62 e3 7d 48 07 30 7b", "TILEMOVROW"),
    ("tcvtrowd2ps L'L=128", "62 e2 6e 08 4a f5", "TCVTROWD2PS"),
    ("tcvtrowd2ps {%k1}", "62 e2 6e 49 4a f5", "TCVTROWD2PS"),
    ("tcvtrowps2phl imm on 66 (Bochs' mapping, not the toolchains')", "62 e3 7d 48 77 f5 7b", "TCVTROWPS2PHL"),
    ("EVEX 0F38 4A NP register form", "62 e2 6c 48 4a f5", "TILEMOVROW"),
    # Opcode sharing: EVEX 0F38 4A 66 with a memory operand is APX TILELOADDRST1 only at L'L=128
    ("EVEX 0F38 4A 66 memory form at L'L=512", "62 9a 79 48 4a b4 ac 23 01 00 00", "TILEMOVROW"),
    ("EVEX 0F38 4A F3 memory form (no such load)", "62 9a 7a 08 4a b4 ac 23 01 00 00", "TCVTROWD2PS"),
    ("APX tileloaddrs W=1", "62 9a fb 08 4a b4 ac 23 01 00 00", "TILELOADDRS"),
    ("APX tileloaddrs {%k1}", "62 9a 7b 09 4a b4 ac 23 01 00 00", "TILELOADDRS"),
    ("APX tileloaddrs without SIB", "62 f2 7b 08 4a 0e", "TILELOADDRS"),
]


def _needs(mnemonic):
    """Skip a case about a row the table does not have (its bytes are then not AMX at all)."""
    if mnemonic not in OP:
        pytest.skip(f"{mnemonic} is not a row of pyamx.table.isa.TABLE")


@pytest.mark.parametrize("case", UD_CASES, ids=[u[0] for u in UD_CASES])
def test_invalid_amx_encodings_are_ud(case):
    text, code, *row = case
    for mnemonic in row:  # the row that puts the opcode in the AMX space, where not an original one
        _needs(mnemonic)
    rc, _ = decode(_hex(code) + b"\x90" * 8)
    assert rc == UD, text


# APX's forms (extended GPRs r16..r31): valid on an APX CPU, not emulated; clang 22 bytes
# (-mapxf), the same as amx-family.md section 2. (bytes, op, length).
UNSUPPORTED_CASES = [
    ("tileloaddrs 291(%r28,%r29,4),%tmm6", "62 9a 7b 08 4a b4 ac 23 01 00 00", "TILELOADDRS"),
    ("tileloaddrst1 291(%r28,%r29,4),%tmm6", "62 9a 79 08 4a b4 ac 23 01 00 00", "TILELOADDRST1"),
    ("tilemovrow %r18d,%tmm7,%zmm31", "62 62 6d 40 4a ff", "TILEMOVROW"),
]


@pytest.mark.parametrize("text,code,op", UNSUPPORTED_CASES, ids=[u[0] for u in UNSUPPORTED_CASES])
def test_apx_forms_are_unsupported_not_misread(text, code, op):
    _needs(op)
    raw = _hex(code)
    rc, out = decode(raw + b"\x90" * 8)
    assert rc == lib.PYAMX_TRAP_DECODE_UNSUPPORTED, text
    assert out.op == OP[op] and out.length == len(raw), text
    for n in range(len(raw)):
        assert decode(raw[:n])[0] == TRUNCATED, (text, n)


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
    ("EVEX vaddps zmm (0F 58)", "62 f1 7c 48 58 c0"),
    ("EVEX map 0F38 outside AMX (vpermd 36)", "62 f2 7d 48 36 c0"),
    ("VEX map 5 opcode other than FD", "c4 e5 58 fc f5"),
    ("VEX 0F3A 07 (only the EVEX form is AMX)", "c4 e3 7d 07 f5 7b"),
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
# Bytes from a real assembler, checked against the assembly text they were made from.

GPR32 = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"] + [f"r{i}d" for i in range(8, 16)]
#: APX's extended GPRs: a row selector there is a valid APX encoding this mode does not emulate
APX_GPR32 = [f"r{i}d" for i in range(16, 32)]


def _mem_operands():
    """Every addressing form: each base (and none), each index (and none), each scale,
    disp none/8/32 (negative too), as ``(memory operand, base register or None)``."""
    disps = ["", "0x7f", "-0x80", "0x1000", "-0x12345678", "0x8"]
    out = []
    indexes = [r for r in REGS if r != "rsp"] + [None]
    for bi, base in enumerate(REGS + [None]):
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
            out.append(f"{disp}({inside})")
    return out


def _config_mem_operands():
    """Plain memory operands (LDTILECFG, STTILECFG): RIP-relative and SIB forms too."""
    out = [f"{disp}(%{base})" for base in REGS for disp in ("", "0x7f", "-0x1000")]
    return out + ["0x40(%rip)", "-0x40(%rip)", "0x10(%r8,%r9,4)", "0x100(,%r14,8)"]


def _register_triples():
    return [t for t in itertools.permutations(range(8), 3) if (t[0] + 2 * t[1] + 3 * t[2]) % 5 == 0]


def _lines_for(insn, full_rows: bool):
    """AT&T lines for every form of one row, chosen by its operand fields (Intel order = the roles'
    order; AT&T reverses it). A row whose fields no case here knows fails the test: it needs a
    decoder case and a template."""
    m = insn.name
    fields = tuple(f for _, f in insn.encoding.roles)
    if fields == ():
        return [m]
    if fields == ("mem",):
        return [f"{m} {mem}" for mem in _config_mem_operands()]
    if fields == ("reg",):
        return [f"{m} %tmm{t}" for t in range(8)]
    if fields == ("reg", "sibmem"):
        return [f"{m} {mem}, %tmm{n % 8}" for n, mem in enumerate(_mem_operands())]
    if fields == ("sibmem", "reg"):
        return [f"{m} %tmm{(n + 3) % 8}, {mem}" for n, mem in enumerate(_mem_operands())]
    if fields == ("reg", "rm", "vvvv") and insn.kind != "row":
        return [f"{m} %tmm{s2}, %tmm{s1}, %tmm{dst}" for dst, s1, s2 in _register_triples()]
    if fields == ("reg", "rm", "vvvv") and insn.kind == "row":
        assert tuple(f for _, f in insn.imm_encoding.roles) == ("reg", "rm", "imm8"), insn.mnemonic
        if full_rows:  # every zmm (R and R'), every tile, every GPR (vvvv), every imm8 bit
            combos = itertools.product(range(32), range(8), range(16))
            imms = [(z, t, (1 << (z % 8)) if z < 16 else 255 - z) for z in range(32) for t in range(8)]
        else:
            combos = [(z, z % 8, (3 * z) % 16) for z in range(0, 32, 3)]
            imms = [(z, z % 8, (37 * z) % 256) for z in range(0, 32, 5)]
        return ([f"{m} %{GPR32[g]}, %tmm{t}, %zmm{z}" for z, t, g in combos]
                + [f"{m} ${i}, %tmm{t}, %zmm{z}" for z, t, i in imms])
    raise AssertionError(f"{insn.mnemonic}: no assembler template for operand fields {fields}; "
                         "the decoder test (and likely decode.c) needs a case for them")


def _grid():
    """Every row of the table in its forms; the first AMX-AVX512 row op with every register combination."""
    first_row = next((i for i in isa.TABLE if i.kind == "row"), None)
    return [line for insn in isa.TABLE for line in _lines_for(insn, insn is first_row)]


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


def _assembler_command():
    """clang 22 of the ``ziglang`` package (knows every AMX extension and APX), else GNU as."""
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu", "-mamx-tile", "-mamx-fp8",
                "-mamx-complex", "-mamx-avx512", "-mamx-movrs", "-mavx512f", "-mapxf", "-c", "-x", "assembler"]
    gas = shutil.which("as")
    return [gas, "--64"] if gas else None


def _assemble(lines, tmp):
    """The bytes of each line, cut at labels the assembler placed (nm), so no disassembler has to
    know the instructions; pytest.skip where no assembler here knows them all."""
    command, nm, objcopy = _assembler_command(), shutil.which("nm"), shutil.which("objcopy")
    if not command or not nm or not objcopy:
        pytest.skip("no assembler (pip install ziglang, or GNU as) or no nm/objcopy")
    src, obj, raw = tmp / "forms.s", tmp / "forms.o", tmp / "forms.bin"
    src.write_text(".text\n" + "".join(f"L_{n}: {line}\n" for n, line in enumerate(lines)) + f"L_{len(lines)}:\n")
    res = subprocess.run([*command, "-o", str(obj), str(src)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"this assembler ({command[0]}) does not know every AMX instruction of the table "
                    f"(pip install ziglang for clang 22): {res.stderr.strip().splitlines()[:2]}")
    subprocess.run([objcopy, "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True)
    text = raw.read_bytes()
    symbols = subprocess.run([nm, str(obj)], capture_output=True, text=True, check=True).stdout
    at = {int(name[2:]): int(value, 16) for value, _, name in (ln.split() for ln in symbols.splitlines())
          if name.startswith("L_")}
    assert len(at) == len(lines) + 1
    return [text[at[n]:at[n + 1]] for n in range(len(lines))]


@pytest.fixture(scope="module")
def assembled(tmp_path_factory):
    lines = _grid()
    codes = _assemble(lines, tmp_path_factory.mktemp("asm"))
    return [(code, line.split()[0], line.partition(" ")[2]) for code, line in zip(codes, lines)]


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


def test_assembler_grid_covers_every_row_of_the_table(assembled):
    assert {mnem for _, mnem, _ in assembled} == {i.name for i in isa.TABLE}
    seen, mods = _check_against_text(assembled)
    # The grid really covered every base (r12/r13/rsp/rbp included), no base, and every mod.
    assert set(REGS) | {None, "rip"} <= seen
    assert {0, 1, 2, "rip"} <= mods


def test_every_register_combination_of_a_row_op(assembled):
    first_row = next((i for i in isa.TABLE if i.kind == "row"), None)
    if first_row is None:
        pytest.skip("the table has no AMX-AVX512 row op")
    got = set()
    for code, mnem, ops in assembled:
        if mnem == first_row.name and "$" not in ops:
            rc, out = decode(code)
            got.add((out.zdst, out.tsrc1, out.row_gpr))
    assert got == set(itertools.product(range(32), range(8), range(16)))


def test_truncated_assembled_forms(assembled):
    for code, mnem, ops in assembled[::7]:
        for n in range(len(code)):
            assert decode(code[:n])[0] == TRUNCATED, (code.hex(" "), mnem, ops, n)


def test_apx_row_selectors_are_unsupported(tmp_path):
    """EVEX.V' names r16d..r31d: an APX encoding, decoded as such and refused."""
    rows = [i for i in isa.TABLE if i.kind == "row"]
    if not rows:
        pytest.skip("the table has no AMX-AVX512 row op")
    lines = [f"{insn.name} %{g}, %tmm{n % 8}, %zmm{(5 * n) % 32}" for insn in rows for n, g in enumerate(APX_GPR32)]
    for code, line in zip(_assemble(lines, tmp_path), lines):
        rc, out = decode(code + b"\x90" * 4)
        mnem, ops = line.split(" ", 1)
        g, t, z = _split_operands(ops)
        assert rc == lib.PYAMX_TRAP_DECODE_UNSUPPORTED, (line, code.hex(" "))
        assert (out.op, out.row_gpr, out.tsrc1, out.zdst) == (OP[mnem.upper()], APX_GPR32.index(g[1:]) + 16,
                                                              int(t[4:]), int(z[4:])), line


def _check_against_text(insns):
    """Each (bytes, mnemonic, AT&T operands) decodes to what the text says. The text's operands,
    reversed, are in the order of the row's roles, which say where each one lives."""
    seen = set()
    mods = set()
    for code, mnem, ops in insns:
        rc, out = decode(code + b"\xcc" * 8)
        where = f"{code.hex(' ')}  {mnem} {ops}"
        assert rc == len(code), where
        assert ffi.string(lib.pyamx_trap_op_name(out.op)).decode().lower() == mnem, where
        insn = isa.get(mnem)
        operands = _split_operands(ops)[::-1]
        roles = insn.encoding.roles
        if operands and operands[-1].startswith("$"):
            roles = insn.imm_encoding.roles
        assert len(roles) == len(operands), where
        expect = dict(tdst=-1, tsrc1=-1, tsrc2=-1, zdst=-1, row_gpr=-1, imm8=-1)
        mems = []
        for (operand, field), text in zip(roles, operands):
            if field in ("mem", "sibmem"):
                mems.append(text)
            elif operand == "row" and text.startswith("$"):
                expect["imm8"] = int(text[1:], 0)
            elif operand == "row":
                expect["row_gpr"] = GPR32.index(text[1:])
            elif operand == "dst" and text.startswith("%zmm"):
                expect["zdst"] = int(text[4:])
            else:
                slot = {"dst": "tdst", "src": "tsrc1", "src1": "tsrc1", "src2": "tsrc2"}[operand]
                expect[slot] = int(text[4:])
        got = {k: getattr(out, k) for k in expect}
        assert got == expect, where
        if insn.kind == "row":
            row = expect["imm8"] if expect["imm8"] >= 0 else GPRS[expect["row_gpr"]] & 0xFFFFFFFF
            assert out.row == row, where
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
        if insn.encoding.form == "mem":
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
    cc, objdump = [shutil.which(compiler)], shutil.which("objdump")
    if cc == [None] and compiler == "clang" and importlib.util.find_spec("ziglang") is not None:
        cc = [sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu", "-fomit-frame-pointer"]
    if cc == [None] or not objdump:
        pytest.skip(f"{compiler} or objdump not installed")
    src = tmp_path / "k.c"
    src.write_text(_INTRINSICS_SOURCE)
    obj = tmp_path / "k.o"
    res = subprocess.run([*cc, "-O2", "-mamx-tile", "-mamx-bf16", "-mamx-int8", "-c", str(src), "-o", str(obj)],
                         capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"{compiler} cannot compile AMX intrinsics: {res.stderr.strip().splitlines()[:2]}")
    amx = [i for i in _disassemble(objdump, obj) if i[1].startswith(("tile", "tdp", "ldtile", "sttile"))]
    assert len(amx) >= 15
    seen, _ = _check_against_text(amx)
    assert "rip" in seen and "rsp" in seen  # global and stack tile configs
