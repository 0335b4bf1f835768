"""Instruction bytes from the table's encoding fields (pyamx.table.isa.Encoding), for the tests that
feed the decoder, the trap or an assembler's output: one VEX register form, one EVEX row form."""

from __future__ import annotations

from pyamx.table import isa


def vex_register_form(enc: isa.Encoding, reg: int = 0, rm: int = 0, vvvv: int = 0) -> bytes:
    """VEX C4 + opcode + ModRM (mod 11) with register ``reg`` in ModRM.reg, ``rm`` in ModRM.rm and
    ``vvvv`` in VEX.vvvv, each 0..15 (the high bit in VEX.R, VEX.B, and vvvv stored inverted)."""
    head = enc.vex3(r=1 - (reg >> 3), x=1, b=1 - (rm >> 3), vvvv=~vvvv & 0xF)
    return head + bytes((enc.opcode, 0xC0 | (reg & 7) << 3 | (rm & 7)))


def evex_row_form(enc: isa.Encoding, zmm: int, tile: int, gpr: int = 0, imm: int | None = None) -> bytes:
    """An AMX-AVX512 row instruction of encoding ``enc`` (the GPR form, or with ``imm`` the imm8
    form's encoding): zmm<zmm> (0..31) in ModRM.reg (+EVEX.R, R'), the tile in ModRM.rm (+EVEX.B for
    8..15), GPR ``gpr`` in vvvv (stored inverted; 0, i.e. 1111, in the imm8 form), V' 1, EVEX.512,
    no masking."""
    p0 = (1 - (zmm >> 3 & 1)) << 7 | 1 << 6 | (1 - (tile >> 3 & 1)) << 5 | (1 - (zmm >> 4 & 1)) << 4 | enc.map
    p1 = enc.w << 7 | (~gpr & 0xF) << 3 | 1 << 2 | enc.pp
    p2 = enc.l << 5 | 1 << 3  # L'L from the table (10: 512 bits), V' = 1 (not inverted: 0), z = b = aaa = 0
    code = bytes((0x62, p0, p1, p2, enc.opcode, 0xC0 | (zmm & 7) << 3 | (tile & 7)))
    return code if imm is None else code + bytes((imm,))
