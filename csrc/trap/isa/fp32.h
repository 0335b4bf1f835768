/* fp32 arithmetic of the trap mode (docs/semantics.md sections 2-3, default
 * numerics), as inline primitives for the dot products in semantics.c and
 * the test entry points in fp32.c.
 *
 * Deliberately a second implementation, written from docs/semantics.md and not
 * from the Python emulator or the compiled engine, so that the cross-check
 * suite compares independent readings of the same rules.  Callers run the
 * hardware operations under PYAMX_MXCSR_DAZ_FTZ.
 */
#ifndef PYAMX_TRAP_FP32_H
#define PYAMX_TRAP_FP32_H

#include <stdint.h>
#include <string.h>

#include "../../fp32_bits.h"

#if defined(__FAST_MATH__)
#error "the trap module must not be built with -ffast-math: its fp32 results must be bit-exact"
#endif

static inline int is_inf32(uint32_t x) { return (x & 0x7FFFFFFFu) == 0x7F800000u; }
static inline int is_zero32(uint32_t x) { return (x & 0x7FFFFFFFu) == 0; }
static inline int is_special32(uint32_t x) { return (x & 0x7F800000u) == 0x7F800000u; }

static inline float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint32_t f_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

/* Hardware single-rounding FMA and add.  Callers run them under
 * PYAMX_MXCSR_DAZ_FTZ, which supplies DAZ, FTZ (tininess after rounding, as x86
 * detects it) and round-to-nearest-even; the NaN cases never reach them
 * because the hardware's choice among several NaNs depends on which
 * register form the compiler picked. */
__attribute__((target("fma"))) static inline uint32_t hw_fma(uint32_t a, uint32_t b, uint32_t c)
{
    return f_bits(__builtin_fmaf(bits_f(a), bits_f(b), bits_f(c)));
}

static inline uint32_t hw_add(uint32_t x, uint32_t y)
{
    volatile float r = bits_f(x) + bits_f(y);
    return f_bits(r);
}

__attribute__((target("fma"))) static inline uint32_t fma32(uint32_t a, uint32_t b, uint32_t c)
{
    a = pyamx_f32_daz(a);
    b = pyamx_f32_daz(b);
    c = pyamx_f32_daz(c);
    if (__builtin_expect(is_special32(a) | is_special32(b) | is_special32(c), 0)) {
        if (pyamx_f32_is_nan(a)) return a | PYAMX_F32_QUIET;
        if (pyamx_f32_is_nan(b)) return b | PYAMX_F32_QUIET;
        if (pyamx_f32_is_nan(c)) return c | PYAMX_F32_QUIET;
        int prod_inf = is_inf32(a) || is_inf32(b);
        if (prod_inf && (is_zero32(a) || is_zero32(b)))
            return PYAMX_F32_DEFAULT_NAN; /* inf * 0 */
        if (prod_inf && is_inf32(c) && (((a ^ b) ^ c) & 0x80000000u))
            return PYAMX_F32_DEFAULT_NAN; /* inf - inf */
    }
    return hw_fma(a, b, c);
}

static inline uint32_t add32(uint32_t x, uint32_t y)
{
    x = pyamx_f32_daz(x);
    y = pyamx_f32_daz(y);
    if (__builtin_expect(is_special32(x) | is_special32(y), 0)) {
        if (pyamx_f32_is_nan(x)) return x | PYAMX_F32_QUIET;
        if (pyamx_f32_is_nan(y)) return y | PYAMX_F32_QUIET;
        if (is_inf32(x) && is_inf32(y) && ((x ^ y) & 0x80000000u))
            return PYAMX_F32_DEFAULT_NAN;
    }
    return hw_add(x, y);
}

/* fp16 -> fp32 is exact: every fp16 value, denormals included, is a
 * normal fp32 value, so DAZ never touches an fp16 input. */
static inline uint32_t f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F)
        return sign | 0x7F800000u | (m << 13); /* inf/NaN, payload and quiet bit kept */
    if (e == 0) {
        if (m == 0)
            return sign;
        uint32_t e32 = 127 - 15 + 1;
        while (!(m & 0x400)) {
            m <<= 1;
            e32--;
        }
        return sign | (e32 << 23) | ((m & 0x3FF) << 13);
    }
    return sign | ((e + 127 - 15) << 23) | (m << 13);
}

#endif
