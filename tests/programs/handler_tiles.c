/* Tile state per signal frame, as Linux keeps it: a handler starts with the
 * init tile state (STTILECFG reads all zeros), and the interrupted code finds
 * its configuration and tiles intact after the handler returns, whatever the
 * handler loaded, computed or released.  A handler that leaves by
 * siglongjmp leaves its own tile state behind (the interrupted one, saved
 * in the discarded frame, is gone), and the code it jumped to goes on with
 * that state, however deep it then runs on the stack.
 *
 * Run directly on AMX silicon this program checks Linux's rules; under
 * `pyamx run` it checks the emulation against the same rules.  It also
 * checks that what sigaction() and its kin report is the program's own
 * action (pyamx run wraps handlers).  One line per case, "CASE ok" or
 * "CASE FAIL: why"; exit status 0 when every case is ok. */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "case_kit.h"

/* One int8 dot product shape: C (m x n int32) += A (m x 4k int8) . B (k x 4n int8). */
struct shape {
    int m, k, n;
    uint8_t cfg[64] __attribute__((aligned(64)));
    int8_t a[16][64], b[16][64];
    int32_t want[16][16];
};

static struct shape main_shape = {.m = 16, .k = 16, .n = 16};
static struct shape handler_shape = {.m = 7, .k = 5, .n = 9};

static uint32_t rng_state = 12345;
static uint32_t rng(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return rng_state >> 8;
}

/* The spec's sum, in integers: C[i].dword[j] += sum over the K dwords p of
 * A[i].byte[4p+q] * B[p].byte[4j+q], q = 0..3, all signed. */
static void prepare(struct shape *s)
{
    memset(s->cfg, 0, 64);
    s->cfg[0] = 1;
    const int rows[3] = {s->m, s->m, s->k}, colsb[3] = {4 * s->n, 4 * s->k, 4 * s->n};
    for (int t = 0; t < 3; t++) {
        s->cfg[16 + 2 * t] = (uint8_t)colsb[t];
        s->cfg[48 + t] = (uint8_t)rows[t];
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++) {
            s->a[i][j] = (int8_t)rng();
            s->b[i][j] = (int8_t)rng();
        }
    /* Corners of the signed range too. */
    s->a[0][0] = -128, s->b[0][0] = -128, s->a[0][1] = 127, s->b[0][1] = -128;
    for (int i = 0; i < s->m; i++)
        for (int j = 0; j < s->n; j++) {
            int32_t sum = 0;
            for (int p = 0; p < s->k; p++)
                for (int q = 0; q < 4; q++)
                    sum += (int32_t)s->a[i][4 * p + q] * (int32_t)s->b[p][4 * j + q];
            s->want[i][j] = sum;
        }
}

/* The shape's tiles loaded (tmm0 zero) and multiplied; tmm0 stored into c. */
static void compute(const struct shape *s, int32_t c[16][16])
{
    static const int32_t zero[16][16];
    load0(zero, 64);
    load1(s->a, 64);
    load2(s->b, 64);
    dp_ss();
    store0(c, 64);
}

static int equal(const struct shape *s, int32_t c[16][16])
{
    for (int i = 0; i < s->m; i++)
        if (memcmp(c[i], s->want[i], 4 * (size_t)s->n) != 0)
            return 0;
    return 1;
}

/* ---- a handler that uses tiles, on a timer, while a loop keeps its own live ---- */

static volatile sig_atomic_t h_runs, h_cfg_not_init, h_wrong;

static void tile_handler(int sig)
{
    (void)sig;
    uint8_t seen[64] __attribute__((aligned(64)));
    static int32_t c[16][16];
    sttilecfg(seen);
    if (!all_zero(seen, 64))
        h_cfg_not_init++;
    ldtilecfg(handler_shape.cfg);
    compute(&handler_shape, c);
    if (!equal(&handler_shape, c))
        h_wrong++;
    tilerelease();
    h_runs++;
}

static const char *timer_case(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tile_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
        return "sigaction(SIGALRM) failed";
    struct itimerval it = {{0, 2000}, {0, 2000}};
    if (setitimer(ITIMER_REAL, &it, NULL) != 0)
        return "setitimer failed";
    static int32_t c[16][16];
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    const char *why = NULL;
    time_t start = time(NULL);
    long loops = 0;
    ldtilecfg(main_shape.cfg);
    /* The signals land anywhere in here: between the loads, the dot
     * product and the store, with the loop's tiles live. */
    while (!why && (h_runs < 25 || loops < 1000) && time(NULL) - start < 100) {
        compute(&main_shape, c);
        if (!equal(&main_shape, c))
            why = "the loop's product differs from the reference (a handler changed its tiles)";
        sttilecfg(cfg_now);
        if (!why && memcmp(cfg_now, main_shape.cfg, 64) != 0)
            why = "the loop's TILECFG changed (a handler's configuration leaked)";
        loops++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);
    tilerelease();
    if (why)
        return why;
    if (h_runs < 25)
        return "fewer than 25 timer signals arrived";
    if (h_cfg_not_init)
        return "a handler did not start with TILECFG in the init state";
    if (h_wrong)
        return "a handler's own product differs from the reference";
    return NULL;
}

/* ---- a handler that only reads TILECFG ---- */

static uint8_t cfg_in_handler[64] __attribute__((aligned(64)));

static void cfg_handler(int sig)
{
    (void)sig;
    sttilecfg(cfg_in_handler);
}

static const char *cfg_case(void)
{
    static int32_t c[16][16];
    static uint8_t cfg_now[64] __attribute__((aligned(64)));
    memset(cfg_in_handler, 0xAA, 64);
    if (signal(SIGUSR2, cfg_handler) == SIG_ERR)
        return "signal(SIGUSR2) failed";
    ldtilecfg(main_shape.cfg);
    load0(main_shape.want, 64);
    raise(SIGUSR2);
    sttilecfg(cfg_now);
    store0(c, 64);
    tilerelease();
    if (!all_zero(cfg_in_handler, 64))
        return "STTILECFG in the handler did not read all zeros";
    if (memcmp(cfg_now, main_shape.cfg, 64) != 0)
        return "the interrupted TILECFG was not back after the handler";
    if (!equal(&main_shape, c))
        return "the interrupted tile data was not back after the handler";
    return NULL;
}

/* ---- a handler that uses tiles and leaves by siglongjmp ---- */

static sigjmp_buf jump_env;

static void jumping_handler(int sig)
{
    (void)sig;
    ldtilecfg(handler_shape.cfg);
    load1(handler_shape.a, 64);
    siglongjmp(jump_env, 1);
}

/* Runs far below the frame the handler ran in, over stack it never writes:
 * whatever the handler's frame left there stays as it was. */
static __attribute__((noinline)) const char *deep_after_jump(void)
{
    volatile uint8_t untouched[65536];
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    static int32_t c[16][16];
    __asm__ volatile("" ::"r"(untouched) : "memory");
    sttilecfg(cfg_now);
    if (memcmp(cfg_now, handler_shape.cfg, 64) != 0)
        return "after siglongjmp out of a handler, TILECFG is not the one the handler loaded";
    ldtilecfg(main_shape.cfg);
    compute(&main_shape, c);
    if (!equal(&main_shape, c))
        return "after siglongjmp, the main code's product differs from the reference";
    sttilecfg(cfg_now);
    if (memcmp(cfg_now, main_shape.cfg, 64) != 0)
        return "after siglongjmp, the main code's TILECFG did not stay";
    return NULL;
}

static const char *jump_case(void)
{
    static int32_t c[16][16];
    const char *why;
    if (signal(SIGUSR1, jumping_handler) == SIG_ERR)
        return "signal(SIGUSR1) failed";
    ldtilecfg(main_shape.cfg);
    load0(main_shape.want, 64);
    if (sigsetjmp(jump_env, 1) == 0) {
        raise(SIGUSR1);
        return "the handler returned instead of jumping";
    }
    why = deep_after_jump();
    if (why)
        return why;
    /* A handler that returns, after the one that jumped: the state the
     * main code has now comes back. */
    memset(cfg_in_handler, 0xAA, 64);
    signal(SIGUSR2, cfg_handler);
    load0(main_shape.want, 64);
    raise(SIGUSR2);
    store0(c, 64);
    tilerelease();
    if (!all_zero(cfg_in_handler, 64))
        return "a handler after the jump did not start with TILECFG in the init state";
    if (!equal(&main_shape, c))
        return "a handler after the jump did not give the main code its tiles back";
    return NULL;
}

/* ---- a handler that leaves by siglongjmp without touching tiles ---- */

static void bare_jumping_handler(int sig)
{
    (void)sig;
    siglongjmp(jump_env, 1);
}

/* The handler started in the init state and never left it: that is the
 * state the jump leaves, however deep the code then runs. */
static __attribute__((noinline)) const char *deep_after_bare_jump(void)
{
    volatile uint8_t untouched[65536];
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    static int32_t c[16][16];
    __asm__ volatile("" ::"r"(untouched) : "memory");
    sttilecfg(cfg_now);
    if (!all_zero(cfg_now, 64))
        return "after siglongjmp out of a handler that used no tiles, TILECFG is not in the init state";
    ldtilecfg(main_shape.cfg);
    compute(&main_shape, c);
    tilerelease();
    if (!equal(&main_shape, c))
        return "after siglongjmp, the main code's product differs from the reference";
    return NULL;
}

static const char *bare_jump_case(void)
{
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    if (signal(SIGUSR1, bare_jumping_handler) == SIG_ERR)
        return "signal(SIGUSR1) failed";
    ldtilecfg(main_shape.cfg);
    load0(main_shape.want, 64);
    if (sigsetjmp(jump_env, 1) == 0) {
        raise(SIGUSR1);
        return "the handler returned instead of jumping";
    }
    const char *why = deep_after_bare_jump();
    if (why)
        return why;
    /* Once more, with the first tile instruction after the jump right here,
     * above the handler's frame. */
    ldtilecfg(main_shape.cfg);
    load0(main_shape.want, 64);
    if (sigsetjmp(jump_env, 1) == 0) {
        raise(SIGUSR1);
        return "the handler returned instead of jumping";
    }
    sttilecfg(cfg_now);
    if (!all_zero(cfg_now, 64))
        return "after siglongjmp out of a handler that used no tiles, TILECFG is not in the init state";
    return NULL;
}

/* ---- a handler on the sigaltstack that uses tiles and is interrupted by another ---- */

static volatile sig_atomic_t outer_ok;

static void outer_handler(int sig)
{
    (void)sig;
    static int32_t c[16][16];
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    ldtilecfg(handler_shape.cfg);
    load0(handler_shape.want, 64);
    memset(cfg_in_handler, 0xAA, 64);
    raise(SIGUSR2); /* cfg_handler, nested on this stack */
    sttilecfg(cfg_now);
    store0(c, 64);
    tilerelease();
    outer_ok = all_zero(cfg_in_handler, 64) ? 1 : 2;
    if (outer_ok == 1 && (memcmp(cfg_now, handler_shape.cfg, 64) != 0 || !equal(&handler_shape, c)))
        outer_ok = 3;
}

static const char *nested_case(void)
{
    static uint8_t alt[256 * 1024] __attribute__((aligned(64)));
    static int32_t c[16][16];
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    struct sigaction sa;
    if (sigaltstack(&ss, NULL) != 0)
        return "sigaltstack failed";
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = outer_handler;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0 || signal(SIGUSR2, cfg_handler) == SIG_ERR)
        return "sigaction(SIGUSR1, SA_ONSTACK) failed";
    ldtilecfg(main_shape.cfg);
    load0(main_shape.want, 64);
    raise(SIGUSR1);
    sttilecfg(cfg_now);
    store0(c, 64);
    tilerelease();
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    if (outer_ok == 0)
        return "the handler on the sigaltstack did not run";
    if (outer_ok == 2)
        return "a handler nested in a handler did not start with TILECFG in the init state";
    if (outer_ok == 3)
        return "the outer handler's tiles were not back after the nested handler";
    if (memcmp(cfg_now, main_shape.cfg, 64) != 0 || !equal(&main_shape, c))
        return "the main code's tiles were not back after the nested handlers";
    return NULL;
}

/* ---- what sigaction() and its kin report: the program's own actions ---- */

static volatile sig_atomic_t plain_runs, info_runs, info_ok;

static void plain_handler(int sig) { plain_runs += sig == SIGUSR2; }

static void info_handler(int sig, siginfo_t *si, void *uc)
{
    info_runs++;
    info_ok = sig == SIGUSR2 && si != NULL && si->si_signo == SIGUSR2 && si->si_code == SI_TKILL && uc != NULL;
}

static void other_handler(int sig) { (void)sig; }

static const char *actions_case(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = plain_handler;
    sa.sa_flags = SA_RESTART | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    if (sigaction(SIGUSR2, &sa, NULL) != 0 || sigaction(SIGUSR2, NULL, &old) != 0)
        return "sigaction(SIGUSR2) failed";
    if (old.sa_handler != plain_handler)
        return "a query does not report the program's handler";
    if ((old.sa_flags & ~SA_RESTORER) != (SA_RESTART | SA_ONSTACK | SA_NODEFER))
        return "a query does not report the program's flags";
    if (!sigismember(&old.sa_mask, SIGTERM) || sigismember(&old.sa_mask, SIGINT))
        return "a query does not report the program's mask";
    raise(SIGUSR2);
    if (plain_runs != 1)
        return "a plain handler was not called with its signal";

    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = info_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR2, &sa, &old) != 0)
        return "sigaction(SIGUSR2, SA_SIGINFO) failed";
    if (old.sa_handler != plain_handler || (old.sa_flags & SA_SIGINFO))
        return "the old action is not the program's previous one";
    if (sigaction(SIGUSR2, NULL, &old) != 0 || old.sa_sigaction != info_handler ||
        (old.sa_flags & ~SA_RESTORER) != (int)(SA_SIGINFO | SA_RESETHAND))
        return "a query does not report the program's SA_SIGINFO handler and flags";
    raise(SIGUSR2);
    if (info_runs != 1 || !info_ok)
        return "an SA_SIGINFO handler did not get its signal, siginfo and context";
    if (sigaction(SIGUSR2, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
        return "SA_RESETHAND did not leave SIG_DFL after the first delivery";

    if (signal(SIGUSR2, other_handler) != SIG_DFL || signal(SIGUSR2, SIG_IGN) != other_handler)
        return "signal() does not return the program's previous handler";
    raise(SIGUSR2); /* ignored */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    if (sigset(SIGUSR2, plain_handler) != SIG_IGN || sigset(SIGUSR2, SIG_DFL) != plain_handler)
        return "sigset() does not return the program's previous handler";
    return NULL;
}

int main(void)
{
    request_tile_permission();
    prepare(&main_shape);
    prepare(&handler_shape);
    int failed = 0;
    failed += report("actions", actions_case());
    failed += report("cfg_read", cfg_case());
    failed += report("longjmp", jump_case());
    failed += report("bare_longjmp", bare_jump_case());
    failed += report("nested_altstack", nested_case());
    failed += report("timer", timer_case());
    return failed ? 1 : 0;
}
