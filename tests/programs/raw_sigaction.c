/* Signal handlers installed by a raw rt_sigaction system call (libc's
 * syscall() and an inline syscall instruction), as the kernel keeps them:
 * each handler starts in the init tile state (STTILECFG reads all zeros)
 * and the interrupted code has its configuration and tiles back after it
 * returns; a raw query reports the action as installed (the kernel drops
 * SIGKILL and SIGSTOP from the mask), and so does libc's sigaction(); the
 * kernel's errors come back as the kernel gives them; glibc's own raw
 * call for its cancellation signal works as it does.
 *
 * Arguments: "mixed" adds the case of a handler installed through libc and
 * queried raw (its action as libc installed it), "wrapped" checks that the
 * raw installs went through pyamx run's trampoline (needs the preload).
 * One line per case, "CASE ok" or "CASE FAIL: why"; exit status 0 when
 * every case is ok. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "case_kit.h"
#include "tiles_across.h"

/* The signal return a handler installed without libc needs. */
__asm__(".text\n"
        "    nop\n"
        "raw_restore_rt:\n"
        "    movq $15, %rax\n"
        "    syscall\n");
extern char raw_restore_rt[];

/* The last call's result and old action, printed with a failure. */
static long last_rc;
static struct ksa last_old;

static long note(long rc, const struct ksa *old)
{
    last_rc = rc;
    if (old && (uintptr_t)old > 4096 && rc == 0)
        last_old = *old;
    return rc;
}

static long via_libc(long sig, const struct ksa *act, struct ksa *old, long size)
{
    long r = syscall(SYS_rt_sigaction, sig, act, old, size);
    return note(r < 0 ? -errno : r, old);
}

static long via_insn(long sig, const struct ksa *act, struct ksa *old, long size)
{
    long r;
    register long r10 __asm__("r10") = size;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"((long)SYS_rt_sigaction), "D"(sig), "S"(act), "d"(old), "r"(r10)
                     : "rcx", "r11", "memory");
    return note(r, old);
}

static void tile_handler(int sig)
{
    (void)sig;
    handler_uses_tiles();
}

static void info_handler(int sig, siginfo_t *si, void *uc)
{
    if (sig == SIGUSR2 && si && si->si_signo == SIGUSR2 && uc)
        handler_uses_tiles();
}

static void libc_handler(int sig) { (void)sig; }

static uint64_t bit(int sig) { return 1ull << (sig - 1); }

/* SIGUSR1 through syscall(), plain handler, SIGTERM and SIGKILL in the
 * mask (the kernel keeps SIGTERM only). */
static const char *raw_case(void)
{
    struct ksa act = {(void *)tile_handler, SA_RESTORER | SA_RESTART | SA_ONSTACK, raw_restore_rt,
                      bit(SIGTERM) | bit(SIGKILL)};
    struct ksa old;
    if (via_libc(SIGUSR1, &act, NULL, 8) != 0)
        return "rt_sigaction(SIGUSR1) failed";
    if (via_libc(SIGUSR1, NULL, &old, 8) != 0)
        return "the raw query failed";
    if (old.handler != (void *)tile_handler || old.flags != (SA_RESTORER | SA_RESTART | SA_ONSTACK) ||
        old.restorer != raw_restore_rt || old.mask != bit(SIGTERM))
        return "a raw query does not report the action as installed";
    return tiles_across(SIGUSR1);
}

/* SIGUSR2 through an inline syscall instruction, SA_SIGINFO handler. */
static const char *insn_case(void)
{
    struct ksa act = {(void *)info_handler, SA_RESTORER | SA_SIGINFO, raw_restore_rt, 0};
    struct ksa old;
    if (via_insn(SIGUSR2, &act, NULL, 8) != 0)
        return "rt_sigaction(SIGUSR2) failed";
    if (via_insn(SIGUSR2, NULL, &old, 8) != 0)
        return "the raw query failed";
    if (old.handler != (void *)info_handler || old.flags != (SA_RESTORER | SA_SIGINFO) || old.mask != 0)
        return "a raw query does not report the SA_SIGINFO action as installed";
    return tiles_across(SIGUSR2);
}

/* libc's sigaction() reports what the raw call installed; a raw call's
 * old action is the one before it. */
static const char *query_case(void)
{
    struct sigaction sa;
    struct ksa act = {(void *)SIG_IGN, SA_RESTORER, raw_restore_rt, 0}, old;
    if (sigaction(SIGUSR1, NULL, &sa) != 0 || sa.sa_handler != tile_handler ||
        (sa.sa_flags & ~SA_RESTORER) != (SA_RESTART | SA_ONSTACK) || !sigismember(&sa.sa_mask, SIGTERM))
        return "sigaction() does not report the raw call's SIGUSR1 action";
    if (via_insn(SIGUSR2, &act, &old, 8) != 0 || old.handler != (void *)info_handler ||
        old.flags != (SA_RESTORER | SA_SIGINFO))
        return "a raw call's old action is not the previous raw one";
    if (via_libc(SIGUSR2, NULL, &old, 8) != 0 || old.handler != (void *)SIG_IGN || old.flags != SA_RESTORER)
        return "a raw SIG_IGN is not reported as such";
    raise(SIGUSR2); /* ignored */
    act.handler = (void *)SIG_DFL;
    if (via_libc(SIGUSR2, &act, &old, 8) != 0 || old.handler != (void *)SIG_IGN)
        return "a raw SIG_DFL does not report the SIG_IGN before it";
    return NULL;
}

/* The kernel's errors: sigsetsize first, then act's pointer, then the
 * signal, then oldact's pointer (after the change is made). */
static const char *errors_case(void)
{
    struct ksa act = {(void *)tile_handler, SA_RESTORER, raw_restore_rt, 0}, old;
    void *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bad == MAP_FAILED)
        return "mmap failed";
    if (via_libc(SIGUSR1, &act, NULL, 4) != -EINVAL || via_insn(SIGUSR1, NULL, &old, 16) != -EINVAL)
        return "a wrong sigsetsize is not EINVAL";
    if (via_libc(SIGKILL, &act, NULL, 8) != -EINVAL || via_insn(SIGSTOP, &act, NULL, 8) != -EINVAL)
        return "installing a handler for SIGKILL or SIGSTOP is not EINVAL";
    if (via_libc(SIGKILL, NULL, &old, 8) != 0 || old.handler != (void *)SIG_DFL)
        return "a query of SIGKILL does not report SIG_DFL";
    if (via_libc(0, NULL, &old, 8) != -EINVAL || via_libc(65, &act, NULL, 8) != -EINVAL ||
        via_insn(-1, NULL, &old, 8) != -EINVAL)
        return "a signal number out of range is not EINVAL";
    if (via_libc(SIGUSR2, bad, NULL, 8) != -EFAULT || via_insn(65, bad, NULL, 8) != -EFAULT)
        return "an unreadable act is not EFAULT (before the signal number is looked at)";
    if (via_libc(SIGUSR2, NULL, &old, 8) != 0 || old.handler != (void *)SIG_DFL)
        return "an unreadable act changed the action";
    act.handler = (void *)SIG_IGN;
    if (via_insn(SIGUSR2, &act, bad, 8) != -EFAULT)
        return "an unwritable oldact is not EFAULT";
    if (via_libc(SIGUSR2, NULL, &old, 8) != 0 || old.handler != (void *)SIG_IGN)
        return "after an unwritable oldact the new action is not in place, as the kernel leaves it";
    act.handler = (void *)SIG_DFL;
    via_libc(SIGUSR2, &act, NULL, 8);
    munmap(bad, 4096);
    return NULL;
}

/* glibc installs its cancellation handler (signal 32) with its own raw
 * call at the first pthread_cancel, and an asynchronous cancellation
 * unwinds out of that handler. */
static void *spin(void *arg)
{
    (void)arg;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    for (;;)
        __asm__ volatile("" ::: "memory");
    return NULL;
}

static const char *cancel_case(void)
{
    pthread_t t;
    void *result = NULL;
    if (pthread_create(&t, NULL, spin, NULL) != 0)
        return "pthread_create failed";
    if (pthread_cancel(t) != 0 || pthread_join(t, &result) != 0)
        return "pthread_cancel or pthread_join failed";
    return result == PTHREAD_CANCELED ? NULL : "the thread was not cancelled";
}

/* A handler installed through libc, queried raw: libc's action. */
static const char *mixed_case(void)
{
    struct sigaction sa;
    struct ksa old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = libc_handler;
    sa.sa_flags = SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    if (sigaction(SIGWINCH, &sa, NULL) != 0)
        return "sigaction(SIGWINCH) failed";
    if (via_insn(SIGWINCH, NULL, &old, 8) != 0 || old.handler != (void *)libc_handler ||
        old.flags != (SA_RESTORER | SA_NODEFER) || old.mask != bit(SIGINT))
        return "a raw query does not report the action libc installed";
    return NULL;
}

int main(int argc, char **argv)
{
    int mixed = 0, wrapped = 0;
    for (int i = 1; i < argc; i++) {
        mixed |= strcmp(argv[i], "mixed") == 0;
        wrapped |= strcmp(argv[i], "wrapped") == 0;
    }
    request_tile_permission();
    tiles_across_prepare();
    int failed = 0;
    failed += report("raw", raw_case());
    failed += report("insn", insn_case());
    if (wrapped) {
        int (*is_wrapped)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "pyamx_preload_wrapped");
        failed += report("wrapped", is_wrapped && is_wrapped(SIGUSR1) == 1 && is_wrapped(SIGUSR2) == 1
                                        ? NULL
                                        : "the raw installs did not go through the preload's trampoline");
    }
    failed += report("query", query_case());
    failed += report("errors", errors_case());
    failed += report("cancel", cancel_case());
    if (mixed)
        failed += report("mixed", mixed_case());
    return failed ? 1 : 0;
}
