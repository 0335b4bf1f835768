/* A thread with the smallest alternate signal stack the kernel accepts,
 * plus a margin, runs tile instructions; the memory below that stack must
 * stay untouched and the results right.
 *
 * On silicon a tile instruction needs no signal stack at all.  Under
 * `pyamx run` an instruction the CPU lacks raises SIGILL and the emulating
 * handler runs on this stack (it is installed SA_ONSTACK, as faulthandler
 * expects), so the handler may use no more of it than the kernel's frame.
 * The instruction is AMX-FP8's TDPHF8PS: emulated both in the complement
 * mode (AMX silicon without AMX-FP8) and in the full trap mode.
 *
 *     small_sigstack [MARGIN [REPEATS]]
 *
 * MARGIN: bytes above the smallest size sigaltstack() accepts (default 512).
 * Prints "ok SIZE" or what went wrong, exit status 0 or 1.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "case_kit.h"

#ifndef AT_MINSIGSTKSZ
#define AT_MINSIGSTKSZ 51
#endif

#define BELOW 65536 /* watched bytes under the alternate stack */
#define PATTERN 0xa5

static size_t g_margin = 512;
static int g_repeats = 20;

static void tdphf8ps(void) { __asm__ volatile(".byte 0xc4,0xe5,0x69,0xfd,0xc1" ::: "memory"); }

static size_t smallest_accepted(uint8_t *top_region, size_t room)
{
    size_t size = (size_t)getauxval(AT_MINSIGSTKSZ);
    if (size < 2048)
        size = 2048;
    for (; size <= room; size++) { /* byte by byte: margin 0 is the exact minimum */
        stack_t ss = {.ss_sp = top_region + room - size, .ss_size = size, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) == 0) {
            stack_t off = {.ss_flags = SS_DISABLE};
            sigaltstack(&off, NULL);
            return size;
        }
        if (errno != ENOMEM)
            break;
    }
    return 0;
}

static void *worker(void *arg)
{
    const char **why = arg;
    size_t room = 1 << 20;
    uint8_t *region = mmap(NULL, BELOW + room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        *why = "mmap failed";
        return NULL;
    }
    size_t size = smallest_accepted(region + BELOW, room - g_margin);
    if (size == 0) {
        *why = "sigaltstack accepted no size";
        return NULL;
    }
    size += g_margin;
    /* The stack is the top `size` bytes of the region; everything under it is watched. */
    uint8_t *stack = region + BELOW + room - size;
    memset(region, PATTERN, (size_t)(stack - region));
    stack_t ss = {.ss_sp = stack, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        *why = "sigaltstack refused the size it accepted before";
        return NULL;
    }
    static uint8_t cfg[64] __attribute__((aligned(64)));
    static uint8_t a[1024], b[1024];
    static float out[256];
    cfg[0] = 1;
    for (int t = 0; t < 3; t++) {
        cfg[16 + 2 * t] = 64; /* colsb of tmm0..2 */
        cfg[48 + t] = 16;     /* rows */
    }
    memset(a, 0x38, sizeof a); /* E4M3 1.0 */
    memset(b, 0x38, sizeof b);
    for (int r = 0; r < g_repeats; r++) {
        ldtilecfg(cfg);
        load1(a, 64);
        load2(b, 64);
        tilezero0();
        tdphf8ps(); /* 64 products of 1.0 per element */
        store0(out, 64);
        tilerelease();
        for (int i = 0; i < 256; i++)
            if (out[i] != 64.0f) {
                *why = "wrong TDPHF8PS result";
                return NULL;
            }
    }
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    size_t written = 0, deepest = 0;
    for (uint8_t *p = region; p < stack; p++)
        if (*p != PATTERN) {
            written++;
            if (!deepest)
                deepest = (size_t)(stack - p);
        }
    if (written) {
        static char msg[160];
        snprintf(msg, sizeof msg, "%zu bytes below the %zu-byte signal stack were written, down to %zu bytes under it",
                 written, size, deepest);
        *why = msg;
        return NULL;
    }
    printf("ok %zu\n", size);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        g_margin = (size_t)strtoul(argv[1], NULL, 0);
    if (argc > 2)
        g_repeats = atoi(argv[2]);
    request_tile_permission();
    const char *why = NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &why) != 0 || pthread_join(t, NULL) != 0) {
        fprintf(stderr, "small_sigstack: no thread\n");
        return 2;
    }
    if (why) {
        printf("FAIL: %s\n", why);
        return 1;
    }
    return 0;
}
