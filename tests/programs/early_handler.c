/* Handlers installed by a library's constructor that ran before the
 * preload's (early_handler_lib.c) get the same tile state rules as any
 * other: each starts in the init state (STTILECFG reads all zeros) and the
 * interrupted code has its configuration and tiles back after it returns.
 * What sigaction() reports stays the library's own action.
 *
 * Lines: "order ok" when the library's constructor ran before the
 * preload's trap was installed ("order none" without a preload), "wrapped
 * ok" when the preload calls those handlers through its trampoline
 * ("wrapped none" without a preload), then "query", "plain" and "info";
 * "CASE FAIL: why" for a failed case.  Exit status 0 when none failed. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void ldtilecfg(const uint8_t *cfg) { __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0x07" ::"D"(cfg) : "memory"); }
static void sttilecfg(uint8_t *cfg) { __asm__ volatile(".byte 0xc4,0xe2,0x79,0x49,0x07" ::"D"(cfg) : "memory"); }
static void tilerelease(void) { __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0xc0" ::: "memory"); }
static void load0(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x04,0x37" ::"D"(p), "S"(s) : "memory"); }
static void store0(void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7a,0x4b,0x04,0x37" ::"D"(p), "S"(s) : "memory"); }

extern int early_preload_state;

static uint8_t cfg_main[64] __attribute__((aligned(64)));
static uint8_t cfg_seen[64] __attribute__((aligned(64)));
static int32_t tile_main[16][16], tile_back[16][16];
static volatile sig_atomic_t info_ok;

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Reads the handler's TILECFG, then loads a configuration of its own and
 * a tile, which the interrupted code must not see. */
static void use_tiles_in_handler(void)
{
    static uint8_t cfg[64] __attribute__((aligned(64)));
    static int32_t junk[16][16];
    sttilecfg(cfg_seen);
    memset(cfg, 0, 64);
    cfg[0] = 1;
    cfg[16] = 12;
    cfg[48] = 3;
    memset(junk, 0x5a, sizeof junk);
    ldtilecfg(cfg);
    load0(junk, 64);
}

void early_plain_handler(int sig)
{
    (void)sig;
    use_tiles_in_handler();
}

void early_info_handler(int sig, siginfo_t *si, void *uc)
{
    info_ok = sig == SIGUSR2 && si != NULL && si->si_signo == SIGUSR2 && si->si_code == SI_TKILL && uc != NULL;
    use_tiles_in_handler();
}

static int report(const char *name, const char *why)
{
    if (why)
        printf("%s FAIL: %s\n", name, why);
    else
        printf("%s ok\n", name);
    fflush(stdout);
    return why != NULL;
}

/* Tiles live, the signal raised, then: did the handler start in the init
 * state, and are the interrupted configuration and tile back? */
static const char *tiles_across(int sig)
{
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    memset(cfg_seen, 0xAA, 64);
    memset(tile_back, 0, sizeof tile_back);
    ldtilecfg(cfg_main);
    load0(tile_main, 64);
    raise(sig);
    sttilecfg(cfg_now);
    store0(tile_back, 64);
    tilerelease();
    if (!all_zero(cfg_seen, 64))
        return "the handler did not start with TILECFG in the init state";
    if (memcmp(cfg_now, cfg_main, 64) != 0)
        return "the interrupted TILECFG was not back after the handler";
    if (memcmp(tile_back, tile_main, sizeof tile_main) != 0)
        return "the interrupted tile data was not back after the handler";
    return NULL;
}

static const char *query_case(void)
{
    struct sigaction old;
    if (sigaction(SIGUSR1, NULL, &old) != 0 || old.sa_handler != early_plain_handler)
        return "a query does not report the library's SIGUSR1 handler";
    if ((old.sa_flags & ~0x04000000 /* SA_RESTORER */) != (SA_RESTART | SA_ONSTACK))
        return "a query does not report the library's SIGUSR1 flags";
    if (!sigismember(&old.sa_mask, SIGTERM) || sigismember(&old.sa_mask, SIGINT))
        return "a query does not report the library's SIGUSR1 mask";
    if (sigaction(SIGUSR2, NULL, &old) != 0 || old.sa_sigaction != early_info_handler ||
        (old.sa_flags & ~0x04000000) != SA_SIGINFO)
        return "a query does not report the library's SA_SIGINFO handler for SIGUSR2";
    return NULL;
}

int main(void)
{
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM)");
        return 2;
    }
    cfg_main[0] = 1;
    cfg_main[16] = 64;
    cfg_main[48] = 16;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            tile_main[i][j] = i * 1000 + j;
    int failed = 0;
    int (*wrapped)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "pyamx_preload_wrapped");
    if (early_preload_state == 0) {
        printf("order none\nwrapped none\n");
    } else {
        failed += report("order", early_preload_state == 1 ? NULL : "the library's constructor ran after the preload's");
        failed += report("wrapped", wrapped && wrapped(SIGUSR1) == 1 && wrapped(SIGUSR2) == 1
                                        ? NULL
                                        : "the preload does not call the library's handlers through its trampoline");
    }
    failed += report("query", query_case());
    failed += report("plain", tiles_across(SIGUSR1));
    const char *why = tiles_across(SIGUSR2);
    failed += report("info", why ? why : info_ok ? NULL : "the SA_SIGINFO handler did not get its siginfo and context");
    return failed ? 1 : 0;
}
