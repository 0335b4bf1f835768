/* The portable variant: plain C, no intrinsics, no MXCSR.
 *
 * The floating-point environment is handled with <fenv.h>: feholdexcept
 * saves the caller's environment and masks every exception, fesetround
 * selects round to nearest, fesetenv gives the caller's environment back
 * (flags included), on every call and in every worker thread.
 *
 * Two paths for the floats, chosen per call by engine.c's pre-scan:
 * - in range (every product of the packed operands is zero, infinite or an
 *   fp32 normal number): a bf16/fp16 product has at most 22 significant
 *   bits, so a*b is exact in fp32 and fma32(a, b, acc) is the single
 *   rounding of the fp32 sum a*b + acc (a contracted fma computes the same
 *   value). A sum of two fp32 values below 2^-126 is a multiple of 2^-149
 *   and hence exact, so FTZ after rounding means: a subnormal sum becomes
 *   the zero of its sign; a hardware FTZ (caller's MXCSR, ARM FZ) does the
 *   very same, and no subnormal ever enters as an operand (DAZ is applied
 *   to the packed operands and to C). NaNs produced here come only from
 *   invalid operations and are written as the x86 default NaN.
 * - otherwise: every step through the exact double-based scalar functions.
 */
#include "engine_internal.h"

#include <float.h>
#include <string.h>

#define P_MR 4
#define P_NR 16

static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline uint32_t flush(uint32_t s)
{
    return (s & 0x7F800000u) == 0 ? s & 0x80000000u : s;
}

static inline uint32_t nan_to_default(uint32_t s)
{
    return pyamx_f32_is_nan(s) ? PYAMX_F32_DEFAULT_NAN : s;
}

static void float_kernel(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                         uint32_t *c, int64_t ldc, int in_range)
{
    eng_tile_start(c, ldc, src, lds, P_MR, P_NR);
    for (int64_t kb = 0; kb < kd; kb += ENG_BLOCK) {
        int64_t len = kd - kb < ENG_BLOCK ? kd - kb : ENG_BLOCK;
        uint32_t even[P_MR][P_NR], odd[P_MR][P_NR];
        memset(even, 0, sizeof even);
        memset(odd, 0, sizeof odd);
        if (in_range) {
            for (int64_t k = 0; k < len; k++) {
                const uint32_t *a = ap + (kb + k) * 2 * P_MR, *b = bp + (kb + k) * 2 * P_NR;
                for (int r = 0; r < P_MR; r++) {
                    float ae = u2f(a[2 * r]), ao = u2f(a[2 * r + 1]);
                    for (int j = 0; j < P_NR; j++) {
                        float pe = ae * u2f(b[j]);
                        float po = ao * u2f(b[P_NR + j]);
                        even[r][j] = flush(f2u(pe + u2f(even[r][j])));
                        odd[r][j] = flush(f2u(po + u2f(odd[r][j])));
                    }
                }
            }
            for (int r = 0; r < P_MR; r++)
                for (int j = 0; j < P_NR; j++) {
                    uint32_t t = flush(f2u(u2f(even[r][j]) + u2f(odd[r][j])));
                    uint32_t *cp = c + r * ldc + j;
                    *cp = nan_to_default(flush(f2u(u2f(pyamx_f32_daz(*cp)) + u2f(t))));
                }
        } else {
            for (int64_t k = 0; k < len; k++) {
                const uint32_t *a = ap + (kb + k) * 2 * P_MR, *b = bp + (kb + k) * 2 * P_NR;
                for (int r = 0; r < P_MR; r++)
                    for (int j = 0; j < P_NR; j++) {
                        even[r][j] = eng_fma32_nonan(a[2 * r], b[j], even[r][j]);
                        odd[r][j] = eng_fma32_nonan(a[2 * r + 1], b[P_NR + j], odd[r][j]);
                    }
            }
            for (int r = 0; r < P_MR; r++)
                for (int j = 0; j < P_NR; j++) {
                    uint32_t *cp = c + r * ldc + j;
                    *cp = eng_add32_nonan(*cp, eng_add32_nonan(even[r][j], odd[r][j]));
                }
        }
    }
}

static void int_kernel(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                       uint32_t *c, int64_t ldc)
{
    eng_tile_start(c, ldc, src, lds, P_MR, P_NR);
    uint32_t acc[P_MR][P_NR];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kd; k++) {
        const uint32_t *a = ap + k * 2 * P_MR, *b = bp + k * 2 * P_NR;
        for (int r = 0; r < P_MR; r++)
            for (int h = 0; h < 2; h++) {
                int32_t a0 = (int16_t)(a[2 * r + h] & 0xFFFF), a1 = (int16_t)(a[2 * r + h] >> 16);
                for (int j = 0; j < P_NR; j++) {
                    uint32_t w = b[h * P_NR + j];
                    int32_t b0 = (int16_t)(w & 0xFFFF), b1 = (int16_t)(w >> 16);
                    /* each pair sum is within +-2^17: no int32 overflow; the wrap is in uint32 */
                    acc[r][j] += (uint32_t)(a0 * b0 + a1 * b1);
                }
            }
    }
    for (int r = 0; r < P_MR; r++)
        for (int j = 0; j < P_NR; j++)
            c[r * ldc + j] += acc[r][j];
}

static void enter(struct eng_fpenv *saved)
{
    feholdexcept(&saved->env);
    fesetround(FE_TONEAREST);
}

static void leave(const struct eng_fpenv *saved)
{
    fesetenv(&saved->env);
}

/* widen16 NULL: the scalar widening of engine.c (plain C is all this variant may use) */
static const struct eng_variant portable = {P_MR, P_NR, float_kernel, int_kernel, enter, leave, 0};

int eng_portable_supported(const char **why)
{
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
    *why = "this compiler evaluates floating point with excess precision (FLT_EVAL_METHOD != 0)";
    return 0;
#else
    *why = "plain C, exact on any IEEE 754 platform";
    return 1;
#endif
}

const struct eng_variant *eng_portable_variant(void) { return &portable; }
