/* The trap mode's instruction decoder.  Pure: used by the SIGILL handler
 * and, through cffi, by the tests.  It reads the bytes strictly in order
 * and never looks past the end of the instruction, so the handler can hand
 * it RIP with len 15 even when the instruction ends at the last byte of a
 * mapped page.
 *
 * Which instruction a byte sequence is comes from the table (pyamx/table/isa.py,
 * generated into pyamx_op_traits.h): a row matches on prefix, map, opcode,
 * pp and ModRM form, then W, L and every field the row leaves unused are
 * checked against what silicon requires (docs/trap.md, "What the decoder
 * rejects").  A new row therefore decodes without a change here.
 */
#include "internal.h"

#include <stddef.h>
#include <stdint.h>

_Static_assert(sizeof(pyamx_op_names) / sizeof(pyamx_op_names[0]) == N_OPS, "one name per enum pyamx_op id");

const char *pyamx_trap_op_name(int32_t op)
{
    if (op < 0 || op >= N_OPS)
        return "(unknown)";
    return pyamx_op_names[op];
}

/* The prefix bytes, with the inverted fields already turned the right way. */
struct prefix {
    int kind; /* enum pyamx_encoding_prefix */
    int map, pp, w, l, opcode;
    int r, x, b, vvvv;
    /* EVEX only (0 under VEX): the high bits of reg and vvvv, the masking
     * and rounding fields, and the two bits AVX-512 fixes (P0[3] = 0,
     * P1[2] = 1) that APX reuses as B4 and X4. */
    int r_hi, v_hi, aaa, z, bcst, fixed_bits_ok;
};

static int form_fits(int form, int mod)
{
    return form == PYAMX_FORM_REG ? mod == 3 : mod != 3;
}

/* Whether some row (either encoding) uses this prefix, map and opcode, or,
 * under EVEX, is a VEX memory row APX promotes to EVEX: bytes outside that
 * space are not ours. */
static int in_amx_space(const struct prefix *x)
{
    for (int op = 1; op < N_OPS; op++) {
        const struct pyamx_op_traits *t = &pyamx_op_traits[op];
        if (t->map == x->map && t->opcode == x->opcode &&
            (t->prefix == x->kind || (x->kind == PYAMX_PREFIX_EVEX && t->form != PYAMX_FORM_REG)))
            return 1;
        if (t->imm_prefix == x->kind && t->imm_map == x->map && t->imm_opcode == x->opcode)
            return 1;
    }
    return 0;
}

/* The row whose encoding (*imm = 0) or imm8 encoding (*imm = 1) has this
 * prefix, map, opcode, pp and a ModRM form that admits mod; W and L are
 * checked afterwards, so a wrong W or L reports the row it belongs to. */
static int find_row(const struct prefix *x, int mod, int *imm)
{
    for (int op = 1; op < N_OPS; op++) {
        const struct pyamx_op_traits *t = &pyamx_op_traits[op];
        if (t->prefix == x->kind && t->map == x->map && t->opcode == x->opcode && t->pp == x->pp &&
            form_fits(t->form, mod)) {
            *imm = 0;
            return op;
        }
        /* Every imm8 form so far is a register form (AMX-AVX512's row ops). */
        if (t->imm_prefix == x->kind && t->imm_map == x->map && t->imm_opcode == x->opcode &&
            t->imm_pp == x->pp && mod == 3) {
            *imm = 1;
            return op;
        }
    }
    return PYAMX_OP_NONE;
}

/* The VEX memory row an EVEX memory encoding is the APX promotion of. */
static int apx_promoted_row(const struct prefix *x, int mod)
{
    if (x->kind != PYAMX_PREFIX_EVEX || mod == 3)
        return PYAMX_OP_NONE;
    for (int op = 1; op < N_OPS; op++) {
        const struct pyamx_op_traits *t = &pyamx_op_traits[op];
        if (t->prefix == PYAMX_PREFIX_VEX && t->form != PYAMX_FORM_REG && t->map == x->map &&
            t->opcode == x->opcode && t->pp == x->pp)
            return op;
    }
    return PYAMX_OP_NONE;
}

/* Reads the VEX (C4) or EVEX (62) prefix and the opcode at p[*i]. */
static int32_t read_prefix(const uint8_t *p, size_t len, size_t *i, struct prefix *x)
{
    size_t k = *i;
    *x = (struct prefix){0};
    x->fixed_bits_ok = 1;
    if (p[k] == 0xC4) {
        if (k + 3 >= len)
            return PYAMX_TRAP_DECODE_TRUNCATED;
        uint8_t v1 = p[k + 1], v2 = p[k + 2];
        x->kind = PYAMX_PREFIX_VEX;
        x->r = !(v1 & 0x80), x->x = !(v1 & 0x40), x->b = !(v1 & 0x20);
        x->map = v1 & 0x1F;
        x->w = v2 >> 7, x->vvvv = (~v2 >> 3) & 0xF, x->l = (v2 >> 2) & 1, x->pp = v2 & 3;
        x->opcode = p[k + 3];
        *i = k + 4;
        return 1;
    }
    /* 0x62 is BOUND outside 64-bit mode; in 64-bit mode it is always EVEX. */
    if (p[k] == 0x62) {
        if (k + 4 >= len)
            return PYAMX_TRAP_DECODE_TRUNCATED;
        uint8_t p0 = p[k + 1], p1 = p[k + 2], p2 = p[k + 3];
        x->kind = PYAMX_PREFIX_EVEX;
        x->r = !(p0 & 0x80), x->x = !(p0 & 0x40), x->b = !(p0 & 0x20), x->r_hi = !(p0 & 0x10);
        x->map = p0 & 7;
        x->w = p1 >> 7, x->vvvv = (~p1 >> 3) & 0xF, x->pp = p1 & 3;
        x->fixed_bits_ok = !(p0 & 0x08) && (p1 & 0x04);
        x->z = p2 >> 7, x->l = (p2 >> 5) & 3, x->bcst = (p2 >> 4) & 1, x->v_hi = !(p2 & 0x08);
        x->aaa = p2 & 7;
        x->opcode = p[k + 4];
        *i = k + 5;
        return 1;
    }
    /* C5 (2-byte VEX) implies map 0F, where no AMX instruction lives. */
    return PYAMX_TRAP_DECODE_NOT_AMX;
}

/* The memory operand after ModRM (and its SIB and displacement). */
static int32_t read_memory(const uint8_t *p, size_t len, size_t *ip, const struct prefix *x, uint8_t modrm,
                           int sibmem, const uint64_t *gpr, uint64_t rip, struct pyamx_trap_insn *d)
{
    size_t i = *ip;
    int mod = modrm >> 6, rm3 = modrm & 7;
    int has_base = 1, has_index = 0, base = rm3 | (x->b << 3), index = -1, scale = 1;
    int disp_bytes = 0;
    d->has_mem = 1;
    if (rm3 == 4) {
        if (i >= len)
            return PYAMX_TRAP_DECODE_TRUNCATED;
        uint8_t sib = p[i++];
        scale = 1 << (sib >> 6);
        index = ((sib >> 3) & 7) | (x->x << 3);
        base = (sib & 7) | (x->b << 3);
        has_index = (index != 4); /* 100b without VEX.X: no index; with it: r12 */
        if ((sib & 7) == 5 && mod == 0) {
            has_base = 0; /* [index*scale + disp32]; holds for r13 too */
            disp_bytes = 4;
        }
    } else if (rm3 == 5 && mod == 0) {
        has_base = 0;
        d->rip_relative = 1;
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
    d->disp = disp;
    d->scale = scale;
    d->base_reg = d->rip_relative ? 16 : (has_base ? base : -1);
    d->index_reg = has_index ? index : -1;

    uint64_t a = (uint64_t)(int64_t)disp;
    if (d->rip_relative)
        a += rip + i; /* RIP-relative counts from the next instruction */
    else if (has_base && gpr)
        a += gpr[base];
    uint64_t idx = (has_index && gpr) ? gpr[index] : 0;
    if (sibmem) {
        /* For sibmem the index register is the row stride. */
        d->stride = (int64_t)(idx * (uint64_t)scale);
    } else {
        a += idx * (uint64_t)scale;
    }
    d->addr = a;
    *ip = i;
    return 1;
}

/* Puts a register field's value where the row's operand slot says. */
static void assign(struct pyamx_trap_insn *d, int kind, int slot, int value)
{
    switch (slot) {
    case PYAMX_OPERAND_DST:
        if (kind == PYAMX_KIND_ROW)
            d->zdst = value;
        else
            d->tdst = value;
        break;
    case PYAMX_OPERAND_SRC1: d->tsrc1 = value; break;
    case PYAMX_OPERAND_SRC2: d->tsrc2 = value; break;
    default: break;
    }
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
    d.zdst = d.row_gpr = d.imm8 = -1;
    d.row = 0;
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
    struct prefix x;
    int32_t rc = read_prefix(p, len, &i, &x);
    if (rc <= 0)
        return rc;
    if (!in_amx_space(&x))
        return PYAMX_TRAP_DECODE_NOT_AMX;
    if (i >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;
    uint8_t modrm = p[i++];
    int mod = modrm >> 6, reg3 = (modrm >> 3) & 7, rm3 = modrm & 7;

    int imm = 0;
    int op = find_row(&x, mod, &imm);
    if (op == PYAMX_OP_NONE) {
        int apx = apx_promoted_row(&x, mod);
        if (apx != PYAMX_OP_NONE) {
            const struct pyamx_op_traits *t = &pyamx_op_traits[apx];
            if (out)
                out->op = apx;
            /* APX's EVEX form of a VEX memory row keeps its W and L (L'L =
             * 128).  Its SIB and displacement are laid out as under VEX, so
             * the length is known even though the address (extended GPRs)
             * is not computed. */
            if (x.w == t->w && x.l == t->l && !x.aaa && !x.z && !x.bcst &&
                (t->form != PYAMX_FORM_SIBMEM || rm3 == 4)) {
                struct pyamx_trap_insn scratch = d;
                rc = read_memory(p, len, &i, &x, modrm, 1, NULL, 0, &scratch);
                if (rc <= 0)
                    return rc;
                if (out)
                    out->length = (int32_t)i;
                return PYAMX_TRAP_DECODE_UNSUPPORTED;
            }
        }
        /* An opcode of the AMX space in a form no AMX instruction has is #UD
         * on silicon too; the caller passes it on as SIGILL either way. */
        return PYAMX_TRAP_DECODE_UD;
    }
    d.op = op;
    const struct pyamx_op_traits *t = &pyamx_op_traits[op];
    const struct pyamx_op_fields *f = &pyamx_op_operands[op][imm];
    int want_w = imm ? t->imm_w : t->w, want_l = imm ? t->imm_l : t->l;
    int form = imm ? PYAMX_FORM_REG : t->form;

    int ud = x.w != want_w || x.l != want_l;
    int unsupported = 0;
    if (x.kind == PYAMX_PREFIX_EVEX) {
        /* No AMX-AVX512 form takes a mask, zeroing, broadcast/rounding, or
         * APX's reuse of the two fixed bits. */
        if (x.aaa || x.z || x.bcst || !x.fixed_bits_ok)
            ud = 1;
        /* The rm register is a tile (3 bits): EVEX.B and EVEX.X would name tmm8..31. */
        if (form == PYAMX_FORM_REG && (x.b || x.x))
            ud = 1;
    }

    int reg = reg3 | (x.r << 3) | (x.r_hi << 4);
    int rm = rm3 | (x.b << 3);
    if (f->reg == PYAMX_OPERAND_NONE) {
        if (reg != 0)
            ud = 1;
    } else {
        assign(&d, t->kind, f->reg, reg);
    }
    if (form == PYAMX_FORM_REG) {
        if (f->rm == PYAMX_OPERAND_NONE) {
            if (rm != 0)
                ud = 1;
        } else {
            assign(&d, t->kind, f->rm, rm);
        }
    }
    if (f->vvvv == PYAMX_OPERAND_NONE) {
        if (x.vvvv != 0 || x.v_hi)
            ud = 1;
    } else if (f->vvvv == PYAMX_OPERAND_ROW) {
        /* EVEX.V' names r16d..r31d, which only APX has. */
        if (x.v_hi)
            unsupported = 1;
        d.row_gpr = x.vvvv | (x.v_hi << 4);
        if (gpr && !x.v_hi)
            d.row = (uint32_t)gpr[x.vvvv];
    } else {
        assign(&d, t->kind, f->vvvv, x.vvvv | (x.v_hi << 4));
    }

    if (form == PYAMX_FORM_SIBMEM && rm3 != 4)
        ud = 1; /* sibmem requires a SIB byte; also rules out RIP-relative */
    if (form != PYAMX_FORM_REG && !ud) {
        rc = read_memory(p, len, &i, &x, modrm, form == PYAMX_FORM_SIBMEM, gpr, rip, &d);
        if (rc <= 0)
            return rc;
    }
    if (f->imm8 != PYAMX_OPERAND_NONE) {
        if (i >= len)
            return PYAMX_TRAP_DECODE_TRUNCATED;
        d.imm8 = p[i++];
        d.row = (uint32_t)d.imm8;
    }
    d.length = (int32_t)i;
    if (out)
        *out = d;
    if (ud)
        return PYAMX_TRAP_DECODE_UD;
    return unsupported ? PYAMX_TRAP_DECODE_UNSUPPORTED : (int32_t)i;
}
