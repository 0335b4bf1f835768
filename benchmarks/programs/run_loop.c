/* Loops for benchmarks/bench_run.py: one kind of trapped instruction N
 * times, timed inside the program (so process start-up is not counted).
 *
 *   run_loop KIND N    KIND: ud2 (the bare SIGILL round trip: a handler
 *                      that only skips the instruction, no emulation),
 *                      sttilecfg, tilezero, tileloadd, tilestored,
 *                      tdpbf16ps, tdpfp16ps, tdpbssd (16x16x16, on finite
 *                      non-zero operands loaded once before the loop),
 *                      signal (raise(SIGUSR1) to a handler installed
 *                      through libc's sigaction: under pyamx run it runs
 *                      through the preload's trampoline, which gives each
 *                      handler frame its own tile state),
 *                      rawsig (a raw rt_sigaction query of SIGUSR1: under
 *                      pyamx run's guard, a round trip to its supervisor),
 *                      notify (the same query with the guard's mechanism
 *                      set up by this program itself: a seccomp filter
 *                      that notifies rt_sigaction to a listener a thread of
 *                      this process answers with CONTINUE; run it bare,
 *                      since a second listener is refused)
 * Prints "KIND N SECONDS".
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <immintrin.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static void skip_ud2(int sig, siginfo_t *si, void *vctx)
{
    (void)sig; (void)si;
    ((ucontext_t *)vctx)->uc_mcontext.gregs[REG_RIP] += 2;
}

static volatile sig_atomic_t delivered;

static void count_signal(int sig)
{
    (void)sig;
    delivered++;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint8_t cfg[64] __attribute__((aligned(64)));
static uint8_t buf[1024] __attribute__((aligned(64)));
static uint16_t data[512] __attribute__((aligned(64)));

/* TDPFP16PS tmm0, tmm2, tmm1 as bytes: compilers before GCC 13 lack amx-fp16. */
#define TDPFP16PS_0_2_1() __asm__ volatile(".byte 0xc4, 0xe2, 0x73, 0x5c, 0xc2" ::: "memory")

__attribute__((target("amx-tile,amx-bf16,amx-int8"), noinline))
static int loop(const char *kind, long n)
{
    _tile_loadconfig(cfg);
    _tile_loadd(1, data, 64);
    _tile_loadd(2, data, 64);
    if (!strcmp(kind, "sttilecfg"))
        for (long i = 0; i < n; i++) _tile_storeconfig(buf);
    else if (!strcmp(kind, "tilezero"))
        for (long i = 0; i < n; i++) _tile_zero(0);
    else if (!strcmp(kind, "tileloadd"))
        for (long i = 0; i < n; i++) _tile_loadd(1, buf, 64);
    else if (!strcmp(kind, "tilestored"))
        for (long i = 0; i < n; i++) _tile_stored(1, buf, 64);
    else if (!strcmp(kind, "tdpbf16ps"))
        for (long i = 0; i < n; i++) _tile_dpbf16ps(0, 1, 2);
    else if (!strcmp(kind, "tdpfp16ps"))
        for (long i = 0; i < n; i++) TDPFP16PS_0_2_1();
    else if (!strcmp(kind, "tdpbssd"))
        for (long i = 0; i < n; i++) _tile_dpbssd(0, 1, 2);
    else
        return 2;
    _tile_release();
    return 0;
}

static long raw_query(void)
{
    uint64_t old[4];
    return syscall(SYS_rt_sigaction, SIGUSR1, NULL, old, 8);
}

/* Answers every notification with CONTINUE, as the guard's supervisor does
 * for a call it lets through; the listener arrives through the pipe. */
static void *answer_continue(void *arg)
{
    int fd;
    if (read((int)(intptr_t)arg, &fd, sizeof fd) != (ssize_t)sizeof fd)
        return NULL;
    for (;;) {
        struct seccomp_notif req;
        struct seccomp_notif_resp resp;
        memset(&req, 0, sizeof req);
        if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
            if (errno == EINTR || errno == ENOENT)
                continue;
            return NULL;
        }
        memset(&resp, 0, sizeof resp);
        resp.id = req.id;
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
}

static int notify_rt_sigaction(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigaction, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    /* The answering thread before the filter: glibc's first pthread_create
     * itself calls rt_sigaction, which nobody could answer yet. */
    int handover[2];
    pthread_t t;
    if (pipe(handover) != 0 || pthread_create(&t, NULL, answer_continue, (void *)(intptr_t)handover[0]) != 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (fd < 0)
        return -1;
    return write(handover[1], &fd, sizeof fd) == (ssize_t)sizeof fd ? 0 : -1;
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
    } else if (!strcmp(kind, "rawsig") || !strcmp(kind, "notify")) {
        if (!strcmp(kind, "notify") && notify_rt_sigaction() != 0) {
            perror("run_loop: seccomp listener");
            return 5;
        }
        t0 = now();
        for (long i = 0; i < n; i++)
            if (raw_query() != 0) {
                perror("run_loop: rt_sigaction");
                return 4;
            }
    } else if (!strcmp(kind, "signal")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = count_signal;
        sigaction(SIGUSR1, &sa, NULL);
        t0 = now();
        for (long i = 0; i < n; i++)
            raise(SIGUSR1);
        if (delivered != n) {
            fprintf(stderr, "run_loop: %ld signals raised, %ld delivered\n", n, (long)delivered);
            return 4;
        }
    } else {
        if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
            fprintf(stderr, "run_loop: no AMX permission (run it under pyamx run)\n");
            return 3;
        }
        /* 1.0 .. 1.98 as bf16 and 1.875 .. 1.94 as fp16: finite sums over any N */
        for (int i = 0; i < 512; i++)
            data[i] = (uint16_t)(0x3F80 + (i % 64));
        cfg[0] = 1;
        for (int t = 0; t < 3; t++) {
            cfg[16 + 2 * t] = 64;
            cfg[48 + t] = 16;
        }
        t0 = now();
        if (loop(kind, n) != 0) {
            fprintf(stderr, "run_loop: unknown kind %s\n", kind);
            return 2;
        }
    }
    printf("%s %ld %.9f\n", kind, n, now() - t0);
    return 0;
}
