/* The AMX kernels: one-shot dot products and the step-by-step tile machine.
 *
 * Every function that executes a tile instruction carries its own
 * target("amx-...") attribute, so the rest of the module stays baseline
 * x86-64. Nothing runs unless detection said yes (pyamx_internal_ready()).
 *
 * The tile-machine functions are their own safety guarantee: each one reads
 * the configuration back from the tile registers (STTILECFG into a local
 * buffer) and checks the instruction against it -- register numbers, the
 * #UD shape rules, every row of a memory operand against the buffer's
 * length -- before executing it, in the same call, with no Python code in
 * between. The Python layer (pyamx/cpu/native.py) checks the same rules first
 * only to word its error messages; a copy of the configuration kept there
 * can go stale (an exception from a signal handler after the C call
 * returned), the registers cannot. In trap mode STTILECFG is trapped like
 * every tile instruction, so the very same code path runs.
 */
#include "pyamx.h"
#include "dot_traits.h"
#include "internal.h"
#include "cpu_features.h"

#include <string.h>

/* The LDTILECFG #GP rules (docs/semantics.md section 1), repeated in C because a
 * #GP here is a SIGSEGV that kills the interpreter. */
static int cfg_legal(const uint8_t *cfg)
{
    if (cfg[0] == 0)
        return 1;
    if (cfg[0] != 1)
        return 0;
    for (int i = 2; i < 16; i++)
        if (cfg[i]) return 0;
    for (int i = 32; i < 48; i++)
        if (cfg[i]) return 0;
    for (int i = 56; i < 64; i++)
        if (cfg[i]) return 0;
    for (int t = 0; t < 8; t++) {
        unsigned colsb = cfg[16 + 2 * t] | (cfg[17 + 2 * t] << 8);
        unsigned rows = cfg[48 + t];
        if (colsb > 64 || rows > 16 || ((colsb == 0) != (rows == 0)))
            return 0;
    }
    return 1;
}

/* ---- the tile machine's guards, on an STTILECFG image ---- */

static inline unsigned cfg_colsb(const uint8_t *cfg, int t) { return cfg[16 + 2 * t] | (cfg[17 + 2 * t] << 8); }
static inline unsigned cfg_rows(const uint8_t *cfg, int t) { return cfg[48 + t]; }

/* Configured tiles and a palette-1 register: what every tile instruction
 * but LDTILECFG/STTILECFG/TILERELEASE needs first. */
int pyamx_check_tile_register(const uint8_t *cfg, int tmm)
{
    if (!cfg_legal(cfg))
        return PYAMX_E_ARG;
    if (cfg[0] == 0)
        return PYAMX_E_UD_UNCONFIGURED;
    if (tmm < 0 || tmm > 7)
        return PYAMX_E_UD_REGISTER;
    return PYAMX_OK;
}

/* TILEZERO: the tile itself must be configured too (silicon faults where the
 * SDM's class AMX-E5 is silent; docs/semantics.md section 7). */
int pyamx_check_tile_configured(const uint8_t *cfg, int tmm)
{
    int rc = pyamx_check_tile_register(cfg, tmm);
    if (rc != PYAMX_OK)
        return rc;
    return cfg_rows(cfg, tmm) ? PYAMX_OK : PYAMX_E_UD_SHAPE;
}

/* TILELOADD(T1), TILESTORED: a configured tile whose colsb is a multiple of 4
 * and whose rows exceed start_row (silicon's rules, docs/semantics.md
 * section 7). */
static int check_memory_tile(const uint8_t *cfg, int tmm)
{
    int rc = pyamx_check_tile_configured(cfg, tmm);
    if (rc != PYAMX_OK)
        return rc;
    if (cfg_colsb(cfg, tmm) % 4 || cfg[1] >= cfg_rows(cfg, tmm))
        return PYAMX_E_UD_SHAPE;
    return PYAMX_OK;
}

/* Rows start_row..rows-1 of colsb bytes at offset + r * stride must lie in
 * [0, len). Every step is overflow-checked: a wrapped product or sum would
 * otherwise land back inside the buffer's numbers while the instruction's
 * own 64-bit address arithmetic points elsewhere. */
int pyamx_check_memory_operand(const uint8_t *cfg, int tmm, int64_t len, int64_t offset, int64_t stride)
{
    int rc = check_memory_tile(cfg, tmm);
    if (rc != PYAMX_OK)
        return rc;
    if (len < 0)
        return PYAMX_E_ARG;
    int64_t colsb = (int64_t)cfg_colsb(cfg, tmm);
    for (int r = cfg[1]; r < (int)cfg_rows(cfg, tmm); r++) {
        int64_t start, end;
        if (__builtin_mul_overflow((int64_t)r, stride, &start) ||
            __builtin_add_overflow(start, offset, &start) ||
            __builtin_add_overflow(start, colsb, &end) || start < 0 || end > len)
            return PYAMX_E_MEMORY;
    }
    return PYAMX_OK;
}

/* The #UD rules of every tile dot product (docs/semantics.md section 2), in the
 * emulator's order (pyamx.table.tilecfg.check_dot_product). */
int pyamx_check_dot_product(const uint8_t *cfg, int dst, int src1, int src2)
{
    const int ts[3] = {dst, src1, src2};
    if (!cfg_legal(cfg))
        return PYAMX_E_ARG;
    for (int i = 0; i < 3; i++) {
        int rc = pyamx_check_tile_register(cfg, ts[i]);
        if (rc != PYAMX_OK)
            return rc;
        if (cfg_rows(cfg, ts[i]) == 0)
            return PYAMX_E_UD_SHAPE;
    }
    if (dst == src1 || dst == src2 || src1 == src2)
        return PYAMX_E_UD_SHAPE;
    for (int i = 0; i < 3; i++)
        if (cfg_colsb(cfg, ts[i]) % 4)
            return PYAMX_E_UD_SHAPE;
    if (cfg_colsb(cfg, dst) != cfg_colsb(cfg, src2) || cfg_colsb(cfg, src1) / 4 != cfg_rows(cfg, src2) ||
        cfg_rows(cfg, dst) != cfg_rows(cfg, src1) || cfg_rows(cfg, src2) > 16 || cfg_colsb(cfg, dst) > 64)
        return PYAMX_E_UD_SHAPE;
    return PYAMX_OK;
}

/* A row instruction's zmm write needs its CPUID feature (or the emulation) and the OS to save
 * the opmask and upper-zmm state. */
static int row_state_enabled(int op)
{
    return (pyamx_cpu_has_op_feature(op) || pyamx_internal_emulated()) && pyamx_cpu_os_saves(PYAMX_XCR0_ZMM);
}

#if PYAMX_HAVE_AMX
#include <immintrin.h>

#define AMX_TILE __attribute__((target("amx-tile")))

#define EACH_TILE(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

#define DP_CASE(pp, opc, d, s1, s2) case (d) * 64 + (s1) * 8 + (s2): DP_BYTES(pp, opc, d, s1, s2); break;
#define DP_S2(pp, opc, d, s1)                                                                  \
    DP_CASE(pp, opc, d, s1, 0) DP_CASE(pp, opc, d, s1, 1) DP_CASE(pp, opc, d, s1, 2)           \
    DP_CASE(pp, opc, d, s1, 3) DP_CASE(pp, opc, d, s1, 4) DP_CASE(pp, opc, d, s1, 5)           \
    DP_CASE(pp, opc, d, s1, 6) DP_CASE(pp, opc, d, s1, 7)
#define DP_S1(pp, opc, d)                                                                      \
    DP_S2(pp, opc, d, 0) DP_S2(pp, opc, d, 1) DP_S2(pp, opc, d, 2) DP_S2(pp, opc, d, 3)        \
    DP_S2(pp, opc, d, 4) DP_S2(pp, opc, d, 5) DP_S2(pp, opc, d, 6) DP_S2(pp, opc, d, 7)
#define DP_SWITCH(index, pp, opc)                                                              \
    switch (index) {                                                                           \
        DP_S1(pp, opc, 0) DP_S1(pp, opc, 1) DP_S1(pp, opc, 2) DP_S1(pp, opc, 3)                \
        DP_S1(pp, opc, 4) DP_S1(pp, opc, 5) DP_S1(pp, opc, 6) DP_S1(pp, opc, 7)                \
        default: return PYAMX_E_ARG;                                                           \
    }

/* ---- saving and restoring the thread's tile state ---- */

typedef pyamx_tile_state tile_state;

AMX_TILE static void store_tile(int t, void *dst, long stride)
{
#define STORE_CASE(n) case n: _tile_stored(n, dst, stride); break;
    switch (t) { EACH_TILE(STORE_CASE) default: break; }
#undef STORE_CASE
    BARRIER();
}

/* TILELOADDRS / TILELOADDRST1 tmm<t>, (%rax,%rcx,1): VEX.128.<F2|66>.0F38.W0 4A with ModRM
 * 00:t:100 and SIB 00:001:000 (no assembler before binutils 2.44 knows them). Checked against
 * clang 22's encodings (tests/cpu/test_rows_native.py). */
#define MOVRS_BYTES(p1, t, src, stride)                                                        \
    __asm__ volatile(".byte 0xc4, 0xe2, %c0, 0x4a, %c1, 0x08"                                 \
                     :                                                                      \
                     : "i"(p1), "i"(0x04 | ((t) << 3)), "a"(src), "c"(stride)              \
                     : "memory")
#define MOVRS_CASE(n) case n: MOVRS_BYTES(0x7b, n, src, stride); break;
#define MOVRST1_CASE(n) case n: MOVRS_BYTES(0x79, n, src, stride); break;
/* noinline: tests/cpu/test_rows_native.py finds its bytes in the built module */
__attribute__((noinline)) static void load_tile_movrs(int t, const void *src, long stride, int rst1)
{
    if (rst1) {
        switch (t) { EACH_TILE(MOVRST1_CASE) default: break; }
    } else {
        switch (t) { EACH_TILE(MOVRS_CASE) default: break; }
    }
}
#undef MOVRS_CASE
#undef MOVRST1_CASE

AMX_TILE static void load_tile(int t, const void *src, long stride, int t1)
{
    BARRIER();
    if (t1 >= 2) {
        load_tile_movrs(t, src, stride, t1 == 3);
        return;
    }
#define LOAD_CASE(n) case n: _tile_loadd(n, src, stride); break;
#define LOADT1_CASE(n) case n: _tile_stream_loadd(n, src, stride); break;
    if (t1) {
        switch (t) { EACH_TILE(LOADT1_CASE) default: break; }
    } else {
        switch (t) { EACH_TILE(LOAD_CASE) default: break; }
    }
#undef LOAD_CASE
#undef LOADT1_CASE
}

/* Loads and stores fault on a tile whose colsb is not a multiple of 4. Such a
 * tile always holds zeros: LDTILECFG zeroed it, and only TILEZERO may write it
 * (a dot product's operands need colsb % 4 == 0 too), so it needs no saving. */
static int tile_movable(const uint8_t *cfg, int t)
{
    return cfg_rows(cfg, t) && cfg_colsb(cfg, t) % 4 == 0;
}

/* Whatever this thread configured (a NativeMachine, or other code) is kept:
 * the config and every configured tile, stored with stride 64. A pending
 * start_row cannot be kept (the first store would consume it, and only
 * LDTILECFG, which zeroes the tiles, can set it again), so that is refused
 * before anything changes. */
AMX_TILE static int save_state(tile_state *s)
{
    _tile_storeconfig(s->cfg);
    BARRIER();
    if (s->cfg[0] == 0)
        return PYAMX_OK;
    if (s->cfg[1] != 0)
        return PYAMX_E_START_ROW;
    for (int t = 0; t < 8; t++)
        if (tile_movable(s->cfg, t))
            store_tile(t, s->tiles[t], 64);
    return PYAMX_OK;
}

AMX_TILE static void restore_state(const tile_state *s)
{
    if (s->cfg[0] == 0) {
        _tile_release();
        return;
    }
    BARRIER();
    _tile_loadconfig(s->cfg);
    for (int t = 0; t < 8; t++)
        if (tile_movable(s->cfg, t))
            load_tile(t, s->tiles[t], 64, 0);
}

/* For other kernel files (internal.h): the same save/restore around their own work. */
int pyamx_internal_save_state(pyamx_tile_state *s) { return save_state(s); }
void pyamx_internal_restore_state(const pyamx_tile_state *s) { restore_state(s); }

/* ---- one-shot dot products: tmm0 (C) += tmm1 (A) . tmm2 (B) ---- */

AMX_TILE static void oneshot_setup(const uint32_t *c, const void *a, const void *b, int m, int k, int n)
{
    uint8_t cfg[64] __attribute__((aligned(64)));
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    cfg[16] = (uint8_t)(4 * n); cfg[48] = (uint8_t)m; /* tmm0: C, M x N dwords */
    cfg[18] = (uint8_t)(4 * k); cfg[49] = (uint8_t)m; /* tmm1: A, M x K dwords */
    cfg[20] = (uint8_t)(4 * n); cfg[50] = (uint8_t)k; /* tmm2: B, K x N dwords */
    BARRIER();
    _tile_loadconfig(cfg);
    load_tile(0, c, 4L * n, 0);
    load_tile(1, a, 4L * k, 0);
    load_tile(2, b, 4L * n, 0);
}

/* Each dot-product row of the traits table gets its kernels here, issuing
 * the row's encoding (VEX map, pp, opcode) as bytes: tdp_<row> runs it on any
 * register triple (dst * 64 + src1 * 8 + src2), oneshot_<row> on tmm0 +=
 * tmm1 . tmm2 after loading them. The table is the one list of the dot
 * products, so a new row gets its kernels without an edit here. */
struct dot_kernels {
    int (*tdp)(int index);
    void (*oneshot)(uint32_t *c, const void *a, const void *b, int m, int k, int n);
};

#define PYAMX_DOT_ROW(name, prefix, map, pp, w, l, opc)                                        \
    PYAMX_ASSERT_DP_BYTES(name, prefix, map, w, l);                                            \
    AMX_TILE static int tdp_##name(int index) { DP_SWITCH(index, VEX_MAP_PP(map, pp), opc) return PYAMX_OK; }   \
    AMX_TILE static void oneshot_##name(uint32_t *c, const void *a, const void *b, int m, int k, int n) \
    {                                                                                          \
        oneshot_setup(c, a, b, m, k, n);                                                       \
        DP_BYTES(VEX_MAP_PP(map, pp), opc, 0, 1, 2);                                           \
        store_tile(0, c, 4L * n);                                                              \
    }
PYAMX_FOR_EACH_DOT
#undef PYAMX_DOT_ROW

/* By op id; empty for rows that are not dot products. */
#define PYAMX_DOT_ROW(name, prefix, map, pp, w, l, opc) [PYAMX_OP_##name] = {tdp_##name, oneshot_##name},
static const struct dot_kernels dot_kernels[PYAMX_OP_TRAITS_COUNT] = {PYAMX_FOR_EACH_DOT};
#undef PYAMX_DOT_ROW

int pyamx_dp_oneshot(int op, uint32_t *c, const void *a, const void *b, int m, int k, int n)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    if (!pyamx_dot_traits(op) || m < 1 || m > 16 || k < 1 || k > 16 || n < 1 || n > 16)
        return PYAMX_E_ARG;
    /* the last word on SIGILL: a row whose CPUID feature this CPU lacks never executes */
    if (!pyamx_internal_row_runnable(op))
        return PYAMX_E_NO_KERNEL;
    tile_state saved;
    int rc = save_state(&saved);
    if (rc != PYAMX_OK)
        return rc;
    dot_kernels[op].oneshot(c, a, b, m, k, n);
    restore_state(&saved);
    return PYAMX_OK;
}

/* ---- the tile machine, one instruction per call ---- */

/* What the registers hold now. Every guard below reads it here, in the
 * same C call that then executes the instruction. */
AMX_TILE static void loaded_cfg(uint8_t *cfg)
{
    BARRIER();
    _tile_storeconfig(cfg);
    BARRIER();
}

AMX_TILE int pyamx_load_config(const uint8_t *cfg64)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    uint8_t cfg[64] __attribute__((aligned(64)));
    memcpy(cfg, cfg64, 64); /* checked and loaded from one copy the caller cannot change */
    if (!cfg_legal(cfg))
        return PYAMX_E_GP_CONFIG;
    BARRIER();
    _tile_loadconfig(cfg);
    return PYAMX_OK;
}

AMX_TILE int pyamx_store_config(uint8_t *cfg64)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    uint8_t cfg[64] __attribute__((aligned(64)));
    loaded_cfg(cfg);
    memcpy(cfg64, cfg, 64);
    return PYAMX_OK;
}

/* The address of row 0 as the instruction computes it: base + offset,
 * wrapping like the CPU's 64-bit address arithmetic. Rows before start_row
 * are never addressed, so this may lie outside the buffer; every row that
 * is addressed was checked to lie inside it. */
static inline uintptr_t row0(const uint8_t *buf, int64_t offset)
{
    return (uintptr_t)buf + (uintptr_t)(uint64_t)offset;
}

AMX_TILE int pyamx_load_tile(int tmm, const uint8_t *buf, int64_t len, int64_t offset, int64_t stride, int t1)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    uint8_t cfg[64] __attribute__((aligned(64)));
    loaded_cfg(cfg);
    if (t1 < 0 || t1 > 3)
        return PYAMX_E_ARG;
    /* the read-shared hints are TILELOADDRS(T1): that row's CPUID feature, not the caller's word */
    if (t1 >= 2 && !pyamx_cpu_has_op_feature(PYAMX_OP_TILELOADDRS) && !pyamx_internal_emulated())
        return PYAMX_E_NO_KERNEL;
    int rc = pyamx_check_memory_operand(cfg, tmm, len, offset, stride);
    if (rc != PYAMX_OK)
        return rc;
    load_tile(tmm, (const void *)row0(buf, offset), (long)stride, t1);
    return PYAMX_OK;
}

/* <row op> zmm0, tmm<t>, %eax, then VMOVDQU32 %zmm0, (%rdx): EVEX.512.<pp>.0F38.W0 <opc> with
 * P0 = F2 (R, X, B, R' clear; map 0F38), P1 = W0 | vvvv 1111 (eax) | 1 | pp, P2 = 48 (L'L 512,
 * V' 1, no masking), ModRM 11:000:t; the store is 62 F1 7E 48 7F 02. Raw bytes, as for the dot
 * products: the assembler need not know AMX-AVX512 and the tile number is an immediate. */
#define ROW_BYTES(pp, opc, t, selector, out)                                                    \
    __asm__ volatile(".byte 0x62, 0xf2, %c0, 0x48, %c1, %c2\n\t"                               \
                     ".byte 0x62, 0xf1, 0x7e, 0x48, 0x7f, 0x02"                                 \
                     :                                                                          \
                     : "i"(0x7c | (pp)), "i"(opc), "i"(0xc0 | (t)), "a"(selector), "d"(out)     \
                     : "memory", "xmm0")

#define PYAMX_ROW_ROW(name, prefix, map, pp, w, l, opc)                                        \
    PYAMX_ASSERT_ROW_BYTES(name, prefix, map, w, l);                                           \
    AMX_TILE static void row_##name(int t, uint32_t selector, uint32_t *out)                  \
    {                                                                                          \
        switch (t) {                                                                           \
            case 0: ROW_BYTES(pp, opc, 0, selector, out); break;                               \
            case 1: ROW_BYTES(pp, opc, 1, selector, out); break;                               \
            case 2: ROW_BYTES(pp, opc, 2, selector, out); break;                               \
            case 3: ROW_BYTES(pp, opc, 3, selector, out); break;                               \
            case 4: ROW_BYTES(pp, opc, 4, selector, out); break;                               \
            case 5: ROW_BYTES(pp, opc, 5, selector, out); break;                               \
            case 6: ROW_BYTES(pp, opc, 6, selector, out); break;                               \
            case 7: ROW_BYTES(pp, opc, 7, selector, out); break;                               \
            default: break;                                                                    \
        }                                                                                      \
    }
PYAMX_FOR_EACH_ROW
#undef PYAMX_ROW_ROW

#define PYAMX_ROW_ROW(name, prefix, map, pp, w, l, opc) [PYAMX_OP_##name] = row_##name,
static void (*const row_kernels[PYAMX_OP_TRAITS_COUNT])(int, uint32_t, uint32_t *) = {PYAMX_FOR_EACH_ROW};
#undef PYAMX_ROW_ROW

/* The imm8 form: EVEX.512.<pp>.0F3A.W0 <opc> /r ib (P0 = F3: map 0F3A, vvvv 1111), the imm8 an
 * immediate of the bytes, so one case per (tile, imm8); only imm8s with a row index below 16
 * (imm8[5:0] < 16, any chunk imm8[7:6]) have one, the guard refusing the others first. */
#define ROWI_BYTES(pp, opc, t, imm, out)                                                        \
    __asm__ volatile(".byte 0x62, 0xf3, %c0, 0x48, %c1, %c2, %c3\n\t"                          \
                     ".byte 0x62, 0xf1, 0x7e, 0x48, 0x7f, 0x02"                                 \
                     :                                                                          \
                     : "i"(0x7c | (pp)), "i"(opc), "i"(0xc0 | (t)), "i"(imm), "d"(out)          \
                     : "memory", "xmm0")
#define ROWI_CASE(pp, opc, t, imm) case (t) * 256 + (imm): ROWI_BYTES(pp, opc, t, imm, out); break;
#define ROWI_4(pp, opc, t, i)                                                                   \
    ROWI_CASE(pp, opc, t, (i)) ROWI_CASE(pp, opc, t, (i) + 1) ROWI_CASE(pp, opc, t, (i) + 2)    \
    ROWI_CASE(pp, opc, t, (i) + 3)
#define ROWI_16(pp, opc, t, c)                                                                  \
    ROWI_4(pp, opc, t, (c) * 64) ROWI_4(pp, opc, t, (c) * 64 + 4) ROWI_4(pp, opc, t, (c) * 64 + 8) \
    ROWI_4(pp, opc, t, (c) * 64 + 12)
#define ROWI_TILE(pp, opc, t)                                                                   \
    ROWI_16(pp, opc, t, 0) ROWI_16(pp, opc, t, 1) ROWI_16(pp, opc, t, 2) ROWI_16(pp, opc, t, 3)

#define PYAMX_ROWI(name, imm_map, imm_pp, imm_opc)                                             \
    _Static_assert((imm_map) == 3, "ROWI_BYTES cannot encode " #name "'s imm8 form");          \
    AMX_TILE static void rowi_##name(int index, uint32_t *out)                                 \
    {                                                                                          \
        switch (index) {                                                                       \
            ROWI_TILE(imm_pp, imm_opc, 0) ROWI_TILE(imm_pp, imm_opc, 1)                        \
            ROWI_TILE(imm_pp, imm_opc, 2) ROWI_TILE(imm_pp, imm_opc, 3)                        \
            ROWI_TILE(imm_pp, imm_opc, 4) ROWI_TILE(imm_pp, imm_opc, 5)                        \
            ROWI_TILE(imm_pp, imm_opc, 6) ROWI_TILE(imm_pp, imm_opc, 7)                        \
            default: break;                                                                    \
        }                                                                                      \
    }
PYAMX_FOR_EACH_IMM_FORM(PYAMX_ROWI)
#undef PYAMX_ROWI

#define PYAMX_ROWI(name, imm_map, imm_pp, imm_opc) [PYAMX_OP_##name] = rowi_##name,
static void (*const rowi_kernels[PYAMX_OP_TRAITS_COUNT])(int, uint32_t *) = {PYAMX_FOR_EACH_IMM_FORM(PYAMX_ROWI)};
#undef PYAMX_ROWI

/* Both forms' guards, then the kernel: imm < 0 is the GPR form with `selector`, else the imm8. */
static int tilerow(int op, int tmm, uint32_t selector, int imm, uint32_t *out16)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    if (!pyamx_row_traits(op))
        return PYAMX_E_ARG;
    if (!row_state_enabled(op))
        return PYAMX_E_NO_KERNEL;
    uint8_t cfg[64] __attribute__((aligned(64)));
    loaded_cfg(cfg);
    int rc = pyamx_check_tile_configured(cfg, tmm);
    if (rc != PYAMX_OK)
        return rc;
    /* no tile has a row 16: refused as the default numerics' #UD (docs/semantics.md section 9) */
    if ((imm < 0 ? selector & 0xFFFF : (uint32_t)imm & 0x3F) >= 16)
        return PYAMX_E_UD_SHAPE;
    uint32_t out[16] __attribute__((aligned(64)));
    if (imm < 0)
        row_kernels[op](tmm, selector, out);
    else
        rowi_kernels[op](tmm * 256 + imm, out);
    BARRIER();
    memcpy(out16, out, sizeof out);
    return PYAMX_OK;
}

int pyamx_tilerow(int op, int tmm, uint32_t selector, uint32_t *out16)
{
    return tilerow(op, tmm, selector, -1, out16);
}

int pyamx_tilerow_imm(int op, int tmm, int imm8, uint32_t *out16)
{
    if (imm8 < 0 || imm8 > 255)
        return PYAMX_E_ARG;
    return tilerow(op, tmm, 0, imm8, out16);
}

AMX_TILE int pyamx_store_tile(int tmm, uint8_t *buf, int64_t len, int64_t offset, int64_t stride)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    uint8_t cfg[64] __attribute__((aligned(64)));
    loaded_cfg(cfg);
    int rc = pyamx_check_memory_operand(cfg, tmm, len, offset, stride);
    if (rc != PYAMX_OK)
        return rc;
    store_tile(tmm, (void *)row0(buf, offset), (long)stride);
    return PYAMX_OK;
}

AMX_TILE int pyamx_zero_tile(int tmm)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    uint8_t cfg[64] __attribute__((aligned(64)));
    loaded_cfg(cfg);
    int rc = pyamx_check_tile_configured(cfg, tmm);
    if (rc != PYAMX_OK)
        return rc;
#define ZERO_CASE(n) case n: _tile_zero(n); break;
    switch (tmm) { EACH_TILE(ZERO_CASE) default: return PYAMX_E_UD_REGISTER; }
#undef ZERO_CASE
    return PYAMX_OK;
}

AMX_TILE int pyamx_release_tiles(void)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    _tile_release();
    return PYAMX_OK;
}

int pyamx_tdp(int op, int dst, int src1, int src2)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    if (!pyamx_dot_traits(op))
        return PYAMX_E_ARG;
    uint8_t cfg[64] __attribute__((aligned(64)));
    loaded_cfg(cfg);
    int rc = pyamx_check_dot_product(cfg, dst, src1, src2);
    if (rc != PYAMX_OK)
        return rc;
    /* the last word on SIGILL: a row whose CPUID feature this CPU lacks never executes */
    if (!pyamx_internal_row_runnable(op))
        return PYAMX_E_NO_KERNEL;
    return dot_kernels[op].tdp(dst * 64 + src1 * 8 + src2);
}

int pyamx_save_tiles(uint8_t *cfg64, uint8_t *tiles8192)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    tile_state s;
    memset(s.tiles, 0, sizeof s.tiles);
    int rc = save_state(&s);
    if (rc != PYAMX_OK)
        return rc;
    memcpy(cfg64, s.cfg, 64);
    memcpy(tiles8192, s.tiles, sizeof s.tiles);
    return PYAMX_OK;
}

int pyamx_restore_tiles(const uint8_t *cfg64, const uint8_t *tiles8192)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    tile_state s;
    memcpy(s.cfg, cfg64, 64); /* checked and loaded from one copy the caller cannot change */
    if (!cfg_legal(s.cfg) || s.cfg[1] != 0)
        return PYAMX_E_ARG;
    memcpy(s.tiles, tiles8192, sizeof s.tiles);
    restore_state(&s);
    return PYAMX_OK;
}

#else /* !PYAMX_HAVE_AMX: the module installs without kernels */

int pyamx_dp_oneshot(int op, uint32_t *c, const void *a, const void *b, int m, int k, int n)
{
    (void)op; (void)c; (void)a; (void)b; (void)m; (void)k; (void)n;
    return PYAMX_E_NO_KERNEL;
}
int pyamx_load_config(const uint8_t *cfg64) { (void)cfg64; return PYAMX_E_NO_KERNEL; }
int pyamx_store_config(uint8_t *cfg64) { (void)cfg64; return PYAMX_E_NO_KERNEL; }
int pyamx_load_tile(int tmm, const uint8_t *buf, int64_t len, int64_t offset, int64_t stride, int t1)
{
    (void)tmm; (void)buf; (void)len; (void)offset; (void)stride; (void)t1;
    return PYAMX_E_NO_KERNEL;
}
int pyamx_store_tile(int tmm, uint8_t *buf, int64_t len, int64_t offset, int64_t stride)
{
    (void)tmm; (void)buf; (void)len; (void)offset; (void)stride;
    return PYAMX_E_NO_KERNEL;
}
int pyamx_zero_tile(int tmm) { (void)tmm; return PYAMX_E_NO_KERNEL; }
int pyamx_tilerow(int op, int tmm, uint32_t selector, uint32_t *out16)
{
    (void)op; (void)tmm; (void)selector; (void)out16; (void)row_state_enabled;
    return PYAMX_E_NO_KERNEL;
}
int pyamx_tilerow_imm(int op, int tmm, int imm8, uint32_t *out16)
{
    (void)op; (void)tmm; (void)imm8; (void)out16;
    return PYAMX_E_NO_KERNEL;
}
int pyamx_release_tiles(void) { return PYAMX_E_NO_KERNEL; }
int pyamx_tdp(int op, int dst, int src1, int src2)
{
    (void)op; (void)dst; (void)src1; (void)src2;
    return PYAMX_E_NO_KERNEL;
}
int pyamx_save_tiles(uint8_t *cfg64, uint8_t *tiles8192) { (void)cfg64; (void)tiles8192; return PYAMX_E_NO_KERNEL; }
int pyamx_restore_tiles(const uint8_t *cfg64, const uint8_t *tiles8192)
{
    (void)cfg64; (void)tiles8192;
    return PYAMX_E_NO_KERNEL;
}

#endif
