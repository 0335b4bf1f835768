/* The compiled engine's driver: its one entry (pyamx_engine_run: the call's
 * checks, then the AMX-FP8 rows to engine_fp8.c), packing (once per call,
 * shared by the threads), the NaN pre-scan, the split over the worker pool
 * (pool.c, shared with the native kernels), and the exact per-element path for
 * outputs with NaN operands. The arithmetic is in engine_x86.c /
 * engine_portable.c / engine_scalar.c, which call nothing here: what they
 * share with this file is in engine_internal.h.
 */
#include "pyamx.h"
#include "engine.h"
#include "engine_internal.h"
#include "pool.h"

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

/* The packed operands' buffer is kept for the next call (up to
 * CACHE_MAX_BYTES): a fresh one costs a page fault and a kernel zeroing
 * per 4 KiB on first touch, measured at 2-4% of a 1024^3 product. A call
 * that finds it in use (another thread's call) allocates its own. */
#define CACHE_MAX_BYTES ((size_t)64 << 20)
#if ENG_THREADS
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cache_buf;
static size_t cache_bytes;
#endif

static void *buffer_get(size_t bytes, int *cached)
{
    *cached = 0;
#if ENG_THREADS
    if (bytes <= CACHE_MAX_BYTES && pthread_mutex_trylock(&cache_lock) == 0) {
        if (cache_bytes < bytes) {
            free64(cache_buf);
            cache_buf = alloc64(bytes);
            cache_bytes = cache_buf ? bytes : 0;
        }
        if (cache_buf) {
            *cached = 1;
            return cache_buf;
        }
        pthread_mutex_unlock(&cache_lock);
    }
#endif
    return alloc64(bytes);
}

static void buffer_put(void *p, int cached)
{
#if ENG_THREADS
    if (cached) {
        pthread_mutex_unlock(&cache_lock);
        return;
    }
#endif
    (void)cached;
    free64(p);
}

static const struct eng_variant *variant(int kind, const char **why)
{
    const char *dummy;
    if (!eng_kind_runs(kind, why ? why : &dummy))
        return 0;
    return kind == PYAMX_ENGINE_PORTABLE ? eng_portable_variant() : eng_x86_variant(kind);
}

int pyamx_engine_available(int kind) { return variant(kind, 0) != 0; }

const char *pyamx_engine_reason(int kind)
{
    const char *why = "";
    variant(kind, &why);
    return why;
}

/* ---- packing ---- */

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

/* int8: count words, each the int16 pair of bytes src[2i], src[2i+1] (sign- or zero-extended). */
static void widen_bytes(int is_signed, const uint8_t *src, int64_t count, uint32_t *dst)
{
    if (is_signed)
        for (int64_t i = 0; i < count; i++)
            dst[i] = (uint32_t)(uint16_t)(int16_t)(int8_t)src[2 * i] | ((uint32_t)(uint16_t)(int16_t)(int8_t)src[2 * i + 1] << 16);
    else
        for (int64_t i = 0; i < count; i++)
            dst[i] = (uint32_t)src[2 * i] | ((uint32_t)src[2 * i + 1] << 16);
}

struct job {
    const struct eng_variant *v;
    int op, is_float, in_range;
    int complex_a;  /* 0; 1: A's dword halves swapped (TCMMIMFP16PS); 2: A's high half negated (TCMMRLFP16PS) */
    const struct pyamx_op_traits *t; /* op's row */
    int b_rowmajor;  /* b is K rows of N values, not kd rows of N interleaved dwords */
    int64_t m, n, kd, k, mp, nq; /* k: values per row of A (lanes * kd, or fewer: padded) */
    const uint32_t *ap, *bp;
    const uint8_t *row_nan, *col_nan;
    const uint32_t *c_in; /* NULL: C starts as +0 (int: 0) */
    int64_t ldc_in;
    uint32_t *c_out;
    int64_t ldc_out;
    int split_cols, parts, any_nan;
    int64_t units, unit_size; /* work units: groups of unit_size column (or row) panels */
    int64_t *next_unit;       /* the next unit nobody has taken (parts > 1) */
    const int *cancel;        /* the caller's flag (NULL: none), read only while a unit is held */
};

static inline int flag_set(const int *flag)
{
#if defined(__GNUC__) || defined(__clang__)
    return flag && __atomic_load_n(flag, __ATOMIC_RELAXED);
#else
    return flag && *(const volatile int *)flag;
#endif
}

/* Polled between tiles (under a millisecond of work apart on avx512, a few on portable), never in the kernels.
 * Only a thread holding a unit reads it: the caller returns, and may free the flag, once
 * every claimed unit is done, and a late helper claims none. */
static inline int cancelled(const struct job *j) { return flag_set(j->cancel); }

static int widen_floats(const struct job *j, const uint16_t *src, int64_t count, uint32_t *dst)
{
    return j->v->widen16 ? j->v->widen16(j->op, src, count, dst) : eng_widen16(j->op, src, count, dst);
}

/* A complex row's A as TDPFP16PS's (docs/semantics.md section 8), on widened words: fp16 -> fp32 is
 * exact and keeps the sign bit, so negating the fp16 before widening is flipping bit 31 after it
 * (a NaN's sign included). Words are whole dwords (pairs): the real row's k is even. */
static void complex_transform(int how, uint32_t *w, int64_t words)
{
    for (int64_t i = 0; i + 1 < words; i += 2) {
        if (how == 1) {
            uint32_t t = w[i];
            w[i] = w[i + 1];
            w[i + 1] = t;
        } else {
            w[i + 1] ^= 0x80000000u;
        }
    }
}

static void note_range(struct erange *er, const uint32_t *w, int64_t count)
{
    if (er)
        for (int64_t i = 0; i < count; i++)
            note_exponent(er, w[i]);
}

/* A row by row: each row's 2*kd words go to every (2*mr)-th pair of its
 * panel. Values past k pad the last dword: -0 for floats (a -0 * +0 product
 * leaves every lane's bits unchanged, -0 lanes included), 0 for int8.
 * tmp: 2*kd words plus 4*kd bytes. */
static int pack_a(const struct job *j, uint32_t *ap, const uint8_t *a, int64_t lda, uint8_t *row_nan, uint32_t *tmp,
                  struct erange *er)
{
    int mr = j->v->mr, any = 0;
    int a_signed = j->t->a_signed;
    int64_t words = 2 * j->kd;
    uint8_t *bytes = (uint8_t *)(tmp + words);
    for (int64_t p = 0; p < j->mp; p++) {
        uint32_t *dst = ap + p * j->kd * 2 * mr;
        for (int r = 0; r < mr; r++) {
            int64_t row = p * mr + r;
            if (row >= j->m) {
                for (int64_t k = 0; k < j->kd; k++)
                    dst[k * 2 * mr + 2 * r] = dst[k * 2 * mr + 2 * r + 1] = 0;
                continue;
            }
            const uint8_t *src = a + row * lda;
            if (j->is_float) {
                int nan = widen_floats(j, (const uint16_t *)src, j->k, tmp);
                for (int64_t i = j->k; i < words; i++)
                    tmp[i] = 0x80000000u;
                if (j->complex_a)
                    complex_transform(j->complex_a, tmp, words);
                note_range(er, tmp, j->k);
                if (row_nan)
                    row_nan[row] = (uint8_t)nan;
                any |= nan;
            } else if (j->k == 4 * j->kd) {
                widen_bytes(a_signed, src, words, tmp);
            } else {
                memcpy(bytes, src, (size_t)j->k);
                memset(bytes + j->k, 0, (size_t)(4 * j->kd - j->k));
                widen_bytes(a_signed, bytes, words, tmp);
            }
            for (int64_t k = 0; k < j->kd; k++)
                memcpy(dst + k * 2 * mr + 2 * r, tmp + 2 * k, 8);
        }
    }
    return any;
}

/* Marks the columns [col, col + count) whose words hold a NaN. */
static void mark_nan_cols(uint8_t *col_nan, int64_t col, const uint32_t *w, int64_t count)
{
    for (int64_t c = 0; c < count; c++)
        col_nan[col + c] |= (uint8_t)pyamx_f32_is_nan(w[c]);
}

/* B in the instructions' layout, one dword row k at a time (tmp: 2*n
 * words): even words to [0, nr), odd words to [nr, 2nr) of each panel. */
static int pack_b_vnni(const struct job *j, uint32_t *bp, const uint8_t *b, int64_t ldb, uint8_t *col_nan, uint32_t *tmp,
                       struct erange *er)
{
    int nr = j->v->nr, any = 0;
    int b_signed = j->t->b_signed;
    for (int64_t k = 0; k < j->kd; k++) {
        int nan = 0;
        if (j->is_float) {
            nan = widen_floats(j, (const uint16_t *)(b + k * ldb), 2 * j->n, tmp);
            note_range(er, tmp, 2 * j->n);
        } else {
            widen_bytes(b_signed, b + k * ldb, 2 * j->n, tmp);
        }
        any |= nan;
        if (nan)
            for (int64_t c = 0; c < j->n; c++)
                col_nan[c] |= (uint8_t)(pyamx_f32_is_nan(tmp[2 * c]) | pyamx_f32_is_nan(tmp[2 * c + 1]));
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

/* B row-major (k rows of n values): the words [h][c] of dword k come from
 * rows lanes*k + 2h (and + 2h + 1 for int8) at the panel's columns, so
 * float rows are widened straight into the panel. Rows past k pad with +0
 * (0 for int8). No transposition anywhere, and no interleaved copy of B. */
static int pack_b_rows(const struct job *j, uint32_t *bp, const uint8_t *b, int64_t ldb, uint8_t *col_nan,
                       struct erange *er)
{
    int nr = j->v->nr, any = 0;
    int b_signed = j->t->b_signed;
    for (int64_t k = 0; k < j->kd; k++) {
        for (int h = 0; h < 2; h++) {
            for (int64_t q = 0; q < j->nq; q++) {
                uint32_t *d = bp + (q * j->kd + k) * 2 * nr + h * nr;
                int64_t col = q * nr, cols = j->n - col < nr ? j->n - col : nr;
                if (j->is_float) {
                    int64_t row = 2 * k + h;
                    if (row < j->k) {
                        int nan = widen_floats(j, (const uint16_t *)(b + row * ldb) + col, cols, d);
                        note_range(er, d, cols);
                        if (nan)
                            mark_nan_cols(col_nan, col, d, cols);
                        any |= nan;
                    } else {
                        memset(d, 0, (size_t)cols * 4);
                    }
                } else {
                    int64_t row = 4 * k + 2 * h;
                    const uint8_t *r0 = row < j->k ? b + row * ldb + col : 0;
                    const uint8_t *r1 = row + 1 < j->k ? b + (row + 1) * ldb + col : 0;
                    for (int64_t c = 0; c < cols; c++) {
                        uint32_t lo = r0 ? (b_signed ? (uint16_t)(int16_t)(int8_t)r0[c] : r0[c]) : 0;
                        uint32_t hi = r1 ? (b_signed ? (uint16_t)(int16_t)(int8_t)r1[c] : r1[c]) : 0;
                        d[c] = lo | hi << 16;
                    }
                }
                for (int64_t c = cols; c < nr; c++)
                    d[c] = 0;
            }
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
    /* VCVTPH2PS raises the invalid flag on a signalling NaN: the kernels'
     * environment (exceptions masked) covers packing too, and the caller's
     * flags are restored after it. */
    struct eng_fpenv saved;
    t->j->v->enter(&saved);
    if (t->col_nan)
        memset(t->col_nan, 0, (size_t)t->j->n);
    struct erange *er = t->need_range ? &t->er : 0;
    t->any_nan = t->j->b_rowmajor ? pack_b_rows(t->j, t->bp, t->b, t->ldb, t->col_nan, er)
                                  : pack_b_vnni(t->j, t->bp, t->b, t->ldb, t->col_nan, t->tmp, er);
    t->j->v->leave(&saved);
    return 0;
}

/* ---- the work of one thread ---- */

/* Output element (row, col) through the exact scalar functions, from the original C. */
static uint32_t exact_element(const struct job *j, int64_t row, int64_t col)
{
    int mr = j->v->mr, nr = j->v->nr;
    const uint32_t *a = j->ap + (row / mr) * j->kd * 2 * mr + (row % mr) * 2;
    const uint32_t *b = j->bp + (col / nr) * j->kd * 2 * nr + (col % nr);
    uint32_t acc = j->c_in ? j->c_in[row * j->ldc_in + col] : 0;
    for (int64_t kb = 0; kb < j->kd; kb += ENG_BLOCK) {
        int64_t end = kb + ENG_BLOCK < j->kd ? kb + ENG_BLOCK : j->kd;
        uint32_t even = 0, odd = 0;
        if (j->complex_a) {
            /* the SDM writes the complex rows' steps fma32(acc, a, b): the accumulator's NaN comes first */
            for (int64_t k = kb; k < end; k++) {
                even = eng_fma32_acc_first(a[k * 2 * mr], b[k * 2 * nr], even);
                odd = eng_fma32_acc_first(a[k * 2 * mr + 1], b[k * 2 * nr + nr], odd);
            }
        } else {
            for (int64_t k = kb; k < end; k++) {
                even = eng_fma32(a[k * 2 * mr], b[k * 2 * nr], even);
                odd = eng_fma32(a[k * 2 * mr + 1], b[k * 2 * nr + nr], odd);
            }
        }
        acc = eng_add32(acc, eng_add32(even, odd));
    }
    return acc;
}

/* exact_element() into c_out, unless the call was cancelled (then 0): one element
 * costs kd scalar steps, so a row of them can outlast the tiles' polling interval. */
static int exact_unless_cancelled(const struct job *j, int64_t row, int64_t col)
{
    if (cancelled(j))
        return 0;
    j->c_out[row * j->ldc_out + col] = exact_element(j, row, col);
    return 1;
}

static const uint32_t zero_row[ENG_MAX_NR]; /* +0 / 0: C without c_in */

/* C's tile (rows x cols at row, col) as the kernel starts it: c_in, or +0 (int: 0) without one.
 * Done per tile just before its first K panel, so no separate pass over C. */
static void start_tile(const struct job *j, uint32_t *dst, int64_t ldd, int64_t row, int64_t col, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        if (j->c_in)
            memcpy(dst + r * ldd, j->c_in + (row + r) * j->ldc_in + col, (size_t)cols * 4);
        else
            memset(dst + r * ldd, 0, (size_t)cols * 4);
    }
}

/* Row panels [p0, p1) x column panels [q0, q1), all of K, C started from c_in. */
static void run_region(const struct job *j, int64_t p0, int64_t p1, int64_t q0, int64_t q1)
{
    const struct eng_variant *v = j->v;
    int mr = v->mr, nr = v->nr;
    int64_t r0 = p0 * mr, r1 = p1 * mr < j->m ? p1 * mr : j->m;
    int64_t c0 = q0 * nr, c1 = q1 * nr < j->n ? q1 * nr : j->n;

    uint32_t tile[ENG_MAX_MR * ENG_MAX_NR];
    int64_t mc_panels = MC_ROWS / mr;
    for (int64_t pc = 0; pc < j->kd; pc += ENG_KC) {
        int64_t kl = j->kd - pc < ENG_KC ? j->kd - pc : ENG_KC;
        for (int64_t pb = p0; pb < p1; pb += mc_panels) {
            int64_t pe = pb + mc_panels < p1 ? pb + mc_panels : p1;
            for (int64_t q = q0; q < q1; q++) {
                if (cancelled(j))
                    return; /* c_out is left partly written: the caller discards it */
                const uint32_t *bp = j->bp + (q * j->kd + pc) * 2 * nr;
                int64_t col = q * nr, cols = j->n - col < nr ? j->n - col : nr;
                for (int64_t p = pb; p < pe; p++) {
                    const uint32_t *ap = j->ap + (p * j->kd + pc) * 2 * mr;
                    int64_t row = p * mr, rows = j->m - row < mr ? j->m - row : mr;
                    uint32_t *c = j->c_out + row * j->ldc_out + col;
                    if (rows == mr && cols == nr) {
                        /* the first K panel starts from c_in's tile, or a repeated zero row */
                        const uint32_t *src = c;
                        int64_t lds = j->ldc_out;
                        if (pc == 0) {
                            src = j->c_in ? j->c_in + row * j->ldc_in + col : zero_row;
                            lds = j->c_in ? j->ldc_in : 0;
                        }
                        if (j->is_float)
                            v->float_kernel(kl, ap, bp, src, lds, c, j->ldc_out, j->in_range);
                        else
                            v->int_kernel(kl, ap, bp, src, lds, c, j->ldc_out);
                        continue;
                    }
                    memset(tile, 0, sizeof tile);
                    if (pc == 0)
                        start_tile(j, tile, nr, row, col, rows, cols);
                    else
                        for (int64_t r = 0; r < rows; r++)
                            memcpy(tile + r * nr, c + r * j->ldc_out, (size_t)cols * 4);
                    if (j->is_float)
                        v->float_kernel(kl, ap, bp, tile, nr, tile, nr, j->in_range);
                    else
                        v->int_kernel(kl, ap, bp, tile, nr, tile, nr);
                    for (int64_t r = 0; r < rows; r++)
                        memcpy(c + r * j->ldc_out, tile + r * nr, (size_t)cols * 4);
                }
            }
        }
    }
    if (j->is_float && (j->any_nan || j->c_in)) {
        for (int64_t r = r0; r < r1; r++) {
            const uint32_t *ci = j->c_in ? j->c_in + r * j->ldc_in : 0;
            if (!j->any_nan) {
                /* only C can hold a NaN in this row */
                for (int64_t col = c0; col < c1; col++)
                    if (pyamx_f32_is_nan(ci[col]) && !exact_unless_cancelled(j, r, col))
                        return;
                continue;
            }
            for (int64_t col = c0; col < c1; col++)
                if ((j->row_nan[r] | j->col_nan[col] | (ci && pyamx_f32_is_nan(ci[col]))) && !exact_unless_cancelled(j, r, col))
                    return;
        }
    }
}

/* One thread's share: units taken one at a time from a shared counter, so a
 * thread that gets less CPU (a busy neighbour on a shared machine) takes
 * fewer of them instead of holding everyone up. Every output element
 * belongs to exactly one unit, so the assignment cannot change a bit.
 * Returns the number of units this thread ran. */
static int64_t run_units(const struct job *j)
{
    int64_t ran = 0;
    struct eng_fpenv saved;
    j->v->enter(&saved);
    for (int64_t u = 0;; u++) {
#if ENG_THREADS
        if (j->next_unit)
            u = __atomic_fetch_add(j->next_unit, 1, __ATOMIC_RELAXED);
#endif
        if (u >= j->units)
            break;
        int64_t lo = u * j->unit_size, total = j->split_cols ? j->nq : j->mp;
        int64_t hi = lo + j->unit_size < total ? lo + j->unit_size : total;
        if (j->split_cols)
            run_region(j, 0, j->mp, lo, hi);
        else
            run_region(j, lo, hi, 0, j->nq);
        ran++;
    }
    j->v->leave(&saved);
    return ran;
}

/* A thread's share on the pool (pool.c): run_units(), which claims units from the job's counter. */
static void units_part(void *arg, int part)
{
    (void)part;
    run_units(arg);
}

/* The two packings of a call with threads, side by side on the pool: A (part 0), B (part 1). */
struct pack_both {
    struct job *j;
    struct pack_b_task *pb;
    const uint8_t *a;
    int64_t lda;
    uint8_t *row_nan;
    uint32_t *tmp;
    struct erange *ea;
    int a_nan;
};

static void pack_a_main(struct pack_both *p)
{
    struct eng_fpenv saved; /* as in pack_b_main() */
    p->j->v->enter(&saved);
    p->a_nan = pack_a(p->j, (uint32_t *)p->j->ap, p->a, p->lda, p->row_nan, p->tmp, p->ea);
    p->j->v->leave(&saved);
}

static void pack_part(void *arg, int part)
{
    struct pack_both *p = arg;
    if (part == 0)
        pack_a_main(p);
    else
        pack_b_main(p->pb);
}

/* How many threads the work of m x n outputs over kd dwords keeps busy (>= 1).
 * Integers only: this runs under the caller's MXCSR, where a float
 * conversion that rounds would raise its precision flag. m and n are at most
 * 2^30, so m * n fits; its product with kd may not, hence the division. */
static int64_t most_parts(int64_t m, int64_t n, int64_t kd)
{
    int64_t mn = m * n;
    if (mn > INT64_MAX / kd)
        return INT64_MAX;
    int64_t most = mn * kd / MIN_WORK_PER_THREAD;
    return most > 1 ? most : 1;
}

/* Whether the exact path would take more than max_exact multiply-adds: outputs in a row or
 * column with a NaN operand (counted twice where both), k each. NaNs in c_in are left out:
 * counting them would cost a pass over C on every call. */
static int exact_work_above(const struct job *j, int64_t max_exact)
{
    int64_t rows = 0, cols = 0;
    for (int64_t r = 0; r < j->m; r++)
        rows += j->row_nan[r];
    for (int64_t c = 0; c < j->n; c++)
        cols += j->col_nan[c];
    int64_t outputs = rows * j->n + cols * j->m; /* < 2^62: m, n <= 2^30 */
    return outputs > max_exact / j->k;
}

/* pyamx_engine_run() of the bf16/fp16/int8/complex rows: b_rowmajor 0 with k = lanes * kd
 * values, or 1 with any k; arguments already checked. */
static int run(const struct eng_variant *v, int kind, int op, const void *a, int64_t lda, const void *b, int64_t ldb,
               int b_rowmajor, const uint32_t *c_in, int64_t ldc_in, uint32_t *c_out, int64_t ldc_out,
               int64_t m, int64_t n, int64_t kd, int64_t k, int threads, const int *cancel, int64_t max_exact)
{
    const struct pyamx_op_traits *t = pyamx_dot_traits(op);
    int is_float = pyamx_dot_is_float(t);
    struct job j;
    memset(&j, 0, sizeof j);
    j.v = v;
    j.op = op;
    j.t = t;
    j.is_float = is_float;
    j.complex_a = pyamx_dot_is_complex(t) ? (pyamx_dot_complex_swaps(op) ? 1 : 2) : 0;
    j.m = m;
    j.n = n;
    j.kd = kd;
    j.k = k;
    j.b_rowmajor = b_rowmajor;
    j.mp = (m + v->mr - 1) / v->mr;
    j.nq = (n + v->nr - 1) / v->nr;
    j.c_in = c_in;
    j.ldc_in = ldc_in;
    j.c_out = c_out;
    j.ldc_out = ldc_out;
    j.cancel = cancel;

    size_t a_words = (size_t)(j.mp * kd * 2 * v->mr), b_words = (size_t)(j.nq * kd * 2 * v->nr);
    uint8_t *flags = 0;
    int cached;
    size_t a_bytes = (a_words * 4 + 63) & ~(size_t)63; /* B's panels 64-byte aligned too */
    uint32_t *ap = buffer_get(a_bytes + b_words * 4, &cached);
    uint32_t *bp = ap ? ap + a_bytes / 4 : 0;
    if (!ap || (is_float && !(flags = malloc((size_t)(m + n))))) {
        if (ap)
            buffer_put(ap, cached);
        return PYAMX_ENGINE_E_NOMEM;
    }
    int64_t parts = threads < 1 ? 1 : threads;
    int64_t most = most_parts(m, n, kd);
    if (parts > most)
        parts = most;
    j.split_cols = j.nq >= parts || j.nq >= j.mp;
#if !ENG_THREADS
    parts = 1; /* one thread takes every unit */
#endif
    int64_t panels = j.split_cols ? j.nq : j.mp;
    if (parts > panels)
        parts = panels;
    j.parts = (int)parts;
    /* one unit per thread would be the static split; about four per thread balance uneven CPU */
    j.unit_size = parts > 1 && panels / (4 * parts) > 0 ? panels / (4 * parts) : (parts > 1 ? 1 : panels);
    j.units = (panels + j.unit_size - 1) / j.unit_size;

    struct erange ea = {255, 0};
    /* only the portable kernel looks at the exponent range */
    int need_range = is_float && kind == PYAMX_ENGINE_PORTABLE;
    struct pack_b_task pb = {&j, bp, b, ldb, is_float ? flags + m : 0, 0, {255, 0}, need_range, 0};
    uint32_t *tmp = malloc((size_t)(2 * kd) * 4 + (size_t)(4 * kd)); /* words, then bytes (pack_a) */
    pb.tmp = malloc((size_t)(2 * n) * 4);
    if (!tmp || !pb.tmp) {
        free(tmp);
        free(pb.tmp);
        buffer_put(ap, cached);
        free(flags);
        return PYAMX_ENGINE_E_NOMEM;
    }
    j.ap = ap;
    j.bp = bp;
    j.row_nan = flags;
    j.col_nan = flags ? flags + m : 0;
    int64_t next_unit = 0;
    j.next_unit = parts > 1 ? &next_unit : 0;
    /* The pool's parts are claimed, so a worker the scheduler has not run yet never holds the
     * call up: the calling thread takes what is left (pool.c). */
    struct pack_both pk = {&j, &pb, a, lda, is_float ? flags : 0, tmp, need_range ? &ea : 0, 0};
    if (parts > 1)
        pyamx_internal_pool_run(pack_part, &pk, 2, 0);
    else {
        pack_part(&pk, 0);
        pack_part(&pk, 1);
    }
    j.any_nan = pk.a_nan | pb.any_nan;
    int slow = max_exact >= 0 && j.any_nan && exact_work_above(&j, max_exact);
    if (slow)
        j.units = 0; /* every thread finds nothing to do */
    struct erange eb = pb.er;
    /* Every finite non-zero product is an fp32 normal number when the
     * smallest exponents sum to >= -126 and the largest to < 127 (products
     * of values below 2^(e+1) stay below 2^128 * 2^-1). */
    j.in_range = ea.lo > ea.hi || eb.lo > eb.hi ||
                 ((ea.lo - 127) + (eb.lo - 127) >= -126 && (ea.hi - 127 + 1) + (eb.hi - 127 + 1) <= 127);
    if (parts > 1)
        pyamx_internal_pool_run(units_part, &j, (int)parts, 0);
    else
        run_units(&j);
    free(tmp);
    free(pb.tmp);
    buffer_put(ap, cached);
    free(flags);
    return slow ? PYAMX_ENGINE_E_SLOW : flag_set(cancel) ? PYAMX_ENGINE_E_CANCELLED : PYAMX_ENGINE_OK;
}

/* The operand formats the packing and the loops above know (complex fp16 pairs as fp16 ones);
 * the AMX-FP8 rows go to engine_fp8.c. Any other row would be widened as if it were fp16 and give
 * garbage, so the entry refuses it (E_ARG); pyamx/emulator/engine.py sends those rows to the numpy
 * engine before ever calling here. */
static int packs(const struct pyamx_op_traits *t)
{
    switch (t->a_format) {
    case PYAMX_FMT_BF16:
    case PYAMX_FMT_FP16:
    case PYAMX_FMT_INT8:
    case PYAMX_FMT_UINT8:
        return t->b_format == t->a_format || (t->acc_format == PYAMX_FMT_INT32 &&
                                              (t->b_format == PYAMX_FMT_INT8 || t->b_format == PYAMX_FMT_UINT8));
    case PYAMX_FMT_CFP16: /* widened as fp16 pairs, A transformed (complex_transform) */
        return t->b_format == PYAMX_FMT_CFP16;
    default:
        return 0;
    }
}

static int is_fp8(int fmt) { return fmt == PYAMX_FMT_BF8 || fmt == PYAMX_FMT_HF8; }

/* The checks of every call: A is m rows of k values, B as its layout says, 2-byte values
 * 2-byte aligned, threads within the pool, and the output overlaps nothing it reads. */
static int call_ok(const struct pyamx_engine_call *c, const struct pyamx_op_traits *t, int fp8)
{
    if (c->numerics != PYAMX_ENGINE_NUMERICS_SDM || !c->a || !c->b || !c->c_out)
        return 0;
    if (c->threads < 1 || c->threads > PYAMX_MATMUL_MAX_THREADS)
        return 0;
    if (c->b_layout != PYAMX_ENGINE_B_DWORDS && c->b_layout != PYAMX_ENGINE_B_ROWS)
        return 0;
    /* a complex number fills its dword: row-major "values" of B would split it */
    if (c->b_layout == PYAMX_ENGINE_B_ROWS && pyamx_dot_is_complex(t))
        return 0;
    int64_t m = c->m, n = c->n, k = c->k, lanes = t->lanes, size = pyamx_dot_value_bytes(t);
    if (m < 1 || n < 1 || k < 1 || m > (1 << 30) || n > (1 << 30) || k > (fp8 ? 1 << 30 : (int64_t)1 << 32))
        return 0;
    /* the dword kernels take whole dwords of B in its instruction layout */
    if (!fp8 && c->b_layout == PYAMX_ENGINE_B_DWORDS && k % lanes)
        return 0;
    int rows = c->b_layout == PYAMX_ENGINE_B_ROWS;
    int64_t a_row = size * k, b_rows = rows ? k : (k + lanes - 1) / lanes, b_row = rows ? size * n : 4 * n;
    if (b_rows > (1 << 30))
        return 0;
    if (c->lda_bytes < a_row || c->ldb_bytes < b_row || (c->c_in && c->ldc_in < n) || c->ldc_out < n)
        return 0;
    if (size == 2 && ((c->lda_bytes | c->ldb_bytes | (int64_t)(uintptr_t)c->a | (int64_t)(uintptr_t)c->b) & 1))
        return 0;
    size_t out_bytes = (size_t)((m - 1) * c->ldc_out + n) * 4;
    return !((c->c_in && eng_overlaps(c->c_out, out_bytes, c->c_in, (size_t)((m - 1) * c->ldc_in + n) * 4)) ||
             eng_overlaps(c->c_out, out_bytes, c->a, (size_t)((m - 1) * c->lda_bytes + a_row)) ||
             eng_overlaps(c->c_out, out_bytes, c->b, (size_t)((b_rows - 1) * c->ldb_bytes + b_row)));
}

int pyamx_engine_run(const struct pyamx_engine_call *c)
{
    if (!c)
        return PYAMX_ENGINE_E_ARG;
    const struct eng_variant *v = variant(c->kind, 0);
    if (!v)
        return PYAMX_ENGINE_E_UNAVAILABLE;
    const struct pyamx_op_traits *t = pyamx_dot_traits(c->op);
    int fp8 = t && is_fp8(t->a_format) && is_fp8(t->b_format);
    if (!t || !(fp8 || packs(t)) || !call_ok(c, t, fp8))
        return PYAMX_ENGINE_E_ARG;
    if (fp8)
        return eng_fp8_run(c, t);
    int64_t lanes = t->lanes;
    return run(v, c->kind, c->op, c->a, c->lda_bytes, c->b, c->ldb_bytes, c->b_layout == PYAMX_ENGINE_B_ROWS,
               c->c_in, c->ldc_in, c->c_out, c->ldc_out, c->m, c->n, (c->k + lanes - 1) / lanes, c->k, c->threads,
               c->cancel, c->max_exact);
}

void pyamx_engine_cancel(int *cancel)
{
    if (!cancel)
        return;
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(cancel, 1, __ATOMIC_RELAXED);
#else
    *(volatile int *)cancel = 1;
#endif
}

#if defined(PYAMX_ENGINE_TEST_HOOKS)
/* ---- a test build's hooks (engine_test_hooks.h) ---- */

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
#endif
