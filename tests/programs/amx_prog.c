/* An AMX program of the kind pyamx run exists for, written without pyamx:
 * it asks the kernel for AMX permission itself and runs tile instructions
 * (compiler intrinsics; TDPFP16PS as raw bytes, for assemblers without
 * AMX-FP16), in the ways real programs do -- several threads, signal
 * handlers firing during tile use, fork, exec, int3 under a SIGTRAP
 * handler, futex waits, its own SIGILL handler.
 *
 *   amx_prog PERM SCENARIO [ARG]
 *   PERM: syscall (libc syscall()), symbol (libc arch_prctl()), raw (a
 *         syscall instruction), none (never asks).
 *   SCENARIO fp8: one TDPBF8PS (AMX-FP8), checked by the program itself.
 *
 * It prints what it computed, one line per block:
 *   blk TAG OP CFG A B C OUT      (hex; OUT is the 1 KiB store of tmm0,
 *                                  whose buffer started as 0xA5 bytes)
 * and the test recomputes OUT from CFG, A, B, C with pyamx's emulator.
 * Other lines start with "info". Exit status 0 means every check of its
 * own passed (signal handlers ran, the tile config round-tripped, ...).
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define XTILE_MASK ((1ull << 17) | (1ull << 18))

extern int arch_prctl(int code, unsigned long addr); /* glibc exports it; not every header declares it */

static const char *g_perm = "syscall";
static pthread_mutex_t g_out = PTHREAD_MUTEX_INITIALIZER;

static long raw_arch_prctl(long code, unsigned long arg)
{
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_arch_prctl), "D"(code), "S"(arg)
                     : "rcx", "r11", "memory");
    return ret; /* -errno on failure */
}

static long xcomp(long code, unsigned long arg)
{
    if (!strcmp(g_perm, "symbol"))
        return arch_prctl((int)code, arg) == 0 ? 0 : -errno;
    if (!strcmp(g_perm, "raw"))
        return raw_arch_prctl(code, arg);
    return syscall(SYS_arch_prctl, code, arg) == 0 ? 0 : -errno;
}

static void die(const char *what)
{
    fprintf(stderr, "amx_prog: FAILED: %s\n", what);
    fflush(stdout);
    _exit(3);
}

/* The kernel selftest's order: what is supported, what is permitted,
 * the request, then the permission must include the tile data. */
static void request_permission(void)
{
    uint64_t supp = 0, before = 0, after = 0;
    if (!strcmp(g_perm, "none"))
        return;
    if (xcomp(ARCH_GET_XCOMP_SUPP, (unsigned long)&supp) != 0 || (supp & XTILE_MASK) != XTILE_MASK)
        die("ARCH_GET_XCOMP_SUPP does not offer AMX");
    /* `before` is printed, not judged: a process that already asked (a Python
     * process whose pyamx detected AMX) holds the permission before this call. */
    if (xcomp(ARCH_GET_XCOMP_PERM, (unsigned long)&before) != 0)
        die("ARCH_GET_XCOMP_PERM before the request");
    long r = xcomp(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    if (r != 0)
        die("ARCH_REQ_XCOMP_PERM refused");
    if (xcomp(ARCH_GET_XCOMP_PERM, (unsigned long)&after) != 0 || (after & XTILE_MASK) != XTILE_MASK)
        die("ARCH_GET_XCOMP_PERM after the request lacks the tile data");
    if (xcomp(ARCH_REQ_XCOMP_PERM, 63) == 0)
        die("ARCH_REQ_XCOMP_PERM granted a nonexistent component");
    if (xcomp(ARCH_REQ_XCOMP_PERM, 17) == 0)  /* only XTILEDATA is requested (Linux: EOPNOTSUPP) */
        die("ARCH_REQ_XCOMP_PERM granted XTILECFG, which is not a requestable component");
    printf("info perm %s supp=%llx before=%llx after=%llx\n", g_perm, (unsigned long long)supp,
           (unsigned long long)before, (unsigned long long)after);
}

/* ---- deterministic inputs ---- */

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* 16-bit floats mostly in a modest range, with specials (inf, NaN payloads,
 * denormals, zeros of both signs) mixed in; ints raw. */
static void fill(uint8_t *p, size_t n, uint64_t *s, int kind)
{
    for (size_t i = 0; i < n; i += 2) {
        uint64_t r = next(s);
        uint16_t v = (uint16_t)r;
        if (kind == 1) { /* bf16 */
            unsigned e = 120 + (unsigned)((r >> 16) % 16);
            if ((r >> 24) % 32 == 0) e = (r >> 32) % 2 ? 255 : 0;
            v = (uint16_t)((v & 0x807F) | (e << 7));
        } else if (kind == 2) { /* fp16 */
            unsigned e = 8 + (unsigned)((r >> 16) % 14);
            if ((r >> 24) % 32 == 0) e = (r >> 32) % 2 ? 31 : 0;
            v = (uint16_t)((v & 0x83FF) | (e << 10));
        }
        memcpy(p + i, &v, 2);
    }
}

static void fill_c(uint8_t *p, uint64_t *s, int floats)
{
    for (int i = 0; i < 1024; i += 4) {
        uint64_t r = next(s);
        uint32_t v = (uint32_t)r;
        if (floats) {
            unsigned e = 118 + (unsigned)((r >> 32) % 20);
            if ((r >> 40) % 64 == 0) e = (r >> 48) % 2 ? 255 : 0;
            v = (v & 0x807FFFFFu) | (e << 23);
        }
        memcpy(p + i, &v, 4);
    }
}

static void hex(char *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

/* ---- between tile instructions: what programs do while tile state is live ---- */

static volatile sig_atomic_t g_alarms, g_usr1, g_traps;
static int g_between; /* bit 0 yield, 1 nanosleep, 2 futex, 3 int3, 4 raise SIGUSR1 */

static void between(void)
{
    if (g_between & 1)
        sched_yield();
    if (g_between & 2) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    if (g_between & 4) {
        int word = 0;
        struct timespec ts = {0, 20000};
        syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0); /* times out */
    }
    if (g_between & 8)
        __asm__ volatile("int3");
    if (g_between & 16)
        raise(SIGUSR1);
}

/* ---- the tile work ---- */

struct cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed));

enum { BF16, FP16, SSD, SUD, USD, UUD, NOPS };
static const char *const NAMES[NOPS] = {"tdpbf16ps", "tdpfp16ps", "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud"};

__attribute__((target("amx-tile,amx-bf16,amx-int8"), noinline))
static void dot(int op, const struct cfg *cfg, const uint8_t *a, const uint8_t *b, const uint8_t *c,
                uint8_t *out, int t1)
{
    _tile_loadconfig(cfg);
    between();
    _tile_loadd(0, c, 64);
    between();
    if (t1)
        _tile_stream_loadd(1, a, 64); /* TILELOADDT1 */
    else
        _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    between();
    switch (op) {
    case BF16: _tile_dpbf16ps(0, 1, 2); break;
    case FP16: __asm__ volatile(".byte 0xc4, 0xe2, 0x6b, 0x5c, 0xc1" ::: "memory"); break; /* TDPFP16PS tmm0, tmm1, tmm2 */
    case SSD: _tile_dpbssd(0, 1, 2); break;
    case SUD: _tile_dpbsud(0, 1, 2); break;
    case USD: _tile_dpbusd(0, 1, 2); break;
    default: _tile_dpbuud(0, 1, 2); break;
    }
    between();
    _tile_stored(0, out, 64);
}

/* STTILECFG gives back what LDTILECFG loaded; reloading it zeroes the tiles. */
__attribute__((target("amx-tile"), noinline))
static void cfg_round_trip(const struct cfg *cfg)
{
    uint8_t got[64], again[64], tile[1024];
    _tile_loadconfig(cfg);
    _tile_loadd(3, cfg, 0); /* stride 0: row 0 of the config, repeated */
    _tile_storeconfig(got);
    if (memcmp(got, cfg, 64))
        die("STTILECFG differs from the LDTILECFG image");
    _tile_loadconfig(got);
    memset(tile, 0x5a, sizeof tile);
    _tile_stored(3, tile, 64);
    for (int r = 0; r < cfg->rows[3]; r++)
        for (int i = 0; i < cfg->colsb[3]; i++)
            if (tile[r * 64 + i])
                die("LDTILECFG did not zero tmm3");
    _tile_release();
    _tile_storeconfig(again);
    for (int i = 0; i < 64; i++)
        if (again[i])
            die("STTILECFG after TILERELEASE is not all zero");
}

static void work(const char *tag, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int op = 0; op < NOPS; op++) {
        struct cfg cfg;
        uint8_t a[1024], b[1024], c[1024], out[1024];
        int floats = op <= FP16;
        /* Full tiles for even seeds, odd shapes for odd ones. */
        int m = seed % 2 ? 1 + (int)(next(&s) % 16) : 16;
        int kd = seed % 2 ? 1 + (int)(next(&s) % 16) : 16;
        int n = seed % 2 ? 1 + (int)(next(&s) % 16) : 16;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        cfg.rows[0] = (uint8_t)m; cfg.colsb[0] = (uint16_t)(4 * n);
        cfg.rows[1] = (uint8_t)m; cfg.colsb[1] = (uint16_t)(4 * kd);
        cfg.rows[2] = (uint8_t)kd; cfg.colsb[2] = (uint16_t)(4 * n);
        cfg.rows[3] = 2; cfg.colsb[3] = 64;
        fill(a, sizeof a, &s, op == BF16 ? 1 : op == FP16 ? 2 : 0);
        fill(b, sizeof b, &s, op == BF16 ? 1 : op == FP16 ? 2 : 0);
        fill_c(c, &s, floats);
        memset(out, 0xA5, sizeof out);
        dot(op, &cfg, a, b, c, out, (int)(seed + (uint64_t)op) % 2);
        cfg_round_trip(&cfg);
        static char line[64 + 8 * 1024 + 256];
        pthread_mutex_lock(&g_out);
        int k = sprintf(line, "blk %s %s ", tag, NAMES[op]);
        hex(line + k, (const uint8_t *)&cfg, 64); k += 128; line[k++] = ' ';
        hex(line + k, a, 1024); k += 2048; line[k++] = ' ';
        hex(line + k, b, 1024); k += 2048; line[k++] = ' ';
        hex(line + k, c, 1024); k += 2048; line[k++] = ' ';
        hex(line + k, out, 1024); k += 2048;
        line[k++] = '\n';
        fwrite(line, 1, (size_t)k, stdout);
        pthread_mutex_unlock(&g_out);
    }
}

/* TDPBF8PS (AMX-FP8), which no shipping Xeon executes, so a run that passes
 * went through an emulation on every CPU (TDPFP16PS runs on some that do not
 * report AMX-FP16). All-ones bf8 operands (0x3c is 1.0 in E5M2) over a full
 * 16 x 64 x 16 shape: every element is exactly 64.0f (0x42800000). */
__attribute__((target("amx-tile"), noinline))
static void fp8_ones(void)
{
    struct cfg cfg;
    static uint8_t ones[1024], out[1024];
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    memset(ones, 0x3c, sizeof ones);
    memset(out, 0xA5, sizeof out);
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_loadd(1, ones, 64);
    _tile_loadd(2, ones, 64);
    __asm__ volatile(".byte 0xc4, 0xe5, 0x68, 0xfd, 0xc1" ::: "memory"); /* TDPBF8PS tmm0, tmm1, tmm2 */
    _tile_stored(0, out, 64);
    _tile_release();
    for (int i = 0; i < 256; i++) {
        uint32_t v;
        memcpy(&v, out + 4 * i, 4);
        if (v != 0x42800000u)
            die("TDPBF8PS of all-ones bf8 operands is not 64.0 everywhere");
    }
    printf("info fp8 ok\n");
}

/* ---- signal handlers of the program's own ---- */

static void on_alarm(int sig) { (void)sig; g_alarms++; }
static void on_usr1(int sig) { (void)sig; g_usr1++; }
static void on_trap(int sig) { (void)sig; g_traps++; } /* int3 resumes after itself */

static volatile sig_atomic_t g_own_sigill;
static void on_sigill(int sig, siginfo_t *si, void *vctx)
{
    (void)sig; (void)si;
    ucontext_t *uc = vctx;
    g_own_sigill++;
    uc->uc_mcontext.gregs[REG_RIP] += 2; /* skip the ud2 */
}

static void handle(int sig, void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL))
        die("sigaction");
}

struct targ {
    int index;
    int loops;
};

static void *thread_main(void *p)
{
    struct targ *t = p;
    char tag[32];
    for (int i = 0; i < t->loops; i++) {
        snprintf(tag, sizeof tag, "t%d.%d", t->index, i);
        work(tag, 100 + (uint64_t)t->index * 10 + (uint64_t)i);
    }
    return NULL;
}

__attribute__((target("amx-tile"), noinline))
static void *tiny_thread(void *p)
{
    struct cfg *cfg = p;
    uint8_t out[1024];
    memset(out, 0x11, sizeof out);
    _tile_loadconfig(cfg);
    _tile_zero(4);
    _tile_stored(4, out, 64);
    for (int i = 0; i < 64; i++)
        if (out[i])
            return (void *)1;
    return NULL;
}

static int slots_in_use(void)
{
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "pyamx_preload_slots_in_use");
    return f ? f() : -1;
}

__attribute__((target("amx-tile"), noinline))
static void one_tile_instruction(void)
{
    static uint8_t tile[1024];
    /* static: GCC 12 models _tile_loadconfig's operand as smaller than 64
     * bytes and drops the zeroing of a local array's tail, so the reserved
     * bytes held stack garbage and silicon raised #GP (SIGSEGV). */
    static const uint8_t cfg[64] = {1, [16] = 64, [48] = 16};
    _tile_loadconfig(cfg); /* XTILECFG only: runs without the permission on silicon */
    printf("info ldtilecfg survived\n");
    fflush(stdout);
    _tile_loadd(0, tile, 64); /* XTILEDATA: SIGILL without the permission */
}

__attribute__((target("amx-tile"), noinline))
static void load_tmm5(const struct cfg *cfg, const uint8_t *data) { _tile_loadconfig(cfg); _tile_loadd(5, data, 64); }


__attribute__((target("amx-tile"), noinline))
static void *check_inherited(void *p)
{
    const struct cfg *cfg = p;
    uint8_t got[64], tile[1024];
    _tile_storeconfig(got);
    memset(tile, 0x77, sizeof tile);
    _tile_stored(5, tile, 64);
    for (int i = 0; i < 1024; i++)
        if (tile[i])
            return NULL;
    return memcmp(got, cfg, 64) ? NULL : (void *)1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: amx_prog PERM SCENARIO [ARG]\n");
        return 2;
    }
    g_perm = argv[1];
    const char *what = argv[2];
    /* Large enough that a process writes all its output at exit or at an
     * explicit flush: a forked child and its parent never interleave. */
    static char outbuf[1 << 22]; /* glibc ignores the size without a buffer */
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);

    if (!strcmp(what, "noperm")) { /* dies of SIGILL, as on silicon */
        one_tile_instruction();
        printf("info survived\n");
        return 0;
    }
    if (!strcmp(what, "nothing")) { /* checks AMX the careful way: CPUID says no, so no tile code */
        unsigned a, b, c, d;
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
        printf("info cpuid amx-tile=%u\n", (d >> 24) & 1);
        return 0;
    }
    request_permission();

    if (!strcmp(what, "basic")) {
        work("main0", 0);
        work("main1", 1);
    } else if (!strcmp(what, "fp8")) {
        fp8_ones();
    } else if (!strcmp(what, "between")) {
        /* int3 under a SIGTRAP handler, futex waits, sleeps, yields and
         * SIGUSR1 between tile instructions. */
        handle(SIGTRAP, on_trap);
        handle(SIGUSR1, on_usr1);
        g_between = 31;
        work("btw0", 2);
        work("btw1", 3);
        if (g_traps < 10 || g_usr1 < 10)
            die("handlers for int3/SIGUSR1 did not run");
        printf("info traps=%d usr1=%d\n", (int)g_traps, (int)g_usr1);
    } else if (!strcmp(what, "threads")) {
        /* Four threads computing while a 100 us interval timer and
         * SIGUSR1 from the main thread interrupt them. */
        enum { N = 4 };
        pthread_t th[N];
        struct targ ta[N];
        handle(SIGALRM, on_alarm);
        handle(SIGUSR1, on_usr1);
        struct itimerval it = {{0, 100}, {0, 100}};
        setitimer(ITIMER_REAL, &it, NULL);
        g_between = 1 | 4;
        for (int i = 0; i < N; i++) {
            ta[i].index = i;
            ta[i].loops = 3;
            if (pthread_create(&th[i], NULL, thread_main, &ta[i]))
                die("pthread_create");
        }
        for (int k = 0; k < 50; k++) {
            for (int i = 0; i < N; i++)
                pthread_kill(th[i], SIGUSR1);
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        for (int i = 0; i < N; i++)
            pthread_join(th[i], NULL);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        if (g_alarms == 0 || g_usr1 == 0)
            die("SIGALRM/SIGUSR1 handlers did not run");
        printf("info alarms>0 usr1>0\n");
    } else if (!strcmp(what, "fork")) {
        /* Tile state across thread creation and fork, as Linux hands it on. */
        struct cfg cfg;
        uint8_t data[1024];
        for (int i = 0; i < 1024; i++)
            data[i] = (uint8_t)(i * 7 + 3);
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        cfg.rows[5] = 16;
        cfg.colsb[5] = 64;
        load_tmm5(&cfg, data);
        /* A new thread starts, as on Linux, with its creator's TILECFG and
         * tile data in the init state (fpu_clone copies no XTILEDATA). */
        pthread_t th;
        void *thread_ok;
        if (pthread_create(&th, NULL, check_inherited, &cfg) || pthread_join(th, &thread_ok) || !thread_ok)
            die("a new thread's tile state is not its creator's TILECFG with zero tiles");
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            /* The same after fork: TILECFG kept, tile data back to init. */
            if (!check_inherited(&cfg))
                die("after fork: TILECFG not kept or tile data not zero");
            request_permission(); /* asking again in the child is allowed */
            work("child", 5);
            fflush(stdout);
            _exit(0);
        }
        work("parent", 6);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            die("the forked child failed");
        printf("info child ok\n");
    } else if (!strcmp(what, "exec")) {
        /* The environment (LD_PRELOAD) reaches the next program. */
        fflush(stdout);
        execl("/proc/self/exe", argv[0], g_perm, "basic", (char *)NULL);
        die("exec");
    } else if (!strcmp(what, "own-sigill")) {
        /* The program's own SIGILL handler still sees what is not a tile instruction. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigill;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGILL, &sa, NULL))
            die("sigaction(SIGILL)");
        __asm__ volatile("ud2");
        work("own", 7);
        __asm__ volatile("ud2");
        if (g_own_sigill != 2)
            die("the program's SIGILL handler did not see its two ud2");
        printf("info own sigill=%d\n", (int)g_own_sigill);
    } else if (!strcmp(what, "many-threads")) {
        /* Thousands of short-lived threads, each with tile state. */
        int total = argc > 3 ? atoi(argv[3]) : 2000;
        struct cfg cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        cfg.rows[4] = 16;
        cfg.colsb[4] = 64;
        for (int done = 0; done < total; done += 16) {
            pthread_t th[16];
            for (int i = 0; i < 16; i++)
                if (pthread_create(&th[i], NULL, tiny_thread, &cfg))
                    die("pthread_create");
            for (int i = 0; i < 16; i++) {
                void *r;
                pthread_join(th[i], &r);
                if (r)
                    die("TILEZERO in a thread");
            }
        }
        printf("info threads=%d slots_in_use=%d\n", total, slots_in_use());
    } else {
        fprintf(stderr, "unknown scenario %s\n", what);
        return 2;
    }
    fflush(stdout);
    return 0;
}
