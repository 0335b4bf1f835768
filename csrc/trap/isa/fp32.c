/* The fp32 primitives as callable functions, for the tests to compare with
 * their rational-arithmetic model (the handler inlines them instead).
 */
#include "internal.h"
#include "fp32.h"

#include <immintrin.h>

/* Out of line so that the compiler cannot move the arithmetic across the
 * MXCSR switches around it (as dp_float_rows, for the same reason). */
__attribute__((noinline, target("fma"))) static uint32_t fma32_isolated(uint32_t a, uint32_t b, uint32_t c)
{
    return fma32(a, b, c);
}

__attribute__((noinline)) static uint32_t add32_isolated(uint32_t x, uint32_t y) { return add32(x, y); }

uint32_t pyamx_trap_fma32(uint32_t a, uint32_t b, uint32_t c)
{
    unsigned int saved = _mm_getcsr();
    _mm_setcsr(PYAMX_MXCSR_DAZ_FTZ);
    uint32_t r = fma32_isolated(a, b, c);
    _mm_setcsr(saved);
    return r;
}

uint32_t pyamx_trap_add32(uint32_t x, uint32_t y)
{
    unsigned int saved = _mm_getcsr();
    _mm_setcsr(PYAMX_MXCSR_DAZ_FTZ);
    uint32_t r = add32_isolated(x, y);
    _mm_setcsr(saved);
    return r;
}

uint32_t pyamx_trap_f16_to_f32(uint16_t h) { return f16_to_f32(h); }

