/* B in the native matmul's tile-contiguous layout (pyamx.pack, matmul_amx.c).
 *
 * The layout: B's K values grouped into dwords of L = 4 / item values (the
 * instruction's pair/quad interleave, K padded with +0 to whole dwords),
 * dword rows in K blocks of 16, columns in block columns of 32. Block column
 * bj, K block kb occupies 2 KiB at (bj * kblocks + kb) * 2048: its left 16
 * columns as one 1 KiB tile (16 rows of 64 bytes), then its right 16. A
 * tile load then reads 16 consecutive cache lines, and streaming a block
 * column along K is sequential. Everything outside B (rows past K, columns
 * past N) is zero, so the bytes are a function of B alone.
 *
 * The source is row-major: K rows of N items (item 1 or 2), or dword rows
 * already interleaved (item 4, L = 1), which is the same gather with one
 * value per dword. K blocks are split over the pool's workers.
 */
#include "pyamx.h"
#include "internal.h"
#include "pool.h"

#include <stdlib.h>
#include <string.h>

struct pack_job {
    int item;
    const uint8_t *b;
    int64_t ldb, rows, n, kblocks, nbn;
    uint8_t *dst;
    int parts;
};

static int64_t dwords_of(int item, int64_t rows) { return (rows * item + 3) / 4; }

int64_t pyamx_packed_b_bytes(int item_bytes, int64_t rows, int64_t n)
{
    if ((item_bytes != 1 && item_bytes != 2 && item_bytes != 4) || rows < 1 || n < 1 ||
        rows > INT64_MAX / 8 || n > INT64_MAX / 8)
        return -1;
    int64_t kblocks = (dwords_of(item_bytes, rows) + 15) / 16, nbn = (n + 31) / 32;
    if (nbn > INT64_MAX / 2048 / kblocks)
        return -1;
    return nbn * kblocks * 2048;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PYAMX_LITTLE_ENDIAN 1
#else
#define PYAMX_LITTLE_ENDIAN 0
#endif

/* One tile row: the 16 dwords of dword row d, columns col0.. (cols of them
 * in B). The L source rows are staged zero-padded to 16 values, then
 * interleaved as whole 32-bit words on little-endian hosts (the layout puts
 * a dword's first value in its low bytes), which the compiler vectorizes;
 * elsewhere value by value. */
static void gather_row(const struct pack_job *j, uint8_t *dst, int64_t d, int64_t col0, int cols)
{
    int lanes = 4 / j->item;
    uint8_t staged[4][64];
    for (int i = 0; i < lanes; i++) {
        int64_t row = lanes * d + i;
        size_t bytes = row < j->rows ? (size_t)(cols * j->item) : 0; /* +0 padding of the last dword */
        if (bytes)
            memcpy(staged[i], j->b + row * j->ldb + col0 * j->item, bytes);
        memset(staged[i] + bytes, 0, 64 - bytes);
    }
    if (j->item == 4) {
        memcpy(dst, staged[0], 64);
        return;
    }
    uint32_t words[16];
    if (PYAMX_LITTLE_ENDIAN && j->item == 2) {
        uint16_t lo[16], hi[16];
        memcpy(lo, staged[0], 32);
        memcpy(hi, staged[1], 32);
        for (int c = 0; c < 16; c++)
            words[c] = (uint32_t)lo[c] | (uint32_t)hi[c] << 16;
    } else if (PYAMX_LITTLE_ENDIAN) {
        for (int c = 0; c < 16; c++)
            words[c] = (uint32_t)staged[0][c] | (uint32_t)staged[1][c] << 8 | (uint32_t)staged[2][c] << 16 |
                       (uint32_t)staged[3][c] << 24;
    } else {
        for (int c = 0; c < 16; c++)
            for (int i = 0; i < lanes; i++)
                memcpy((uint8_t *)words + 4 * c + j->item * i, staged[i] + j->item * c, (size_t)j->item);
    }
    memcpy(dst, words, 64);
}

/* K blocks [kb0, kb1) of every block column: the source rows of a K block
 * (16 dwords of K, a few hundred KiB for a wide B) stay in cache while the
 * block columns are filled, where a column-first order walked B's rows 2N
 * bytes apart (a page each) once per block column. */
static void pack_part(void *arg, int part)
{
    const struct pack_job *j = arg;
    int64_t kd = dwords_of(j->item, j->rows);
    int64_t kb0 = j->kblocks * part / j->parts, kb1 = j->kblocks * (part + 1) / j->parts;
    for (int64_t kb = kb0; kb < kb1; kb++)
        for (int64_t bj = 0; bj < j->nbn; bj++)
            for (int half = 0; half < 2; half++) {
                int64_t col0 = 32 * bj + 16 * half;
                int cols = col0 >= j->n ? 0 : (j->n - col0 < 16 ? (int)(j->n - col0) : 16);
                uint8_t *tile = j->dst + (bj * j->kblocks + kb) * 2048 + 1024 * half;
                for (int r = 0; r < 16; r++) {
                    int64_t d = 16 * kb + r;
                    if (d < kd && cols > 0)
                        gather_row(j, tile + 64 * r, d, col0, cols);
                    else
                        memset(tile + 64 * r, 0, 64);
                }
            }
}

int pyamx_pack_b(int item_bytes, const void *b, int64_t ldb_bytes, int64_t rows, int64_t n, void *dst,
                 int64_t dst_bytes, int threads)
{
    int64_t bytes = pyamx_packed_b_bytes(item_bytes, rows, n);
    if (bytes < 0 || !b || !dst || dst_bytes < bytes || threads < 1 || threads > PYAMX_MATMUL_MAX_THREADS)
        return PYAMX_E_ARG;
    if (ldb_bytes < n * item_bytes || (rows > 1 && ldb_bytes > INT64_MAX / rows))
        return PYAMX_E_ARG;
    struct pack_job j = {item_bytes, b, ldb_bytes, rows, n, (dwords_of(item_bytes, rows) + 15) / 16,
                         (n + 31) / 32, dst, 1};
    j.parts = j.kblocks < threads ? (int)j.kblocks : threads;
    pyamx_internal_pool_run(pack_part, &j, j.parts, 0);
    return PYAMX_OK;
}

/* ---- float32/float64 B rounded to bf16/fp16 while it is packed ----
 *
 * A K block's 32 source rows are rounded a chunk of block columns at a time
 * into a small staging buffer (convert.c's own conversion: the same element
 * functions and vector loops as pyamx_convert), which the bits path above
 * then gathers into the tiles. B is read once, no rounded copy of it is
 * made, and the bytes equal those of pyamx_convert followed by pyamx_pack_b. */

/* Columns staged at a time: a K block's 32 rows of up to 4096 columns (256 KiB, within a core's
 * L2) are read as whole long rows, which the hardware prefetchers stream; narrower chunks read 32
 * short pieces a row stride apart. Where that buffer cannot be had, 256 columns on the stack. */
#define ROUNDED_CHUNK_COLS 4096
#define ROUNDED_STACK_COLS 256

struct rounded_job {
    int op;
    const char *b;
    int64_t row_stride, col_stride, rows, n, kblocks, nbn;
    uint8_t *dst;
    int parts;
};

/* K block kb, block columns from c0 / 32 over `chunk` columns: rounded into `staged`, then gathered. */
static void pack_rounded_chunk(const struct rounded_job *j, uint16_t *staged, int64_t kb, int64_t c0, int64_t chunk)
{
    int64_t row0 = 32 * kb, rows = j->rows - row0 < 32 ? j->rows - row0 : 32;
    int64_t width = j->n - c0 < chunk ? j->n - c0 : chunk; /* > 0: c0 is below n */
    pyamx_internal_convert_rows(j->op, j->b + row0 * j->row_stride + c0 * j->col_stride, rows, width, j->row_stride,
                                j->col_stride, staged);
    /* the staged rows as the bits path's source: rows 2d and 2d + 1 of dword row d */
    struct pack_job bits = {2, (const uint8_t *)staged, 2 * width, rows, width, 1, 1, 0, 1};
    for (int64_t bj = c0 / 32; bj < (c0 + chunk) / 32 && bj < j->nbn; bj++)
        for (int half = 0; half < 2; half++) {
            int64_t col0 = 32 * bj + 16 * half;
            int cols = col0 >= j->n ? 0 : (j->n - col0 < 16 ? (int)(j->n - col0) : 16);
            uint8_t *tile = j->dst + (bj * j->kblocks + kb) * 2048 + 1024 * half;
            for (int r = 0; r < 16; r++) {
                if (2 * r < rows && cols > 0)
                    gather_row(&bits, tile + 64 * r, r, col0 - c0, cols);
                else
                    memset(tile + 64 * r, 0, 64);
            }
        }
}

static void pack_rounded_part(void *arg, int part)
{
    const struct rounded_job *j = arg;
    int64_t kb0 = j->kblocks * part / j->parts, kb1 = j->kblocks * (part + 1) / j->parts;
    int64_t chunk = 32 * j->nbn < ROUNDED_CHUNK_COLS ? 32 * j->nbn : ROUNDED_CHUNK_COLS;
    uint16_t small[32 * ROUNDED_STACK_COLS];
    uint16_t *staged = chunk > ROUNDED_STACK_COLS ? malloc((size_t)(32 * chunk) * sizeof(uint16_t)) : 0;
    if (!staged) {
        staged = small;
        chunk = chunk < ROUNDED_STACK_COLS ? chunk : ROUNDED_STACK_COLS;
    }
    for (int64_t kb = kb0; kb < kb1; kb++)
        for (int64_t c0 = 0; c0 < j->n; c0 += chunk)
            pack_rounded_chunk(j, staged, kb, c0, chunk);
    if (staged != small)
        free(staged);
}

int pyamx_pack_b_rounded(int op, const void *b, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t n,
                         void *dst, int64_t dst_bytes, int threads)
{
    /* the rounding ops only: a float32/float64 source (the widening ones read 2 bytes) */
    int64_t size = (int64_t)pyamx_internal_convert_source_size(op), bytes = pyamx_packed_b_bytes(2, rows, n);
    if (size < 4 || bytes < 0 || !b || !dst || dst_bytes < bytes || threads < 1 ||
        threads > PYAMX_MATMUL_MAX_THREADS || row_stride % size != 0 || col_stride % size != 0)
        return PYAMX_E_ARG;
    struct rounded_job j = {op, b, row_stride, col_stride, rows, n, (dwords_of(2, rows) + 15) / 16, (n + 31) / 32,
                            dst, 1};
    j.parts = j.kblocks < threads ? (int)j.kblocks : threads;
    pyamx_internal_pool_run(pack_rounded_part, &j, j.parts, 0);
    return PYAMX_OK;
}

/* The inverse of gather_row's interleave: the L values of each of the 16
 * dwords of a tile row into L rows of `cols` items. */
static void scatter_row(int item_bytes, uint8_t *const out[4], const uint8_t *line, int cols)
{
    int lanes = 4 / item_bytes;
    if (item_bytes == 4) {
        memcpy(out[0], line, (size_t)(4 * cols));
        return;
    }
    uint32_t words[16];
    memcpy(words, line, 64);
    uint8_t split[4][64];
    if (PYAMX_LITTLE_ENDIAN && item_bytes == 2) {
        uint16_t lo[16], hi[16];
        for (int c = 0; c < 16; c++) {
            lo[c] = (uint16_t)words[c];
            hi[c] = (uint16_t)(words[c] >> 16);
        }
        memcpy(split[0], lo, 32);
        memcpy(split[1], hi, 32);
    } else if (PYAMX_LITTLE_ENDIAN) {
        for (int c = 0; c < 16; c++)
            for (int i = 0; i < 4; i++)
                split[i][c] = (uint8_t)(words[c] >> (8 * i));
    } else {
        for (int c = 0; c < 16; c++)
            for (int i = 0; i < lanes; i++)
                memcpy(split[i] + item_bytes * c, line + 4 * c + item_bytes * i, (size_t)item_bytes);
    }
    for (int i = 0; i < lanes; i++)
        if (out[i])
            memcpy(out[i], split[i], (size_t)(cols * item_bytes));
}

int pyamx_unpack_b(int item_bytes, const void *src, int64_t src_bytes, int64_t rows, int64_t n, void *dst,
                   int64_t ldd_bytes)
{
    int64_t bytes = pyamx_packed_b_bytes(item_bytes, rows, n);
    if (bytes < 0 || !src || !dst || src_bytes < bytes || ldd_bytes < n * item_bytes ||
        (rows > 1 && ldd_bytes > INT64_MAX / rows))
        return PYAMX_E_ARG;
    int lanes = 4 / item_bytes;
    int64_t kblocks = (dwords_of(item_bytes, rows) + 15) / 16, nbn = (n + 31) / 32;
    /* Tile by tile, K block by K block: the output rows of one K block stay
     * in cache while every block column is read once, sequentially. */
    for (int64_t kb = 0; kb < kblocks; kb++)
        for (int64_t bj = 0; bj < nbn; bj++)
            for (int half = 0; half < 2; half++) {
                int64_t col0 = 32 * bj + 16 * half;
                if (col0 >= n)
                    continue;
                int cols = n - col0 < 16 ? (int)(n - col0) : 16;
                const uint8_t *tile = (const uint8_t *)src + (bj * kblocks + kb) * 2048 + 1024 * half;
                for (int r = 0; r < 16; r++) {
                    uint8_t *out[4] = {0, 0, 0, 0};
                    for (int i = 0; i < lanes; i++) {
                        int64_t row = lanes * (16 * kb + r) + i;
                        if (row < rows)
                            out[i] = (uint8_t *)dst + row * ldd_bytes + col0 * item_bytes;
                    }
                    if (out[0])
                        scatter_row(item_bytes, out, tile + 64 * r, cols);
                }
            }
    return PYAMX_OK;
}
