/* float32/float64 <-> bf16/fp16 array conversions (csrc/convert.h states the rules).
 *
 * Each element conversion is a branch-free function of the source bits, so
 * the contiguous loops vectorize with whatever SIMD the compiler targets
 * (SSE2 on baseline x86-64); the strided loop runs the same functions one
 * element at a time. Large arrays are split over the worker pool (pool.c):
 * the work is memory-bound, so a second thread pays only once the array is
 * far larger than handing it a part. */
#include "pyamx.h"
#include "cpu_features.h"
#include "internal.h"
#include "pool.h"

#include <stdlib.h>
#include <string.h>

/* GCC's -O2 cost model vectorizes only loops that need no scalar epilogue;
 * these loops are the whole point of the file. Clang vectorizes them at -O2. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("O3")))
#else
#define VECTORIZE
#endif

/* 2**22 elements: 16 MiB of float32, where a second thread starts to pay in memory bandwidth */
#define PARALLEL_MIN ((int64_t)1 << 22)

int64_t pyamx_convert_parallel_min(void) { return PARALLEL_MIN; }

static inline uint32_t select32(uint32_t condition, uint32_t yes, uint32_t no)
{
    uint32_t mask = 0u - condition; /* condition is 0 or 1 */
    return (yes & mask) | (no & ~mask);
}

static inline uint64_t select64(uint64_t condition, uint64_t yes, uint64_t no)
{
    uint64_t mask = 0u - condition;
    return (yes & mask) | (no & ~mask);
}

/* ---- to bf16 ---- */

static inline uint16_t bf16_of_f32(uint32_t bits)
{
    /* RNE at bit 16: add 0x7FFF plus the kept part's lowest bit; a carry moves into the
     * exponent, and the largest finite values carry into infinity. No non-NaN value wraps. */
    uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (bits >> 16) | 0x0040u;
    return (uint16_t)select32((bits & 0x7FFFFFFFu) > 0x7F800000u, quiet_nan, rounded);
}

/* Right shift by `shift` (2..63) rounding to nearest, ties to even. Only values are shifted,
 * never a constant by a variable amount, which keeps GCC from vectorizing the loop. */
static inline uint64_t shift_rne64(uint64_t value, uint64_t shift)
{
    uint64_t kept = value >> shift;
    uint64_t round_bit = (value >> (shift - 1)) & 1u;
    uint64_t sticky = (value << (65 - shift)) != 0; /* any bit below the round bit */
    return kept + (round_bit & (sticky | (kept & 1u)));
}

static inline uint16_t bf16_of_f64(uint64_t bits)
{
    uint64_t sign = (bits >> 48) & 0x8000u;
    uint64_t magnitude = bits & 0x7FFFFFFFFFFFFFFFull;
    uint64_t biased = magnitude >> 52;
    uint64_t significand = (magnitude & 0x000FFFFFFFFFFFFFull) | (biased ? ((uint64_t)1 << 52) : 0);
    /* Normal bf16 results (2**-126 and up, biased >= 897): rebias the exponent and round the
     * 52-bit fraction to 7 bits; a carry moves into the exponent, overflow into infinity. */
    uint64_t rebiased = magnitude - ((uint64_t)(1023 - 127) << 52);
    uint64_t normal = shift_rne64(rebiased, 45);
    /* Denormal results: the significand in units of 2**-133, the smallest bf16 denormal
     * (value = significand * 2**(biased - 1075)); shifts past 63 give 0 anyway. */
    uint64_t shift = 897 + 45 - (biased > 0 ? biased : 1);
    uint64_t denormal = shift_rne64(significand, shift > 63 ? 63 : (shift < 45 ? 45 : shift));
    uint64_t finite = select64(biased >= 897, normal, denormal);
    finite = finite > 0x7F80u ? 0x7F80u : finite;
    uint64_t nan = 0x7FC0u | ((magnitude >> 45) & 0x7Fu);
    uint64_t result = select64(magnitude > 0x7FF0000000000000ull, nan,
                               select64(magnitude >= ((uint64_t)(1023 + 128) << 52), 0x7F80u, finite));
    return (uint16_t)(sign | result);
}

/* ---- to fp16 (numpy's rules) ---- */

static inline uint16_t fp16_of_f32(uint32_t bits)
{
    uint32_t sign = (bits >> 16) & 0x8000u;
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    uint32_t biased = magnitude >> 23;
    /* Normal fp16 results (2**-14 and up, biased >= 113): rebias and round 23 bits to 10;
     * below 2**16 the rounding carries at most into 0x7C00, infinity. */
    uint32_t rebiased = magnitude - ((uint32_t)(127 - 15) << 23);
    uint32_t normal = (rebiased + 0x0FFFu + ((rebiased >> 13) & 1u)) >> 13;
    /* Denormal results: the significand in units of 2**-24 (value = significand * 2**(biased - 150)).
     * float32 denormals and anything below 2**-25 shift out completely (shift capped at 31). */
    uint32_t significand = (magnitude & 0x007FFFFFu) | 0x00800000u;
    uint32_t shift = 126 - (biased < 126 ? biased : 126);
    shift = shift > 31 ? 31 : (shift < 14 ? 14 : shift);
    uint32_t denormal = (significand + ((1u << (shift - 1)) - 1u) + ((significand >> shift) & 1u)) >> shift;
    uint32_t finite = select32(biased >= 113, normal, select32(biased == 0, 0, denormal));
    uint32_t payload = (magnitude & 0x007FFFFFu) >> 13;
    uint32_t nan = 0x7C00u | payload | (payload == 0);
    uint32_t result = select32(magnitude > 0x7F800000u, nan,
                               select32(magnitude >= ((uint32_t)(127 + 16) << 23), 0x7C00u, finite));
    return (uint16_t)(sign | result);
}

static inline uint16_t fp16_of_f64(uint64_t bits)
{
    uint64_t sign = (bits >> 48) & 0x8000u;
    uint64_t magnitude = bits & 0x7FFFFFFFFFFFFFFFull;
    uint64_t biased = magnitude >> 52;
    uint64_t significand = (magnitude & 0x000FFFFFFFFFFFFFull) | ((uint64_t)1 << 52);
    uint64_t rebiased = magnitude - ((uint64_t)(1023 - 15) << 52);
    uint64_t normal = shift_rne64(rebiased, 42);
    /* units of 2**-24: value = significand * 2**(biased - 1075); biased 0 (denormal float64) and
     * everything below 2**-25 shift out completely */
    uint64_t shift = 1051 - (biased < 1051 && biased > 0 ? biased : 988);
    uint64_t denormal = shift_rne64(significand, shift > 63 ? 63 : (shift < 42 ? 42 : shift));
    uint64_t finite = select64(biased >= 1009, normal, denormal);
    uint64_t payload = (magnitude & 0x000FFFFFFFFFFFFFull) >> 42;
    uint64_t nan = 0x7C00u | payload | (payload == 0);
    uint64_t result = select64(magnitude > 0x7FF0000000000000ull, nan,
                               select64(magnitude >= ((uint64_t)(1023 + 16) << 52), 0x7C00u, finite));
    return (uint16_t)(sign | result);
}

/* ---- to float32 ---- */

static inline uint32_t f32_of_bf16(uint16_t bits) { return (uint32_t)bits << 16; }

static inline uint32_t f32_of_fp16(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exponent = (bits >> 10) & 0x1Fu;
    uint32_t mantissa = bits & 0x3FFu;
    uint32_t normal = ((exponent + (127 - 15)) << 23) | (mantissa << 13);
    uint32_t special = 0x7F800000u | (mantissa << 13);
    /* A denormal is mantissa * 2**-24: an integer below 2**10 times a normal power of two, exact in
     * float32 and a normal result, so no rounding mode, FTZ or DAZ setting can touch it. */
    union { float f; uint32_t u; } denormal = { .f = (float)(int32_t)mantissa * 0x1p-24f };
    uint32_t magnitude = select32(exponent == 31, special, select32(exponent == 0, denormal.u, normal));
    return sign | magnitude;
}

/* ---- the loops: contiguous ones vectorized, one strided fallback ---- */

/* Each contiguous loop is compiled for baseline x86-64 (SSE2) and, on x86-64, again for AVX2
 * and AVX-512: the fp16 and float64 conversions shift each element by its own amount and
 * compare 64-bit integers, which SSE2 cannot do in vector registers, so only the wider sets
 * vectorize them. The same element functions run in every variant: the bits cannot differ. */
#define CONTIGUOUS_LOOP(name, attributes, src_type, dst_type, convert)                                    \
    static VECTORIZE attributes void name(const src_type *restrict src, dst_type *restrict dst, int64_t n) \
    {                                                                                                       \
        for (int64_t i = 0; i < n; i++)                                                                     \
            dst[i] = convert(src[i]);                                                                       \
    }

#define CONTIGUOUS_LOOPS(suffix, attributes)                                                  \
    CONTIGUOUS_LOOP(bf16_of_f32_##suffix, attributes, uint32_t, uint16_t, bf16_of_f32)       \
    CONTIGUOUS_LOOP(bf16_of_f64_##suffix, attributes, uint64_t, uint16_t, bf16_of_f64)       \
    CONTIGUOUS_LOOP(fp16_of_f32_##suffix, attributes, uint32_t, uint16_t, fp16_of_f32)       \
    CONTIGUOUS_LOOP(fp16_of_f64_##suffix, attributes, uint64_t, uint16_t, fp16_of_f64)       \
    CONTIGUOUS_LOOP(f32_of_bf16_##suffix, attributes, uint16_t, uint32_t, f32_of_bf16)       \
    CONTIGUOUS_LOOP(f32_of_fp16_##suffix, attributes, uint16_t, uint32_t, f32_of_fp16)       \
    static void run_##suffix(int op, const char *src, char *dst, int64_t n)                  \
    {                                                                                         \
        switch (op) {                                                                         \
        case PYAMX_CONVERT_F32_TO_BF16: bf16_of_f32_##suffix((const uint32_t *)src, (uint16_t *)dst, n); break; \
        case PYAMX_CONVERT_F64_TO_BF16: bf16_of_f64_##suffix((const uint64_t *)src, (uint16_t *)dst, n); break; \
        case PYAMX_CONVERT_F32_TO_FP16: fp16_of_f32_##suffix((const uint32_t *)src, (uint16_t *)dst, n); break; \
        case PYAMX_CONVERT_F64_TO_FP16: fp16_of_f64_##suffix((const uint64_t *)src, (uint16_t *)dst, n); break; \
        case PYAMX_CONVERT_BF16_TO_F32: f32_of_bf16_##suffix((const uint16_t *)src, (uint32_t *)dst, n); break; \
        case PYAMX_CONVERT_FP16_TO_F32: f32_of_fp16_##suffix((const uint16_t *)src, (uint32_t *)dst, n); break; \
        }                                                                                     \
    }

CONTIGUOUS_LOOPS(baseline, )

#if PYAMX_CPU_X86
CONTIGUOUS_LOOPS(avx2, __attribute__((target("avx2"))))
CONTIGUOUS_LOOPS(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))
#endif

typedef void (*contiguous_run)(int op, const char *src, char *dst, int64_t n);

/* The widest variant this CPU and OS run, chosen on first use (CPUID can cost microseconds
 * in a VM); a race only chooses the same twice. */
static contiguous_run contiguous_variant(void)
{
    static contiguous_run chosen;
    contiguous_run run = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (run)
        return run;
    run = run_baseline;
#if PYAMX_CPU_X86
    if (pyamx_cpu_has(PYAMX_CPU_AVX2) && pyamx_cpu_os_saves(PYAMX_XCR0_YMM))
        run = run_avx2;
    if (pyamx_cpu_has(PYAMX_CPU_AVX512F) && pyamx_cpu_has(PYAMX_CPU_AVX512BW) &&
        pyamx_cpu_os_saves(PYAMX_XCR0_ZMM))
        run = run_avx512;
#endif
    __atomic_store_n(&chosen, run, __ATOMIC_RELEASE);
    return run;
}

struct span {
    int op;
    const char *src;
    int64_t cols, row_stride, col_stride;
    char *dst;
    int64_t first, end; /* flat element indices [first, end) */
};

size_t pyamx_internal_convert_source_size(int op)
{
    switch (op) {
    case PYAMX_CONVERT_F32_TO_BF16: case PYAMX_CONVERT_F32_TO_FP16: return 4;
    case PYAMX_CONVERT_F64_TO_BF16: case PYAMX_CONVERT_F64_TO_FP16: return 8;
    case PYAMX_CONVERT_BF16_TO_F32: case PYAMX_CONVERT_FP16_TO_F32: return 2;
    default: return 0;
    }
}

static size_t destination_size(int op) { return pyamx_internal_convert_source_size(op) == 2 ? 4 : 2; }

/* A strided source, rows r0..r1-1 and columns c0..c1-1 of it, into dst (the whole
 * C-contiguous output, cols wide), in tiles: a transposed view (rows closer together in
 * memory than columns) is read along its memory order into a small buffer, which then goes
 * out row by row: no new cache line for every element, and no output rows a power of two
 * apart competing for one cache set. */
#define TILE_ROWS 128
#define TILE_COLS 32
#define STRIDED_BLOCK(name, src_type, dst_type, convert)                                               \
    static void name(const char *src, int64_t row_stride, int64_t col_stride, char *dst_bytes,           \
                     int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1)                         \
    {                                                                                                      \
        dst_type *dst = (dst_type *)dst_bytes;                                                             \
        int down_columns = llabs(row_stride) < llabs(col_stride);                                          \
        for (int64_t i0 = r0; i0 < r1; i0 += TILE_ROWS)                                                         \
            for (int64_t j0 = c0; j0 < c1; j0 += TILE_COLS) {                                                   \
                int64_t i1 = i0 + TILE_ROWS < r1 ? i0 + TILE_ROWS : r1, j1 = j0 + TILE_COLS < c1 ? j0 + TILE_COLS : c1;      \
                if (down_columns) {                                                                        \
                    dst_type tile[TILE_ROWS][TILE_COLS];                                                             \
                    for (int64_t j = j0; j < j1; j++)                                                      \
                        for (int64_t i = i0; i < i1; i++)                                                  \
                            tile[i - i0][j - j0] = convert(*(const src_type *)(src + i * row_stride + j * col_stride)); \
                    for (int64_t i = i0; i < i1; i++)                                                      \
                        memcpy(dst + i * cols + j0, tile[i - i0], (size_t)(j1 - j0) * sizeof(dst_type));  \
                } else {                                                                                   \
                    for (int64_t i = i0; i < i1; i++)                                                      \
                        for (int64_t j = j0; j < j1; j++)                                                  \
                            dst[i * cols + j] = convert(*(const src_type *)(src + i * row_stride + j * col_stride)); \
                }                                                                                          \
            }                                                                                              \
    }

STRIDED_BLOCK(bf16_of_f32_strided, uint32_t, uint16_t, bf16_of_f32)
STRIDED_BLOCK(bf16_of_f64_strided, uint64_t, uint16_t, bf16_of_f64)
STRIDED_BLOCK(fp16_of_f32_strided, uint32_t, uint16_t, fp16_of_f32)
STRIDED_BLOCK(fp16_of_f64_strided, uint64_t, uint16_t, fp16_of_f64)
STRIDED_BLOCK(f32_of_bf16_strided, uint16_t, uint32_t, f32_of_bf16)
STRIDED_BLOCK(f32_of_fp16_strided, uint16_t, uint32_t, f32_of_fp16)

static void strided_block(const struct span *s, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    void (*block)(const char *, int64_t, int64_t, char *, int64_t, int64_t, int64_t, int64_t, int64_t) = 0;
    switch (s->op) {
    case PYAMX_CONVERT_F32_TO_BF16: block = bf16_of_f32_strided; break;
    case PYAMX_CONVERT_F64_TO_BF16: block = bf16_of_f64_strided; break;
    case PYAMX_CONVERT_F32_TO_FP16: block = fp16_of_f32_strided; break;
    case PYAMX_CONVERT_F64_TO_FP16: block = fp16_of_f64_strided; break;
    case PYAMX_CONVERT_BF16_TO_F32: block = f32_of_bf16_strided; break;
    case PYAMX_CONVERT_FP16_TO_F32: block = f32_of_fp16_strided; break;
    default: return;
    }
    block(s->src, s->row_stride, s->col_stride, s->dst, s->cols, r0, r1, c0, c1);
}

/* The span's elements: contiguous rows (pieces of them at its ends) through the vectorized
 * loops, a strided source as a partial first row, whole rows, a partial last row. */
static void convert_span(const struct span *s)
{
    int64_t index = s->first, cols = s->cols;
    if (s->col_stride == (int64_t)pyamx_internal_convert_source_size(s->op)) {
        size_t out_size = destination_size(s->op);
        contiguous_run run = contiguous_variant();
        while (index < s->end) {
            int64_t row = index / cols, col = index % cols;
            int64_t n = cols - col < s->end - index ? cols - col : s->end - index;
            run(s->op, s->src + row * s->row_stride + col * s->col_stride, s->dst + index * (int64_t)out_size, n);
            index += n;
        }
        return;
    }
    int64_t row = index / cols, col = index % cols;
    if (col != 0) {
        int64_t last = cols < col + (s->end - index) ? cols : col + (s->end - index);
        strided_block(s, row, row + 1, col, last);
        index += last - col;
        row++;
    }
    int64_t whole_rows = (s->end - index) / cols;
    if (whole_rows > 0) {
        strided_block(s, row, row + whole_rows, 0, cols);
        index += whole_rows * cols;
        row += whole_rows;
    }
    if (index < s->end)
        strided_block(s, row, row + 1, 0, s->end - index);
}

void pyamx_internal_convert_rows(int op, const void *src, int64_t rows, int64_t cols, int64_t row_stride,
                                 int64_t col_stride, void *dst)
{
    struct span s = {op, (const char *)src, cols, row_stride, col_stride, (char *)dst, 0, rows * cols};
    convert_span(&s);
}

/* One conversion split into parts of whole 64-element runs, so that no two
 * parts write one cache line of dst. */
struct convert_job {
    struct span whole;
    int64_t chunk;
};

static void convert_part(void *arg, int part)
{
    const struct convert_job *job = (const struct convert_job *)arg;
    struct span s = job->whole;
    int64_t first = job->chunk * part, end = first + job->chunk;
    s.first = first < s.end ? first : s.end;
    s.end = end < s.end ? end : s.end;
    convert_span(&s);
}

int pyamx_convert(int op, const void *src, int64_t rows, int64_t cols,
                  int64_t row_stride, int64_t col_stride, void *dst, int threads)
{
    int64_t size = (int64_t)pyamx_internal_convert_source_size(op);
    if (size == 0 || rows < 0 || cols < 0 || threads < 1 || threads > PYAMX_MATMUL_MAX_THREADS
        || row_stride % size != 0 || col_stride % size != 0)
        return PYAMX_E_ARG;
    if (rows == 0 || cols == 0)
        return PYAMX_OK;
    if (rows > INT64_MAX / cols)
        return PYAMX_E_ARG;
    int64_t total = rows * cols;
    int64_t wanted = total / PARALLEL_MIN + 1; /* each part gets at least half of PARALLEL_MIN */
    int parts = wanted < threads ? (int)wanted : threads;
    struct convert_job job = {{op, (const char *)src, cols, row_stride, col_stride, (char *)dst, 0, total},
                              ((total + parts - 1) / parts + 63) & ~(int64_t)63};
    pyamx_internal_pool_run(convert_part, &job, parts, 0);
    return PYAMX_OK;
}
