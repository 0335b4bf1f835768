/* The trap mode's instruction decoder.  Pure: used by the SIGILL handler
 * and, through cffi, by the tests.  It reads the bytes strictly in order
 * and never looks past the end of the instruction, so the handler can hand
 * it RIP with len 15 even when the instruction ends at the last byte of a
 * mapped page.
 */
#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* Indexed by enum pyamx_op; the assertion catches a new id without a name. */
static const char *const op_names[] = {
    [PYAMX_OP_NONE] = "(none)",
    [PYAMX_OP_LDTILECFG] = "LDTILECFG",
    [PYAMX_OP_STTILECFG] = "STTILECFG",
    [PYAMX_OP_TILERELEASE] = "TILERELEASE",
    [PYAMX_OP_TILEZERO] = "TILEZERO",
    [PYAMX_OP_TILELOADD] = "TILELOADD",
    [PYAMX_OP_TILELOADDT1] = "TILELOADDT1",
    [PYAMX_OP_TILESTORED] = "TILESTORED",
    [PYAMX_OP_TDPBF16PS] = "TDPBF16PS",
    [PYAMX_OP_TDPFP16PS] = "TDPFP16PS",
    [PYAMX_OP_TDPBSSD] = "TDPBSSD",
    [PYAMX_OP_TDPBSUD] = "TDPBSUD",
    [PYAMX_OP_TDPBUSD] = "TDPBUSD",
    [PYAMX_OP_TDPBUUD] = "TDPBUUD",
    [PYAMX_OP_TCMMIMFP16PS] = "TCMMIMFP16PS",
    [PYAMX_OP_TCMMRLFP16PS] = "TCMMRLFP16PS",
};
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == N_OPS, "one name per enum pyamx_op id");

const char *pyamx_trap_op_name(int32_t op)
{
    if (op < 0 || op >= N_OPS)
        return "(unknown)";
    return op_names[op];
}

int32_t pyamx_trap_decode(const uint8_t *p, size_t len, const uint64_t *gpr,
                          uint64_t rip, struct pyamx_trap_insn *out)
{
    size_t i = 0;
    struct pyamx_trap_insn d;

    d.op = PYAMX_OP_NONE;
    d.length = 0;
    d.tdst = d.tsrc1 = d.tsrc2 = -1;
    d.has_mem = 0;
    d.base_reg = d.index_reg = -1;
    d.scale = 1;
    d.disp = 0;
    d.rip_relative = 0;
    d.addr = 0;
    d.stride = 0;
    if (out)
        *out = d;

    /* Segment prefixes CS/DS/ES/SS are no-ops in 64-bit mode and may
     * legally precede VEX; anything else (66/F2/F3/REX/LOCK) before VEX is
     * #UD on silicon, and FS/GS would need the segment base, which this
     * mode does not fetch.  Both go the "not mine" way. */
    while (i < len && (p[i] == 0x2E || p[i] == 0x3E || p[i] == 0x26 || p[i] == 0x36))
        i++;
    if (i >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;
    if (p[i] == 0xC5)
        return PYAMX_TRAP_DECODE_NOT_AMX; /* 2-byte VEX implies map 0F; AMX lives in 0F38 */
    if (p[i] != 0xC4)
        return PYAMX_TRAP_DECODE_NOT_AMX;
    if (i + 3 >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;

    uint8_t v1 = p[i + 1], v2 = p[i + 2], opc = p[i + 3];
    if ((v1 & 0x1F) != 0x02)
        return PYAMX_TRAP_DECODE_NOT_AMX;
    if (opc != 0x49 && opc != 0x4B && opc != 0x5C && opc != 0x5E && opc != 0x6C)
        return PYAMX_TRAP_DECODE_NOT_AMX;
    /* VEX stores R, X, B and vvvv inverted. */
    int R = !(v1 & 0x80), X = !(v1 & 0x40), B = !(v1 & 0x20);
    int W = (v2 >> 7) & 1, vvvv = (~v2 >> 3) & 0xF, L = (v2 >> 2) & 1, pp = v2 & 3;
    i += 4;
    if (i >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;
    uint8_t modrm = p[i++];
    int mod = modrm >> 6, reg3 = (modrm >> 3) & 7, rm3 = modrm & 7;
    int reg = reg3 | (R << 3), rm = rm3 | (B << 3);

    enum { PP_NP = 0, PP_66 = 1, PP_F3 = 2, PP_F2 = 3 };
    int op = PYAMX_OP_NONE, memform = 0, sibmem = 0, is_dp = 0;

    switch (opc) {
    case 0x49:
        if (mod != 3 && pp == PP_NP) { op = PYAMX_OP_LDTILECFG; memform = 1; }
        else if (mod != 3 && pp == PP_66) { op = PYAMX_OP_STTILECFG; memform = 1; }
        else if (mod == 3 && pp == PP_NP) op = PYAMX_OP_TILERELEASE;
        else if (mod == 3 && pp == PP_F2) op = PYAMX_OP_TILEZERO;
        break;
    case 0x4B:
        if (mod != 3 && pp == PP_F2) op = PYAMX_OP_TILELOADD;
        else if (mod != 3 && pp == PP_66) op = PYAMX_OP_TILELOADDT1;
        else if (mod != 3 && pp == PP_F3) op = PYAMX_OP_TILESTORED;
        memform = sibmem = (op != PYAMX_OP_NONE);
        break;
    case 0x5C:
        if (mod == 3 && pp == PP_F3) op = PYAMX_OP_TDPBF16PS;
        else if (mod == 3 && pp == PP_F2) op = PYAMX_OP_TDPFP16PS;
        is_dp = 1;
        break;
    case 0x6C: /* AMX-COMPLEX; F3/F2 were the withdrawn AMX-TRANSPOSE TTDP*: #UD */
        if (mod == 3 && pp == PP_NP) op = PYAMX_OP_TCMMRLFP16PS;
        else if (mod == 3 && pp == PP_66) op = PYAMX_OP_TCMMIMFP16PS;
        is_dp = 1;
        break;
    case 0x5E:
        if (mod == 3) {
            static const int8_t by_pp[4] = {PYAMX_OP_TDPBUUD, PYAMX_OP_TDPBUSD,
                                            PYAMX_OP_TDPBSUD, PYAMX_OP_TDPBSSD};
            op = by_pp[pp];
        }
        is_dp = 1;
        break;
    }
    d.op = op;
    /* An opcode of the AMX space in a form no AMX instruction has is #UD
     * on silicon too; the caller passes it on as SIGILL either way. */
    if (op == PYAMX_OP_NONE)
        return PYAMX_TRAP_DECODE_UD;

    int ud = (W != 0) || (L != 0);
    if (!is_dp && vvvv != 0)
        ud = 1;
    switch (op) {
    case PYAMX_OP_LDTILECFG:
    case PYAMX_OP_STTILECFG:
        if (reg != 0) ud = 1;
        break;
    case PYAMX_OP_TILERELEASE:
        if (modrm != 0xC0 || R || B) ud = 1;
        break;
    case PYAMX_OP_TILEZERO:
        if (rm != 0) ud = 1;
        d.tdst = reg;
        break;
    case PYAMX_OP_TILESTORED:
        d.tsrc1 = reg;
        break;
    case PYAMX_OP_TILELOADD:
    case PYAMX_OP_TILELOADDT1:
        d.tdst = reg;
        break;
    default: /* dot products */
        d.tdst = reg;
        d.tsrc1 = rm;
        d.tsrc2 = vvvv;
        break;
    }
    if (sibmem && rm3 != 4)
        ud = 1; /* sibmem requires a SIB byte; also rules out RIP-relative */

    if (memform && !ud) {
        int has_base = 1, has_index = 0, base = rm, index = -1, scale = 1;
        int disp_bytes = 0;
        d.has_mem = 1;
        if (rm3 == 4) {
            if (i >= len)
                return PYAMX_TRAP_DECODE_TRUNCATED;
            uint8_t sib = p[i++];
            scale = 1 << (sib >> 6);
            index = ((sib >> 3) & 7) | (X << 3);
            base = (sib & 7) | (B << 3);
            has_index = (index != 4); /* 100b without VEX.X: no index; with it: r12 */
            if ((sib & 7) == 5 && mod == 0) {
                has_base = 0; /* [index*scale + disp32]; holds for r13 too */
                disp_bytes = 4;
            }
        } else if (rm3 == 5 && mod == 0) {
            has_base = 0;
            d.rip_relative = 1;
            disp_bytes = 4;
        }
        if (mod == 1)
            disp_bytes = 1;
        else if (mod == 2)
            disp_bytes = 4;
        if (i + (size_t)disp_bytes > len)
            return PYAMX_TRAP_DECODE_TRUNCATED;
        int32_t disp = 0;
        if (disp_bytes == 1) {
            disp = (int8_t)p[i];
        } else if (disp_bytes == 4) {
            uint32_t u = (uint32_t)p[i] | ((uint32_t)p[i + 1] << 8) |
                         ((uint32_t)p[i + 2] << 16) | ((uint32_t)p[i + 3] << 24);
            disp = (int32_t)u;
        }
        i += (size_t)disp_bytes;
        d.disp = disp;
        d.scale = scale;
        d.base_reg = d.rip_relative ? 16 : (has_base ? base : -1);
        d.index_reg = has_index ? index : -1;

        uint64_t a = (uint64_t)(int64_t)disp;
        if (d.rip_relative)
            a += rip + i; /* RIP-relative counts from the next instruction */
        else if (has_base && gpr)
            a += gpr[base];
        uint64_t idx = (has_index && gpr) ? gpr[index] : 0;
        if (sibmem) {
            /* For sibmem the index register is the row stride. */
            d.stride = (int64_t)(idx * (uint64_t)scale);
        } else {
            a += idx * (uint64_t)scale;
        }
        d.addr = a;
    }
    d.length = (int32_t)i;
    if (out)
        *out = d;
    return ud ? PYAMX_TRAP_DECODE_UD : (int32_t)i;
}

