/* AVX2 paths of the dot products, chosen at run time (the library must
 * also load and work on CPUs with AVX and FMA only, see cpu_has_fma() in
 * sigill_handler.c).  Same results, bit for bit, as the scalar paths in
 * semantics.c, which stay the reference and the fallback.
 *
 * Why the vector paths give the same bits (docs/semantics.md sections 2-3):
 *
 * - Floats, taken only when no used element of tsrc1 or tsrc2 is an
 *   infinity or NaN (otherwise nothing is written and the scalar path
 *   runs).  bf16 -> fp32 is a shift; fp16 -> fp32 is done in integer
 *   arithmetic, exact for every finite fp16 value (denormals become normal
 *   fp32 values, so DAZ never applies to them).  No product is special, so
 *   even/odd are never NaN: the hardware FMA under PYAMX_MXCSR_DAZ_FTZ (DAZ, FTZ,
 *   nearest-even) is fma32, and even + odd is add32 in either operand
 *   order.  C = C + (even + odd) can meet a NaN in C: x86 returns the
 *   first NaN operand quietened, and the compiler may swap the operands of
 *   a commutative add, so the lanes where C is NaN are set to C | quiet
 *   afterwards, which is add32's rule whatever the other operand.
 * - int8: every product and pair sum fits in int32 (|x*y| <= 2^16), and
 *   the wrap-around sum of int32 values does not depend on the grouping,
 *   so VPMADDWD pair sums added in any order give the scalar loop's bits.
 *
 * Two rows of the destination are computed at once (eight independent
 * FMA chains): each element still accumulates its K products in
 * increasing k, one chain for the even and one for the odd lanes.
 */
#include "internal.h"
#include "fp32.h"
#include "../../cpu_features.h"

#include <immintrin.h>
#include <string.h>

static int32_t g_simd_supported = -1; /* -1: not probed yet */
static int32_t g_simd_on;
static uint64_t g_simd_count;

uint64_t pyamx_trap_simd_count(void) { return __atomic_load_n(&g_simd_count, __ATOMIC_RELAXED); }

static int32_t probe_avx2(void)
{
    /* AVX and the OS's YMM support are checked by pyamx_trap_install(). */
    return pyamx_cpu_has(PYAMX_CPU_AVX2);
}

void trap_simd_setup(void)
{
    int32_t s = probe_avx2();
    __atomic_store_n(&g_simd_supported, s, __ATOMIC_RELAXED);
    __atomic_store_n(&g_simd_on, s, __ATOMIC_RELAXED);
}

int32_t trap_simd_enabled(void) { return __atomic_load_n(&g_simd_on, __ATOMIC_RELAXED); }

int32_t pyamx_trap_set_simd(int32_t on)
{
    int32_t s = __atomic_load_n(&g_simd_supported, __ATOMIC_RELAXED);
    if (s < 0) {
        s = probe_avx2();
        __atomic_store_n(&g_simd_supported, s, __ATOMIC_RELAXED);
        __atomic_store_n(&g_simd_on, s, __ATOMIC_RELAXED);
    }
    if (on >= 0)
        __atomic_store_n(&g_simd_on, on && s ? 1 : 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&g_simd_on, __ATOMIC_RELAXED);
}

#define AVX2 __attribute__((target("avx2,fma")))

/* fp16 halves (zero-extended in 32-bit lanes) that are not inf/NaN -> fp32 bits. */
AVX2 static inline __m256i f16_finite_to_f32(__m256i h)
{
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
    __m256i mag = _mm256_and_si256(h, _mm256_set1_epi32(0x7FFF));
    /* normal: rebias the exponent (15 -> 127) */
    __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 13), _mm256_set1_epi32((127 - 15) << 23));
    /* zero or denormal: m * 2^-24, exact (m < 2^10, result a normal fp32 or +0) */
    __m256i denormal = _mm256_castps_si256(
        _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-24f)));
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x400), mag);
    return _mm256_or_si256(_mm256_blendv_epi8(normal, denormal, small), sign);
}

/* Not engine_x86.c's widening: that one needs F16C and applies DAZ while packing, this one runs on
 * any AVX2 CPU and leaves DAZ to the FMA under PYAMX_MXCSR_DAZ_FTZ.
 * Eight dwords of a tile row -> their low and high halves as fp32 bits;
 * returns the lanes holding an inf/NaN half. */
AVX2 static inline __m256i widen8(__m256i w, int fp16, __m256i *lo, __m256i *hi)
{
    if (fp16) {
        __m256i hl = _mm256_and_si256(w, _mm256_set1_epi32(0xFFFF));
        __m256i hh = _mm256_srli_epi32(w, 16);
        const __m256i e = _mm256_set1_epi32(0x7C00);
        __m256i sp = _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(hl, e), e),
                                     _mm256_cmpeq_epi32(_mm256_and_si256(hh, e), e));
        *lo = f16_finite_to_f32(hl);
        *hi = f16_finite_to_f32(hh);
        return sp;
    }
    *lo = _mm256_slli_epi32(w, 16);
    *hi = _mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u));
    const __m256i e = _mm256_set1_epi32(0x7F800000);
    return _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(*lo, e), e),
                           _mm256_cmpeq_epi32(_mm256_and_si256(*hi, e), e));
}

/* One tile row of up to 16 dwords widened into lo[16], hi[16]; returns the
 * lanes (dwords < used) holding an inf/NaN half. */
AVX2 static inline __m256i widen_row(const uint8_t *row, int fp16, const __m256i used[2], float *lo,
                                     float *hi)
{
    __m256i sp = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        __m256i l, u;
        __m256i s = widen8(_mm256_loadu_si256((const __m256i *)(row + 32 * h)), fp16, &l, &u);
        _mm256_storeu_si256((__m256i *)(lo + 8 * h), l);
        _mm256_storeu_si256((__m256i *)(hi + 8 * h), u);
        sp = _mm256_or_si256(sp, _mm256_and_si256(s, used[h]));
    }
    return sp;
}

AVX2 static inline void lanes_below(int n, __m256i out[2])
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    out[0] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
    out[1] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), idx);
}

/* C row (16 dwords) = add32(C, add32(even, odd)), NaNs in C as add32 orders them. */
AVX2 static inline void accumulate_row(uint8_t *crow, __m256 e0, __m256 e1, __m256 o0, __m256 o1)
{
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i quiet = _mm256_set1_epi32(PYAMX_F32_QUIET);
    __m256 t[2] = {_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1)};
    for (int h = 0; h < 2; h++) {
        __m256i c = _mm256_loadu_si256((const __m256i *)(crow + 32 * h));
        __m256i r = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(c), t[h]));
        __m256i cnan = _mm256_cmpgt_epi32(_mm256_and_si256(c, abs), inf);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(c, quiet), cnan);
        _mm256_storeu_si256((__m256i *)(crow + 32 * h), r);
    }
}

/* Returns 0 when done, 1 (nothing written) when an operand holds an inf or
 * NaN.  Runs under PYAMX_MXCSR_DAZ_FTZ, set by the caller; out of line so that no fp
 * operation moves across that switch. */
__attribute__((noinline)) AVX2 int trap_simd_dp_float(struct tile_state *st, int d, int s1, int s2, int fp16)
{
    int M = st->rows[d], K = st->rows[s2], N = st->colsb[d] / 4;
    __m256i ncols[2], kcols[2];
    lanes_below(N, ncols);
    lanes_below(K, kcols);
    __m256i sp = _mm256_setzero_si256();
    for (int k = 0; k < K; k++)
        sp = _mm256_or_si256(sp, widen_row(st->tiles[s2][k], fp16, ncols, (float *)st->bconv[k][0],
                                           (float *)st->bconv[k][1]));
    float alo[2][16], ahi[2][16];
    for (int m = 0; m < M; m++)
        sp = _mm256_or_si256(sp, widen_row(st->tiles[s1][m], fp16, kcols, alo[0], ahi[0]));
    if (!_mm256_testz_si256(sp, sp))
        return 1;

    for (int m = 0; m < M; m += 2) {
        int pair = m + 1 < M;
        widen_row(st->tiles[s1][m], fp16, kcols, alo[0], ahi[0]);
        if (pair)
            widen_row(st->tiles[s1][m + 1], fp16, kcols, alo[1], ahi[1]);
        __m256 e00 = _mm256_setzero_ps(), e01 = _mm256_setzero_ps();
        __m256 o00 = _mm256_setzero_ps(), o01 = _mm256_setzero_ps();
        __m256 e10 = _mm256_setzero_ps(), e11 = _mm256_setzero_ps();
        __m256 o10 = _mm256_setzero_ps(), o11 = _mm256_setzero_ps();
        for (int k = 0; k < K; k++) {
            const float *b0 = (const float *)st->bconv[k][0];
            const float *b1 = (const float *)st->bconv[k][1];
            __m256 be0 = _mm256_loadu_ps(b0), be1 = _mm256_loadu_ps(b0 + 8);
            __m256 bo0 = _mm256_loadu_ps(b1), bo1 = _mm256_loadu_ps(b1 + 8);
            __m256 a = _mm256_broadcast_ss(&alo[0][k]), b = _mm256_broadcast_ss(&ahi[0][k]);
            e00 = _mm256_fmadd_ps(a, be0, e00);
            e01 = _mm256_fmadd_ps(a, be1, e01);
            o00 = _mm256_fmadd_ps(b, bo0, o00);
            o01 = _mm256_fmadd_ps(b, bo1, o01);
            if (pair) {
                a = _mm256_broadcast_ss(&alo[1][k]);
                b = _mm256_broadcast_ss(&ahi[1][k]);
                e10 = _mm256_fmadd_ps(a, be0, e10);
                e11 = _mm256_fmadd_ps(a, be1, e11);
                o10 = _mm256_fmadd_ps(b, bo0, o10);
                o11 = _mm256_fmadd_ps(b, bo1, o11);
            }
        }
        accumulate_row(st->tiles[d][m], e00, e01, o00, o01);
        if (pair)
            accumulate_row(st->tiles[d][m + 1], e10, e11, o10, o11);
    }
    __atomic_fetch_add(&g_simd_count, 1, __ATOMIC_RELAXED);
    return 0;
}

/* (a0, a1, a2, a3), one dword of tsrc1, as int16 in every 64-bit lane:
 * VPMADDWD with a tsrc2 row then gives, per dword n, a0*b0 + a1*b1 and
 * a2*b2 + a3*b3 side by side. */
AVX2 static inline __m256i a_pattern(const uint8_t *p, int is_signed)
{
    uint32_t a4;
    memcpy(&a4, p, 4);
    __m128i a = _mm_cvtsi32_si128((int)a4);
    return _mm256_broadcastq_epi64(is_signed ? _mm_cvtepi8_epi16(a) : _mm_cvtepu8_epi16(a));
}

/* C row (16 dwords) += the pair sums of dwords 0-3, 4-7, 8-11, 12-15 (int32, wrapping). */
AVX2 static inline void add_pair_sums(uint8_t *crow, __m256i p0, __m256i p1, __m256i p2, __m256i p3)
{
    __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(p0, p1), 0xD8);
    __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(p2, p3), 0xD8);
    __m256i *c = (__m256i *)crow;
    _mm256_storeu_si256(c, _mm256_add_epi32(_mm256_loadu_si256(c), lo));
    _mm256_storeu_si256(c + 1, _mm256_add_epi32(_mm256_loadu_si256(c + 1), hi));
}

/* tsrc2 rows as int16 (sign- or zero-extended bytes), kept in st->bconv's
 * 2 KiB (off the signal stack): row k is 64 int16, byte j of the tile row
 * at [k][j]. */
__attribute__((noinline)) AVX2 void trap_simd_dp_int8(struct tile_state *st, int d, int s1, int s2,
                                                      int s1_signed, int s2_signed)
{
    int M = st->rows[d], K = st->rows[s2];
    uint8_t *bw = (uint8_t *)st->bconv; /* 16 rows x 128 bytes */
    for (int k = 0; k < K; k++) {
        for (int q = 0; q < 4; q++) {
            __m128i b = _mm_loadu_si128((const __m128i *)&st->tiles[s2][k][16 * q]);
            __m256i w = s2_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
            _mm256_storeu_si256((__m256i *)(bw + 128 * k + 32 * q), w);
        }
    }
    /* Two rows at a time share the loads of tsrc2 (row M-1 twice when M is
     * odd: computed twice, stored once); accumulators in named registers. */
    for (int m = 0; m < M; m += 2) {
        int m1 = m + 1 < M ? m + 1 : m;
        __m256i x0 = _mm256_setzero_si256(), x1 = x0, x2 = x0, x3 = x0;
        __m256i y0 = x0, y1 = x0, y2 = x0, y3 = x0;
        for (int k = 0; k < K; k++) {
            __m256i ax = a_pattern(&st->tiles[s1][m][4 * k], s1_signed);
            __m256i ay = a_pattern(&st->tiles[s1][m1][4 * k], s1_signed);
            const __m256i *b = (const __m256i *)(bw + 128 * k);
            __m256i b0 = _mm256_loadu_si256(b), b1 = _mm256_loadu_si256(b + 1);
            __m256i b2 = _mm256_loadu_si256(b + 2), b3 = _mm256_loadu_si256(b + 3);
            x0 = _mm256_add_epi32(x0, _mm256_madd_epi16(b0, ax));
            x1 = _mm256_add_epi32(x1, _mm256_madd_epi16(b1, ax));
            x2 = _mm256_add_epi32(x2, _mm256_madd_epi16(b2, ax));
            x3 = _mm256_add_epi32(x3, _mm256_madd_epi16(b3, ax));
            y0 = _mm256_add_epi32(y0, _mm256_madd_epi16(b0, ay));
            y1 = _mm256_add_epi32(y1, _mm256_madd_epi16(b1, ay));
            y2 = _mm256_add_epi32(y2, _mm256_madd_epi16(b2, ay));
            y3 = _mm256_add_epi32(y3, _mm256_madd_epi16(b3, ay));
        }
        add_pair_sums(st->tiles[d][m], x0, x1, x2, x3);
        if (m1 != m)
            add_pair_sums(st->tiles[d][m1], y0, y1, y2, y3);
    }
    __atomic_fetch_add(&g_simd_count, 1, __ATOMIC_RELAXED);
}
