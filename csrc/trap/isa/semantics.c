/* Instruction semantics of the trap mode (docs/semantics.md sections 1 and 2):
 * the tile configuration rules, loads and stores, and the dot products on
 * a thread's emulated tile state (AMX-FP8's in fp8_dot.c).  Called by the SIGILL handler for an
 * instruction that decoded and is permitted; every rule that silicon
 * enforces with #UD or #GP is checked here and reported through the
 * message.
 */
#include "internal.h"
#include "fp32.h"

#include <immintrin.h>
#include <string.h>

_Static_assert(sizeof pyamx_op_actions == N_OPS, "one action entry per enum pyamx_op id");

static int gp_cfg(struct msg *m, const char *rule, int64_t a, int64_t b)
{
    m_str(m, rule);
    if (a >= 0) {
        m_str(m, " ");
        m_dec(m, a);
    }
    if (b >= 0) {
        m_str(m, " value ");
        m_dec(m, b);
    }
    return EXEC_GP;
}

static int do_load_config(struct tile_state *st, const uint8_t *mem, struct msg *m)
{
    uint8_t c[64];
    memcpy(c, mem, 64); /* a bad address faults here: SIGSEGV, as the #PF would */
    if (c[0] == 0) {
        state_init(st);
        return EXEC_OK;
    }
    if (c[0] > 1)
        return gp_cfg(m, "palette_id (byte 0) is not 0 or 1:", -1, c[0]);
    for (int b = 2; b < 64; b++) {
        if ((b >= 2 && b < 16) || (b >= 32 && b < 48) || b >= 56) {
            if (c[b])
                return gp_cfg(m, "reserved byte is not zero: byte", b, c[b]);
        }
    }
    for (int t = 0; t < 8; t++) {
        uint16_t colsb = (uint16_t)(c[16 + 2 * t] | (c[17 + 2 * t] << 8));
        if (colsb > 64)
            return gp_cfg(m, "colsb > 64 for tile", t, colsb);
        if (c[48 + t] > 16)
            return gp_cfg(m, "rows > 16 for tile", t, c[48 + t]);
        if ((colsb == 0) != (c[48 + t] == 0))
            return gp_cfg(m, "exactly one of rows/colsb is zero for tile", t, -1);
    }
    state_init(st); /* a successful LDTILECFG zeroes all tile data */
    state_config_from_bytes(st, c);
    return EXEC_OK;
}

static void do_store_config(const struct tile_state *st, uint8_t *mem)
{
    uint8_t c[64];
    state_config_to_bytes(st, c);
    memcpy(mem, c, 64);
}

static int need_configured(const struct tile_state *st, struct msg *m)
{
    if (st->palette)
        return 0;
    m_str(m, "tiles are not configured (init state; no ");
    m_str(m, pyamx_op_names[PYAMX_OP_OF_LOAD_CONFIG]);
    m_str(m, ")");
    return 1;
}

static int need_register(const char *what, int t, struct msg *m)
{
    if (t < 8)
        return 0;
    m_tile(m, what, t);
    m_str(m, " does not exist in palette 1 (tmm0..tmm7)");
    return 1;
}

static int need_tile(const struct tile_state *st, const char *what, int t, struct msg *m)
{
    if (need_register(what, t, m))
        return 1;
    if (st->rows[t] == 0) {
        m_tile(m, what, t);
        m_str(m, " is not configured (rows=0, colsb=0)");
        return 1;
    }
    return 0;
}

/* The tile of a load or store, as silicon checks it (Sapphire Rapids,
 * docs/semantics.md section 7; the SDM's class AMX-E3 names none of these):
 * a configured tile, colsb a multiple of 4, and start_row below its rows. */
static int need_memory_tile(const struct tile_state *st, const char *what, int t, struct msg *m)
{
    if (need_tile(st, what, t, m))
        return 1;
    if (st->colsb[t] % 4) {
        m_tile(m, what, t);
        m_str(m, " colsb is not a multiple of 4: ");
        m_dec(m, st->colsb[t]);
        return 1;
    }
    if (st->start_row >= st->rows[t]) {
        m_str(m, "start_row ");
        m_dec(m, st->start_row);
        m_str(m, " is not below the rows of ");
        m_tile(m, what, t);
        m_str(m, ": ");
        m_dec(m, st->rows[t]);
        return 1;
    }
    return 0;
}

static void zero_tail(struct tile_state *st, int t, int rows, int bytes)
{
    for (int r = 0; r < 16; r++) {
        int from = r < rows ? bytes : 0;
        if (from < 64)
            memset(&st->tiles[t][r][from], 0, (size_t)(64 - from));
    }
}

static void do_load_tile(struct tile_state *st, int t, uint64_t base, int64_t stride)
{
    int rows = st->rows[t], colsb = st->colsb[t];
    for (int r = st->start_row; r < rows; r++) {
        /* start_row tracks progress so a fault on a row leaves the
         * restart point where silicon would. */
        st->start_row = (uint8_t)r;
        const uint8_t *src = (const uint8_t *)(uintptr_t)(base + (uint64_t)r * (uint64_t)stride);
        memcpy(st->tiles[t][r], src, (size_t)colsb);
        memset(&st->tiles[t][r][colsb], 0, (size_t)(64 - colsb));
    }
    for (int r = rows; r < 16; r++)
        memset(st->tiles[t][r], 0, 64);
    st->start_row = 0;
}

static void do_store_tile(struct tile_state *st, int t, uint64_t base, int64_t stride)
{
    int rows = st->rows[t], colsb = st->colsb[t];
    for (int r = st->start_row; r < rows; r++) {
        st->start_row = (uint8_t)r;
        uint8_t *dst = (uint8_t *)(uintptr_t)(base + (uint64_t)r * (uint64_t)stride);
        memcpy(dst, st->tiles[t][r], (size_t)colsb);
    }
    st->start_row = 0;
}

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static inline void widen_pair(uint32_t w, int fp16, uint32_t *lo, uint32_t *hi)
{
    if (fp16) {
        *lo = f16_to_f32((uint16_t)(w & 0xFFFF));
        *hi = f16_to_f32((uint16_t)(w >> 16));
    } else {
        *lo = w << 16; /* bf16 -> fp32 is a shift: exact, NaN payload kept */
        *hi = w & 0xFFFF0000u;
    }
}

/* fma32 with the accumulator's NaN first: the SDM writes the complex rows'
 * steps fma32(acc, a, b) where TDPFP16PS's are acc + a * b (docs/semantics.md
 * section 8); everything else as fma32. */
__attribute__((target("fma"))) static uint32_t fma32_acc_first(uint32_t acc, uint32_t a, uint32_t b)
{
    if (pyamx_f32_is_nan(acc))
        return acc | PYAMX_F32_QUIET;
    return fma32(a, b, acc);
}

/* Kept out of line so that no fp operation can be scheduled across the
 * MXCSR switch in its caller.
 *
 * Two paths with identical results.  When no used element of tsrc1 or
 * tsrc2 is an infinity or NaN, no product is special, so even/odd can
 * only become infinite by overflow and never NaN: the hardware FMA under
 * PYAMX_MXCSR_DAZ_FTZ is then exactly fma32, and 8 lanes at a time are safe.
 * Otherwise the scalar fma32 with its explicit NaN order runs.  The final
 * two add32 per element are always scalar, as the destination may hold
 * NaNs whose order matters.  acc_first: the scalar steps take the
 * accumulator's NaN first (the complex rows). */
__attribute__((noinline, target("avx,fma"))) static void dp_float_rows(struct tile_state *st,
                                                                        int d, int s1, int s2,
                                                                        int fp16, int acc_first)
{
    int M = st->rows[d], K = st->rows[s2], N = st->colsb[d] / 4;
    uint32_t special = 0;
    for (int k = 0; k < K; k++) {
        for (int n = 0; n < 16; n++) {
            uint32_t lo, hi;
            widen_pair(rd32(&st->tiles[s2][k][4 * n]), fp16, &lo, &hi);
            st->bconv[k][0][n] = lo;
            st->bconv[k][1][n] = hi;
            if (n < N)
                special |= (uint32_t)(is_special32(lo) | is_special32(hi));
        }
    }
    for (int m = 0; m < M && !special; m++) {
        for (int k = 0; k < K; k++) {
            uint32_t lo, hi;
            widen_pair(rd32(&st->tiles[s1][m][4 * k]), fp16, &lo, &hi);
            special |= (uint32_t)(is_special32(lo) | is_special32(hi));
        }
    }

    for (int m = 0; m < M; m++) {
        uint32_t even[16], odd[16];
        if (!special) {
            __m256 e0 = _mm256_setzero_ps(), e1 = _mm256_setzero_ps();
            __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps();
            for (int k = 0; k < K; k++) {
                uint32_t lo, hi;
                widen_pair(rd32(&st->tiles[s1][m][4 * k]), fp16, &lo, &hi);
                __m256 a0 = _mm256_set1_ps(bits_f(lo)), a1 = _mm256_set1_ps(bits_f(hi));
                const float *b0 = (const float *)st->bconv[k][0];
                const float *b1 = (const float *)st->bconv[k][1];
                e0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0), e0);
                e1 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0 + 8), e1);
                o0 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1), o0);
                o1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1 + 8), o1);
            }
            _mm256_storeu_ps((float *)even, e0);
            _mm256_storeu_ps((float *)even + 8, e1);
            _mm256_storeu_ps((float *)odd, o0);
            _mm256_storeu_ps((float *)odd + 8, o1);
        } else {
            for (int n = 0; n < N; n++)
                even[n] = odd[n] = 0; /* +0.0 */
            for (int k = 0; k < K; k++) {
                uint32_t a0, a1;
                widen_pair(rd32(&st->tiles[s1][m][4 * k]), fp16, &a0, &a1);
                for (int n = 0; n < N; n++) {
                    uint32_t b0 = st->bconv[k][0][n], b1 = st->bconv[k][1][n];
                    even[n] = acc_first ? fma32_acc_first(even[n], a0, b0) : fma32(a0, b0, even[n]);
                    odd[n] = acc_first ? fma32_acc_first(odd[n], a1, b1) : fma32(a1, b1, odd[n]);
                }
            }
        }
        for (int n = 0; n < N; n++) {
            uint32_t t = add32(even[n], odd[n]);
            uint8_t *cp = &st->tiles[d][m][4 * n];
            wr32(cp, add32(rd32(cp), t));
        }
    }
}

static void dp_int8_rows(struct tile_state *st, int d, int s1, int s2, int s1_signed, int s2_signed)
{
    int M = st->rows[d], K = st->rows[s2], N = st->colsb[d] / 4;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            uint32_t acc = rd32(&st->tiles[d][m][4 * n]);
            for (int k = 0; k < K; k++) {
                const uint8_t *a = &st->tiles[s1][m][4 * k];
                const uint8_t *b = &st->tiles[s2][k][4 * n];
                for (int i = 0; i < 4; i++) {
                    int32_t x = s1_signed ? (int32_t)(int8_t)a[i] : (int32_t)a[i];
                    int32_t y = s2_signed ? (int32_t)(int8_t)b[i] : (int32_t)b[i];
                    acc += (uint32_t)(x * y); /* |x*y| <= 2^14: no int overflow; wrap is in acc */
                }
            }
            wr32(&st->tiles[d][m][4 * n], acc);
        }
    }
}

static void int8_rows(struct tile_state *st, int d, int s1, int s2, int s1_signed, int s2_signed)
{
    if (trap_simd_enabled())
        trap_simd_dp_int8(st, d, s1, s2, s1_signed, s2_signed);
    else
        dp_int8_rows(st, d, s1, s2, s1_signed, s2_signed);
}

/* The vector paths never meet a NaN accumulator (no operand is special, so
 * even/odd stay finite or infinite), so only the scalar path needs acc_first. */
static void float_rows(struct tile_state *st, int d, int s1, int s2, int fp16, int acc_first)
{
    unsigned int saved = _mm_getcsr();
    _mm_setcsr(PYAMX_MXCSR_DAZ_FTZ);
    if (!trap_simd_enabled() || trap_simd_dp_float(st, d, s1, s2, fp16) != 0)
        dp_float_rows(st, d, s1, s2, fp16, acc_first);
    _mm_setcsr(saved);
}

/* AMX-COMPLEX through the fp16 dot product (docs/semantics.md section 8):
 * its two accumulators take a_im * b_re and a_re * b_im (TCMMIMFP16PS) or
 * a_re * b_re and -a_im * b_im (TCMMRLFP16PS), and TDPFP16PS's take
 * a_lo * b_lo and a_hi * b_hi; fp32 addition is commutative, so TDPFP16PS
 * on tsrc1 with its halves swapped (IM) or its high half negated (RL, the
 * fp16 sign flipped before conversion, as the pseudo-code does) gives the
 * same bits, except for which NaN wins where an accumulator already holds
 * one: with an infinity or a NaN among the operands the scalar steps run
 * with the accumulator's NaN first. tsrc1 is rearranged in place and put
 * back afterwards. */
static void complex_rows(struct tile_state *st, int d, int s1, int s2, int real)
{
    int M = st->rows[s1], K = st->colsb[s1] / 4;
    memcpy(st->saved_src1, st->tiles[s1], sizeof st->saved_src1);
    for (int m = 0; m < M; m++) {
        for (int k = 0; k < K; k++) {
            uint8_t *p = &st->tiles[s1][m][4 * k];
            uint32_t w = rd32(p);
            wr32(p, real ? w ^ 0x80000000u : (w >> 16) | (w << 16));
        }
    }
    float_rows(st, d, s1, s2, 1, 1);
    memcpy(st->tiles[s1], st->saved_src1, sizeof st->saved_src1);
}

static int do_dot(struct tile_state *st, const struct pyamx_trap_insn *in, struct msg *m)
{
    int d = in->tdst, s1 = in->tsrc1, s2 = in->tsrc2;
    if (need_configured(st, m) || need_tile(st, "tsrcdest", d, m) ||
        need_tile(st, "tsrc1", s1, m) || need_tile(st, "tsrc2", s2, m))
        return EXEC_UD;
    if (d == s1 || d == s2 || s1 == s2) {
        m_str(m, "operands are not three different tiles: ");
        m_tile(m, "tsrcdest", d);
        m_tile(m, ", tsrc1", s1);
        m_tile(m, ", tsrc2", s2);
        return EXEC_UD;
    }
    const int ts[3] = {d, s1, s2};
    const char *const names[3] = {"tsrcdest", "tsrc1", "tsrc2"};
    for (int i = 0; i < 3; i++) {
        if (st->colsb[ts[i]] % 4) {
            m_tile(m, names[i], ts[i]);
            m_str(m, " colsb is not a multiple of 4: ");
            m_dec(m, st->colsb[ts[i]]);
            return EXEC_UD;
        }
    }
    if (st->colsb[d] != st->colsb[s2]) {
        m_str(m, "tsrcdest colsb ");
        m_dec(m, st->colsb[d]);
        m_str(m, " != tsrc2 colsb ");
        m_dec(m, st->colsb[s2]);
        return EXEC_UD;
    }
    if (st->colsb[s1] / 4 != st->rows[s2]) {
        m_str(m, "tsrc1 colsb/4 ");
        m_dec(m, st->colsb[s1] / 4);
        m_str(m, " != tsrc2 rows ");
        m_dec(m, st->rows[s2]);
        return EXEC_UD;
    }
    if (st->rows[d] != st->rows[s1]) {
        m_str(m, "tsrcdest rows ");
        m_dec(m, st->rows[d]);
        m_str(m, " != tsrc1 rows ");
        m_dec(m, st->rows[s1]);
        return EXEC_UD;
    }
    if (st->rows[s2] > 16 || st->colsb[d] > 64) {
        m_str(m, "K or N exceeds tmul_maxk/tmul_maxn");
        return EXEC_UD;
    }

    /* The row's operand formats (pyamx/table/isa.py, through the generated
     * traits) pick the arithmetic; only the two complex rows, which share
     * their formats, are told apart by id. */
    const struct pyamx_op_traits *t = &pyamx_op_traits[in->op];
    switch (t->a_format) {
    case PYAMX_FMT_BF16:
    case PYAMX_FMT_FP16:
        float_rows(st, d, s1, s2, t->a_format == PYAMX_FMT_FP16, 0);
        break;
    case PYAMX_FMT_CFP16:
        complex_rows(st, d, s1, s2, pyamx_op_traits[in->op].part == 1);
        break;
    case PYAMX_FMT_BF8:
    case PYAMX_FMT_HF8:
        trap_dp_fp8_rows(st, d, s1, s2, t->a_format == PYAMX_FMT_HF8, t->b_format == PYAMX_FMT_HF8);
        break;
    default:
        int8_rows(st, d, s1, s2, t->a_signed, t->b_signed);
        break;
    }
    zero_tail(st, d, st->rows[d], st->colsb[d]);
    st->start_row = 0;
    return EXEC_OK;
}

int trap_execute(struct tile_state *st, const struct pyamx_trap_insn *in, struct msg *m)
{
    /* The config and memory rows by what they do (pyamx/table/isa.py's actions, through the generated
     * traits), never by op id: a new hinted load joins by its row alone. */
    switch (in->op > 0 && in->op < N_OPS ? pyamx_op_actions[in->op] : PYAMX_ACTION_NONE) {
    case PYAMX_ACTION_LOAD_CONFIG:
        return do_load_config(st, (const uint8_t *)(uintptr_t)in->addr, m);
    case PYAMX_ACTION_STORE_CONFIG:
        do_store_config(st, (uint8_t *)(uintptr_t)in->addr);
        return EXEC_OK;
    case PYAMX_ACTION_RELEASE:
        state_init(st);
        return EXEC_OK;
    case PYAMX_ACTION_ZERO:
        /* Silicon (Sapphire Rapids, docs/semantics.md section 7) also faults on an
         * unconfigured tdest, which the SDM's class AMX-E5 does not list. The
         * whole 16x64 tile is zeroed; start_row is ignored and reset. */
        if (need_configured(st, m) || need_tile(st, "tdest", in->tdst, m))
            return EXEC_UD;
        memset(st->tiles[in->tdst], 0, 1024);
        st->start_row = 0;
        return EXEC_OK;
    case PYAMX_ACTION_LOAD:
    case PYAMX_ACTION_LOAD_T1:
    case PYAMX_ACTION_LOAD_RS:   /* AMX-MOVRS: a read-shared hint, the same load */
    case PYAMX_ACTION_LOAD_RS_T1:
        if (need_configured(st, m) || need_memory_tile(st, "tdest", in->tdst, m))
            return EXEC_UD;
        do_load_tile(st, in->tdst, in->addr, in->stride);
        return EXEC_OK;
    case PYAMX_ACTION_STORE:
        if (need_configured(st, m) || need_memory_tile(st, "tsrc", in->tsrc1, m))
            return EXEC_UD;
        do_store_tile(st, in->tsrc1, in->addr, in->stride);
        return EXEC_OK;
    default:
        break;
    }
    /* The rest by the row's kind (pyamx/table/isa.py through the generated traits):
     * do_dot picks the arithmetic by the operand formats. */
    switch (in->op > 0 && in->op < N_OPS ? pyamx_op_traits[in->op].kind : PYAMX_KIND_NONE) {
    case PYAMX_KIND_DOT_PAIRS:
    case PYAMX_KIND_DOT_QUADS:
    case PYAMX_KIND_DOT_COMPLEX:
        return do_dot(st, in, m);
    case PYAMX_KIND_ROW:
        return trap_do_row(st, in, st->zmm, m); /* the handler writes st->zmm into zmm<zdst> */
    default:
        /* A row the decoder knows (it reads the whole table) but whose
         * arithmetic this mode has no code for: refused, never run as
         * another instruction. */
        m_str(m, "decoded, but the trap mode does not emulate this instruction");
        return EXEC_UD;
    }
}
