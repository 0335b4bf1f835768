/* The compiled engine's driver: argument checks, packing (once per call,
 * shared by the threads), the NaN pre-scan, the split over threads, and the
 * exact per-element path for outputs with NaN operands. The arithmetic is in
 * engine_x86.c / engine_portable.c / engine_scalar.c.
 */
#include "pyamx.h"
#include "engine.h"
#include "engine_internal.h"

#include <stdlib.h>
#if defined(_WIN32)
#include <malloc.h>
#endif
#include <string.h>

#if !defined(_WIN32)
#include <pthread.h>
#define ENG_THREADS 1
#else
#define ENG_THREADS 0
#endif

/* Below about this many dword steps per thread a thread costs more than it saves. */
#define MIN_WORK_PER_THREAD (1 << 18)
/* Row panels kept hot (in L2) while the column panels of one K panel stream past. */
#define MC_ROWS 384

/* 64-byte aligned buffers (the kernels use aligned loads on packed panels). */
static void *alloc64(size_t bytes)
{
#if defined(_WIN32)
    return _aligned_malloc(bytes ? bytes : 1, 64);
#else
    void *p = 0;
    return posix_memalign(&p, 64, bytes ? bytes : 1) ? 0 : p;
#endif
}

static void free64(void *p)
{
#if defined(_WIN32)
    _aligned_free(p);
#else
    free(p);
#endif
}

static const struct eng_variant *variant(int kind, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (kind == PYAMX_ENGINE_PORTABLE)
        return eng_portable_supported(why) ? eng_portable_variant() : 0;
    if (kind == PYAMX_ENGINE_AVX2 || kind == PYAMX_ENGINE_AVX512)
        return eng_x86_cpu_has(kind, why) ? eng_x86_variant(kind) : 0;
    *why = "unknown engine kind";
    return 0;
}

int pyamx_engine_available(int kind) { return variant(kind, 0) != 0; }

const char *pyamx_engine_reason(int kind)
{
    const char *why = "";
    variant(kind, &why);
    return why;
}

/* ---- packing ---- */

/* fp16 -> fp32 bits, exactly, branch-free so the packing loop vectorises.
 * A subnormal fp16 is m * 2^-24 with m < 1024: the fp32 product below is
 * exact and normal, so no rounding mode, FTZ or DAZ setting can change it. */
static inline uint32_t widen_fp16(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    uint32_t normal = sign | ((e + 112) << 23) | (m << 13);
    uint32_t special = sign | 0x7F800000u | (m << 13);
    float sub = (float)(int32_t)m * 0x1p-24f;
    uint32_t sub_bits;
    memcpy(&sub_bits, &sub, 4);
    uint32_t small = sign | sub_bits; /* m == 0 gives the signed zero */
    return e == 31 ? special : e == 0 ? small : normal;
}

/* Exponent range of the finite non-zero packed values (fp32 biased exponents). */
struct erange { int lo, hi; };

static void note_exponent(struct erange *r, uint32_t w)
{
    int e = (int)((w >> 23) & 0xFF);
    if (e == 0 || e == 255)
        return;
    if (e < r->lo)
        r->lo = e;
    if (e > r->hi)
        r->hi = e;
}

/* One row of operand values widened to words: fp32 bits (bf16 with DAZ,
 * fp16 exact) or int16 pairs of bytes. Returns 1 when a float row holds a
 * NaN; widens *er to the exponent range of its finite non-zero values when
 * er is not NULL. Tight loops the compiler can vectorise: packing must stay
 * a small fraction of the multiply. */
static int widen_row(int op, int is_signed, const uint8_t *src, int64_t count, uint32_t *dst, struct erange *er)
{
    if (op == PYAMX_OP_TDPBF16PS) {
        uint16_t h;
        uint32_t nan = 0;
        for (int64_t i = 0; i < count; i++) {
            memcpy(&h, src + 2 * i, 2);
            uint32_t w = (uint32_t)h << 16;
            w = (w & 0x7F800000u) ? w : (w & 0x80000000u);
            nan |= (w & 0x7FFFFFFFu) > 0x7F800000u;
            dst[i] = w;
        }
        if (er)
            for (int64_t i = 0; i < count; i++)
                note_exponent(er, dst[i]);
        return (int)nan;
    }
    if (op == PYAMX_OP_TDPFP16PS) {
        uint16_t h;
        uint32_t nan = 0;
        for (int64_t i = 0; i < count; i++) {
            memcpy(&h, src + 2 * i, 2);
            uint32_t w = widen_fp16(h);
            nan |= (w & 0x7FFFFFFFu) > 0x7F800000u;
            dst[i] = w;
        }
        if (er)
            for (int64_t i = 0; i < count; i++)
                note_exponent(er, dst[i]);
        return (int)nan;
    }
    /* count words of two bytes each */
    if (is_signed)
        for (int64_t i = 0; i < count; i++)
            dst[i] = (uint32_t)(uint16_t)(int16_t)(int8_t)src[2 * i] | ((uint32_t)(uint16_t)(int16_t)(int8_t)src[2 * i + 1] << 16);
    else
        for (int64_t i = 0; i < count; i++)
            dst[i] = (uint32_t)src[2 * i] | ((uint32_t)src[2 * i + 1] << 16);
    return 0;
}

struct job {
    const struct eng_variant *v;
    int op, is_float, in_range;
    int64_t m, n, kd, mp, nq;
    const uint32_t *ap, *bp;
    const uint8_t *row_nan, *col_nan;
    const uint32_t *c_in;
    int64_t ldc_in;
    uint32_t *c_out;
    int64_t ldc_out;
    int split_cols, parts, any_nan;
};

/* A row by row: each row's 2*kd words go to every (2*mr)-th pair of its panel. */
static int pack_a(const struct job *j, uint32_t *ap, const uint8_t *a, int64_t lda, uint8_t *row_nan, uint32_t *tmp,
                  struct erange *er)
{
    int mr = j->v->mr, any = 0;
    int a_signed = j->op == PYAMX_OP_TDPBSSD || j->op == PYAMX_OP_TDPBSUD;
    for (int64_t p = 0; p < j->mp; p++) {
        uint32_t *dst = ap + p * j->kd * 2 * mr;
        for (int r = 0; r < mr; r++) {
            int64_t row = p * mr + r;
            if (row >= j->m) {
                for (int64_t k = 0; k < j->kd; k++)
                    dst[k * 2 * mr + 2 * r] = dst[k * 2 * mr + 2 * r + 1] = 0;
                continue;
            }
            int nan = widen_row(j->op, a_signed, a + row * lda, 2 * j->kd, tmp, er);
            if (row_nan)
                row_nan[row] = (uint8_t)nan;
            any |= nan;
            for (int64_t k = 0; k < j->kd; k++)
                memcpy(dst + k * 2 * mr + 2 * r, tmp + 2 * k, 8);
        }
    }
    return any;
}

/* B row by row (one k at a time): even words to [0, nr), odd words to [nr, 2nr) of each panel. */
static int pack_b(const struct job *j, uint32_t *bp, const uint8_t *b, int64_t ldb, uint8_t *col_nan, uint32_t *tmp,
                  struct erange *er)
{
    int nr = j->v->nr, any = 0;
    int b_signed = j->op == PYAMX_OP_TDPBSSD || j->op == PYAMX_OP_TDPBUSD;
    if (col_nan)
        memset(col_nan, 0, (size_t)j->n);
    for (int64_t k = 0; k < j->kd; k++) {
        int nan = widen_row(j->op, b_signed, b + k * ldb, 2 * j->n, tmp, er);
        any |= nan;
        if (nan)
            for (int64_t c = 0; c < j->n; c++)
                col_nan[c] |= (uint8_t)(eng_isnan(tmp[2 * c]) | eng_isnan(tmp[2 * c + 1]));
        for (int64_t q = 0; q < j->nq; q++) {
            uint32_t *d = bp + (q * j->kd + k) * 2 * nr;
            int64_t col = q * nr, cols = j->n - col < nr ? j->n - col : nr;
            const uint32_t *t = tmp + 2 * col;
            for (int64_t c = 0; c < cols; c++) {
                d[c] = t[2 * c];
                d[nr + c] = t[2 * c + 1];
            }
            for (int64_t c = cols; c < nr; c++)
                d[c] = d[nr + c] = 0;
        }
    }
    return any;
}

struct pack_b_task {
    const struct job *j;
    uint32_t *bp;
    const uint8_t *b;
    int64_t ldb;
    uint8_t *col_nan;
    uint32_t *tmp;
    struct erange er;
    int need_range, any_nan;
};

static void *pack_b_main(void *arg)
{
    struct pack_b_task *t = arg;
    t->any_nan = pack_b(t->j, t->bp, t->b, t->ldb, t->col_nan, t->tmp, t->need_range ? &t->er : 0);
    return 0;
}

/* ---- the work of one thread ---- */

/* Output element (row, col) through the exact scalar functions, from the original C. */
static uint32_t exact_element(const struct job *j, int64_t row, int64_t col)
{
    int mr = j->v->mr, nr = j->v->nr;
    const uint32_t *a = j->ap + (row / mr) * j->kd * 2 * mr + (row % mr) * 2;
    const uint32_t *b = j->bp + (col / nr) * j->kd * 2 * nr + (col % nr);
    uint32_t acc = j->c_in[row * j->ldc_in + col];
    for (int64_t kb = 0; kb < j->kd; kb += ENG_BLOCK) {
        int64_t end = kb + ENG_BLOCK < j->kd ? kb + ENG_BLOCK : j->kd;
        uint32_t even = 0, odd = 0;
        for (int64_t k = kb; k < end; k++) {
            even = eng_fma32(a[k * 2 * mr], b[k * 2 * nr], even);
            odd = eng_fma32(a[k * 2 * mr + 1], b[k * 2 * nr + nr], odd);
        }
        acc = eng_add32(acc, eng_add32(even, odd));
    }
    return acc;
}

static void run_part(const struct job *j, int part)
{
    const struct eng_variant *v = j->v;
    int mr = v->mr, nr = v->nr;
    int64_t units = j->split_cols ? j->nq : j->mp;
    int64_t u0 = units * part / j->parts, u1 = units * (part + 1) / j->parts;
    int64_t p0 = j->split_cols ? 0 : u0, p1 = j->split_cols ? j->mp : u1;
    int64_t q0 = j->split_cols ? u0 : 0, q1 = j->split_cols ? u1 : j->nq;
    if (u0 >= u1)
        return;
    int64_t r0 = p0 * mr, r1 = p1 * mr < j->m ? p1 * mr : j->m;
    int64_t c0 = q0 * nr, c1 = q1 * nr < j->n ? q1 * nr : j->n;

    struct eng_fpenv saved;
    v->enter(&saved);
    for (int64_t r = r0; r < r1; r++)
        memcpy(j->c_out + r * j->ldc_out + c0, j->c_in + r * j->ldc_in + c0, (size_t)(c1 - c0) * 4);

    uint32_t tile[ENG_MAX_MR * ENG_MAX_NR];
    int64_t mc_panels = MC_ROWS / mr;
    for (int64_t pc = 0; pc < j->kd; pc += ENG_KC) {
        int64_t kl = j->kd - pc < ENG_KC ? j->kd - pc : ENG_KC;
        for (int64_t pb = p0; pb < p1; pb += mc_panels) {
            int64_t pe = pb + mc_panels < p1 ? pb + mc_panels : p1;
            for (int64_t q = q0; q < q1; q++) {
                const uint32_t *bp = j->bp + (q * j->kd + pc) * 2 * nr;
                int64_t col = q * nr, cols = j->n - col < nr ? j->n - col : nr;
                for (int64_t p = pb; p < pe; p++) {
                    const uint32_t *ap = j->ap + (p * j->kd + pc) * 2 * mr;
                    int64_t row = p * mr, rows = j->m - row < mr ? j->m - row : mr;
                    uint32_t *c = j->c_out + row * j->ldc_out + col;
                    if (rows == mr && cols == nr) {
                        if (j->is_float)
                            v->float_kernel(kl, ap, bp, c, j->ldc_out, j->in_range);
                        else
                            v->int_kernel(kl, ap, bp, c, j->ldc_out);
                        continue;
                    }
                    memset(tile, 0, sizeof tile);
                    for (int64_t r = 0; r < rows; r++)
                        memcpy(tile + r * nr, c + r * j->ldc_out, (size_t)cols * 4);
                    if (j->is_float)
                        v->float_kernel(kl, ap, bp, tile, nr, j->in_range);
                    else
                        v->int_kernel(kl, ap, bp, tile, nr);
                    for (int64_t r = 0; r < rows; r++)
                        memcpy(c + r * j->ldc_out, tile + r * nr, (size_t)cols * 4);
                }
            }
        }
    }
    if (j->is_float) {
        for (int64_t r = r0; r < r1; r++) {
            if (!j->any_nan) {
                /* only C can hold a NaN in this row */
                const uint32_t *ci = j->c_in + r * j->ldc_in;
                for (int64_t col = c0; col < c1; col++)
                    if (eng_isnan(ci[col]))
                        j->c_out[r * j->ldc_out + col] = exact_element(j, r, col);
                continue;
            }
            for (int64_t col = c0; col < c1; col++)
                if (j->row_nan[r] | j->col_nan[col] | eng_isnan(j->c_in[r * j->ldc_in + col]))
                    j->c_out[r * j->ldc_out + col] = exact_element(j, r, col);
        }
    }
    v->leave(&saved);
}

#if ENG_THREADS
struct worker { const struct job *job; int part; pthread_t thread; int started; };

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    run_part(w->job, w->part);
    return 0;
}
#endif

static int overlaps(const void *p0, size_t n0, const void *p1, size_t n1)
{
    uintptr_t a = (uintptr_t)p0, b = (uintptr_t)p1;
    return a < b + n1 && b < a + n0;
}

int pyamx_engine_dot(int kind, int op, const void *a, int64_t lda, const void *b, int64_t ldb,
                     const uint32_t *c_in, int64_t ldc_in, uint32_t *c_out, int64_t ldc_out,
                     int64_t m, int64_t n, int64_t kd, int threads)
{
    const struct eng_variant *v = variant(kind, 0);
    if (!v)
        return PYAMX_ENGINE_E_UNAVAILABLE;
    if (op < PYAMX_OP_TDPBF16PS || op > PYAMX_OP_TDPBUUD || !a || !b || !c_in || !c_out)
        return PYAMX_ENGINE_E_ARG;
    if (m < 1 || n < 1 || kd < 1 || m > (1 << 30) || n > (1 << 30) || kd > (1 << 30))
        return PYAMX_ENGINE_E_ARG;
    if (lda < 4 * kd || ldb < 4 * n || ldc_in < n || ldc_out < n)
        return PYAMX_ENGINE_E_ARG;
    int is_float = op == PYAMX_OP_TDPBF16PS || op == PYAMX_OP_TDPFP16PS;
    if (is_float && ((lda | ldb) & 1))
        return PYAMX_ENGINE_E_ARG;
    size_t out_bytes = (size_t)((m - 1) * ldc_out + n) * 4;
    if (overlaps(c_out, out_bytes, c_in, (size_t)((m - 1) * ldc_in + n) * 4) ||
        overlaps(c_out, out_bytes, a, (size_t)((m - 1) * lda + 4 * kd)) ||
        overlaps(c_out, out_bytes, b, (size_t)((kd - 1) * ldb + 4 * n)))
        return PYAMX_ENGINE_E_ARG;

    struct job j;
    memset(&j, 0, sizeof j);
    j.v = v;
    j.op = op;
    j.is_float = is_float;
    j.m = m;
    j.n = n;
    j.kd = kd;
    j.mp = (m + v->mr - 1) / v->mr;
    j.nq = (n + v->nr - 1) / v->nr;
    j.c_in = c_in;
    j.ldc_in = ldc_in;
    j.c_out = c_out;
    j.ldc_out = ldc_out;

    size_t a_words = (size_t)(j.mp * kd * 2 * v->mr), b_words = (size_t)(j.nq * kd * 2 * v->nr);
    uint32_t *ap = 0, *bp = 0;
    uint8_t *flags = 0;
    ap = alloc64(a_words * 4);
    bp = alloc64(b_words * 4);
    if (!ap || !bp || (is_float && !(flags = malloc((size_t)(m + n))))) {
        free64(ap);
        free64(bp);
        return PYAMX_ENGINE_E_NOMEM;
    }
    double work = (double)m * (double)n * (double)kd; /* double: no overflow for any argument */
    int64_t parts = threads < 1 ? 1 : threads;
    if ((double)parts > work / MIN_WORK_PER_THREAD)
        parts = work / MIN_WORK_PER_THREAD >= 1 ? (int64_t)(work / MIN_WORK_PER_THREAD) : 1;
    j.split_cols = j.nq >= parts || j.nq >= j.mp;
    int64_t units = j.split_cols ? j.nq : j.mp;
    if (parts > units)
        parts = units;
    j.parts = (int)parts;

    struct erange ea = {255, 0};
    /* only the portable kernel looks at the exponent range */
    int need_range = is_float && kind == PYAMX_ENGINE_PORTABLE;
    struct pack_b_task pb = {&j, bp, b, ldb, is_float ? flags + m : 0, 0, {255, 0}, need_range, 0};
    uint32_t *tmp = malloc((size_t)(2 * kd) * 4);
    pb.tmp = malloc((size_t)(2 * n) * 4);
    if (!tmp || !pb.tmp) {
        free(tmp);
        free(pb.tmp);
        free64(ap);
        free64(bp);
        free(flags);
        return PYAMX_ENGINE_E_NOMEM;
    }
    /* With threads to spare, B is packed by a helper while this thread packs A. */
#if ENG_THREADS
    pthread_t packer;
    int helper = parts > 1 && pthread_create(&packer, 0, pack_b_main, &pb) == 0;
#else
    int helper = 0;
#endif
    j.any_nan = pack_a(&j, ap, a, lda, is_float ? flags : 0, tmp, need_range ? &ea : 0);
#if ENG_THREADS
    if (helper)
        pthread_join(packer, 0);
#endif
    if (!helper)
        pack_b_main(&pb);
    j.any_nan |= pb.any_nan;
    struct erange eb = pb.er;
    free(tmp);
    free(pb.tmp);
    j.ap = ap;
    j.bp = bp;
    j.row_nan = flags;
    j.col_nan = flags ? flags + m : 0;
    /* Every finite non-zero product is an fp32 normal number when the
     * smallest exponents sum to >= -126 and the largest to < 127 (products
     * of values below 2^(e+1) stay below 2^128 * 2^-1). */
    j.in_range = ea.lo > ea.hi || eb.lo > eb.hi ||
                 ((ea.lo - 127) + (eb.lo - 127) >= -126 && (ea.hi - 127 + 1) + (eb.hi - 127 + 1) <= 127);

#if ENG_THREADS
    struct worker *workers = parts > 1 ? calloc((size_t)parts, sizeof *workers) : 0;
    if (workers) {
        for (int i = 1; i < parts; i++) {
            workers[i].job = &j;
            workers[i].part = i;
            workers[i].started = pthread_create(&workers[i].thread, 0, worker_main, &workers[i]) == 0;
        }
    }
    run_part(&j, 0);
    for (int i = 1; i < parts; i++) {
        if (workers && workers[i].started)
            pthread_join(workers[i].thread, 0);
        else
            run_part(&j, i); /* no thread (or no memory for one): do its share here */
    }
    free(workers);
#else
    for (int i = 0; i < parts; i++)
        run_part(&j, i);
#endif
    free64(ap);
    free64(bp);
    free(flags);
    return PYAMX_ENGINE_OK;
}

/* ---- scalar primitives and test hooks ---- */

uint32_t pyamx_engine_fma32(uint32_t a, uint32_t b, uint32_t acc)
{
    struct eng_fpenv saved;
    eng_portable_variant()->enter(&saved);
    uint32_t r = eng_fma32(a, b, acc);
    eng_portable_variant()->leave(&saved);
    return r;
}

uint32_t pyamx_engine_add32(uint32_t x, uint32_t y)
{
    struct eng_fpenv saved;
    eng_portable_variant()->enter(&saved);
    uint32_t r = eng_add32(x, y);
    eng_portable_variant()->leave(&saved);
    return r;
}

uint32_t pyamx_engine_getcsr(void) { return ENG_X86 ? eng_x86_getcsr() : 0; }

int pyamx_engine_dot_under_mxcsr(uint32_t mxcsr, uint32_t *mxcsr_after, int kind, int op,
                                 const void *a, int64_t lda, const void *b, int64_t ldb,
                                 const uint32_t *c_in, int64_t ldc_in, uint32_t *c_out, int64_t ldc_out,
                                 int64_t m, int64_t n, int64_t kd, int threads)
{
    if (!ENG_X86)
        return PYAMX_ENGINE_E_UNAVAILABLE;
    /* LDMXCSR faults (#GP) on any of the reserved bits 16-31: refuse, as pyamx_set_mxcsr does. */
    if (mxcsr > 0xFFFFu || !mxcsr_after)
        return PYAMX_ENGINE_E_ARG;
    uint32_t own = eng_x86_getcsr();
    eng_x86_setcsr(mxcsr);
    int rc = pyamx_engine_dot(kind, op, a, lda, b, ldb, c_in, ldc_in, c_out, ldc_out, m, n, kd, threads);
    *mxcsr_after = eng_x86_getcsr();
    eng_x86_setcsr(own);
    return rc;
}
