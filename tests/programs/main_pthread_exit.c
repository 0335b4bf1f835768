/* main() leaves with pthread_exit() while a worker still runs tile
 * instructions.  On silicon the process ends when the worker returns, with
 * status 0 and the worker's buffered output flushed (glibc's last thread
 * calls exit(0)); under `pyamx run` a thread of the emulation's own must not
 * keep it alive.  Prints "worker done SUM" (SUM: a TDPBF16PS result). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "case_kit.h"

static void *worker(void *arg)
{
    (void)arg;
    usleep(300 * 1000); /* main has long left by now */
    static uint8_t cfg[64] __attribute__((aligned(64)));
    static uint16_t a[512], b[512];
    static float c[256];
    cfg[0] = 1;
    for (int t = 0; t < 3; t++) {
        cfg[16 + 2 * t] = 64;
        cfg[48 + t] = 16;
    }
    for (int i = 0; i < 512; i++)
        a[i] = b[i] = 0x3f80; /* bf16 1.0 */
    ldtilecfg(cfg);
    load1(a, 64);
    load2(b, 64);
    tilezero0();
    tdpbf16ps();
    store0(c, 64);
    tilerelease();
    printf("worker done %g\n", c[0]); /* buffered: only exit() flushes it into a pipe */
    return NULL;
}

int main(void)
{
    request_tile_permission();
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 2;
    pthread_exit(NULL);
}
