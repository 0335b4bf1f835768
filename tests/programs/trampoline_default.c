/* A signal whose handler entry in pyamx run's table is empty, reached
 * through the trampoline all the same: a raw rt_sigaction copies the
 * action a raw query of another, wrapped signal returned (without the
 * guard, which hides the trampoline from raw queries).  The trampoline
 * stands for SIG_DFL there, and does what the kernel does for SIG_DFL:
 * SIGWINCH is ignored, SIGTERM ends the process.
 *
 * Prints "hidden" and exits 0 where the raw query reports the program's
 * own handler (no preload, or the guard); else "winch ok" (or "winch
 * FAIL: why") and then should die of SIGTERM; "survived SIGTERM" if not. */
#define _GNU_SOURCE 1
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "case_kit.h"

static volatile sig_atomic_t runs;

static void handler(int sig)
{
    (void)sig;
    runs++;
}

int main(void)
{
    struct ksa k;
    if (signal(SIGUSR1, handler) == SIG_ERR || syscall(SYS_rt_sigaction, SIGUSR1, NULL, &k, 8) != 0)
        return 2;
    if (k.handler == (void *)handler) {
        puts("hidden");
        return 0;
    }
    if (syscall(SYS_rt_sigaction, SIGWINCH, &k, NULL, 8) != 0 || syscall(SYS_rt_sigaction, SIGTERM, &k, NULL, 8) != 0)
        return 2;
    raise(SIGWINCH);
    puts(runs == 0 ? "winch ok" : "winch FAIL: the handler of another signal ran");
    fflush(stdout);
    raise(SIGTERM);
    puts("survived SIGTERM");
    return 0;
}
