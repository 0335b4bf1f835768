/* Native AMX matmul: C (M x N) += A (M x K) . B (K x N) as tile instructions.
 *
 * The schedule (the one pyamx.matmul defines, docs and issue 10): for every
 * output element K is consumed in blocks of 16 dwords in increasing order,
 * each block one dot-product instruction whose C is the previous block's
 * result. Edge tiles use smaller tile shapes (rows, colsb), as real code
 * does, so the result is what that sequence of instructions computes on this
 * machine -- silicon, or the trap mode's emulation of it.
 *
 * Register use: the output is cut into 32 x 32 blocks of 2 x 2 accumulator
 * tiles tmm0..3 (tmm0 rows 0-15 x cols 0-15, tmm1 rows 0-15 x cols 16-31,
 * tmm2 rows 16-31 x cols 0-15, tmm3 rows 16-31 x cols 16-31); each K block
 * loads two A tiles (tmm4, tmm5) and two B tiles (tmm6, tmm7) and runs four
 * dot products, so every loaded tile feeds two of them.
 *
 * Configurations: a block's shape is (rows of its upper and lower tile row,
 * columns of its left and right tile column, dwords of the K block). Only
 * the last block row/column and the last K block can differ from the
 * interior, so one call needs at most 2 x 2 x 2 shapes per thread, and each
 * thread loads each shape it uses once: it runs every block of one shape
 * before loading the next. Within a shape, blocks are visited in panels (a
 * few block columns x a K range) so that a panel of B stays in cache while
 * all block rows pass over it. LDTILECFG zeroes the tiles, so a K remainder is
 * a second pass over the shape's blocks (C stored after the full K blocks
 * and reloaded); passes run in K order, so each element still sees its K
 * blocks in increasing order, and storing and reloading fp32/int32 bits is
 * exact. When several block rows reuse B, it is first copied into a
 * tile-contiguous layout (pack_b).
 *
 * Threads split the blocks; every element belongs to exactly one block, so
 * the result does not depend on the thread count. The caller's own tile
 * state (a NativeMachine) is saved and restored around its part; workers
 * start from the init state and release their tiles before they end.
 */
#include "pyamx.h"
#include "dot_traits.h"
#include "internal.h"
#include "pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if PYAMX_HAVE_AMX
#include <immintrin.h>
#include <pthread.h>
#include <time.h>

#define AMX_TILE __attribute__((target("amx-tile")))

struct shape {
    int r0, r1;  /* rows of the upper / lower tile row (r1 may be 0) */
    int c0, c1;  /* dword columns of the left / right tile column (c1 may be 0) */
};

struct job {
    int op;
    int64_t m, n, kd;
    const uint8_t *a;
    int64_t lda;
    const uint8_t *b;        /* B's K block kb, block column bj: b_tile() */
    int64_t ldb;             /* row stride of the B tiles */
    int64_t b_right;         /* from a left B tile to the right one */
    int packed;              /* b is in the tile-contiguous layout of pack_b.c */
    uint8_t *c;
    int64_t ldc;
    int64_t nbn;             /* blocks per block row */
    int64_t k_panel;         /* K blocks per panel */
    int64_t n_panel;         /* block columns per panel */
    int a_in_place;          /* A's tile rows are 64-byte aligned: loaded where they are */
    pthread_t caller;        /* the thread whose tile state is saved and restored */
    int64_t first, last;     /* this part's blocks: linear indices [first, last) */
};

static inline int min64(int64_t x, int64_t y) { return (int)(x < y ? x : y); }

static struct shape block_shape(const struct job *j, int64_t bi, int64_t bj)
{
    int64_t mrest = j->m - 32 * bi, nrest = j->n - 32 * bj;
    struct shape s;
    s.r0 = min64(mrest, 16);
    s.r1 = mrest > 16 ? min64(mrest - 16, 16) : 0;
    s.c0 = min64(nrest, 16);
    s.c1 = nrest > 16 ? min64(nrest - 16, 16) : 0;
    return s;
}

static int same_shape(struct shape x, struct shape y)
{
    return x.r0 == y.r0 && x.r1 == y.r1 && x.c0 == y.c0 && x.c1 == y.c1;
}

static void set_tile(uint8_t *cfg, int t, int rows, int colsb)
{
    if (rows == 0 || colsb == 0)
        return; /* unconfigured: both stay zero */
    cfg[16 + 2 * t] = (uint8_t)colsb;
    cfg[48 + t] = (uint8_t)rows;
}

AMX_TILE static void load_shape(struct shape s, int kc)
{
    uint8_t cfg[64] __attribute__((aligned(64)));
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    set_tile(cfg, 0, s.r0, 4 * s.c0);
    set_tile(cfg, 1, s.r0, 4 * s.c1);
    set_tile(cfg, 2, s.r1, 4 * s.c0);
    set_tile(cfg, 3, s.r1, 4 * s.c1);
    set_tile(cfg, 4, s.r0, 4 * kc);
    set_tile(cfg, 5, s.r1, 4 * kc);
    set_tile(cfg, 6, kc, 4 * s.c0);
    set_tile(cfg, 7, kc, 4 * s.c1);
    BARRIER();
    _tile_loadconfig(cfg);
}

/* Where B's K block kb of block column bj starts (its left tile). */
static inline const uint8_t *b_tile(const struct job *j, int64_t kb, int64_t bj)
{
    if (j->packed)
        return j->b + (bj * ((j->kd + 15) / 16) + kb) * 2048;
    return j->b + (16 * kb) * j->ldb + 4 * (32 * bj);
}

/* A's K blocks [kb0, kb1) of block row bi copied into `strip`: per K block
 * its upper and lower tile, each 16 rows of 64 bytes, so every A tile load
 * reads 16 whole, aligned cache lines (A's own rows sit anywhere mod 64 in a
 * numpy array, and a tile row straddling two lines measured 1.5x slower).
 * The strip is reused by every block column of the panel. */
static void copy_a_strip(const struct job *j, uint8_t *strip, int64_t bi, struct shape s, int64_t kb0, int64_t kb1)
{
    for (int64_t kb = kb0; kb < kb1; kb++) {
        size_t bytes = (size_t)(4 * min64(j->kd - 16 * kb, 16));
        uint8_t *dst = strip + (kb - kb0) * 2048;
        const uint8_t *src = j->a + (32 * bi) * j->lda + 64 * kb;
        for (int r = 0; r < s.r0; r++)
            memcpy(dst + 64 * r, src + r * j->lda, bytes);
        for (int r = 0; r < s.r1; r++)
            memcpy(dst + 1024 + 64 * r, src + (16 + r) * j->lda, bytes);
    }
}

/* One block, K blocks [kb0, kb1): load C, the dot products, store C. The
 * tile numbers are immediates, so each instruction form gets its own copy of
 * this body through the macro. */
#define DEFINE_BLOCK(NAME, PP, OPC)                                                            \
    AMX_TILE static void NAME(const struct job *j, const uint8_t *strip, int64_t bi, int64_t bj,  \
                              struct shape s, int64_t kb0, int64_t kb1)                        \
    {                                                                                          \
        const int lower = s.r1 > 0, right = s.c1 > 0;                                          \
        const int64_t lda = strip ? 64 : j->lda, a_lower = strip ? 1024 : 16 * j->lda;         \
        uint8_t *c0 = j->c + (32 * bi) * j->ldc + 4 * (32 * bj);                               \
        uint8_t *c1 = c0 + 16 * j->ldc;                                                        \
        BARRIER();                                                                             \
        _tile_loadd(0, c0, j->ldc);                                                            \
        if (right) _tile_loadd(1, c0 + 64, j->ldc);                                            \
        if (lower) _tile_loadd(2, c1, j->ldc);                                                 \
        if (lower && right) _tile_loadd(3, c1 + 64, j->ldc);                                   \
        for (int64_t kb = kb0; kb < kb1; kb++) {                                               \
            const uint8_t *a0 = strip ? strip + (kb - kb0) * 2048                              \
                                      : j->a + (32 * bi) * j->lda + 64 * kb;                   \
            const uint8_t *b0 = b_tile(j, kb, bj);                                             \
            _tile_loadd(4, a0, lda);                                                           \
            _tile_loadd(6, b0, j->ldb);                                                        \
            DP_BYTES(PP, OPC, 0, 4, 6);                                                        \
            if (right) {                                                                       \
                _tile_loadd(7, b0 + j->b_right, j->ldb);                                       \
                DP_BYTES(PP, OPC, 1, 4, 7);                                                    \
            }                                                                                  \
            if (lower) {                                                                       \
                _tile_loadd(5, a0 + a_lower, lda);                                             \
                DP_BYTES(PP, OPC, 2, 5, 6);                                                    \
                if (right) DP_BYTES(PP, OPC, 3, 5, 7);                                         \
            }                                                                                  \
        }                                                                                      \
        _tile_stored(0, c0, j->ldc);                                                           \
        if (right) _tile_stored(1, c0 + 64, j->ldc);                                           \
        if (lower) _tile_stored(2, c1, j->ldc);                                                \
        if (lower && right) _tile_stored(3, c1 + 64, j->ldc);                                  \
        BARRIER();                                                                             \
    }

/* One block kernel per dot-product row of the traits table, issuing that
 * row's encoding (VEX map, pp, opcode) as bytes: the table is the one list of
 * the dot products, so a new row gets its kernel without an edit here. */
#define PYAMX_DOT_ROW(name, prefix, map, pp, w, l, opc)                                        \
    PYAMX_ASSERT_DP_BYTES(name, prefix, map, w, l);                                            \
    DEFINE_BLOCK(block_##name, VEX_MAP_PP(map, pp), opc)
PYAMX_FOR_EACH_DOT
#undef PYAMX_DOT_ROW

typedef void (*block_fn)(const struct job *, const uint8_t *, int64_t, int64_t, struct shape, int64_t, int64_t);

/* The kernels by op id: NULL for rows that are not dot products. */
#define PYAMX_DOT_ROW(name, prefix, map, pp, w, l, opc) [PYAMX_OP_##name] = block_##name,
static const block_fn blocks[PYAMX_OP_TRAITS_COUNT] = {PYAMX_FOR_EACH_DOT};
#undef PYAMX_DOT_ROW

/* The blocks of [first, last) with shape s and block column in [bj0, bj1),
 * each over K blocks [kb0, kb1). With a `strip` buffer, each block row's A
 * goes through it (copied once per row and panel). */
static void run_panel(const struct job *j, block_fn block, uint8_t *strip, struct shape s, int64_t bj0,
                      int64_t bj1, int64_t kb0, int64_t kb1)
{
    int64_t bi_first = j->first / j->nbn, bi_last = (j->last - 1) / j->nbn;
    for (int64_t bi = bi_first; bi <= bi_last; bi++) {
        int64_t lo = bi == bi_first ? j->first % j->nbn : 0;
        int64_t hi = bi == bi_last ? (j->last - 1) % j->nbn + 1 : j->nbn;
        if (lo < bj0) lo = bj0;
        if (hi > bj1) hi = bj1;
        int copied = 0;
        for (int64_t bj = lo; bj < hi; bj++) {
            struct shape here = block_shape(j, bi, bj);
            if (!same_shape(here, s))
                continue;
            if (strip && !copied) {
                copy_a_strip(j, strip, bi, s, kb0, kb1);
                copied = 1;
            }
            block(j, copied ? strip : 0, bi, bj, here, kb0, kb1);
        }
    }
}

/* The blocks [first, last): per shape one LDTILECFG per K-block size; full
 * K blocks first, then the remainder. Within a shape, panels of
 * n_panel block columns x k_panel K blocks keep the B panel in cache while
 * every block row of the range passes over it; C goes back to memory
 * between K panels (exact), and each block still sees its K blocks in
 * increasing order. */
AMX_TILE static void run_blocks(const struct job *j)
{
    block_fn block = blocks[j->op];
    int64_t full = j->kd / 16, rem = j->kd % 16;
    /* Without memory for the strip, A is read in place: same bits. */
    int64_t strip_blocks = j->k_panel < full ? j->k_panel : (full > 0 ? full : 1);
    uint8_t *strip = j->a_in_place ? 0 : aligned_alloc(64, (size_t)strip_blocks * 2048);
    /* Distinct shapes of this range: at most 4 (interior/last row x column). */
    struct shape shapes[4];
    int nshapes = 0;
    for (int64_t x = j->first; x < j->last; x++) {
        struct shape s = block_shape(j, x / j->nbn, x % j->nbn);
        int seen = 0;
        for (int i = 0; i < nshapes; i++)
            seen |= same_shape(shapes[i], s);
        if (!seen && nshapes < 4)
            shapes[nshapes++] = s;
    }
    for (int i = 0; i < nshapes; i++) {
        if (full > 0) {
            load_shape(shapes[i], 16);
            for (int64_t bj0 = 0; bj0 < j->nbn; bj0 += j->n_panel)
                for (int64_t kb0 = 0; kb0 < full; kb0 += j->k_panel)
                    run_panel(j, block, strip, shapes[i], bj0, bj0 + j->n_panel, kb0,
                              kb0 + j->k_panel < full ? kb0 + j->k_panel : full);
        }
        if (rem > 0) {
            load_shape(shapes[i], (int)rem);
            for (int64_t bj0 = 0; bj0 < j->nbn; bj0 += j->n_panel)
                run_panel(j, block, strip, shapes[i], bj0, bj0 + j->n_panel, full, full + 1);
        }
    }
    free(strip);
}

/* The peak probe (benchmarks/bench_native.py): `count` dot products of one
 * row into tmm0, each reading the tmm0 the previous one wrote -- a
 * dependent chain, the rate one accumulator sustains, which is what the
 * kernel's four accumulators must beat -- on full 16 x 64-byte tiles of
 * zeros (the data does not change the timing of the integer or the float
 * rows). The tile numbers are immediates, hence one loop per row. */
#define PYAMX_DOT_ROW(name, prefix, map, pp, w, l, opc)                                        \
    AMX_TILE static void chain_##name(int64_t count)                                           \
    {                                                                                          \
        for (int64_t i = 0; i < count; i++)                                                    \
            DP_BYTES(VEX_MAP_PP(map, pp), opc, 0, 1, 2);                                       \
    }
PYAMX_FOR_EACH_DOT
#undef PYAMX_DOT_ROW

typedef void (*chain_fn)(int64_t);
#define PYAMX_DOT_ROW(name, prefix, map, pp, w, l, opc) [PYAMX_OP_##name] = chain_##name,
static const chain_fn chains[PYAMX_OP_TRAITS_COUNT] = {PYAMX_FOR_EACH_DOT};
#undef PYAMX_DOT_ROW

static int64_t monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

AMX_TILE int pyamx_matmul_peak_probe(int op, int64_t count, int64_t *nanoseconds)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    if (!pyamx_dot_traits(op) || count < 1 || !nanoseconds)
        return PYAMX_E_ARG;
    if (!pyamx_internal_row_runnable(op))
        return PYAMX_E_NO_KERNEL;
    pyamx_tile_state saved;
    int rc = pyamx_internal_save_state(&saved);
    if (rc != PYAMX_OK)
        return rc;
    uint8_t cfg[64] __attribute__((aligned(64)));
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    for (int t = 0; t < 3; t++)
        set_tile(cfg, t, 16, 64); /* tmm0 += tmm1 . tmm2, each 16 rows of 64 bytes */
    BARRIER();
    _tile_loadconfig(cfg); /* and zeroes them */
    int64_t start = monotonic_ns();
    chains[op](count);
    *nanoseconds = monotonic_ns() - start;
    pyamx_internal_restore_state(&saved);
    return PYAMX_OK;
}

/* One part of the blocks, on whichever thread claimed it (pool.c). A worker
 * leaves its tiles in the init state; the caller's are restored at the end. */
AMX_TILE static void run_part(void *arg, int part)
{
    const struct job *j = (const struct job *)arg + part;
    run_blocks(j);
    if (!pthread_equal(pthread_self(), j->caller))
        _tile_release();
}

/* The arguments every entry shares; PYAMX_OK when the call may run. */
static int check_call(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                      const uint32_t *c, int64_t ldc_bytes, int threads, int64_t k_panel, int64_t n_panel)
{
    if (!pyamx_internal_ready())
        return PYAMX_E_NOT_READY;
    if (!pyamx_dot_traits(op))
        return PYAMX_E_ARG;
    if (!pyamx_internal_row_runnable(op))
        return PYAMX_E_NO_KERNEL;
    /* Bounds that keep every product below (4 * 16 * dim, stride * dim) in int64. */
    const int64_t dim_max = INT64_MAX / 64;
    if (m < 1 || n < 1 || k_dwords < 1 || m > dim_max || n > dim_max || k_dwords > dim_max)
        return PYAMX_E_ARG;
    if (!a || !c || threads < 1 || threads > PYAMX_MATMUL_MAX_THREADS || k_panel < 1 || n_panel < 1)
        return PYAMX_E_ARG;
    /* Rows may not overlap, and the last byte of each operand must be
     * addressable in int64 (the tile loads add row * stride). */
    if (lda_bytes < 4 * k_dwords || ldc_bytes < 4 * n || lda_bytes > INT64_MAX / m || ldc_bytes > INT64_MAX / m)
        return PYAMX_E_ARG;
    return PYAMX_OK;
}

static struct job job_for(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                          uint32_t *c, int64_t ldc_bytes, int64_t k_panel, int64_t n_panel)
{
    struct job j = {
        .op = op, .m = m, .n = n, .kd = k_dwords, .a = a, .lda = lda_bytes,
        .c = (uint8_t *)c, .ldc = ldc_bytes, .nbn = (n + 31) / 32, .k_panel = k_panel, .n_panel = n_panel,
        .a_in_place = (uintptr_t)a % 64 == 0 && lda_bytes % 64 == 0,
    };
    return j;
}

static void use_packed_b(struct job *j, const uint8_t *tiles)
{
    j->b = tiles;
    j->ldb = 64;
    j->b_right = 1024;
    j->packed = 1;
}

/* The blocks split into `threads` contiguous parts, run on the pool; every
 * element belongs to one block, so the split never changes a bit. */
static int run_matmul(struct job base, int threads)
{
    int64_t blocks = ((base.m + 31) / 32) * base.nbn;
    int parts = blocks < threads ? (int)blocks : threads;
    pyamx_tile_state saved;
    int rc = pyamx_internal_save_state(&saved);
    if (rc != PYAMX_OK)
        return rc;
    base.caller = pthread_self();
    /* Heap, not stack: a Python thread's stack may be small. Without
     * memory the caller does every block itself. */
    struct job one, *jobs = parts > 1 ? malloc(sizeof(*jobs) * (size_t)parts) : 0;
    if (!jobs) {
        jobs = &one;
        parts = 1;
    }
    for (int t = 0; t < parts; t++) {
        jobs[t] = base;
        jobs[t].first = blocks * t / parts;
        jobs[t].last = blocks * (t + 1) / parts;
    }
    pyamx_internal_pool_run(run_part, jobs, parts, 1);
    pyamx_internal_restore_state(&saved);
    if (jobs != &one)
        free(jobs);
    return PYAMX_OK;
}

int pyamx_matmul_amx_panels(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                            const void *b_vnni, int64_t ldb_bytes, uint32_t *c, int64_t ldc_bytes, int threads,
                            int64_t k_panel, int64_t n_panel)
{
    int rc = check_call(op, m, n, k_dwords, a, lda_bytes, c, ldc_bytes, threads, k_panel, n_panel);
    if (rc != PYAMX_OK)
        return rc;
    if (!b_vnni || ldb_bytes < 4 * n || ldb_bytes > INT64_MAX / k_dwords)
        return PYAMX_E_ARG;
    struct job base = job_for(op, m, n, k_dwords, a, lda_bytes, c, ldc_bytes, k_panel, n_panel);
    base.b = b_vnni;
    base.ldb = ldb_bytes;
    base.b_right = 64;
    /* B is reused by every block row: with more than one, the tile-contiguous
     * copy (once, by all the threads) pays for itself. Without memory for it
     * B is read in place. */
    int64_t bytes = m > 32 ? pyamx_packed_b_bytes(4, k_dwords, n) : -1;
    uint8_t *packed = bytes > 0 && (uint64_t)bytes <= SIZE_MAX ? aligned_alloc(64, (size_t)bytes) : 0;
    if (packed && pyamx_pack_b(4, b_vnni, ldb_bytes, k_dwords, n, packed, bytes, threads) == PYAMX_OK)
        use_packed_b(&base, packed);
    rc = run_matmul(base, threads);
    free(packed);
    return rc;
}

int pyamx_matmul_amx_packed(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                            const void *b_tiles, int64_t b_bytes, uint32_t *c, int64_t ldc_bytes, int threads,
                            int64_t k_panel, int64_t n_panel)
{
    int rc = check_call(op, m, n, k_dwords, a, lda_bytes, c, ldc_bytes, threads, k_panel, n_panel);
    if (rc != PYAMX_OK)
        return rc;
    int64_t need = pyamx_packed_b_bytes(4, k_dwords, n);
    if (!b_tiles || (uintptr_t)b_tiles % 64 != 0 || need < 0 || b_bytes < need)
        return PYAMX_E_ARG;
    struct job base = job_for(op, m, n, k_dwords, a, lda_bytes, c, ldc_bytes, k_panel, n_panel);
    use_packed_b(&base, b_tiles);
    return run_matmul(base, threads);
}

int pyamx_matmul_amx(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                     const void *b_vnni, int64_t ldb_bytes, uint32_t *c, int64_t ldc_bytes, int threads)
{
    return pyamx_matmul_amx_panels(op, m, n, k_dwords, a, lda_bytes, b_vnni, ldb_bytes, c, ldc_bytes, threads,
                                   PYAMX_MATMUL_K_PANEL, PYAMX_MATMUL_N_PANEL);
}

#else /* !PYAMX_HAVE_AMX: the module installs without kernels */

int pyamx_matmul_amx(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                     const void *b_vnni, int64_t ldb_bytes, uint32_t *c, int64_t ldc_bytes, int threads)
{
    (void)op; (void)m; (void)n; (void)k_dwords; (void)a; (void)lda_bytes;
    (void)b_vnni; (void)ldb_bytes; (void)c; (void)ldc_bytes; (void)threads;
    return PYAMX_E_NO_KERNEL;
}

int pyamx_matmul_amx_panels(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                            const void *b_vnni, int64_t ldb_bytes, uint32_t *c, int64_t ldc_bytes, int threads,
                            int64_t k_panel, int64_t n_panel)
{
    (void)k_panel; (void)n_panel;
    return pyamx_matmul_amx(op, m, n, k_dwords, a, lda_bytes, b_vnni, ldb_bytes, c, ldc_bytes, threads);
}

int pyamx_matmul_peak_probe(int op, int64_t count, int64_t *nanoseconds)
{
    (void)op; (void)count; (void)nanoseconds;
    return PYAMX_E_NO_KERNEL;
}

int pyamx_matmul_amx_packed(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                            const void *b_tiles, int64_t b_bytes, uint32_t *c, int64_t ldc_bytes, int threads,
                            int64_t k_panel, int64_t n_panel)
{
    (void)b_bytes; (void)k_panel; (void)n_panel;
    return pyamx_matmul_amx(op, m, n, k_dwords, a, lda_bytes, b_tiles, 0, c, ldc_bytes, threads);
}

#endif
