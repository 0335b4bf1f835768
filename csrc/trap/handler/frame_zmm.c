/* Reading and writing zmm0..31 of an interrupted context: the XSAVE image
 * Linux puts in a user signal frame, which XRSTOR reloads at sigreturn.
 *
 * The frame is in the standard (non-compacted) format, so component i sits
 * at the offset CPUID.(0xD, i).EBX reports, whatever the kernel's own
 * buffers use.  A zmm register is spread over up to four places:
 *   bytes  0..15 of zmm0..15: the legacy FXSAVE area (XMM, component 1),
 *   bytes 16..31 of zmm0..15: YMM_Hi128 (component 2),
 *   bytes 32..63 of zmm0..15: ZMM_Hi256 (component 6),
 *   all 64 bytes of zmm16..31: Hi16_ZMM (component 7).
 * Async-signal-safe: no allocation, no libc beyond memcpy/memset.
 */
#include "internal.h"
#include "../../cpu_features.h"

#include <string.h>

/* struct _fpx_sw_bytes of the kernel's uapi sigcontext.h, in the legacy
 * area's software-reserved bytes 464..511. */
enum {
    SW_RESERVED = 464,
    SIGFRAME_MAGIC1 = 0x46505853, /* FP_XSTATE_MAGIC1, "FPXS": the frame carries an XSAVE image */
    SIGFRAME_MAGIC2 = 0x46505845, /* FP_XSTATE_MAGIC2, "FPXE": written right after it */
    LEGACY_XMM = 160,              /* xmm0 in the FXSAVE layout */
    XSAVE_HEADER = 512,            /* XSTATE_BV is its first 8 bytes */
    XSAVE_MIN = 576                /* legacy area + header */
};

struct component {
    uint32_t offset, size;
};

static struct component component(int i)
{
    struct component c;
    pyamx_cpu_xsave_component((uint32_t)i, &c.offset, &c.size);
    return c;
}

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* One part of a register: where it lies in the image and the component
 * (XSTATE_BV bit) it belongs to. */
struct part {
    int bit;
    uint32_t at, len, from;
};

/* Register reg in a frame: its parts, the image and the image's XSTATE_BV. */
struct zmm_parts {
    uint8_t *image;
    uint64_t bv;
    int n;
    struct part part[3];
};

/* PYAMX_TRAP_ZMM_OK, or a PYAMX_TRAP_ZMM_E_* code when the frame cannot hold the register. */
static int32_t parts_of(const ucontext_t *uc, int32_t reg, struct zmm_parts *z)
{
    if (reg < 0 || reg > 31)
        return PYAMX_TRAP_ZMM_E_REG;
    uint8_t *fp = (uint8_t *)uc->uc_mcontext.fpregs;
    if (fp == NULL || rd32(fp + SW_RESERVED) != SIGFRAME_MAGIC1)
        return PYAMX_TRAP_ZMM_E_NO_XSTATE;
    uint64_t xfeatures = rd64(fp + SW_RESERVED + 8);
    uint32_t xstate_size = rd32(fp + SW_RESERVED + 16);
    if (xstate_size < XSAVE_MIN || rd32(fp + xstate_size) != SIGFRAME_MAGIC2)
        return PYAMX_TRAP_ZMM_E_NO_XSTATE;
    int need[3] = {1, 2, 6};
    int n = 0;
    if (reg >= 16) {
        need[0] = 7;
        n = 1;
    } else {
        n = 3;
    }
    for (int k = 0; k < n; k++) {
        int bit = need[k];
        if (!(xfeatures & (1ull << bit)) || (bit >= 6 && !(xfeatures & (1ull << 5))))
            return PYAMX_TRAP_ZMM_E_NO_AVX512;
        struct part p = {bit, 0, 0, 0};
        if (bit == 1) {
            p.at = LEGACY_XMM + 16u * (uint32_t)reg;
            p.len = 16;
        } else {
            struct component c = component(bit);
            uint32_t per = bit == 2 ? 16 : bit == 6 ? 32 : 64;
            uint32_t idx = (uint32_t)(bit == 7 ? reg - 16 : reg);
            if (c.size < 16 * per || c.offset < XSAVE_MIN || c.offset + c.size > xstate_size)
                return PYAMX_TRAP_ZMM_E_NO_AVX512;
            p.at = c.offset + per * idx;
            p.len = per;
            p.from = bit == 2 ? 16 : bit == 6 ? 32 : 0;
        }
        z->part[k] = p;
    }
    z->image = fp;
    z->bv = rd64(fp + XSAVE_HEADER);
    z->n = n;
    return PYAMX_TRAP_ZMM_OK;
}

/* The init value of every component here is all zeros: a part whose
 * XSTATE_BV bit is clear reads as zeros, whatever the image holds there. */
int32_t pyamx_trap_get_zmm(const ucontext_t *uc, int32_t reg, uint8_t bytes[64])
{
    struct zmm_parts z;
    int32_t rc = parts_of(uc, reg, &z);
    if (rc != PYAMX_TRAP_ZMM_OK)
        return rc;
    memset(bytes, 0, 64);
    for (int k = 0; k < z.n; k++)
        if (z.bv & (1ull << z.part[k].bit))
            memcpy(bytes + z.part[k].from, z.image + z.part[k].at, z.part[k].len);
    return PYAMX_TRAP_ZMM_OK;
}

/* A component whose XSTATE_BV bit is clear may hold anything in the image
 * (XSAVE leaves it unwritten), so it is zeroed, the init value of every
 * register in it, before its bit is set; XRSTOR then loads all of it. */
int32_t pyamx_trap_set_zmm(ucontext_t *uc, int32_t reg, const uint8_t bytes[64])
{
    struct zmm_parts z;
    int32_t rc = parts_of(uc, reg, &z);
    if (rc != PYAMX_TRAP_ZMM_OK)
        return rc;
    for (int k = 0; k < z.n; k++) {
        const struct part *p = &z.part[k];
        uint64_t bit = 1ull << p->bit;
        if (!(z.bv & bit)) {
            if (p->bit == 1) {
                memset(z.image + LEGACY_XMM, 0, 16 * 16);
            } else {
                struct component c = component(p->bit);
                memset(z.image + c.offset, 0, c.size);
            }
            z.bv |= bit;
        }
        memcpy(z.image + p->at, bytes + p->from, p->len);
    }
    memcpy(z.image + XSAVE_HEADER, &z.bv, 8);
    return PYAMX_TRAP_ZMM_OK;
}
