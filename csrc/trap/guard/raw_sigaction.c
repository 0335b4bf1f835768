/* The guard's answer to a raw rt_sigaction system call: the call the
 * program makes without libc (an inline syscall instruction,
 * syscall(SYS_rt_sigaction, ...), libc's own internal sigaction), which
 * pyamx run's interposed sigaction() never sees.  SIGILL's changes the
 * virtual disposition (seccomp_guard.c); any other signal's goes through the
 * wrapper described here.
 *
 * Where a wrapper is registered (pyamx run's preload, whose handlers get a
 * tile state frame each: csrc/preload/handlers.c), the guard's filter is
 * notified of every rt_sigaction not made from this module's marked call
 * site, and its supervisor, a thread of the same process, makes the call
 * on the caller's behalf through the wrapper: the kernel then sees the
 * trampoline with the program's flags, mask and restorer, and the caller
 * sees what the kernel would have answered for its own action.  The
 * kernel's order is kept: sigsetsize, read act, change, write oldact (a
 * bad oldact still leaves the new action in place, as in the kernel).
 * The supervisor shares the caller's memory: a bad pointer becomes EFAULT
 * through self_copy (self_copy.c), never a SIGSEGV in the supervisor.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <errno.h>

static rawsig_fn g_wrapper;

void rawsig_set_wrapper(rawsig_fn fn) { __atomic_store_n(&g_wrapper, fn, __ATOMIC_RELEASE); }
rawsig_fn rawsig_wrapper(void) { return __atomic_load_n(&g_wrapper, __ATOMIC_ACQUIRE); }

long rawsig_call(rawsig_fn fn, int sig, uint64_t act, uint64_t oact, uint64_t sigsetsize, int (*still_valid)(void *),
                 void *ctx)
{
    struct ksigaction newk, oldk;
    if (sigsetsize != sizeof(uint64_t))
        return -EINVAL;
    if (act && self_copy(&newk, (const void *)(uintptr_t)act, sizeof newk) != 0)
        return -EFAULT;
    /* A caller interrupted meanwhile makes the call again once its handler
     * returns: changing the action now would make that second call report
     * the new action as the old one. */
    if (!still_valid(ctx))
        return -EINTR;
    long rc = fn(sig, act ? &newk : NULL, oact ? &oldk : NULL);
    if (rc == 0 && oact && self_copy((void *)(uintptr_t)oact, &oldk, sizeof oldk) != 0)
        rc = -EFAULT;
    return rc;
}
