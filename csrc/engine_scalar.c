/* Exact scalar fp32 fma32/add32 with the AMX rules (docs/semantics.md sections 2-3),
 * from double arithmetic. The engine's fallback for NaN operands and the
 * portable variant's path when a product may leave the fp32 normal range.
 *
 * Why it is exact: DAZ is applied to the bit patterns first, so no
 * denormal ever enters the hardware (the caller's DAZ/FTZ bits cannot
 * matter). The product of two fp32 values has at most 48 significant bits
 * and a magnitude within [2^-252, 2^256], so it is exact in double (a
 * contracted fma would round the same exact value, so -ffp-contract cannot
 * change anything). The sum is computed as double plus its exact TwoSum
 * error; folding a non-zero error into the last bit (round to odd) makes
 * the final rounding to 24 bits correct (53 >= 24 + 2). TwoSum needs round
 * to nearest: every caller runs with it (MXCSR set by the x86 variants,
 * fesetround by the portable one). Doubles here are never subnormal (the
 * smallest non-zero error is far above 2^-1022), so FTZ/DAZ on doubles
 * cannot matter either. FTZ is decided on the value rounded with an
 * unbounded exponent (scaled by 2^192 into the normal range): tininess
 * after rounding, as x86 detects it.
 *
 * Separate from trap/fp32.h on purpose: the cross-checks compare two independent readings of the rules.
 *
 * Also the exact scalar widening of bf16/fp16 operands (eng_widen16), the reference every
 * variant's vector widening matches and falls back to: the variants and the driver (engine.c)
 * call down into this file, never into each other.
 */
#include "engine_internal.h"

#include <math.h>
#include <string.h>

#define SIGN 0x80000000u

static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* fp32 bits of the exact value s + e (e the TwoSum error of s), RNE, FTZ after rounding. */
static uint32_t round_pair(double s, double e)
{
    if (isnan(s))
        return PYAMX_F32_DEFAULT_NAN; /* no NaN operand reaches here: an invalid operation */
    if (isinf(s))
        return signbit(s) ? 0xFF800000u : 0x7F800000u;
    if (s == 0)
        return signbit(s) ? SIGN : 0u; /* an exact zero: e is 0 too */
    if (e != 0) {
        uint64_t bits;
        memcpy(&bits, &s, 8);
        if ((bits & 1) == 0) {
            /* round to odd: step toward the lost error */
            if ((e > 0) == (s > 0))
                bits += 1;
            else
                bits -= 1;
            memcpy(&s, &bits, 8);
        }
    }
    if (fabs(s) >= 0x1p-126)
        return f2u((float)s); /* RNE; overflow gives infinity */
    uint32_t sign = s < 0 ? SIGN : 0u;
    float scaled = (float)(s * 0x1p192); /* exact scaling, then the rounding with an unbounded exponent */
    return fabsf(scaled) >= 0x1p66f ? (sign | 0x00800000u) : sign;
}

/* fp32 bits of x + y (exact doubles): their sum and its TwoSum error, rounded once. */
static inline uint32_t round_sum(double x, double y)
{
    double s = x + y;
    if (!isfinite(s))
        return round_pair(s, 0.0);
    double t = s - x;
    double e = (x - (s - t)) + (y - t);
    return round_pair(s, e);
}

uint32_t eng_fma32_nonan(uint32_t a, uint32_t b, uint32_t acc)
{
    double p = (double)u2f(pyamx_f32_daz(a)) * (double)u2f(pyamx_f32_daz(b));
    return round_sum(p, (double)u2f(pyamx_f32_daz(acc)));
}

uint32_t eng_add32_nonan(uint32_t x, uint32_t y)
{
    return round_sum((double)u2f(pyamx_f32_daz(x)), (double)u2f(pyamx_f32_daz(y)));
}

uint32_t eng_fma32(uint32_t a, uint32_t b, uint32_t acc)
{
    if (pyamx_f32_is_nan(a))
        return a | PYAMX_F32_QUIET;
    if (pyamx_f32_is_nan(b))
        return b | PYAMX_F32_QUIET;
    if (pyamx_f32_is_nan(acc))
        return acc | PYAMX_F32_QUIET;
    return eng_fma32_nonan(a, b, acc);
}

uint32_t eng_fma32_acc_first(uint32_t a, uint32_t b, uint32_t acc)
{
    if (pyamx_f32_is_nan(acc))
        return acc | PYAMX_F32_QUIET;
    return eng_fma32(a, b, acc);
}

uint32_t eng_add32(uint32_t x, uint32_t y)
{
    if (pyamx_f32_is_nan(x))
        return x | PYAMX_F32_QUIET;
    if (pyamx_f32_is_nan(y))
        return y | PYAMX_F32_QUIET;
    return eng_add32_nonan(x, y);
}

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

/* bf16/fp16 values widened to fp32 words: bf16 with DAZ, fp16 exactly (NaN
 * payloads kept, signalling ones unquieted). The reference every variant's
 * widen16 must match; returns 1 when one of the values is a NaN. */
int eng_widen16(int op, const uint16_t *src, int64_t count, uint32_t *dst)
{
    uint32_t nan = 0;
    if (pyamx_op_traits[op].a_format == PYAMX_FMT_BF16) {
        for (int64_t i = 0; i < count; i++) {
            uint32_t w = (uint32_t)src[i] << 16;
            w = (w & 0x7F800000u) ? w : (w & 0x80000000u);
            nan |= (w & 0x7FFFFFFFu) > 0x7F800000u;
            dst[i] = w;
        }
    } else {
        for (int64_t i = 0; i < count; i++) {
            uint32_t w = widen_fp16(src[i]);
            nan |= (w & 0x7FFFFFFFu) > 0x7F800000u;
            dst[i] = w;
        }
    }
    return (int)nan;
}
