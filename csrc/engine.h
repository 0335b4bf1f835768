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

/* Results of pyamx_engine_run(). */
enum pyamx_engine_status {
    PYAMX_ENGINE_OK = 0,
    PYAMX_ENGINE_E_ARG = -1,         /* bad op, size, stride, layout, numerics, threads or overlapping output */
    PYAMX_ENGINE_E_UNAVAILABLE = -2, /* the variant is not compiled in or this CPU/OS lacks it */
    PYAMX_ENGINE_E_NOMEM = -3,       /* packing buffers could not be allocated */
    PYAMX_ENGINE_E_CANCELLED = -4,   /* pyamx_engine_cancel() stopped the call; c_out is partly written */
    PYAMX_ENGINE_E_SLOW = -5         /* more exact-path work than max_exact: nothing computed */
};

/* How B is laid out (struct pyamx_engine_call's b_layout). */
enum pyamx_engine_b_layout {
    /* ceil(k / L) rows of N dwords of L values each, pair-/quad-interleaved ("VNNI") as the
     * instructions take it (L: values per dword of the op) */
    PYAMX_ENGINE_B_DWORDS = 0,
    /* k rows of N values, no interleaving (pyamx.matmul's row-major B; not for complex ops,
     * whose numbers fill a dword) */
    PYAMX_ENGINE_B_ROWS = 1
};

/* The numerics a call asks for. The compiled engines implement the default ones only: a call
 * asking for any other value is refused (E_ARG), never run on the default rules. */
enum pyamx_engine_numerics { PYAMX_ENGINE_NUMERICS_SDM = 0 };

/* 1 when `kind` is compiled in and this CPU and OS run it (CPUID and XCR0). */
int pyamx_engine_available(int kind);
/* Why (not) available, one line, static storage. */
const char *pyamx_engine_reason(int kind);

/* One engine call: every product the compiled engines compute, described once.
 *   a:  M rows of k values (bf16/fp16 bits and the halves of complex fp16 numbers: 2 bytes,
 *       int8/uint8 and fp8 codes: 1 byte), row r at a + r*lda_bytes
 *   b:  as b_layout says, row i at b + i*ldb_bytes
 *   c_in: NULL for C = +0 (int: 0), else M x N uint32 (fp32 bits or int32), rows ldc_in
 *       elements apart; c_out likewise (ldc_out), and it must not overlap c_in or the operands.
 *   k:  values per row of A. With B_DWORDS the bf16/fp16/int8/complex ops need whole dwords
 *       (k a multiple of L); with B_ROWS, and for the fp8 ops always, the last dword is padded
 *       as docs/matmul.md says (A with -0, B with +0 for floats; zeros for int8 and fp8).
 *   threads: an upper bound, 1..PYAMX_MATMUL_MAX_THREADS (small products use fewer), run on the
 *       persistent worker pool the native kernels share (pool.c). Operands are packed once and
 *       shared by the threads.
 *   cancel: NULL, or a flag another thread may set with pyamx_engine_cancel() (it must stay
 *       valid for the call): every worker then stops at its next tile (at most a few
 *       milliseconds of work apart on the portable variant; NaN operands' exact elements are
 *       polled one by one; packing is not polled) and the call returns E_CANCELLED once none of
 *       them runs any more, with c_out partly written.
 *   max_exact: >= 0 bounds the multiply-adds of the exact path (bf16/fp16/int8/complex:
 *       outputs whose row of A or column of B holds a NaN, k values each, up to 200 times
 *       slower than the kernels; fp8: the integer path's, estimated from the packed
 *       exponents): above it the call returns E_SLOW after packing, without computing, so that
 *       a caller running short calls where they cannot be cancelled can run it again where
 *       they can. -1: no bound.
 * Strides may be any value >= the row width; 2-byte values must be 2-byte aligned. Releases
 * nothing itself: cffi drops the GIL around the call. */
struct pyamx_engine_call {
    int kind;     /* enum pyamx_engine_kind */
    int op;       /* a dot-product row's PYAMX_OP_* id */
    int numerics; /* enum pyamx_engine_numerics */
    int b_layout; /* enum pyamx_engine_b_layout */
    const void *a;
    int64_t lda_bytes;
    const void *b;
    int64_t ldb_bytes;
    const uint32_t *c_in;
    int64_t ldc_in;
    uint32_t *c_out;
    int64_t ldc_out;
    int64_t m, n, k;
    int threads;
    const int *cancel;
    int64_t max_exact;
};

/* The one entry of the compiled engines: C after the schedule above (the AMX-FP8 rows: after
 * theirs, below), PYAMX_ENGINE_OK or a status. */
int pyamx_engine_run(const struct pyamx_engine_call *call);

/* Sets *cancel (atomically; NULL: nothing), from any thread. */
void pyamx_engine_cancel(int *cancel);

/* The AMX-FP8 rows (engine_fp8.c) run through pyamx_engine_run() as well, under their own
 * default numerics: per output element and K block of 64 values, t = the exact sum of the
 * products rounded once to fp32 (RNE), then C = C + t in IEEE fp32 (RNE, denormals kept,
 * whatever the caller's MXCSR); any NaN result is 0xFFC00000. */

#endif
