/* The x86-64 variants: AVX-512 and AVX2+FMA kernels on the hardware FMA.
 *
 * Only the kernel functions carry target attributes, so this file (and the
 * module) builds with any x86-64 compiler flags; run-time CPUID + XCR0
 * decide whether a variant may run.
 *
 * Why the hardware gives the docs/semantics.md bits: under MXCSR = DAZ | FTZ |
 * round to nearest even | all exceptions masked (0x9FC0), vfmadd is fma32
 * and vaddps is add32 for everything but the choice among several NaN
 * operands: DAZ zeroes subnormal operands keeping their sign, FTZ flushes
 * a result that is tiny after rounding (x86 detects tininess after
 * rounding) to the zero of its sign, overflow gives infinity, an invalid
 * operation gives 0xFFC00000, and a single NaN operand comes out quieted.
 * Without NaN operands every NaN is 0xFFC00000, so operand order cannot
 * matter; engine.c recomputes every output element that has a NaN among its
 * operands with the exact scalar functions. The caller's MXCSR is saved and
 * restored around every call, in every thread (flags included).
 */
#include "engine_internal.h"

#if ENG_X86

#include <immintrin.h>

#include "cpu_features.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx2,fma")))
#define T256 __attribute__((target("avx2,fma")))

uint32_t eng_x86_getcsr(void) { return _mm_getcsr(); }
void eng_x86_setcsr(uint32_t v) { _mm_setcsr(v); }

static void enter(struct eng_fpenv *saved)
{
    saved->mxcsr = _mm_getcsr();
    _mm_setcsr(PYAMX_MXCSR_DAZ_FTZ);
}

static void leave(const struct eng_fpenv *saved) { _mm_setcsr(saved->mxcsr); }

/* ---- AVX-512: 6 rows x 32 columns, even/odd lanes in 24 registers ---- */

/* Read through a may_alias type: the packed words were written as uint32. A
 * float operand lets the compiler fold the broadcast into the FMA ({1to16}). */
typedef float f32_alias __attribute__((may_alias));
#define F32(p) (*(const f32_alias *)&(p))
#define B512(p) _mm512_set1_ps(F32(p))

/* The C tile lives in a contiguous local copy while the kernel runs: rows of
 * the caller's C are often 4 KiB apart, and stores then loads at that
 * distance stall on false store-to-load dependencies (4K aliasing). */
T512 static void f512_tile(int64_t kd, const uint32_t *ap, const uint32_t *bp, float *cf);

T512 static void f512(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                      uint32_t *c, int64_t ldc, int in_range)
{
    (void)in_range;
    __attribute__((aligned(64))) float tile[6 * 32];
    for (int r = 0; r < 6; r++) {
        _mm512_store_ps(tile + 32 * r, _mm512_loadu_ps((const float *)src + r * lds));
        _mm512_store_ps(tile + 32 * r + 16, _mm512_loadu_ps((const float *)src + r * lds + 16));
    }
    f512_tile(kd, ap, bp, tile);
    for (int r = 0; r < 6; r++) {
        _mm512_storeu_ps((float *)c + r * ldc, _mm512_load_ps(tile + 32 * r));
        _mm512_storeu_ps((float *)c + r * ldc + 16, _mm512_load_ps(tile + 32 * r + 16));
    }
}

T512 static inline void f512_tile(int64_t kd, const uint32_t *ap, const uint32_t *bp, float *cf)
{
    const int64_t ldc = 32;
    for (int64_t kb = 0; kb < kd; kb += ENG_BLOCK) {
        int64_t len = kd - kb < ENG_BLOCK ? kd - kb : ENG_BLOCK;
        __m512 e00 = _mm512_setzero_ps(), e01 = e00, o00 = e00, o01 = e00;
        __m512 e10 = e00, e11 = e00, o10 = e00, o11 = e00;
        __m512 e20 = e00, e21 = e00, o20 = e00, o21 = e00;
        __m512 e30 = e00, e31 = e00, o30 = e00, o31 = e00;
        __m512 e40 = e00, e41 = e00, o40 = e00, o41 = e00;
        __m512 e50 = e00, e51 = e00, o50 = e00, o51 = e00;
        for (int64_t k = 0; k < len; k++) {
            __m512 be0 = _mm512_load_ps((const float *)bp), be1 = _mm512_load_ps((const float *)bp + 16);
            __m512 bo0 = _mm512_load_ps((const float *)bp + 32), bo1 = _mm512_load_ps((const float *)bp + 48);
#define ROW(r)                                              \
    do {                                                    \
        __m512 x = B512(ap[2 * r]);                         \
        e##r##0 = _mm512_fmadd_ps(x, be0, e##r##0);         \
        e##r##1 = _mm512_fmadd_ps(x, be1, e##r##1);         \
        x = B512(ap[2 * r + 1]);                            \
        o##r##0 = _mm512_fmadd_ps(x, bo0, o##r##0);         \
        o##r##1 = _mm512_fmadd_ps(x, bo1, o##r##1);         \
    } while (0)
            ROW(0); ROW(1); ROW(2); ROW(3); ROW(4); ROW(5);
#undef ROW
            ap += 12;
            bp += 64;
        }
#define OUT(r)                                                                                     \
    do {                                                                                           \
        float *cr = cf + (r) * ldc;                                                                \
        _mm512_storeu_ps(cr, _mm512_add_ps(_mm512_loadu_ps(cr), _mm512_add_ps(e##r##0, o##r##0)));           \
        _mm512_storeu_ps(cr + 16, _mm512_add_ps(_mm512_loadu_ps(cr + 16), _mm512_add_ps(e##r##1, o##r##1))); \
    } while (0)
        OUT(0); OUT(1); OUT(2); OUT(3); OUT(4); OUT(5);
#undef OUT
    }
}

T512 static void i512(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                      uint32_t *c, int64_t ldc)
{
    eng_tile_start(c, ldc, src, lds, 6, 32);
    __m512i a00 = _mm512_setzero_si512(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m512i a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    for (int64_t k = 0; k < kd; k++) {
        __m512i b0 = _mm512_load_si512(bp), b1 = _mm512_load_si512(bp + 16);
        __m512i b2 = _mm512_load_si512(bp + 32), b3 = _mm512_load_si512(bp + 48);
        /* vpmaddwd: int16 pairs (values -128..255) give exact int32 pair sums; vpaddd wraps */
#define ROW(r)                                                                   \
    do {                                                                         \
        __m512i x = _mm512_set1_epi32((int)ap[2 * r]);                           \
        a##r##0 = _mm512_add_epi32(a##r##0, _mm512_madd_epi16(x, b0));           \
        a##r##1 = _mm512_add_epi32(a##r##1, _mm512_madd_epi16(x, b1));           \
        x = _mm512_set1_epi32((int)ap[2 * r + 1]);                               \
        a##r##0 = _mm512_add_epi32(a##r##0, _mm512_madd_epi16(x, b2));           \
        a##r##1 = _mm512_add_epi32(a##r##1, _mm512_madd_epi16(x, b3));           \
    } while (0)
        ROW(0); ROW(1); ROW(2); ROW(3); ROW(4); ROW(5);
#undef ROW
        ap += 12;
        bp += 64;
    }
#define OUT(r)                                                                                          \
    do {                                                                                                \
        uint32_t *cr = c + (r) * ldc;                                                                   \
        _mm512_storeu_si512(cr, _mm512_add_epi32(_mm512_loadu_si512(cr), a##r##0));                     \
        _mm512_storeu_si512(cr + 16, _mm512_add_epi32(_mm512_loadu_si512(cr + 16), a##r##1));           \
    } while (0)
    OUT(0); OUT(1); OUT(2); OUT(3); OUT(4); OUT(5);
#undef OUT
}

/* ---- AVX2: 3 rows x 16 columns, 12 accumulators (even lanes, then odd lanes per k) ---- */

#define B256(p) _mm256_set1_ps(F32(p))

T256 static void f256(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                      uint32_t *c, int64_t ldc, int in_range)
{
    (void)in_range;
    eng_tile_start(c, ldc, src, lds, 3, 16);
    float *cf = (float *)c;
    for (int64_t kb = 0; kb < kd; kb += ENG_BLOCK) {
        int64_t len = kd - kb < ENG_BLOCK ? kd - kb : ENG_BLOCK;
        __m256 e00 = _mm256_setzero_ps(), e01 = e00, o00 = e00, o01 = e00;
        __m256 e10 = e00, e11 = e00, o10 = e00, o11 = e00;
        __m256 e20 = e00, e21 = e00, o20 = e00, o21 = e00;
        for (int64_t k = 0; k < len; k++) {
            __m256 b0 = _mm256_load_ps((const float *)bp), b1 = _mm256_load_ps((const float *)bp + 8);
            __m256 x = B256(ap[0]);
            e00 = _mm256_fmadd_ps(x, b0, e00); e01 = _mm256_fmadd_ps(x, b1, e01);
            x = B256(ap[2]);
            e10 = _mm256_fmadd_ps(x, b0, e10); e11 = _mm256_fmadd_ps(x, b1, e11);
            x = B256(ap[4]);
            e20 = _mm256_fmadd_ps(x, b0, e20); e21 = _mm256_fmadd_ps(x, b1, e21);
            b0 = _mm256_load_ps((const float *)bp + 16);
            b1 = _mm256_load_ps((const float *)bp + 24);
            x = B256(ap[1]);
            o00 = _mm256_fmadd_ps(x, b0, o00); o01 = _mm256_fmadd_ps(x, b1, o01);
            x = B256(ap[3]);
            o10 = _mm256_fmadd_ps(x, b0, o10); o11 = _mm256_fmadd_ps(x, b1, o11);
            x = B256(ap[5]);
            o20 = _mm256_fmadd_ps(x, b0, o20); o21 = _mm256_fmadd_ps(x, b1, o21);
            ap += 6;
            bp += 32;
        }
#define OUT(r)                                                                                     \
    do {                                                                                           \
        float *cr = cf + (r) * ldc;                                                                \
        _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), _mm256_add_ps(e##r##0, o##r##0)));         \
        _mm256_storeu_ps(cr + 8, _mm256_add_ps(_mm256_loadu_ps(cr + 8), _mm256_add_ps(e##r##1, o##r##1))); \
    } while (0)
        OUT(0); OUT(1); OUT(2);
#undef OUT
    }
}

T256 static void i256(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                      uint32_t *c, int64_t ldc)
{
    eng_tile_start(c, ldc, src, lds, 3, 16);
    __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    for (int64_t k = 0; k < kd; k++) {
        const __m256i *b = (const __m256i *)bp;
        __m256i b0 = _mm256_load_si256(b), b1 = _mm256_load_si256(b + 1);
        __m256i b2 = _mm256_load_si256(b + 2), b3 = _mm256_load_si256(b + 3);
#define ROW(r)                                                                   \
    do {                                                                         \
        __m256i x = _mm256_set1_epi32((int)ap[2 * r]);                           \
        a##r##0 = _mm256_add_epi32(a##r##0, _mm256_madd_epi16(x, b0));           \
        a##r##1 = _mm256_add_epi32(a##r##1, _mm256_madd_epi16(x, b1));           \
        x = _mm256_set1_epi32((int)ap[2 * r + 1]);                               \
        a##r##0 = _mm256_add_epi32(a##r##0, _mm256_madd_epi16(x, b2));           \
        a##r##1 = _mm256_add_epi32(a##r##1, _mm256_madd_epi16(x, b3));           \
    } while (0)
        ROW(0); ROW(1); ROW(2);
#undef ROW
        ap += 6;
        bp += 32;
    }
#define OUT(r)                                                                                          \
    do {                                                                                                \
        __m256i *cr = (__m256i *)(c + (r) * ldc);                                                       \
        _mm256_storeu_si256(cr, _mm256_add_epi32(_mm256_loadu_si256(cr), a##r##0));                     \
        _mm256_storeu_si256(cr + 1, _mm256_add_epi32(_mm256_loadu_si256(cr + 1), a##r##1));             \
    } while (0)
    OUT(0); OUT(1); OUT(2);
#undef OUT
}

/* ---- widening while packing ----
 *
 * bf16: the value is the top half of its fp32 word; DAZ keeps only the sign
 * of a zero exponent (the hardware would do the same in the FMA, but the
 * exact scalar path and the numpy engine see the packed words).
 * fp16: VCVTPH2PS is exact for every finite value, subnormals included, and
 * ignores MXCSR.DAZ (SDM: half-precision inputs are never treated as
 * denormals-are-zero; tests/emulator/test_engine_pack.py checks all 65536 values under
 * several MXCSR settings); it quiets signalling NaNs, so lanes with an
 * all-ones exponent (inf, NaN) are rebuilt from their bits as eng_widen16()
 * builds them, keeping NaN payloads unquieted.
 * trap/simd.c widens on its own on purpose: it may not assume F16C, and leaves DAZ to its FMA. */

T512 static inline __m512i w512_bf16(__m256i h, __mmask16 *nan)
{
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    __mmask16 normal = _mm512_test_epi32_mask(w, _mm512_set1_epi32(0x7F800000));
    w = _mm512_mask_mov_epi32(_mm512_and_si512(w, _mm512_set1_epi32((int)0x80000000u)), normal, w);
    *nan |= _mm512_cmpgt_epu32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    return w;
}

T512 static inline __m512i w512_fp16(__m256i h, __mmask16 *nan)
{
    __m512i z = _mm512_cvtepu16_epi32(h);
    __m512i w = _mm512_castps_si512(_mm512_cvtph_ps(h));
    __m512i e = _mm512_and_si512(z, _mm512_set1_epi32(0x7C00));
    __mmask16 special = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0x7C00));
    if (special) {
        __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(z, _mm512_set1_epi32(0x8000)), 16),
                                       _mm512_or_si512(_mm512_set1_epi32(0x7F800000),
                                                       _mm512_slli_epi32(_mm512_and_si512(z, _mm512_set1_epi32(0x3FF)), 13)));
        w = _mm512_mask_mov_epi32(w, special, bits);
        *nan |= _mm512_cmpgt_epu32_mask(_mm512_and_si512(z, _mm512_set1_epi32(0x7FFF)), _mm512_set1_epi32(0x7C00));
    }
    return w;
}

T512 static int widen512(int op, const uint16_t *src, int64_t count, uint32_t *dst)
{
    __mmask16 nan = 0;
    int bf = pyamx_op_traits[op].a_format == PYAMX_FMT_BF16;
    int64_t i = 0;
    for (; i + 32 <= count; i += 32) {
        __m512i h = _mm512_loadu_si512(src + i);
        __m256i lo = _mm512_castsi512_si256(h), hi = _mm512_extracti64x4_epi64(h, 1);
        _mm512_storeu_si512(dst + i, bf ? w512_bf16(lo, &nan) : w512_fp16(lo, &nan));
        _mm512_storeu_si512(dst + i + 16, bf ? w512_bf16(hi, &nan) : w512_fp16(hi, &nan));
    }
    for (; i < count; i += 16) {
        int64_t left = count - i < 16 ? count - i : 16;
        __mmask32 m = (__mmask32)((1u << left) - 1);
        __m256i h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, src + i));
        __m512i w = bf ? w512_bf16(h, &nan) : w512_fp16(h, &nan); /* zero lanes: +0, never NaN */
        _mm512_mask_storeu_epi32(dst + i, (__mmask16)m, w);
    }
    return nan != 0;
}

/* AVX2: bf16 with shifts; fp16 through F16C where the CPU has it (every
 * AVX2 CPU so far does, but it is a separate CPUID bit), else the scalar
 * widening. */
static int have_f16c;

T256 static inline __m256i w256_bf16(__m128i h, __m256i *nan)
{
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    __m256i zero_exp = _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    w = _mm256_blendv_epi8(w, _mm256_and_si256(w, _mm256_set1_epi32((int)0x80000000u)), zero_exp);
    *nan = _mm256_or_si256(*nan, _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000)));
    return w;
}

__attribute__((target("avx2,fma,f16c"))) static inline __m256i w256_fp16(__m128i h, __m256i *nan)
{
    __m256i z = _mm256_cvtepu16_epi32(h);
    __m256i w = _mm256_castps_si256(_mm256_cvtph_ps(h));
    __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(z, _mm256_set1_epi32(0x7C00)), _mm256_set1_epi32(0x7C00));
    if (!_mm256_testz_si256(special, special)) {
        __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(z, _mm256_set1_epi32(0x8000)), 16),
                                       _mm256_or_si256(_mm256_set1_epi32(0x7F800000),
                                                       _mm256_slli_epi32(_mm256_and_si256(z, _mm256_set1_epi32(0x3FF)), 13)));
        w = _mm256_blendv_epi8(w, bits, special);
        *nan = _mm256_or_si256(*nan, _mm256_cmpgt_epi32(_mm256_and_si256(z, _mm256_set1_epi32(0x7FFF)), _mm256_set1_epi32(0x7C00)));
    }
    return w;
}

__attribute__((target("avx2,fma,f16c"))) static int widen256(int op, const uint16_t *src, int64_t count, uint32_t *dst)
{
    int bf = pyamx_op_traits[op].a_format == PYAMX_FMT_BF16;
    if (!bf && !__atomic_load_n(&have_f16c, __ATOMIC_RELAXED))
        return eng_widen16(op, src, count, dst);
    __m256i nan = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), bf ? w256_bf16(h, &nan) : w256_fp16(h, &nan));
    }
    int tail = i < count ? eng_widen16(op, src + i, count - i, dst + i) : 0;
    return tail | !_mm256_testz_si256(nan, nan);
}

static const struct eng_variant v512 = {6, 32, f512, i512, enter, leave, widen512};
static const struct eng_variant v256 = {3, 16, f256, i256, enter, leave, widen256};

static int cpu_has_uncached(int kind, const char **why)
{
    uint32_t r[4];
    if (!pyamx_cpu_cpuid(1, 0, r)) {
        *why = "CPUID leaf 1 is not available";
        return 0;
    }
    __atomic_store_n(&have_f16c, pyamx_cpu_has(PYAMX_CPU_F16C), __ATOMIC_RELAXED);
    if (!pyamx_cpu_has(PYAMX_CPU_AVX) || !pyamx_cpu_has(PYAMX_CPU_FMA)) {
        *why = "the CPU lacks AVX or FMA (CPUID.1:ECX)";
        return 0;
    }
    if (!pyamx_cpu_has(PYAMX_CPU_OSXSAVE)) {
        *why = "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE = 0)";
        return 0;
    }
    if (!pyamx_cpu_cpuid(7, 0, r)) {
        *why = "CPUID leaf 7 is not available";
        return 0;
    }
    if (!pyamx_cpu_has(PYAMX_CPU_AVX2)) {
        *why = "the CPU lacks AVX2 (CPUID.7.0:EBX[5])";
        return 0;
    }
    if (!pyamx_cpu_os_saves(PYAMX_XCR0_YMM)) {
        *why = "the OS does not save YMM state (XCR0 bits 1-2)";
        return 0;
    }
    if (kind == PYAMX_ENGINE_AVX2) {
        *why = "CPU has AVX2 and FMA; OS saves YMM state";
        return 1;
    }
    if (!pyamx_cpu_has(PYAMX_CPU_AVX512F) || !pyamx_cpu_has(PYAMX_CPU_AVX512BW)) {
        *why = "the CPU lacks AVX-512 F/BW (CPUID.7.0:EBX[16], [30])";
        return 0;
    }
    if (!pyamx_cpu_os_saves(PYAMX_XCR0_ZMM)) {
        *why = "the OS does not save ZMM/opmask state (XCR0 bits 5-7)";
        return 0;
    }
    *why = "CPU has AVX-512 F/BW and FMA; OS saves ZMM state";
    return 1;
}

/* CPUID traps to the hypervisor in a VM (tens of microseconds), so the
 * answer is computed once; racing first callers store the same values. */
int eng_x86_cpu_has(int kind, const char **why)
{
    static int known[3], answer[3];
    static const char *reason[3];
    if (kind < 0 || kind > 2) {
        *why = "unknown engine kind";
        return 0;
    }
    if (!__atomic_load_n(&known[kind], __ATOMIC_ACQUIRE)) {
        const char *r = "";
        answer[kind] = cpu_has_uncached(kind, &r);
        reason[kind] = r;
        __atomic_store_n(&known[kind], 1, __ATOMIC_RELEASE);
    }
    *why = reason[kind];
    return answer[kind];
}

const struct eng_variant *eng_x86_variant(int kind) { return kind == PYAMX_ENGINE_AVX512 ? &v512 : kind == PYAMX_ENGINE_AVX2 ? &v256 : 0; }

#else /* not x86-64 */

int eng_x86_cpu_has(int kind, const char **why)
{
    (void)kind;
    *why = "not an x86-64 build";
    return 0;
}
const struct eng_variant *eng_x86_variant(int kind)
{
    (void)kind;
    return 0;
}
uint32_t eng_x86_getcsr(void) { return 0; }
void eng_x86_setcsr(uint32_t v) { (void)v; }

#endif
