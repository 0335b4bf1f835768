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
 * value per dword. Block columns are split over the pool's workers.
 */
#include "pyamx.h"
#include "internal.h"
#include "pool.h"

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

/* One tile row: 16 dwords of dword row d, columns col0.. (cols of them valid). */
static void gather_row(const struct pack_job *j, uint8_t *dst, int64_t d, int64_t col0, int cols)
{
    int lanes = 4 / j->item;
    memset(dst, 0, 64);
    for (int i = 0; i < lanes; i++) {
        int64_t row = lanes * d + i;
        if (row >= j->rows)
            break; /* +0 padding of the last dword */
        const uint8_t *src = j->b + row * j->ldb + col0 * j->item;
        switch (j->item) {
        case 1:
            for (int c = 0; c < cols; c++)
                dst[4 * c + i] = src[c];
            break;
        case 2:
            for (int c = 0; c < cols; c++)
                memcpy(dst + 4 * c + 2 * i, src + 2 * c, 2);
            break;
        default:
            memcpy(dst, src, (size_t)(4 * cols));
        }
    }
}

static void pack_part(void *arg, int part)
{
    const struct pack_job *j = arg;
    int64_t kd = dwords_of(j->item, j->rows);
    int64_t bj0 = j->nbn * part / j->parts, bj1 = j->nbn * (part + 1) / j->parts;
    for (int64_t bj = bj0; bj < bj1; bj++)
        for (int64_t kb = 0; kb < j->kblocks; kb++)
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
    j.parts = j.nbn < threads ? (int)j.nbn : threads;
    pyamx_internal_pool_run(pack_part, &j, j.parts, 0);
    return PYAMX_OK;
}

int pyamx_unpack_b(int item_bytes, const void *src, int64_t src_bytes, int64_t rows, int64_t n, void *dst,
                   int64_t ldd_bytes)
{
    int64_t bytes = pyamx_packed_b_bytes(item_bytes, rows, n);
    if (bytes < 0 || !src || !dst || src_bytes < bytes || ldd_bytes < n * item_bytes ||
        (rows > 1 && ldd_bytes > INT64_MAX / rows))
        return PYAMX_E_ARG;
    int lanes = 4 / item_bytes;
    int64_t kblocks = (dwords_of(item_bytes, rows) + 15) / 16;
    const uint8_t *tiles = src;
    for (int64_t row = 0; row < rows; row++) {
        int64_t d = row / lanes, i = row % lanes;
        uint8_t *out = (uint8_t *)dst + row * ldd_bytes;
        for (int64_t col0 = 0; col0 < n; col0 += 16) {
            int cols = n - col0 < 16 ? (int)(n - col0) : 16;
            const uint8_t *line = tiles + ((col0 / 32) * kblocks + d / 16) * 2048 + 1024 * ((col0 / 16) % 2) +
                                  64 * (d % 16);
            for (int c = 0; c < cols; c++)
                memcpy(out + (col0 + c) * item_bytes, line + 4 * c + item_bytes * i, (size_t)item_bytes);
        }
    }
    return PYAMX_OK;
}
