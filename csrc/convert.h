/* Array conversions between float32/float64 and the 16-bit formats, for
 * pyamx.table.bf16 and pyamx.matmul's rounding of float operands (pyamx/_convert.py).
 *
 * Included by pyamx.h, so build.py feeds it to cffi's cdef(): plain
 * declarations only. Every conversion is integer bit manipulation (the one
 * float step, fp16 denormal widening, is exact), so no result depends on the
 * caller's MXCSR. The rules are those of the Python implementations they
 * replace (pyamx/table/bf16.py, numpy's float16 conversion), which stay as
 * the fallback and as the tests' reference:
 *   to bf16: RNE, overflow to infinity; a NaN keeps its sign and the top 7
 *            bits of its significand and is quieted (0x0040 set).
 *   to fp16: RNE, overflow to infinity; a NaN keeps its sign and the top 10
 *            bits of its significand, NOT quieted (numpy's rule); a payload
 *            that falls off entirely becomes 1, so it stays a NaN.
 *   widening bf16/fp16 to float32: exact, NaN payloads kept.
 * float64 input is rounded directly, never through float32. */
#ifndef PYAMX_CONVERT_H
#define PYAMX_CONVERT_H

#include <stdint.h>

enum pyamx_convert_op {
    PYAMX_CONVERT_F32_TO_BF16 = 1,
    PYAMX_CONVERT_F64_TO_BF16 = 2,
    PYAMX_CONVERT_F32_TO_FP16 = 3,
    PYAMX_CONVERT_F64_TO_FP16 = 4,
    PYAMX_CONVERT_BF16_TO_F32 = 5,
    PYAMX_CONVERT_FP16_TO_F32 = 6
};

/* dst[i * cols + j] = convert(element (i, j) of src) for a rows x cols
 * source whose element (i, j) is at src + i * row_stride + j * col_stride
 * (bytes, any sign, multiples of the source's item size; the source
 * aligned to it). dst is C-contiguous and must not overlap src. Work of at
 * least pyamx_convert_parallel_min() elements is split over up to
 * `threads` (1..PYAMX_MATMUL_MAX_THREADS) of the worker pool's threads, the
 * caller's included. PYAMX_OK, or PYAMX_E_ARG for an unknown op, a
 * negative size, threads out of range or a stride that is not a multiple
 * of the item size. The GIL is released by cffi around the call. */
int pyamx_convert(int op, const void *src, int64_t rows, int64_t cols,
                  int64_t row_stride, int64_t col_stride, void *dst, int threads);

/* The element count from which pyamx_convert() uses more than one thread. */
int64_t pyamx_convert_parallel_min(void);

#endif
