/* The compiled emulator engine: the default ("sdm") numerics of the six
 * tile dot products over whole matrices, bit-identical to the numpy engine.
 *
 * build.py feeds this file to cffi's cdef() after pyamx.h (preprocessor
 * lines stripped), so it holds plain declarations only. Op ids are the
 * PYAMX_OP_TDP* values of enum pyamx_op in pyamx_ops.h.
 *
 * The schedule (docs: pyamx.matmul): for every output element, K is
 * consumed in blocks of 16 dwords in increasing order; per block the even
 * and odd fp32 lanes start at +0, take one fma32 per dword, then
 * C = add32(C, add32(even, odd)). Integer ops add the 4 byte products of
 * every dword to C with 32-bit wrap-around. DAZ, FTZ (tininess after
 * rounding), round to nearest even and the x86 NaN rule of docs/semantics.md
 * section 2-3, whatever the caller's floating-point environment.
 */
#ifndef PYAMX_ENGINE_H
#define PYAMX_ENGINE_H

#include <stdint.h>

/* Compiled variants. */
enum pyamx_engine_kind {
    PYAMX_ENGINE_PORTABLE = 0, /* plain C, any platform */
    PYAMX_ENGINE_AVX2 = 1,     /* x86-64 AVX2 + FMA, hardware FMA under MXCSR DAZ|FTZ|RNE */
    PYAMX_ENGINE_AVX512 = 2    /* x86-64 AVX-512 F + BW, likewise */
};

/* Results of pyamx_engine_dot(). */
enum pyamx_engine_status {
    PYAMX_ENGINE_OK = 0,
    PYAMX_ENGINE_E_ARG = -1,         /* bad op, size, stride or overlapping output */
    PYAMX_ENGINE_E_UNAVAILABLE = -2, /* the variant is not compiled in or this CPU/OS lacks it */
    PYAMX_ENGINE_E_NOMEM = -3,       /* packing buffers could not be allocated */
    PYAMX_ENGINE_E_CANCELLED = -4,   /* pyamx_engine_cancel() stopped the call; c_out is partly written */
    PYAMX_ENGINE_E_SLOW = -5         /* more exact-path work than max_exact: nothing computed */
};

/* 1 when `kind` is compiled in and this CPU and OS run it (CPUID and XCR0). */
int pyamx_engine_available(int kind);
/* Why (not) available, one line, static storage. */
const char *pyamx_engine_reason(int kind);

/* out = C after the schedule above, for M x N outputs and K = kd dwords.
 *   a:  M rows of kd dwords (2 bf16/fp16 or 4 int8 values each), row r at a + r*lda_bytes
 *   b:  kd rows of N dwords, pair-/quad-interleaved ("VNNI", as the
 *       instructions take it), row k at b + k*ldb_bytes
 *   c_in, c_out: M x N uint32 (fp32 bits or int32), rows ldc_in / ldc_out
 *       elements apart; c_out must not overlap c_in or the operands.
 * Strides may be any value >= the row width (element-aligned). threads is
 * an upper bound (>= 1); small products use fewer. Operands are packed
 * once and shared by the threads. Releases nothing itself: cffi drops the
 * GIL around the call. */
int pyamx_engine_dot(int kind, int op,
                     const void *a, int64_t lda_bytes,
                     const void *b, int64_t ldb_bytes,
                     const uint32_t *c_in, int64_t ldc_in,
                     uint32_t *c_out, int64_t ldc_out,
                     int64_t m, int64_t n, int64_t kd, int threads);

/* pyamx.matmul's entry: the same schedule on ordinary row-major operands,
 * packed (and widened) inside, once, shared by the threads:
 *   a: M rows of k values (bf16/fp16 bits: 2 bytes, int8/uint8: 1 byte), row r at a + r*lda_bytes
 *   b: k rows of N values, row i at b + i*ldb_bytes (no interleaving)
 *   c_in: NULL for C = +0 (int: 0), else as for pyamx_engine_dot().
 * K is padded to whole dwords as docs/matmul.md says (A with -0, B with +0
 * for floats; zeros for int8). Float operands must be 2-byte aligned. */
int pyamx_engine_matmul(int kind, int op,
                        const void *a, int64_t lda_bytes,
                        const void *b, int64_t ldb_bytes,
                        const uint32_t *c_in, int64_t ldc_in,
                        uint32_t *c_out, int64_t ldc_out,
                        int64_t m, int64_t n, int64_t k, int threads);

/* pyamx_engine_dot() and pyamx_engine_matmul() that another thread can stop:
 * while *cancel is 0 they are those calls; once pyamx_engine_cancel(cancel)
 * sets it, every worker stops at its next tile (at most a few milliseconds of
 * work apart on the portable variant; NaN operands' exact elements are polled
 * one by one; packing is not polled) and the call returns
 * PYAMX_ENGINE_E_CANCELLED once none of them runs any more, with c_out
 * partly written. cancel may be NULL; it must stay valid for the call.
 * max_exact >= 0 bounds the multiply-adds of the exact per-element path
 * (outputs whose row of A or column of B holds a NaN, k values each; up to
 * 200 times slower than the kernels): above it the call returns
 * PYAMX_ENGINE_E_SLOW after packing, without computing, so that a caller
 * running short calls where they cannot be cancelled can run it again where
 * they can. -1: no bound. */
int pyamx_engine_dot_cancellable(int kind, int op,
                                 const void *a, int64_t lda_bytes,
                                 const void *b, int64_t ldb_bytes,
                                 const uint32_t *c_in, int64_t ldc_in,
                                 uint32_t *c_out, int64_t ldc_out,
                                 int64_t m, int64_t n, int64_t kd, int threads, const int *cancel,
                                 int64_t max_exact);
int pyamx_engine_matmul_cancellable(int kind, int op,
                                    const void *a, int64_t lda_bytes,
                                    const void *b, int64_t ldb_bytes,
                                    const uint32_t *c_in, int64_t ldc_in,
                                    uint32_t *c_out, int64_t ldc_out,
                                    int64_t m, int64_t n, int64_t k, int threads, const int *cancel,
                                    int64_t max_exact);
/* Sets *cancel (atomically; NULL: nothing), from any thread. */
void pyamx_engine_cancel(int *cancel);

/* The exact scalar primitives the engine falls back to for NaN operands
 * (and that the portable variant is built on): fp32 bit patterns in and
 * out, DAZ on every operand, FTZ after rounding, RNE, x86 NaN rule. */
uint32_t pyamx_engine_fma32(uint32_t a, uint32_t b, uint32_t acc);
uint32_t pyamx_engine_add32(uint32_t x, uint32_t y);

/* Test hooks for the floating-point environment: run pyamx_engine_dot()
 * with the calling thread's MXCSR set to `mxcsr` and report in
 * *mxcsr_after what it was right after the call (the engine must leave it
 * as it found it); the caller's own MXCSR is restored before returning.
 * PYAMX_ENGINE_E_UNAVAILABLE off x86-64. */
int pyamx_engine_dot_under_mxcsr(uint32_t mxcsr, uint32_t *mxcsr_after, int kind, int op,
                                 const void *a, int64_t lda_bytes,
                                 const void *b, int64_t ldb_bytes,
                                 const uint32_t *c_in, int64_t ldc_in,
                                 uint32_t *c_out, int64_t ldc_out,
                                 int64_t m, int64_t n, int64_t kd, int threads);
/* The same for pyamx_engine_matmul(). */
int pyamx_engine_matmul_under_mxcsr(uint32_t mxcsr, uint32_t *mxcsr_after, int kind, int op,
                                    const void *a, int64_t lda_bytes,
                                    const void *b, int64_t ldb_bytes,
                                    const uint32_t *c_in, int64_t ldc_in,
                                    uint32_t *c_out, int64_t ldc_out,
                                    int64_t m, int64_t n, int64_t k, int threads);
/* The calling thread's MXCSR, or 0 off x86-64. */
uint32_t pyamx_engine_getcsr(void);

/* The AMX-FP8 rows (engine_fp8.c), default numerics: per output element and
 * K block of 64 values, t = the exact sum of the products rounded once to
 * fp32 (RNE), then C = C + t in IEEE fp32 (RNE, denormals kept, whatever the
 * caller's MXCSR); any NaN result is 0xFFC00000.
 *   a: M rows of k fp8 codes, row r at a + r*lda_bytes
 *   b: b_rowmajor = 1: k rows of N codes; 0: ceil(k/4) rows of N dwords of
 *      4 codes (as the instructions take it), row d at b + d*ldb_bytes
 *   c_in: NULL for C = +0, else M x N fp32 bits, rows ldc_in apart.
 * K past k counts as zeros (padding adds nothing). cancel and max_exact as
 * for pyamx_engine_dot_cancellable() (max_exact bounds the integer path's
 * multiply-adds, estimated from the packed exponents). */
int pyamx_engine_fp8(int kind, int op, const void *a, int64_t lda_bytes, const void *b, int64_t ldb_bytes,
                     int b_rowmajor, const uint32_t *c_in, int64_t ldc_in, uint32_t *c_out, int64_t ldc_out,
                     int64_t m, int64_t n, int64_t k, int threads, const int *cancel, int64_t max_exact);
/* Test hook: enable (1) or disable (0) the int16 (AVX-512 VNNI) path of the avx512 variant
 * for later calls, or only ask (-1); returns the previous setting. */
int pyamx_engine_fp8_int_path(int enable);
/* Test hook, the same for the split rows (left-out rows summed as two int16 rows on avx512 with
 * VNNI and DQ, engine_fp8.c z_split_row2). */
int pyamx_engine_fp8_split_path(int enable);
/* Test hook: pyamx_engine_fp8() under the given MXCSR, as pyamx_engine_dot_under_mxcsr(). */
int pyamx_engine_fp8_under_mxcsr(uint32_t mxcsr, uint32_t *mxcsr_after, int kind, int op, const void *a,
                                 int64_t lda_bytes, const void *b, int64_t ldb_bytes, int b_rowmajor,
                                 const uint32_t *c_in, int64_t ldc_in, uint32_t *c_out, int64_t ldc_out,
                                 int64_t m, int64_t n, int64_t k, int threads);

#endif
