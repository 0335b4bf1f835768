/* The compiled engine's test hooks: in a test build only (PYAMX_ENGINE_TEST_HOOKS=1 at build
 * time: build.py then defines the macro and feeds this header to cffi after engine.h). The
 * product's API has none of them; tests that need one skip, saying so, where it is absent.
 * Plain declarations only (cdef). */
#ifndef PYAMX_ENGINE_TEST_HOOKS_H
#define PYAMX_ENGINE_TEST_HOOKS_H

#include <stdint.h>

/* The exact scalar primitives the engine falls back to for NaN operands (and that the
 * portable variant is built on): fp32 bit patterns in and out, DAZ on every operand, FTZ after
 * rounding, RNE, x86 NaN rule. */
uint32_t pyamx_engine_fma32(uint32_t a, uint32_t b, uint32_t acc);
uint32_t pyamx_engine_add32(uint32_t x, uint32_t y);

/* Enable (1) or disable (0) the int16 (AVX-512 VNNI) path of the avx512 variant's AMX-FP8 rows
 * for later calls, or only ask (-1); returns the previous setting. */
int pyamx_engine_fp8_int_path(int enable);
/* The same for the split rows (left-out rows summed as two int16 rows on avx512 with VNNI and
 * DQ, engine_fp8.c z_split_row2). */
int pyamx_engine_fp8_split_path(int enable);

#endif
