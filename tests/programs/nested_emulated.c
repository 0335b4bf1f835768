/* A signal handler that runs an emulated instruction while the thread it
 * interrupted is itself inside one: the interrupted thread's tiles must be
 * exactly as they were, as on silicon, where an instruction is never
 * interrupted and a handler starts in the init tile state and gives the
 * interrupted one back at sigreturn.
 *
 * Workers keep two accumulators live over ITERATIONS dot products of
 * all-ones operands: tmm0 += tmm1 . tmm2 by TDPBF8PS (AMX-FP8: no shipping
 * Xeon executes it, so `pyamx run` emulates it on every CPU, in the
 * complement mode on AMX silicon) and tmm3 += tmm4 . tmm5 by TDPBF16PS
 * (silicon where there is AMX). Another thread sends SIGUSR1 to the workers
 * back to back; the handler loads a tile configuration and operands of its
 * own, runs one TDPBF8PS and one TDPBF16PS, checks both results and
 * releases its tiles. Under the full trap mode every tile instruction is
 * emulated, so the signals land inside the trap's handler as well.
 *
 *   nested_emulated WORKERS ITERATIONS
 *
 * Prints "workers ok" (every element of every accumulator, operands
 * included, as the arithmetic says) and "handlers ok N, M inside pyamx's
 * SIGILL handler" (N > 0 handler runs, each right; M of them interrupted
 * the emulation of an instruction, in pyamx's preload), or a FAIL line;
 * exit status 0 when both are ok. */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "case_kit.h"

/* Tile instructions on fixed registers, as bytes (tests/trap/test_trap_decoder.py
 * holds the table's encodings against clang's). */
static inline void load(int t, const void *p, long s)
{
    switch (t) { /* TILELOADD tmmT, [rdi + rsi] */
    case 1: __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x0c,0x37" ::"D"(p), "S"(s) : "memory"); break;
    case 2: __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x14,0x37" ::"D"(p), "S"(s) : "memory"); break;
    case 4: __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x24,0x37" ::"D"(p), "S"(s) : "memory"); break;
    default: __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x2c,0x37" ::"D"(p), "S"(s) : "memory"); break;
    }
}
static inline void store3(void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7a,0x4b,0x1c,0x37" ::"D"(p), "S"(s) : "memory"); }
static inline void tilezero3(void) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x49,0xd8" ::: "memory"); }
/* TDPBF8PS tmm0, tmm1, tmm2 */
static inline void tdpbf8ps(void) { __asm__ volatile(".byte 0xc4,0xe5,0x68,0xfd,0xc1" ::: "memory"); }
/* TDPBF16PS tmm3, tmm4, tmm5 */
static inline void tdpbf16ps_345(void) { __asm__ volatile(".byte 0xc4,0xe2,0x52,0x5c,0xdc" ::: "memory"); }

#define BF8_ONE 0x3c     /* 1.0 in E5M2 */
#define BF16_ONE 0x3f80  /* 1.0 in bfloat16 */

/* A configuration: tmm0/tmm3 the accumulators (rows x 4n bytes), tmm1/tmm4
 * the A operands (rows x 4k), tmm2/tmm5 the B operands (k x 4n). */
static void configure(uint8_t cfg[64], int rows, int k, int n)
{
    memset(cfg, 0, 64);
    cfg[0] = 1;
    const int r[6] = {rows, rows, k, rows, rows, k}, c[6] = {4 * n, 4 * k, 4 * n, 4 * n, 4 * k, 4 * n};
    for (int t = 0; t < 6; t++) {
        cfg[16 + 2 * t] = (uint8_t)c[t];
        cfg[48 + t] = (uint8_t)r[t];
    }
}

static uint8_t bf8_ones[16 * 64];
static uint16_t bf16_ones[16 * 32];

/* Each element of an all-ones dot product over k dwords: 4k bf8 products,
 * 2k bf16 pairs, each 1.0, summed exactly (small integers). */
static int all_equal(const float *p, int rows, int cols, float want)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            if (p[i * 16 + j] != want)
                return 0;
    return 1;
}

static volatile sig_atomic_t g_handler_runs, g_handler_bad, g_handler_inside;

/* The executable mappings of pyamx's preload (none when run without it):
 * a handler whose interrupted RIP lies there interrupted its SIGILL
 * handler, which is the window this program is about. */
static uintptr_t g_lo[16], g_hi[16];
static int g_ranges;

static void find_preload(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    while (maps && g_ranges < 16 && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[2] == 'x' && strstr(line, "_amxpreload")) {
            g_lo[g_ranges] = lo;
            g_hi[g_ranges++] = hi;
        }
    }
    if (maps)
        fclose(maps);
}

static void on_usr1(int sig, siginfo_t *si, void *vctx)
{
    (void)sig;
    (void)si;
    uintptr_t rip = (uintptr_t)((ucontext_t *)vctx)->uc_mcontext.gregs[REG_RIP];
    for (int i = 0; i < g_ranges; i++)
        if (rip >= g_lo[i] && rip < g_hi[i])
            g_handler_inside = g_handler_inside + 1;
    static __thread uint8_t cfg[64] __attribute__((aligned(64)));
    static __thread float c0[16 * 16], c3[16 * 16];
    configure(cfg, 3, 2, 5); /* a shape the workers do not use */
    ldtilecfg(cfg);
    tilezero0();
    tilezero3();
    load(1, bf8_ones, 64);
    load(2, bf8_ones, 64);
    load(4, bf16_ones, 64);
    load(5, bf16_ones, 64);
    tdpbf8ps();
    tdpbf16ps_345();
    memset(c0, 0xa5, sizeof c0);
    memset(c3, 0xa5, sizeof c3);
    store0(c0, 64);
    store3(c3, 64);
    tilerelease();
    if (!all_equal(c0, 3, 5, 8.0f) || !all_equal(c3, 3, 5, 4.0f))
        g_handler_bad = 1;
    g_handler_runs = g_handler_runs + 1;
}

static long g_iterations;
static int g_finished; /* workers past their last tile instruction */
static int g_failed;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    (void)arg;
    uint8_t cfg[64] __attribute__((aligned(64)));
    static __thread float c0[16 * 16], c3[16 * 16];
    configure(cfg, 16, 16, 16);
    ldtilecfg(cfg);
    tilezero0();
    tilezero3();
    load(1, bf8_ones, 64);
    load(2, bf8_ones, 64);
    load(4, bf16_ones, 64);
    load(5, bf16_ones, 64);
    for (long i = 0; i < g_iterations; i++) {
        tdpbf8ps();
        tdpbf16ps_345();
    }
    store0(c0, 64);
    store3(c3, 64);
    tilerelease();
    __atomic_fetch_add(&g_finished, 1, __ATOMIC_RELEASE);
    int bad0 = 0, bad3 = 0;
    float first0 = 0, first3 = 0;
    for (int i = 0; i < 256; i++) {
        if (c0[i] != 64.0f * (float)g_iterations && !bad0++)
            first0 = c0[i];
        if (c3[i] != 32.0f * (float)g_iterations && !bad3++)
            first3 = c3[i];
    }
    if (bad0 || bad3) {
        pthread_mutex_lock(&g_lock);
        if (!g_failed++)
            printf("workers FAIL: %d wrong elements in tmm0 (TDPBF8PS, e.g. %g, want %g), %d in tmm3 "
                   "(TDPBF16PS, e.g. %g, want %g)\n", bad0, first0, 64.0 * (double)g_iterations, bad3, first3,
                   32.0 * (double)g_iterations);
        pthread_mutex_unlock(&g_lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: nested_emulated WORKERS ITERATIONS\n");
        return 2;
    }
    int workers = atoi(argv[1]);
    g_iterations = atol(argv[2]);
    if (workers < 1 || workers > 64 || g_iterations < 1 || g_iterations > 100000) {
        fprintf(stderr, "nested_emulated: 1..64 workers, 1..100000 iterations\n");
        return 2;
    }
    memset(bf8_ones, BF8_ONE, sizeof bf8_ones);
    for (size_t i = 0; i < sizeof bf16_ones / sizeof bf16_ones[0]; i++)
        bf16_ones[i] = BF16_ONE;
    request_tile_permission();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    find_preload();
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);

    pthread_t th[64];
    for (int i = 0; i < workers; i++)
        if (pthread_create(&th[i], NULL, worker, NULL) != 0) {
            perror("pthread_create");
            return 2;
        }
    /* Back to back: a signal is pending again as soon as the last one was taken. */
    while (__atomic_load_n(&g_finished, __ATOMIC_ACQUIRE) < workers)
        for (int i = 0; i < workers; i++)
            pthread_kill(th[i], SIGUSR1);
    for (int i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    if (!g_failed)
        printf("workers ok\n");
    int runs = g_handler_runs;
    if (g_handler_bad)
        printf("handlers FAIL: a handler's own TDPBF8PS or TDPBF16PS result was wrong\n");
    else if (runs == 0)
        printf("handlers FAIL: no handler ran\n");
    else
        printf("handlers ok %d, %d inside pyamx's SIGILL handler\n", runs, (int)g_handler_inside);
    return g_failed || g_handler_bad || runs == 0;
}
