/* Loops for benchmarks/bench_run.py: one kind of trapped instruction N
 * times, timed inside the program (so process start-up is not counted).
 *
 *   run_loop KIND N    KIND: ud2 (the bare SIGILL round trip: a handler
 *                      that only skips the instruction, no emulation),
 *                      sttilecfg, tilezero, tileloadd, tdpbf16ps
 * Prints "KIND N SECONDS".
 */
#define _GNU_SOURCE 1
#include <immintrin.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static void skip_ud2(int sig, siginfo_t *si, void *vctx)
{
    (void)sig; (void)si;
    ((ucontext_t *)vctx)->uc_mcontext.gregs[REG_RIP] += 2;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint8_t cfg[64] __attribute__((aligned(64)));
static uint8_t buf[1024] __attribute__((aligned(64)));

__attribute__((target("amx-tile,amx-bf16"), noinline))
static void loop(const char *kind, long n)
{
    _tile_loadconfig(cfg);
    if (!strcmp(kind, "sttilecfg"))
        for (long i = 0; i < n; i++) _tile_storeconfig(buf);
    else if (!strcmp(kind, "tilezero"))
        for (long i = 0; i < n; i++) _tile_zero(0);
    else if (!strcmp(kind, "tileloadd"))
        for (long i = 0; i < n; i++) _tile_loadd(1, buf, 64);
    else
        for (long i = 0; i < n; i++) _tile_dpbf16ps(0, 1, 2);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *kind = argv[1];
    long n = atol(argv[2]);
    double t0;
    if (!strcmp(kind, "ud2")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = skip_ud2;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGILL, &sa, NULL);
        t0 = now();
        for (long i = 0; i < n; i++)
            __asm__ volatile("ud2");
    } else {
        if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
            fprintf(stderr, "run_loop: no AMX permission (run it under pyamx run)\n");
            return 3;
        }
        cfg[0] = 1;
        for (int t = 0; t < 3; t++) {
            cfg[16 + 2 * t] = 64;
            cfg[48 + t] = 16;
        }
        t0 = now();
        loop(kind, n);
    }
    printf("%s %ld %.9f\n", kind, n, now() - t0);
    return 0;
}
