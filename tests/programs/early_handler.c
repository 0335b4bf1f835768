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

#include "case_kit.h"
#include "tiles_across.h"

extern int early_preload_state;

static volatile sig_atomic_t info_ok;

void early_plain_handler(int sig)
{
    (void)sig;
    handler_uses_tiles();
}

void early_info_handler(int sig, siginfo_t *si, void *uc)
{
    info_ok = sig == SIGUSR2 && si != NULL && si->si_signo == SIGUSR2 && si->si_code == SI_TKILL && uc != NULL;
    handler_uses_tiles();
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
    request_tile_permission();
    tiles_across_prepare();
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
