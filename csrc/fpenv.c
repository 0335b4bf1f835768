/* The calling thread's SSE control and status register (MXCSR), for the
 * numpy emulator.
 *
 * numpy's float arithmetic runs on SSE/AVX instructions, which round and
 * flush as the thread's MXCSR says; a caller that set round-toward-zero, or
 * a library built with -ffast-math that set FTZ/DAZ when it was loaded,
 * would change the emulator's bits. pyamx/_fpenv.py saves the caller's
 * MXCSR, runs the emulator under the default one and restores it. Baseline
 * x86-64 only (no target attributes); elsewhere the functions say so. */
#include "pyamx.h"

#if defined(__x86_64__)
#include <xmmintrin.h>

int pyamx_fpenv_supported(void) { return 1; }

uint32_t pyamx_get_mxcsr(void) { return _mm_getcsr(); }

int pyamx_set_mxcsr(uint32_t value)
{
    /* Bits 16-31 are reserved: LDMXCSR with any of them set raises #GP,
     * which would kill the process instead of raising in Python. */
    if (value > 0xFFFFu)
        return PYAMX_E_ARG;
    _mm_setcsr(value);
    return PYAMX_OK;
}

#else

int pyamx_fpenv_supported(void) { return 0; }

uint32_t pyamx_get_mxcsr(void) { return 0; }

int pyamx_set_mxcsr(uint32_t value)
{
    (void)value;
    return PYAMX_E_UNSUPPORTED;
}

#endif
