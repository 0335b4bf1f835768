/* What the engine's C files share and Python never sees (engine.h is the
 * cffi API; this file is not fed to cdef).
 *
 * Packed layouts (built once per call by engine.c, shared by all threads):
 *   A: row panels of MR rows; panel p holds, for k = 0..kd-1, 2*MR words
 *      [r][h]: h = 0/1 is the even/odd fp32 value of dword k of row r
 *      (bf16/fp16 widened, bf16 with DAZ applied), or for int8 the int16
 *      pair of bytes 2h, 2h+1 (sign- or zero-extended) in one word.
 *   B: column panels of NR columns; panel q holds, for each k, 2*NR words
 *      [h][j] with the same meaning for column j.
 * Rows and columns past M and N are zero.
 */
#ifndef PYAMX_ENGINE_INTERNAL_H
#define PYAMX_ENGINE_INTERNAL_H

#include <fenv.h>
#include <stddef.h>
#include <stdint.h>

#include "dot_traits.h"
#include "engine.h"
#include "fp32_bits.h"

#define ENG_BLOCK 16  /* dwords per tile instruction (tmul_maxk) */
#define ENG_KC 512    /* K panel in dwords; a multiple of ENG_BLOCK so panels start on block boundaries (512: measured best on Zen 4 at 512..2048, 128..1024 tried; fewer C tile reloads) */
#define ENG_MAX_MR 8
#define ENG_MAX_NR 32

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ENG_X86 1
#else
#define ENG_X86 0
#endif

/* A compiled variant. The float kernel runs kd dwords starting on a block
 * boundary over one MR x NR tile of C (ldc in elements), starting from the
 * tile at src (rows lds apart: lds 0 repeats one row, e.g. of zeros; src == c
 * for in place), so no separate pass starts C; the int
 * kernel adds the byte products with wrap-around. in_range = 1 promises
 * that every product of the packed operands is zero, infinite or an fp32
 * normal number (exact in fp32): the portable kernel then runs on fp32
 * arithmetic; the hardware kernels ignore it. enter() puts the calling
 * thread's floating-point environment in the state the kernels need and
 * returns what is needed to undo it; leave() undoes it. */
struct eng_fpenv { uint32_t mxcsr; fenv_t env; };

struct eng_variant {
    int mr, nr;
    void (*float_kernel)(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                         uint32_t *c, int64_t ldc, int in_range);
    void (*int_kernel)(int64_t kd, const uint32_t *ap, const uint32_t *bp, const uint32_t *src, int64_t lds,
                       uint32_t *c, int64_t ldc);
    void (*enter)(struct eng_fpenv *saved);
    void (*leave)(const struct eng_fpenv *saved);
    /* count bf16/fp16 values at src widened to fp32 words at dst, exactly as
     * eng_widen16() does (bf16 with DAZ, fp16 exact, NaN payloads kept);
     * nonzero when one of them is a NaN. NULL: eng_widen16() (engine_scalar.c). */
    int (*widen16)(int op, const uint16_t *src, int64_t count, uint32_t *dst);
};

/* engine_scalar.c: the scalar widening every widen16 must match (and their tails use) */
int eng_widen16(int op, const uint16_t *src, int64_t count, uint32_t *dst);

/* engine_x86.c (zero/NULL off x86-64) */
int eng_x86_cpu_has(int kind, const char **why);
const struct eng_variant *eng_x86_variant(int kind);
uint32_t eng_x86_getcsr(void);
void eng_x86_setcsr(uint32_t v);

/* engine_portable.c */
const struct eng_variant *eng_portable_variant(void);
int eng_portable_supported(const char **why);

/* engine_scalar.c: the exact scalar arithmetic (rounding mode must be to nearest) */
uint32_t eng_fma32(uint32_t a, uint32_t b, uint32_t acc);
/* eng_fma32 with NaN priority acc, a, b (the complex rows, as the SDM writes them) */
uint32_t eng_fma32_acc_first(uint32_t a, uint32_t b, uint32_t acc);
uint32_t eng_add32(uint32_t x, uint32_t y);
uint32_t eng_fma32_nonan(uint32_t a, uint32_t b, uint32_t acc);
uint32_t eng_add32_nonan(uint32_t x, uint32_t y);

/* Whether `kind` is compiled in and runs here (why: the reason, static storage). Engine.c and
 * engine_fp8.c both ask, so it sits here rather than in either. */
static inline int eng_kind_runs(int kind, const char **why)
{
    if (kind == PYAMX_ENGINE_PORTABLE)
        return eng_portable_supported(why);
    if (kind == PYAMX_ENGINE_AVX2 || kind == PYAMX_ENGINE_AVX512)
        return eng_x86_cpu_has(kind, why);
    *why = "unknown engine kind";
    return 0;
}

static inline int eng_overlaps(const void *p0, size_t n0, const void *p1, size_t n1)
{
    uintptr_t a = (uintptr_t)p0, b = (uintptr_t)p1;
    return a < b + n1 && b < a + n0;
}

/* engine_fp8.c: the AMX-FP8 rows of pyamx_engine_run(), the call already checked by engine.c
 * (op an fp8 row, shapes, strides, overlaps, threads; kind available). */
int eng_fp8_run(const struct pyamx_engine_call *call, const struct pyamx_op_traits *t);

/* The tile at src copied to c (nothing when src == c): kernels that work in place start with it. */
static inline void eng_tile_start(uint32_t *c, int64_t ldc, const uint32_t *src, int64_t lds, int rows, int cols)
{
    if (src != c)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++)
                c[r * ldc + j] = src[r * lds + j];
}

#endif
