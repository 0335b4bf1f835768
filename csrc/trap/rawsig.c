/* The guard's answer to a raw rt_sigaction system call for a signal other
 * than SIGILL: the call the program makes without libc (an inline syscall
 * instruction, syscall(SYS_rt_sigaction, ...), libc's own internal
 * sigaction), which pyamx run's interposed sigaction() never sees.
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
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

static rawsig_fn g_wrapper;

void rawsig_set_wrapper(rawsig_fn fn) { __atomic_store_n(&g_wrapper, fn, __ATOMIC_RELEASE); }
int rawsig_wrapping(void) { return __atomic_load_n(&g_wrapper, __ATOMIC_ACQUIRE) != NULL; }

/* Through the kernel, so that the caller's bad pointer is EFAULT for the
 * caller, not a SIGSEGV in the supervisor.  A plain copy where a container
 * forbids process_vm_* (the supervisor shares the caller's memory). */
static int copy(pid_t pid, void *dst, const void *src, size_t n, int to_caller)
{
    struct iovec local = {to_caller ? (void *)src : dst, n};
    struct iovec remote = {to_caller ? dst : (void *)src, n};
    ssize_t r = to_caller ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
                          : process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r == (ssize_t)n)
        return 0;
    if (r < 0 && (errno == ENOSYS || errno == EPERM)) {
        memcpy(dst, src, n);
        return 0;
    }
    return -1;
}

int rawsig_answer(pid_t pid, int sig, uint64_t act, uint64_t oact, uint64_t sigsetsize, int (*still_valid)(void *),
                  void *ctx, long *result)
{
    rawsig_fn wrapper = __atomic_load_n(&g_wrapper, __ATOMIC_ACQUIRE);
    if (!wrapper)
        return 0;
    struct ksigaction newk, oldk;
    if (sigsetsize != sizeof(uint64_t)) {
        *result = -EINVAL;
        return 1;
    }
    if (act && copy(pid, &newk, (const void *)(uintptr_t)act, sizeof newk, 0) != 0) {
        *result = -EFAULT;
        return 1;
    }
    /* A caller interrupted meanwhile makes the call again once its handler
     * returns: changing the action now would make that second call report
     * the new action as the old one. */
    if (!still_valid(ctx)) {
        *result = -EINTR;
        return 1;
    }
    long rc = wrapper(sig, act ? &newk : NULL, oact ? &oldk : NULL);
    if (rc == 0 && oact && copy(pid, (void *)(uintptr_t)oact, &oldk, sizeof oldk, 1) != 0)
        rc = -EFAULT;
    *result = rc;
    return 1;
}
