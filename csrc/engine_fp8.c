/* The compiled engine's AMX-FP8 dot products (TDPBF8PS, TDPBHF8PS,
 * TDPHBF8PS, TDPHF8PS) under the default numerics, bit-identical to
 * pyamx/emulator/fp8.py (docs/semantics.md section 4a).
 *
 * Per output element and K block of 64 values: t = the exact sum of the
 * block's products rounded once to fp32, then C = C + t (IEEE fp32, RNE,
 * denormals kept); NaNs and infinities follow from IEEE arithmetic on the
 * values and a NaN result becomes the default NaN at the end.
 *
 * Why doubles are exact: every fp8 value and every product of two is exact
 * in double (<= 8 significant bits). With |product| < 2^H and every product
 * a multiple of 2^L, every partial sum of 64 is below 2^(H+6) and a multiple
 * of 2^L, hence exact in double when H + 6 - L <= 53. H and L come from the
 * packed rows' and columns' largest / lowest-set-bit exponents; where the
 * bound fails the block is summed in integers (exact_block). A non-finite
 * double sum is already the IEEE answer (NaN for any NaN operand, Inf x 0 or
 * opposite infinities; the infinity otherwise), so specials need no path.
 * Converting the exact double to float is then the one RNE rounding.
 *
 * Faster where it applies (avx512 with VNNI, see int_exact): a row's or
 * column's block divided by its lowest set bit is an integer; when those fit
 * int16 and the sum's bound fits int32, vpdpwssd sums them exactly and the
 * int32 -> float conversion is the one rounding. The register tile spans a
 * pair of column panels (8 x 48). Rows that do not fit are left out of the
 * int16 tile and summed as two int16 rows combined exactly in int64
 * (split_row), or alone in doubles (row_t) where that cannot be done.
 */
#include "pyamx.h"
#include "engine.h"
#include "engine_internal.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <pthread.h>
#define F8_THREADS 1 /* pthread_once for the tables; the work itself runs on pool.c */
#else
#define F8_THREADS 0
#endif

#if ENG_X86
#include <immintrin.h>
#endif

#define F8_BLOCK 64      /* fp8 values per instruction on each side (16 dwords) */
#define F8_SPAN_MAX 47   /* H - L bound of the exact double sum (53 - 6) */
#define F8_NONE_HI (-100) /* exponent sentinels of a row or column without a finite non-zero value */
#define F8_NONE_LO 100
#define F8_KC_BLOCKS 4   /* K blocks per pass: an A block of MC rows and a B panel stay in cache */
#define F8_MC_PANELS 12
#define F8_MIN_WORK_PER_THREAD (1 << 22)
#define F8_MXCSR 0x1F80u /* all exceptions masked, RNE, no FTZ/DAZ */

/* One fp8 format decoded: the double value and the integer image (value * 2^scale) magnitude and sign. */
struct f8_table {
    double value[256];
    uint32_t image[256];
    uint8_t negative[256];
    uint8_t special[256]; /* NaN or infinity */
    int64_t signed_image[256]; /* image with its sign (0 for specials; BF8 images reach 2^32, hence 64 bits):
                                * >> a block's lowest set bit is its int16 */
    int scale;
};

static void build_table(struct f8_table *t, int fmt)
{
    int bf8 = fmt == PYAMX_FMT_BF8;
    int mbits = bf8 ? 2 : 3, ebits = bf8 ? 5 : 4, bias = bf8 ? 15 : 7;
    int emax = (1 << ebits) - 1;
    t->scale = bias + mbits - 1;
    for (int code = 0; code < 256; code++) {
        int neg = code >> 7, e = (code >> mbits) & emax, f = code & ((1 << mbits) - 1);
        t->negative[code] = (uint8_t)neg;
        t->image[code] = 0; /* zeros and specials: no bits in the span */
        t->signed_image[code] = 0;
        int special = bf8 ? e == emax : (e == emax && f == (1 << mbits) - 1);
        t->special[code] = (uint8_t)special;
        if (special) {
            t->value[code] = (bf8 && f == 0) ? (neg ? -INFINITY : INFINITY) : NAN;
            continue;
        }
        uint32_t mag = e == 0 ? (uint32_t)f : (uint32_t)(f | (1 << mbits)) << (e - 1);
        t->image[code] = mag;
        t->signed_image[code] = neg ? -(int64_t)mag : (int64_t)mag;
        t->value[code] = ldexp(neg ? -(double)mag : (double)mag, -t->scale);
    }
}

static struct f8_table tables[2];
static int tables_ready;
#if F8_THREADS
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
#endif
static void build_tables(void)
{
    build_table(&tables[0], PYAMX_FMT_BF8);
    build_table(&tables[1], PYAMX_FMT_HF8);
    tables_ready = 1;
}
static const struct f8_table *table_of(int fmt)
{
#if F8_THREADS
    pthread_once(&tables_once, build_tables);
#else
    if (!tables_ready)
        build_tables();
#endif
    return &tables[fmt == PYAMX_FMT_BF8 ? 0 : 1];
}

/* ---- kernels: one MR x NR tile, whole blocks of 64 values ---- */

/* run: nb blocks, each t = float(exact double sum) then c += t in place.
 * block_t: one block's t only (the driver patches elements and adds). */
struct f8_variant {
    int mr, nr;
    void (*run)(int64_t nb, const double *ap, const double *bp, float *c, int64_t ldc);
    void (*block_t)(const double *ap, const double *bp, float *t);
    /* Optional (NULL: none): one block on int16 pairs (B's ldb words apart per step) with exact int32 sums,
     * c += float(sum) * a_scale[r] * b_scale[j]. Only for an MR x NR of 8 x 24. */
    void (*run_int)(const uint32_t *ap, const uint32_t *bp, int64_t ldb, const float *as, const float *bs, float *c,
                    int64_t ldc);
    /* With run_int: one row's block (arow: its 64 values) of t in doubles (t[j] = float of its sum for column j),
     * for the rows the int16 path leaves out. */
    void (*row_t)(const double *arow, const double *bp, float *t);
    /* With run_int: the same on a pair of adjacent column panels (MR x 2 NR) in one register tile,
     * B's int16 pairs then laid out [pair][2 NR] (see b16_group). */
    void (*run_int2)(const uint32_t *ap, const uint32_t *bp, const float *as, const float *bs, float *c, int64_t ldc);
    /* Optional, with run_int2: one left-out row on a pair, split in two int16 rows (z_split_row2). */
    void (*split_row2)(const uint32_t *hp, const uint32_t *lp, const uint32_t *bp, int d, float as, const float *bs,
                       float *c);
};

#define P_MR 4
#define P_NR 8
static void portable_sums(const double *ap, const double *bp, double acc[P_MR][P_NR])
{
    for (int r = 0; r < P_MR; r++)
        for (int j = 0; j < P_NR; j++)
            acc[r][j] = 0.0;
    for (int k = 0; k < F8_BLOCK; k++, ap += P_MR, bp += P_NR)
        for (int r = 0; r < P_MR; r++)
            for (int j = 0; j < P_NR; j++)
                acc[r][j] += ap[r] * bp[j];
}
static void portable_block_t(const double *ap, const double *bp, float *t)
{
    double acc[P_MR][P_NR];
    portable_sums(ap, bp, acc);
    for (int r = 0; r < P_MR; r++)
        for (int j = 0; j < P_NR; j++)
            t[r * P_NR + j] = (float)acc[r][j];
}
static void portable_run(int64_t nb, const double *ap, const double *bp, float *c, int64_t ldc)
{
    for (int64_t b = 0; b < nb; b++, ap += P_MR * F8_BLOCK, bp += P_NR * F8_BLOCK) {
        double acc[P_MR][P_NR];
        portable_sums(ap, bp, acc);
        for (int r = 0; r < P_MR; r++)
            for (int j = 0; j < P_NR; j++)
                c[r * ldc + j] = c[r * ldc + j] + (float)acc[r][j];
    }
}
static const struct f8_variant portable_variant = {P_MR, P_NR, portable_run, portable_block_t, 0, 0, 0, 0};

#if ENG_X86
#define T512 __attribute__((target("avx512f,avx2,fma")))
#define T256 __attribute__((target("avx2,fma")))

/* AVX-512: 8 rows x 24 columns, 24 zmm accumulators of 8 doubles. */
#define Z_MR 8
#define Z_NR 24
#define Z_ROW(r)                                                  \
    do {                                                          \
        __m512d a_ = _mm512_set1_pd(ap[r]);                       \
        acc[r][0] = _mm512_fmadd_pd(a_, b0, acc[r][0]);           \
        acc[r][1] = _mm512_fmadd_pd(a_, b1, acc[r][1]);           \
        acc[r][2] = _mm512_fmadd_pd(a_, b2, acc[r][2]);           \
    } while (0)

T512 static inline void z_sums(const double *ap, const double *bp, __m512d acc[Z_MR][3])
{
    for (int r = 0; r < Z_MR; r++)
        acc[r][0] = acc[r][1] = acc[r][2] = _mm512_setzero_pd();
    for (int k = 0; k < F8_BLOCK; k++, ap += Z_MR, bp += Z_NR) {
        __m512d b0 = _mm512_load_pd(bp), b1 = _mm512_load_pd(bp + 8), b2 = _mm512_load_pd(bp + 16);
        Z_ROW(0); Z_ROW(1); Z_ROW(2); Z_ROW(3); Z_ROW(4); Z_ROW(5); Z_ROW(6); Z_ROW(7);
    }
}
T512 static void z_block_t(const double *ap, const double *bp, float *t)
{
    __m512d acc[Z_MR][3];
    z_sums(ap, bp, acc);
    for (int r = 0; r < Z_MR; r++)
        for (int x = 0; x < 3; x++)
            _mm256_storeu_ps(t + r * Z_NR + 8 * x, _mm512_cvtpd_ps(acc[r][x]));
}
T512 static void z_run(int64_t nb, const double *ap, const double *bp, float *c, int64_t ldc)
{
    for (int64_t b = 0; b < nb; b++, ap += Z_MR * F8_BLOCK, bp += Z_NR * F8_BLOCK) {
        __m512d acc[Z_MR][3];
        z_sums(ap, bp, acc);
        for (int r = 0; r < Z_MR; r++)
            for (int x = 0; x < 3; x++) {
                float *cp = c + r * ldc + 8 * x;
                _mm256_storeu_ps(cp, _mm256_add_ps(_mm256_loadu_ps(cp), _mm512_cvtpd_ps(acc[r][x])));
            }
    }
}
static const struct f8_variant avx512_variant = {Z_MR, Z_NR, z_run, z_block_t, 0, 0, 0, 0};

/* AVX-512 VNNI: the same tile on int16 pairs, 8 zmm + 8 ymm int32 accumulators (vpdpwssd
 * wraps, so only the final sum must fit int32: the driver's bound sees to it). The
 * conversion to float is the one rounding; the scales are powers of two, exact on
 * results between 2^-32 and 2^39. */
#define T512V __attribute__((target("avx512f,avx512vl,avx512vnni,avx2,fma")))
/* acc += pairwise int16 products of x and y. Inline asm because GCC 12 copies the accumulator
 * around _mm512_dpwssd_epi32 (and spills, with 24 of them live): perf showed 67 moves for 24
 * vpdpwssd in the 8 x 48 loop. */
#define DPW512(acc, x, y) __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(y))
#define DPW256(acc, x, y) __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(y))
#define V_ROW(r)                                                                        \
    do {                                                                                \
        __m512i a_ = _mm512_set1_epi32((int)ap[r]);                                     \
        DPW512(accz[r], a_, bz);                                                        \
        DPW256(accy[r], _mm512_castsi512_si256(a_), by);                                \
    } while (0)
T512V static void z_int_block(const uint32_t *ap, const uint32_t *bp, int64_t ldb, const float *as, const float *bs,
                              float *c, int64_t ldc)
{
    __m512i accz[Z_MR];
    __m256i accy[Z_MR];
    for (int r = 0; r < Z_MR; r++) {
        accz[r] = _mm512_setzero_si512();
        accy[r] = _mm256_setzero_si256();
    }
    for (int s = 0; s < F8_BLOCK / 2; s++, ap += Z_MR, bp += ldb) {
        __m512i bz = _mm512_loadu_si512(bp);
        __m256i by = _mm256_loadu_si256((const __m256i *)(bp + 16));
        V_ROW(0); V_ROW(1); V_ROW(2); V_ROW(3); V_ROW(4); V_ROW(5); V_ROW(6); V_ROW(7);
    }
    __m512 sz = _mm512_loadu_ps(bs);
    __m256 sy = _mm256_loadu_ps(bs + 16);
    for (int r = 0; r < Z_MR; r++) {
        float *cp = c + r * ldc;
        __m512 tz = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(accz[r]), _mm512_set1_ps(as[r])), sz);
        __m256 ty = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(accy[r]), _mm256_set1_ps(as[r])), sy);
        _mm512_storeu_ps(cp, _mm512_add_ps(_mm512_loadu_ps(cp), tz));
        _mm256_storeu_ps(cp + 16, _mm256_add_ps(_mm256_loadu_ps(cp + 16), ty));
    }
}
/* 8 x 48 (two column panels): 24 zmm int32 accumulators, all full width, and per step of
 * two k 3 B loads and 8 broadcasts for 24 vpdpwssd, where the 8 x 24 tile spends 10 loads
 * on 8 zmm + 8 half-width ymm ones. Same exactness argument as z_int_block, per column. */
#define V2_ROW(r)                                                                       \
    do {                                                                                \
        __m512i a_ = _mm512_set1_epi32((int)ap[r]);                                     \
        DPW512(x##r##0, a_, b0);                                                        \
        DPW512(x##r##1, a_, b1);                                                        \
        DPW512(x##r##2, a_, b2);                                                        \
    } while (0)
#define V2_OUT(r)                                                                       \
    do {                                                                                \
        float *cp = c + r * ldc;                                                        \
        __m512 ar = _mm512_set1_ps(as[r]);                                              \
        __m512 t0 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(x##r##0), ar), s0);  \
        __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(x##r##1), ar), s1);  \
        __m512 t2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(x##r##2), ar), s2);  \
        _mm512_storeu_ps(cp, _mm512_add_ps(_mm512_loadu_ps(cp), t0));                   \
        _mm512_storeu_ps(cp + 16, _mm512_add_ps(_mm512_loadu_ps(cp + 16), t1));         \
        _mm512_storeu_ps(cp + 32, _mm512_add_ps(_mm512_loadu_ps(cp + 32), t2));         \
    } while (0)
/* Named accumulators, not an array: GCC 12 keeps an array of 24 in memory and stores it every step. */
T512V static void z_int_block2(const uint32_t *ap, const uint32_t *bp, const float *as, const float *bs, float *c,
                               int64_t ldc)
{
    __m512i x00, x01, x02, x10, x11, x12, x20, x21, x22, x30, x31, x32;
    __m512i x40, x41, x42, x50, x51, x52, x60, x61, x62, x70, x71, x72;
    x00 = x01 = x02 = x10 = x11 = x12 = x20 = x21 = x22 = x30 = x31 = x32 = _mm512_setzero_si512();
    x40 = x41 = x42 = x50 = x51 = x52 = x60 = x61 = x62 = x70 = x71 = x72 = _mm512_setzero_si512();
    for (int s = 0; s < F8_BLOCK / 2; s++, ap += Z_MR, bp += 2 * Z_NR) {
        __m512i b0 = _mm512_loadu_si512(bp), b1 = _mm512_loadu_si512(bp + 16), b2 = _mm512_loadu_si512(bp + 32);
        V2_ROW(0); V2_ROW(1); V2_ROW(2); V2_ROW(3); V2_ROW(4); V2_ROW(5); V2_ROW(6); V2_ROW(7);
    }
    __m512 s0 = _mm512_loadu_ps(bs), s1 = _mm512_loadu_ps(bs + 16), s2 = _mm512_loadu_ps(bs + 32);
    V2_OUT(0); V2_OUT(1); V2_OUT(2); V2_OUT(3); V2_OUT(4); V2_OUT(5); V2_OUT(6); V2_OUT(7);
}
/* One left-out row against a pair of panels (48 columns), its block split in two int16 rows:
 * hp holds the values at or above 2^d times the lowest set bit, in units of their own lowest
 * set bit (2^d units of lp's), lp the others (see split_row). Each part's int32 sum is exact
 * (the driver bounds both below 2^31), so hi x 2^d + lo is the exact block sum in int64 (d <= 32:
 * |hi| x 2^d + |lo| < 2^63), and vcvtqq2ps is its one rounding; the scales are exact as in
 * z_int_block. */
#define T512VD __attribute__((target("avx512f,avx512vl,avx512dq,avx512vnni,avx2,fma")))
T512VD static __m256 split_half(__m256i hi, __m256i lo, __m128i d)
{
    __m512i sum = _mm512_add_epi64(_mm512_sll_epi64(_mm512_cvtepi32_epi64(hi), d), _mm512_cvtepi32_epi64(lo));
    return _mm512_cvtepi64_ps(sum);
}
T512VD static void z_split_row2(const uint32_t *hp, const uint32_t *lp, const uint32_t *bp, int d, float as,
                                const float *bs, float *c)
{
    __m512i h0 = _mm512_setzero_si512(), h1 = h0, h2 = h0, l0 = h0, l1 = h0, l2 = h0;
    for (int s = 0; s < F8_BLOCK / 2; s++, bp += 2 * Z_NR) {
        __m512i b0 = _mm512_loadu_si512(bp), b1 = _mm512_loadu_si512(bp + 16), b2 = _mm512_loadu_si512(bp + 32);
        __m512i x = _mm512_set1_epi32((int)hp[s]), y = _mm512_set1_epi32((int)lp[s]);
        DPW512(h0, x, b0); DPW512(h1, x, b1); DPW512(h2, x, b2);
        DPW512(l0, y, b0); DPW512(l1, y, b1); DPW512(l2, y, b2);
    }
    __m128i dv = _mm_cvtsi32_si128(d);
    __m512i hs[3] = {h0, h1, h2}, ls[3] = {l0, l1, l2};
    __m256 a8 = _mm256_set1_ps(as);
    for (int x = 0; x < 3; x++)
        for (int half = 0; half < 2; half++) {
            __m256i hh = half ? _mm512_extracti64x4_epi64(hs[x], 1) : _mm512_castsi512_si256(hs[x]);
            __m256i ll = half ? _mm512_extracti64x4_epi64(ls[x], 1) : _mm512_castsi512_si256(ls[x]);
            float *cp = c + 16 * x + 8 * half;
            /* GCC may contract the last multiply and the add into an FMA: the same result, the
             * product being exact */
            __m256 t = _mm256_mul_ps(_mm256_mul_ps(split_half(hh, ll, dv), a8), _mm256_loadu_ps(bs + 16 * x + 8 * half));
            _mm256_storeu_ps(cp, _mm256_add_ps(_mm256_loadu_ps(cp), t));
        }
}

/* Two accumulators per 8 columns (even and odd k): any order of an exact sum is the same sum,
 * and NaNs and infinities combine as in one. */
T512 static void z_row_t(const double *arow, const double *bp, float *t)
{
    __m512d even[3], odd[3];
    for (int x = 0; x < 3; x++)
        even[x] = odd[x] = _mm512_setzero_pd();
    for (int k = 0; k < F8_BLOCK; k += 2, bp += 2 * Z_NR) {
        __m512d a0 = _mm512_set1_pd(arow[k]), a1 = _mm512_set1_pd(arow[k + 1]);
        for (int x = 0; x < 3; x++) {
            even[x] = _mm512_fmadd_pd(a0, _mm512_load_pd(bp + 8 * x), even[x]);
            odd[x] = _mm512_fmadd_pd(a1, _mm512_load_pd(bp + Z_NR + 8 * x), odd[x]);
        }
    }
    for (int x = 0; x < 3; x++)
        _mm256_storeu_ps(t + 8 * x, _mm512_cvtpd_ps(_mm512_add_pd(even[x], odd[x])));
}
static const struct f8_variant avx512_vnni_variant = {Z_MR, Z_NR, z_run, z_block_t, z_int_block, z_row_t,
                                                      z_int_block2, 0};
static const struct f8_variant avx512_vnni_dq_variant = {Z_MR, Z_NR, z_run, z_block_t, z_int_block, z_row_t,
                                                         z_int_block2, z_split_row2};

/* AVX2: 4 rows x 12 columns, 12 ymm accumulators of 4 doubles. */
#define Y_MR 4
#define Y_NR 12
#define Y_ROW(r)                                                  \
    do {                                                          \
        __m256d a_ = _mm256_broadcast_sd(ap + r);                 \
        acc[r][0] = _mm256_fmadd_pd(a_, b0, acc[r][0]);           \
        acc[r][1] = _mm256_fmadd_pd(a_, b1, acc[r][1]);           \
        acc[r][2] = _mm256_fmadd_pd(a_, b2, acc[r][2]);           \
    } while (0)

T256 static inline void y_sums(const double *ap, const double *bp, __m256d acc[Y_MR][3])
{
    for (int r = 0; r < Y_MR; r++)
        acc[r][0] = acc[r][1] = acc[r][2] = _mm256_setzero_pd();
    for (int k = 0; k < F8_BLOCK; k++, ap += Y_MR, bp += Y_NR) {
        __m256d b0 = _mm256_load_pd(bp), b1 = _mm256_load_pd(bp + 4), b2 = _mm256_load_pd(bp + 8);
        Y_ROW(0); Y_ROW(1); Y_ROW(2); Y_ROW(3);
    }
}
T256 static void y_block_t(const double *ap, const double *bp, float *t)
{
    __m256d acc[Y_MR][3];
    y_sums(ap, bp, acc);
    for (int r = 0; r < Y_MR; r++)
        for (int x = 0; x < 3; x++)
            _mm_storeu_ps(t + r * Y_NR + 4 * x, _mm256_cvtpd_ps(acc[r][x]));
}
T256 static void y_run(int64_t nb, const double *ap, const double *bp, float *c, int64_t ldc)
{
    for (int64_t b = 0; b < nb; b++, ap += Y_MR * F8_BLOCK, bp += Y_NR * F8_BLOCK) {
        __m256d acc[Y_MR][3];
        y_sums(ap, bp, acc);
        for (int r = 0; r < Y_MR; r++)
            for (int x = 0; x < 3; x++) {
                float *cp = c + r * ldc + 4 * x;
                _mm_storeu_ps(cp, _mm_add_ps(_mm_loadu_ps(cp), _mm256_cvtpd_ps(acc[r][x])));
            }
    }
}
static const struct f8_variant avx2_variant = {Y_MR, Y_NR, y_run, y_block_t, 0, 0, 0, 0};
#endif

/* Whether the avx512 variant takes its int16 (AVX-512 VNNI) path, and the split rows
 * (left-out rows summed as two int16 rows on avx512 with VNNI and DQ, z_split_row2). Always on
 * in the product; a test build (engine_test_hooks.h) can switch them off, so that the paths
 * they replace meet every case too. */
#if defined(PYAMX_ENGINE_TEST_HOOKS)
static int int_path_on = 1;
int pyamx_engine_fp8_int_path(int enable)
{
    int was = int_path_on;
    if (enable >= 0)
        __atomic_store_n(&int_path_on, enable != 0, __ATOMIC_RELAXED);
    return was;
}

static int split_path_on = 1;
int pyamx_engine_fp8_split_path(int enable)
{
    int was = split_path_on;
    if (enable >= 0)
        __atomic_store_n(&split_path_on, enable != 0, __ATOMIC_RELAXED);
    return was;
}
#else
enum { int_path_on = 1, split_path_on = 1 };
#endif

static const struct f8_variant *f8_variant(int kind)
{
    const char *why;
    if (!eng_kind_runs(kind, &why))
        return 0;
    if (kind == PYAMX_ENGINE_PORTABLE)
        return &portable_variant;
#if ENG_X86
    if (kind == PYAMX_ENGINE_AVX512)
    {
        if (!(__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") && int_path_on))
            return &avx512_variant;
        return __builtin_cpu_supports("avx512dq") && split_path_on ? &avx512_vnni_dq_variant : &avx512_vnni_variant;
    }
    if (kind == PYAMX_ENGINE_AVX2)
        return &avx2_variant;
#endif
    return 0;
}

/* ---- the exact integer path of one (element, block) ---- */

/* float(sum of a[j] * b[j]) rounded once (RNE), for blocks whose double sum may be inexact.
 * Products of images are below 2^64; positive and negative ones are summed apart
 * in 128 bits (two words with carry), so no step loses a bit. */
static float exact_block(const struct f8_table *ta, const struct f8_table *tb, const uint8_t *a, const uint8_t *b,
                         int count)
{
    double d = 0.0;
    for (int j = 0; j < count; j++)
        d += ta->value[a[j]] * tb->value[b[j]];
    if (!isfinite(d))
        return (float)d; /* the special values' answer does not depend on the finite products */
    uint64_t pos_hi = 0, pos_lo = 0, neg_hi = 0, neg_lo = 0;
    for (int j = 0; j < count; j++) {
        uint64_t p = (uint64_t)ta->image[a[j]] * tb->image[b[j]];
        if (ta->negative[a[j]] ^ tb->negative[b[j]]) {
            neg_lo += p;
            neg_hi += neg_lo < p;
        } else {
            pos_lo += p;
            pos_hi += pos_lo < p;
        }
    }
    int negative = pos_hi < neg_hi || (pos_hi == neg_hi && pos_lo < neg_lo);
    uint64_t hi, lo;
    if (negative) {
        lo = neg_lo - pos_lo;
        hi = neg_hi - pos_hi - (neg_lo < pos_lo);
    } else {
        lo = pos_lo - neg_lo;
        hi = pos_hi - neg_hi - (pos_lo < neg_lo);
    }
    if (!hi && !lo)
        return 0.0f;
    /* to 53 bits with the discarded bits folded into the last one (round to odd):
     * the later rounding to 24 bits is then the single RNE rounding of the exact sum */
    int bits = hi ? 64 + (64 - __builtin_clzll(hi)) : 64 - __builtin_clzll(lo);
    double mag;
    if (bits <= 53) {
        mag = (double)lo;
    } else {
        int sh = bits - 53; /* 1..18: the sum is below 2^71 */
        uint64_t q = (lo >> sh) | (hi << (64 - sh)), sticky = lo & ((1ull << sh) - 1);
        mag = ldexp((double)(q | (sticky != 0)), sh);
    }
    mag = ldexp(mag, -(ta->scale + tb->scale));
    return (float)(negative ? -mag : mag);
}

/* ---- packing: doubles in the kernels' panels, and each row's / column's block exponents ---- */

struct f8_job {
    const struct f8_variant *v;
    const struct f8_table *ta, *tb;
    const uint8_t *a, *b;
    int64_t lda, ldb;
    int b_rowmajor; /* b: k rows of n codes; else ceil(k/4) rows of n dwords of 4 codes */
    int64_t m, n, k, nblk, mp, nq;
    double *ap, *bp;
    int8_t *a_hi, *a_lo; /* [row][block] */
    int8_t *b_hi, *b_lo; /* [block][column] */
    int16_t *sa, *sb;    /* [panel][block]: the panel's largest hi minus its smallest lo */
    float *c;
    int64_t ldc;
    const int *cancel;
    int cancelled;
    /* the int16 path (v->run_int): pairs [panel][block][pair][MR or NR], scales [panel][block][MR or NR],
     * per panel and block: usable (spans <= 15 bits, no specials) and the sum bound's factors */
    uint32_t *a16, *b16;
    float *a_scale, *b_scale;
    uint8_t *b_packed; /* [panel][block]: bp holds that block's doubles (b_panel_doubles) */
    uint8_t *a_bad_rows, *b_int_ok; /* a_bad_rows: bit r set: row r of the panel is left to row_t */
    uint32_t *a_abs_sum, *b_abs_max;
    uint8_t *a_odd;
};

static inline uint8_t b_code(const struct f8_job *J, int64_t kidx, int64_t col)
{
    if (kidx >= J->k || col >= J->n)
        return 0; /* +0 in both formats: padding adds nothing to an exact sum */
    return J->b_rowmajor ? J->b[kidx * J->ldb + col] : J->b[(kidx >> 2) * J->ldb + col * 4 + (kidx & 3)];
}

/* The block exponents of a row or column from the OR of its images: the top
 * set bit of the OR is the largest value's, its lowest set bit the lowest of all. */
static inline int8_t or_hi(uint32_t x, int scale) { return (int8_t)(x ? 32 - __builtin_clz(x) - scale : F8_NONE_HI); }
static inline int8_t or_lo(uint32_t x, int scale) { return (int8_t)(x ? __builtin_ctz(x) - scale : F8_NONE_LO); }

static void panel_spans(const int8_t *hi, const int8_t *lo, int64_t stride, int64_t step, int64_t panels, int width,
                        int64_t nblk, int16_t *span)
{
    for (int64_t p = 0; p < panels; p++)
        for (int64_t blk = 0; blk < nblk; blk++) {
            int h = F8_NONE_HI, l = F8_NONE_LO;
            for (int64_t i = p * width; i < (p + 1) * width; i++) {
                int64_t at = i * stride + blk * step;
                h = hi[at] > h ? hi[at] : h;
                l = lo[at] < l ? lo[at] : l;
            }
            span[p * nblk + blk] = (int16_t)(h - l);
        }
}

/* The int16 image of a block's value: image >> shift, signed (exact: shift is the block's lowest set bit). */
static inline uint32_t int_half(const struct f8_table *t, uint8_t code, int shift)
{
    int32_t x = (int32_t)(t->image[code] >> shift);
    return (uint16_t)(int16_t)(t->negative[code] ? -x : x);
}

/* A's int16 pairs of one panel and block, from its packed doubles (see pack_b_int);
 * special[r] says row r's block holds a NaN or infinity. */
static void pack_a_int(struct f8_job *J, int64_t p, int64_t blk, const uint8_t *special)
{
    int mr = J->v->mr;
    int64_t pb = p * J->nblk + blk;
    unsigned bad = 0;
    int shifts[ENG_MAX_MR];
    const uint8_t *src[ENG_MAX_MR];
    for (int r = 0; r < mr; r++) {
        int64_t at = (p * mr + r) * J->nblk + blk;
        int hi = J->a_hi[at], lo = J->a_lo[at];
        int shift = hi == F8_NONE_HI ? 0 : lo + J->ta->scale;
        int ok = !special[r] && (hi == F8_NONE_HI || hi - lo <= 15);
        bad |= (unsigned)!ok << r;
        J->a_scale[pb * mr + r] = ok ? (float)ldexp(1.0, shift - J->ta->scale) : 1.0f;
        shifts[r] = shift;
        src[r] = p * mr + r < J->m ? J->a + (p * mr + r) * J->lda : 0;
    }
    J->a_bad_rows[pb] = (uint8_t)bad;
    uint32_t sums[ENG_MAX_MR] = {0}, largest = 0;
    uint32_t *dst = J->a16 + pb * (F8_BLOCK / 2) * mr;
    const int64_t *simage = J->ta->signed_image;
    for (int s = 0; s < F8_BLOCK / 2; s++, dst += mr) {
        int64_t k0 = blk * F8_BLOCK + 2 * s;
        for (int r = 0; r < mr; r++) {
            int32_t x = 0, y = 0;
            /* a left-out row adds +0, harmless (C + +0 + t == C + t: t is never -0); the shift is
             * exact (no bit below the block's lowest set bit), also for negative images */
            if (!(bad >> r & 1) && src[r]) {
                x = k0 < J->k ? (int32_t)(simage[src[r][k0]] >> shifts[r]) : 0;
                y = k0 + 1 < J->k ? (int32_t)(simage[src[r][k0 + 1]] >> shifts[r]) : 0;
            }
            sums[r] += (uint32_t)(x < 0 ? -x : x) + (uint32_t)(y < 0 ? -y : y); /* 64 x 2^15: no overflow */
            dst[r] = (uint16_t)(int16_t)x | (uint32_t)(uint16_t)(int16_t)y << 16;
        }
    }
    for (int r = 0; r < mr; r++)
        largest = sums[r] > largest ? sums[r] : largest;
    J->a_abs_sum[pb] = largest;
}

/* A's block exponents, specials and int16 pairs (every path needs these). */
static void pack_a(struct f8_job *J)
{
    int mr = J->v->mr, scale = J->ta->scale;
    const uint32_t *image = J->ta->image;
    uint8_t *odd = J->a_odd; /* the current panel's [row][block] NaN-or-infinity flags */
    for (int64_t row = 0; row < J->mp * mr; row++) {
        int64_t filled = row < J->m ? J->k : 0;
        const uint8_t *src = J->a + (row < J->m ? row : 0) * J->lda;
        for (int64_t blk = 0; blk < J->nblk; blk++) {
            uint32_t bits = 0;
            uint8_t oddity = 0;
            int64_t k0 = blk * F8_BLOCK, k1 = k0 + F8_BLOCK < filled ? k0 + F8_BLOCK : filled;
            for (int64_t kidx = k0; kidx < k1; kidx++) {
                bits |= image[src[kidx]];
                oddity |= J->ta->special[src[kidx]];
            }
            J->a_hi[row * J->nblk + blk] = or_hi(bits, scale);
            J->a_lo[row * J->nblk + blk] = or_lo(bits, scale);
            if (odd)
                odd[(row % mr) * J->nblk + blk] = oddity;
        }
        if (J->a16 && row % mr == mr - 1)
            for (int64_t blk = 0; blk < J->nblk; blk++) {
                uint8_t flags[ENG_MAX_MR];
                for (int r = 0; r < mr; r++)
                    flags[r] = odd[r * J->nblk + blk];
                pack_a_int(J, row / mr, blk, flags);
            }
    }
    panel_spans(J->a_hi, J->a_lo, J->nblk, 1, J->mp, mr, J->nblk, J->sa);
}

/* B's int16 pairs are stored by groups of column panels: pairs (0, 1), (2, 3), ... where the
 * variant has run_int2 (one register tile spans both), a last odd panel alone. A group of g
 * panels holds, per block and step of two k, g x NR words: [group][block][step][g x NR], and
 * its scales [group][block][g x NR]; either way a group takes g panels' room. Returns the
 * group's first panel; *width: its g x NR. */
static inline int64_t b16_group(const struct f8_job *J, int64_t q, int *width)
{
    int nr = J->v->nr;
    int64_t q0 = J->v->run_int2 ? q & ~(int64_t)1 : q;
    *width = (q0 + 1 < J->nq && J->v->run_int2) ? 2 * nr : nr;
    return q0;
}
static inline int64_t b16_offset(const struct f8_job *J, int64_t q, int64_t blk, int *width)
{
    int64_t q0 = b16_group(J, q, width);
    return q0 * J->nblk * (F8_BLOCK / 2) * J->v->nr + blk * (F8_BLOCK / 2) * *width + (q - q0) * J->v->nr;
}
static inline int64_t b_scale_offset(const struct f8_job *J, int64_t q, int64_t blk)
{
    int width;
    int64_t q0 = b16_group(J, q, &width);
    return q0 * J->nblk * J->v->nr + blk * width + (q - q0) * J->v->nr;
}

/* B's int16 pairs of usable columns, from the codes: the signed image >> shift (exact, shift
 * being the column block's lowest set bit). */
static void pack_b_int(struct f8_job *J, const uint32_t *ors, const uint8_t *special)
{
    int nr = J->v->nr;
    int64_t npad = J->nq * nr;
    const int64_t *simage = J->tb->signed_image;
    for (int64_t q = 0; q < J->nq; q++)
        for (int64_t blk = 0; blk < J->nblk; blk++) {
            int64_t pb = q * J->nblk + blk, so = b_scale_offset(J, q, blk);
            int all_ok = 1, width;
            uint32_t largest = 0;
            int shifts[ENG_MAX_NR];
            for (int j = 0; j < nr; j++) {
                int64_t at = blk * npad + q * nr + j;
                uint32_t bits = ors[at];
                int shift = bits ? __builtin_ctz(bits) : 0;
                all_ok &= !special[at] && (bits >> shift) < (1u << 15);
                largest = (bits >> shift) > largest ? bits >> shift : largest; /* >= every |value| */
                J->b_scale[so + j] = (float)ldexp(1.0, shift - J->tb->scale);
                shifts[j] = shift;
            }
            J->b_int_ok[pb] = (uint8_t)all_ok;
            J->b_abs_max[pb] = largest;
            uint32_t *dst = J->b16 + b16_offset(J, q, blk, &width);
            if (!all_ok) /* never read: the tile takes the double path */
                continue;
            int64_t c0 = q * nr;
            int cols = (int)(J->n - c0 < nr ? J->n - c0 : nr);
            for (int s = 0; s < F8_BLOCK / 2; s++, dst += width) {
                int64_t k0 = blk * F8_BLOCK + 2 * s;
                int j = 0;
                if (J->b_rowmajor && k0 + 1 < J->k) {
                    const uint8_t *r0 = J->b + k0 * J->ldb + c0, *r1 = r0 + J->ldb;
                    for (; j < cols; j++)
                        dst[j] = (uint16_t)(int16_t)(simage[r0[j]] >> shifts[j]) |
                                 (uint32_t)(uint16_t)(int16_t)(simage[r1[j]] >> shifts[j]) << 16;
                }
                for (; j < nr; j++)
                    dst[j] = (uint16_t)(int16_t)(simage[b_code(J, k0, c0 + j)] >> shifts[j]) |
                             (uint32_t)(uint16_t)(int16_t)(simage[b_code(J, k0 + 1, c0 + j)] >> shifts[j]) << 16;
            }
        }
}

/* B's block exponents and specials; its doubles come later, per (column panel, block), where a
 * kernel reads them (b_panel_doubles). */
static void pack_b(struct f8_job *J, uint32_t *ors, uint8_t *special)
{
    int nr = J->v->nr, scale = J->tb->scale;
    int64_t npad = J->nq * nr;
    const uint32_t *image = J->tb->image;
    memset(ors, 0, (size_t)(J->nblk * npad) * 4);
    memset(special, 0, (size_t)(J->nblk * npad));
    for (int64_t kidx = 0; kidx < J->k; kidx++) {
        uint32_t *bits = ors + (kidx / F8_BLOCK) * npad;
        uint8_t *odd = special + (kidx / F8_BLOCK) * npad;
        const uint8_t *src = J->b_rowmajor ? J->b + kidx * J->ldb : J->b + (kidx >> 2) * J->ldb + (kidx & 3);
        int64_t step = J->b_rowmajor ? 1 : 4;
        for (int64_t col = 0; col < J->n; col++) {
            uint8_t code = src[col * step];
            bits[col] |= image[code];
            odd[col] |= J->tb->special[code];
        }
    }
    for (int64_t i = 0; i < J->nblk * npad; i++) {
        J->b_hi[i] = or_hi(ors[i], scale);
        J->b_lo[i] = or_lo(ors[i], scale);
    }
    panel_spans(J->b_hi, J->b_lo, 1, npad, J->nq, nr, J->nblk, J->sb);
    if (J->b16)
        pack_b_int(J, ors, special);
}

/* The packed doubles of column panel q's block blk, packed at the first call: on ordinary data
 * only left-out rows that cannot be split read them. No lock: a column panel belongs to one
 * thread (the parts split the column panels). */
static const double *b_panel_doubles(const struct f8_job *J, int64_t q, int64_t blk)
{
    int nr = J->v->nr;
    double *dst = J->bp + (q * J->nblk + blk) * F8_BLOCK * nr;
    if (J->b_packed[q * J->nblk + blk])
        return dst;
    const double *value = J->tb->value;
    for (int i = 0; i < F8_BLOCK; i++)
        for (int j = 0; j < nr; j++)
            dst[i * nr + j] = value[b_code(J, blk * F8_BLOCK + i, q * nr + j)];
    J->b_packed[q * J->nblk + blk] = 1;
    return dst;
}

/* ---- the schedule over tiles ---- */

static inline int tile_exact(const struct f8_job *J, int64_t p, int64_t q, int64_t blk)
{
    return J->sa[p * J->nblk + blk] + J->sb[q * J->nblk + blk] <= F8_SPAN_MAX;
}

/* The int16 path is exact for a tile and block when every value fits 15 bits above its
 * row's / column's lowest set bit, nothing is special, and |sum| <= max row sum of |a| x
 * max |b| stays below 2^31. */
static inline int int_exact(const struct f8_job *J, int64_t p, int64_t q, int64_t blk)
{
    int64_t pa = p * J->nblk + blk, qb = q * J->nblk + blk;
    return J->a16 && J->a_bad_rows[pa] != (1u << J->v->mr) - 1 && J->b_int_ok[qb] &&
           (uint64_t)J->a_abs_sum[pa] * J->b_abs_max[qb] < ((uint64_t)1 << 31);
}

/* c += t for rows [r_begin, r_end) of a tile and block, each element's t replaced by the exact
 * integer sum where the double sum may have rounded. */
static void finish_rows(const struct f8_job *J, int64_t kb, int64_t r0, int64_t c0, int r_begin, int r_end, int cols,
                        const float *t, int nr, float *c, int64_t ldc)
{
    int64_t npad = J->nq * nr;
    int count = (int)(J->k - kb * F8_BLOCK < F8_BLOCK ? J->k - kb * F8_BLOCK : F8_BLOCK);
    for (int j = 0; j < cols; j++) {
        int64_t col = c0 + j;
        int bh = J->b_hi[kb * npad + col], bl = J->b_lo[kb * npad + col];
        uint8_t bcodes[F8_BLOCK];
        int gathered = 0;
        for (int r = r_begin; r < r_end; r++) {
            int64_t row = r0 + r;
            float tv = t[r * nr + j];
            if (J->a_hi[row * J->nblk + kb] + bh - J->a_lo[row * J->nblk + kb] - bl > F8_SPAN_MAX) {
                if (!gathered) {
                    for (int i = 0; i < count; i++)
                        bcodes[i] = b_code(J, kb * F8_BLOCK + i, col);
                    gathered = 1;
                }
                tv = exact_block(J->ta, J->tb, J->a + row * J->lda + kb * F8_BLOCK, bcodes, count);
            }
            c[r * ldc + j] = c[r * ldc + j] + tv;
        }
    }
}

/* A left-out row's block as two int16 rows for split_row2: values of at least 15 bits above the
 * block's lowest set bit lo go to hp, in units of their own lowest set bit lh, the others to lp in
 * units of 2^lo. 0 where that does not work (a NaN or infinity, hp's values spanning more than 15
 * bits, lh - lo over 32, or an int32 sum bound of 2^31 missed against the columns' bmax); else 1,
 * *d = lh - lo and *unit = lp's unit as a value. */
static int split_row(const struct f8_job *J, int64_t row, int64_t kb, uint32_t bmax, uint32_t *hp, uint32_t *lp,
                     int *d, float *unit)
{
    const struct f8_table *ta = J->ta;
    int count = (int)(J->k - kb * F8_BLOCK < F8_BLOCK ? J->k - kb * F8_BLOCK : F8_BLOCK);
    const uint8_t *src = J->a + row * J->lda + kb * F8_BLOCK;
    uint32_t all = 0, high = 0;
    for (int i = 0; i < count; i++) {
        if (ta->special[src[i]])
            return 0;
        all |= ta->image[src[i]];
    }
    if (!all)
        return 0;
    int lo = __builtin_ctz(all);
    for (int i = 0; i < count; i++)
        if (ta->image[src[i]] >> lo >= 1u << 15)
            high |= ta->image[src[i]];
    int lh = high ? __builtin_ctz(high) : lo;
    if ((high >> lh) >= 1u << 15 || lh - lo > 32) /* lh - lo <= 31 for fp8 images (< 2^32); kept for the proof */
        return 0;
    uint64_t hsum = 0, lsum = 0;
    int16_t hv[F8_BLOCK] = {0}, lv[F8_BLOCK] = {0};
    for (int i = 0; i < count; i++) {
        uint32_t img = ta->image[src[i]];
        int big = img >> lo >= 1u << 15;
        int32_t x = (int32_t)(big ? img >> lh : img >> lo);
        x = ta->negative[src[i]] ? -x : x;
        if (big) {
            hv[i] = (int16_t)x;
            hsum += (uint32_t)(x < 0 ? -x : x);
        } else {
            lv[i] = (int16_t)x;
            lsum += (uint32_t)(x < 0 ? -x : x);
        }
    }
    if (hsum * bmax >= (uint64_t)1 << 31 || lsum * bmax >= (uint64_t)1 << 31)
        return 0;
    for (int s = 0; s < F8_BLOCK / 2; s++) {
        hp[s] = (uint16_t)hv[2 * s] | (uint32_t)(uint16_t)hv[2 * s + 1] << 16;
        lp[s] = (uint16_t)lv[2 * s] | (uint32_t)(uint16_t)lv[2 * s + 1] << 16;
    }
    *d = lh - lo;
    *unit = (float)ldexp(1.0, lo - ta->scale);
    return 1;
}

/* The rows of a tile's block that the int16 path left out: a double sum each, with finish_rows's
 * exact fallback. */
static void left_out_row(const struct f8_job *J, int64_t p, int64_t q, int64_t kb, int r, int cols, float *c,
                         int64_t ldc)
{
    float t[ENG_MAX_MR * ENG_MAX_NR];
    double arow[F8_BLOCK];
    int64_t row = p * J->v->mr + r;
    int count = (int)(J->k - kb * F8_BLOCK < F8_BLOCK ? J->k - kb * F8_BLOCK : F8_BLOCK);
    const uint8_t *src = J->a + row * J->lda + kb * F8_BLOCK;
    for (int i = 0; i < F8_BLOCK; i++) /* from the codes: A's packed doubles exist only where tiles need them */
        arow[i] = i < count ? J->ta->value[src[i]] : 0.0;
    J->v->row_t(arow, b_panel_doubles(J, q, kb), t + r * J->v->nr);
    finish_rows(J, kb, p * J->v->mr, q * J->v->nr, r, r + 1, cols, t, J->v->nr, c, ldc);
}
static void left_out_rows(const struct f8_job *J, int64_t p, int64_t q, int64_t kb, int rows, int cols, float *c,
                          int64_t ldc)
{
    unsigned bad = J->a_bad_rows[p * J->nblk + kb];
    for (int r = 0; r < rows; r++)
        if (bad >> r & 1)
            left_out_row(J, p, q, kb, r, cols, c, ldc);
}

/* Blocks [kb, kb1) of one MR x NR tile, c at the tile; returns the next block to run: the
 * double kernel takes a run of blocks in one call. */
static int64_t panel_blocks(const struct f8_job *J, int64_t p, int64_t q, int64_t kb, int64_t kb1, int rows, int cols,
                            float *c, int64_t ldc)
{
    const struct f8_variant *v = J->v;
    int mr = v->mr, nr = v->nr;
    int64_t kpad = J->nblk * F8_BLOCK;
    const double *ap = J->ap + p * kpad * mr + kb * F8_BLOCK * mr;
    if (int_exact(J, p, q, kb)) {
        int64_t pa = p * J->nblk + kb;
        int width;
        int64_t bo = b16_offset(J, q, kb, &width);
        v->run_int(J->a16 + pa * (F8_BLOCK / 2) * mr, J->b16 + bo, width, J->a_scale + pa * mr,
                   J->b_scale + b_scale_offset(J, q, kb), c, ldc);
        left_out_rows(J, p, q, kb, rows, cols, c, ldc);
        return kb + 1;
    }
    if (tile_exact(J, p, q, kb)) {
        int64_t ke = kb + 1;
        while (ke < kb1 && tile_exact(J, p, q, ke) && !int_exact(J, p, q, ke))
            ke++;
        const double *bp = b_panel_doubles(J, q, kb);
        for (int64_t i = kb + 1; i < ke; i++) /* the blocks of panel q follow each other */
            b_panel_doubles(J, q, i);
        v->run(ke - kb, ap, bp, c, ldc);
        return ke;
    }
    float t[ENG_MAX_MR * ENG_MAX_NR];
    v->block_t(ap, b_panel_doubles(J, q, kb), t);
    finish_rows(J, kb, p * mr, q * nr, 0, rows, cols, t, nr, c, ldc);
    return kb + 1;
}

/* Blocks [kb0, kb1) of row panel p and the w (1 or 2) column panels from q: a pair's blocks
 * where both panels are int16-exact run as one MR x 2 NR register tile (run_int2), the others
 * panel by panel. An edge tile runs on a full-size copy of C. */
static void run_tile(const struct f8_job *J, int64_t p, int64_t q, int w, int64_t kb0, int64_t kb1)
{
    const struct f8_variant *v = J->v;
    int mr = v->mr, nr = v->nr, wide = w * nr;
    int64_t r0 = p * mr, c0 = q * nr;
    int rows = (int)(J->m - r0 < mr ? J->m - r0 : mr), cols = (int)(J->n - c0 < wide ? J->n - c0 : wide);
    float local[ENG_MAX_MR * 2 * ENG_MAX_NR];
    float *c = J->c + r0 * J->ldc + c0;
    int64_t ldc = J->ldc;
    if (rows < mr || cols < wide) {
        memset(local, 0, sizeof local);
        for (int r = 0; r < rows; r++)
            memcpy(local + r * wide, c + r * ldc, (size_t)cols * 4);
        c = local;
        ldc = wide;
    }
    int cols0 = cols < nr ? cols : nr, cols1 = cols - cols0;
    for (int64_t kb = kb0; kb < kb1;) {
        if (w == 2 && int_exact(J, p, q, kb) && int_exact(J, p, q + 1, kb)) {
            int64_t pa = p * J->nblk + kb;
            int width;
            v->run_int2(J->a16 + pa * (F8_BLOCK / 2) * mr, J->b16 + b16_offset(J, q, kb, &width),
                        J->a_scale + pa * mr, J->b_scale + b_scale_offset(J, q, kb), c, ldc);
            unsigned bad = J->a_bad_rows[pa];
            for (int r = 0; bad && r < rows; r++) {
                if (!(bad >> r & 1))
                    continue;
                uint32_t hp[F8_BLOCK / 2], lp[F8_BLOCK / 2], b0 = J->b_abs_max[q * J->nblk + kb],
                                                            b1 = J->b_abs_max[(q + 1) * J->nblk + kb];
                int d;
                float unit;
                if (v->split_row2 && split_row(J, r0 + r, kb, b0 > b1 ? b0 : b1, hp, lp, &d, &unit)) {
                    v->split_row2(hp, lp, J->b16 + b16_offset(J, q, kb, &width), d, unit,
                                  J->b_scale + b_scale_offset(J, q, kb), c + r * ldc);
                } else {
                    left_out_row(J, p, q, kb, r, cols0, c, ldc);
                    left_out_row(J, p, q + 1, kb, r, cols1, c + nr, ldc);
                }
            }
            kb++;
            continue;
        }
        /* a block the pair cannot share: each panel alone, as far as the next block the pair can */
        int64_t ke = kb + 1;
        while (w == 2 && ke < kb1 && !(int_exact(J, p, q, ke) && int_exact(J, p, q + 1, ke)))
            ke++;
        if (w == 1)
            ke = kb1;
        for (int h = 0; h < w; h++)
            for (int64_t k = kb; k < ke;)
                k = panel_blocks(J, p, q + h, k, ke, rows, h ? cols1 : cols0, c + h * nr, ldc);
        kb = ke;
    }
    if (c == local)
        for (int r = 0; r < rows; r++)
            memcpy(J->c + (r0 + r) * J->ldc + c0, local + r * wide, (size_t)cols * 4);
}

/* A's doubles of the (row panel, block)s where some tile may run a double kernel: all of them
 * without the int16 path, else those int_exact can fail for with some column panel (a panel of
 * left-out rows only, a column panel that cannot be int16, or the sum bound against the block's
 * largest |b|). Left-out rows read their doubles from the codes, not from the panels. */
static void pack_a_doubles(struct f8_job *J)
{
    int mr = J->v->mr;
    unsigned full = (1u << mr) - 1;
    int64_t kpad = J->nblk * F8_BLOCK;
    const double *value = J->ta->value;
    for (int64_t blk = 0; blk < J->nblk; blk++) {
        uint64_t bmax = 0;
        int b_ok = 1;
        for (int64_t q = 0; J->a16 && q < J->nq; q++) {
            b_ok &= J->b_int_ok[q * J->nblk + blk];
            bmax = J->b_abs_max[q * J->nblk + blk] > bmax ? J->b_abs_max[q * J->nblk + blk] : bmax;
        }
        for (int64_t p = 0; p < J->mp; p++) {
            int64_t pb = p * J->nblk + blk;
            if (J->a16 && b_ok && J->a_bad_rows[pb] != full && J->a_abs_sum[pb] * bmax < (uint64_t)1 << 31)
                continue;
            for (int r = 0; r < mr; r++) {
                int64_t row = p * mr + r, k0 = blk * F8_BLOCK;
                double *dst = J->ap + (p * kpad + k0) * mr + r;
                int count = row >= J->m ? 0 : (int)(J->k - k0 < F8_BLOCK ? J->k - k0 : F8_BLOCK);
                const uint8_t *src = J->a + (row < J->m ? row : 0) * J->lda + k0;
                for (int i = 0; i < F8_BLOCK; i++)
                    dst[i * mr] = i < count ? value[src[i]] : 0.0;
            }
        }
    }
}

static inline int is_cancelled(const int *flag)
{
    return flag && __atomic_load_n(flag, __ATOMIC_RELAXED);
}

struct f8_part { struct f8_job *J; int64_t q0, q1; int stopped; };

static void run_part(struct f8_part *part)
{
    const struct f8_job *J = part->J;
    uint32_t saved_csr = 0;
    fenv_t saved_env;
#if ENG_X86
    saved_csr = eng_x86_getcsr();
    eng_x86_setcsr(F8_MXCSR);
#else
    fegetenv(&saved_env);
    fesetround(FE_TONEAREST);
#endif
    for (int64_t kb0 = 0; kb0 < J->nblk && !part->stopped; kb0 += F8_KC_BLOCKS) {
        int64_t kb1 = kb0 + F8_KC_BLOCKS < J->nblk ? kb0 + F8_KC_BLOCKS : J->nblk;
        for (int64_t p0 = 0; p0 < J->mp && !part->stopped; p0 += F8_MC_PANELS) {
            int64_t p1 = p0 + F8_MC_PANELS < J->mp ? p0 + F8_MC_PANELS : J->mp;
            for (int64_t q = part->q0; q < part->q1;) {
                if (is_cancelled(J->cancel)) {
                    part->stopped = 1;
                    break;
                }
                int width;
                int w = (b16_group(J, q, &width), width / J->v->nr);
                for (int64_t p = p0; p < p1; p++)
                    run_tile(J, p, q, w, kb0, kb1);
                q += w;
            }
        }
    }
#if ENG_X86
    (void)saved_env;
    eng_x86_setcsr(saved_csr);
#else
    (void)saved_csr;
    fesetenv(&saved_env);
#endif
}

/* A thread's share on the pool (pool.c): one part of the column groups. */
static void pool_part(void *arg, int index) { run_part((struct f8_part *)arg + index); }

int eng_fp8_run(const struct pyamx_engine_call *call, const struct pyamx_op_traits *t)
{
    int kind = call->kind, threads = call->threads;
    int b_rowmajor = call->b_layout == PYAMX_ENGINE_B_ROWS;
    const void *a = call->a, *b = call->b;
    int64_t lda_bytes = call->lda_bytes, ldb_bytes = call->ldb_bytes, ldc_in = call->ldc_in, ldc_out = call->ldc_out;
    int64_t m = call->m, n = call->n, k = call->k, max_exact = call->max_exact;
    const uint32_t *c_in = call->c_in;
    uint32_t *c_out = call->c_out;
    const int *cancel = call->cancel;
    const struct f8_variant *v = f8_variant(kind);
    if (!v)
        return PYAMX_ENGINE_E_UNAVAILABLE;

    struct f8_job J;
    memset(&J, 0, sizeof J);
    J.v = v;
    J.ta = table_of(t->a_format);
    J.tb = table_of(t->b_format);
    J.a = a;
    J.b = b;
    J.lda = lda_bytes;
    J.ldb = ldb_bytes;
    J.b_rowmajor = b_rowmajor;
    J.m = m;
    J.n = n;
    J.k = k;
    J.nblk = (k + F8_BLOCK - 1) / F8_BLOCK;
    J.mp = (m + v->mr - 1) / v->mr;
    J.nq = (n + v->nr - 1) / v->nr;
    J.cancel = cancel;
    int64_t kpad = J.nblk * F8_BLOCK;
    size_t a_doubles = (size_t)(J.mp * v->mr * kpad), b_doubles = (size_t)(J.nq * v->nr * kpad);
    size_t a_ex = (size_t)(J.mp * v->mr * J.nblk), b_ex = (size_t)(J.nq * v->nr * J.nblk);
    int use_int = v->run_int != 0;
    size_t a_pb = (size_t)(J.mp * J.nblk), b_pb = (size_t)(J.nq * J.nblk);
    size_t int_bytes = use_int ? (a_doubles + b_doubles) * 2 + (a_ex + b_ex) * 4 + (a_pb + b_pb) * 5 +
                                     (size_t)(v->mr * J.nblk) : 0;
    size_t bytes = (a_doubles + b_doubles) * 8 + 5 * b_ex + 2 * (a_ex + b_ex) + 2 * (size_t)(J.mp + J.nq) * (size_t)J.nblk +
                   int_bytes + b_pb + 64;
    char *buf = 0;
#if defined(_WIN32)
    buf = _aligned_malloc(bytes, 64);
#else
    if (posix_memalign((void **)&buf, 64, bytes))
        buf = 0;
#endif
    if (!buf)
        return PYAMX_ENGINE_E_NOMEM;
    char *at = buf;
    J.ap = (double *)at; at += a_doubles * 8;
    J.bp = (double *)at; at += b_doubles * 8;
    uint32_t *ors = (uint32_t *)at; at += 4 * b_ex;
    J.sa = (int16_t *)at; at += 2 * (size_t)(J.mp * J.nblk);
    J.sb = (int16_t *)at; at += 2 * (size_t)(J.nq * J.nblk);
    J.a_hi = (int8_t *)at; at += a_ex;
    J.a_lo = (int8_t *)at; at += a_ex;
    J.b_hi = (int8_t *)at; at += b_ex;
    J.b_lo = (int8_t *)at; at += b_ex;
    uint8_t *special = (uint8_t *)at; at += b_ex;
    J.b_packed = (uint8_t *)at; at += b_pb;
    memset(J.b_packed, 0, b_pb);
    if (use_int) { /* 4-byte items first: at is 4-aligned here (every size above is a multiple of 4) */
        at = (char *)(((uintptr_t)at + 3) & ~(uintptr_t)3);
        J.a16 = (uint32_t *)at; at += a_doubles * 2;
        J.b16 = (uint32_t *)at; at += b_doubles * 2;
        J.a_scale = (float *)at; at += a_ex * 4;
        J.b_scale = (float *)at; at += b_ex * 4;
        J.a_abs_sum = (uint32_t *)at; at += a_pb * 4;
        J.b_abs_max = (uint32_t *)at; at += b_pb * 4;
        J.a_bad_rows = (uint8_t *)at; at += a_pb;
        J.b_int_ok = (uint8_t *)at; at += b_pb;
        J.a_odd = (uint8_t *)at;
    }
    pack_a(&J);
    pack_b(&J, ors, special);
    pack_a_doubles(&J);

    if (max_exact >= 0) { /* a bound on the integer path's work, before any is done */
        int64_t slow = 0;
        for (int64_t p = 0; p < J.mp; p++)
            for (int64_t q = 0; q < J.nq; q++)
                for (int64_t blk = 0; blk < J.nblk; blk++)
                    slow += tile_exact(&J, p, q, blk) ? 0 : (int64_t)v->mr * v->nr * F8_BLOCK;
        if (slow > max_exact) {
#if defined(_WIN32)
            _aligned_free(buf);
#else
            free(buf);
#endif
            return PYAMX_ENGINE_E_SLOW;
        }
    }

    for (int64_t r = 0; r < m; r++) {
        if (c_in)
            memcpy(c_out + r * ldc_out, c_in + r * ldc_in, (size_t)n * 4);
        else
            memset(c_out + r * ldc_out, 0, (size_t)n * 4);
    }
    J.c = (float *)(void *)c_out;
    J.ldc = ldc_out;

    int64_t work = m * n * kpad;
    int64_t parts = threads;
    int group = v->run_int2 ? 2 : 1; /* parts split on group boundaries (b16_group) */
    int64_t groups = (J.nq + group - 1) / group;
    if (parts > groups)
        parts = groups;
    if (parts > work / F8_MIN_WORK_PER_THREAD)
        parts = work / F8_MIN_WORK_PER_THREAD;
    if (parts < 1)
        parts = 1;
    struct f8_part part_list[PYAMX_MATMUL_MAX_THREADS];
    if (parts > PYAMX_MATMUL_MAX_THREADS)
        parts = PYAMX_MATMUL_MAX_THREADS;
    for (int64_t i = 0; i < parts; i++) {
        part_list[i].J = &J;
        int64_t q0 = groups * i / parts * group, q1 = groups * (i + 1) / parts * group;
        part_list[i].q0 = q0 < J.nq ? q0 : J.nq;
        part_list[i].q1 = q1 < J.nq ? q1 : J.nq;
        part_list[i].stopped = 0;
    }
    if (parts > 1)
        pyamx_internal_pool_run(pool_part, part_list, (int)parts, 0);
    else
        run_part(&part_list[0]);
    int stopped = 0;
    for (int64_t i = 0; i < parts; i++)
        stopped |= part_list[i].stopped;
#if defined(_WIN32)
    _aligned_free(buf);
#else
    free(buf);
#endif
    if (stopped)
        return PYAMX_ENGINE_E_CANCELLED;
    for (int64_t r = 0; r < m; r++) /* every NaN result is the default NaN */
        for (int64_t j = 0; j < n; j++) {
            uint32_t w;
            memcpy(&w, c_out + r * ldc_out + j, 4);
            if ((w & 0x7FFFFFFFu) > 0x7F800000u) {
                w = 0xFFC00000u;
                memcpy(c_out + r * ldc_out + j, &w, 4);
            }
        }
    return PYAMX_ENGINE_OK;
}
