/* A program's own seccomp filter decides its sigaction(SIGILL) calls, as the
 * kernel lets it on any CPU: a sandbox that forbids installing a SIGILL
 * handler gets EPERM, one that forbids queries gets its errno, and what the
 * filters let through works.  Run directly (the kernel's own answers, no
 * AMX needed) and under `pyamx run`, which answers the program's SIGILL
 * calls on its own (csrc/preload/preload.c) and must not answer past them.
 *
 * One line per case, "CASE ok" or "CASE FAIL: why"; exit status 0 when
 * every case is ok. */
#define _GNU_SOURCE 1
#include <signal.h>

#include "case_kit.h"

static void on_sigill(int sig) { (void)sig; }

/* rt_sigaction(SIGILL, ...) answers SECCOMP_RET_ERRNO | err where act is
 * null (want_act 0) or not (want_act 1); everything else is allowed. */
static int deny_sigill_calls(int want_act, int err)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigaction, 0, 7),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SIGILL, 0, 5),
        /* act is null when both halves of args[1] are zero */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, want_act ? 2 : 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1]) + 4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, want_act ? 1 : 0, want_act ? 0 : 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static const char *expect_errno(int rc, int err)
{
    static char why[128];
    if (rc == -1 && errno == err)
        return NULL;
    snprintf(why, sizeof why, "returned %d, errno %d (%s); want -1, errno %d", rc, rc ? errno : 0,
             rc ? strerror(errno) : "-", err);
    return why;
}

static const char *query_is_default(void)
{
    struct sigaction old;
    memset(&old, 0x5a, sizeof old);
    if (sigaction(SIGILL, NULL, &old) != 0)
        return strerror(errno);
    return old.sa_handler == SIG_DFL ? NULL : "the SIGILL handler is no longer SIG_DFL";
}

int main(void)
{
    int failed = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigill;
    sigemptyset(&sa.sa_mask);

    if (deny_sigill_calls(1, EPERM) != 0) {
        perror("seccomp");
        return 2;
    }
    failed |= report("install denied", expect_errno(sigaction(SIGILL, &sa, NULL), EPERM));
    errno = 0;
    failed |= report("signal denied", signal(SIGILL, on_sigill) == SIG_ERR && errno == EPERM ? NULL
                                          : "signal(SIGILL) did not fail with EPERM");
    struct ksa raw = {(void *)on_sigill, SA_RESTORER, NULL, 0};
    failed |= report("raw install denied", expect_errno((int)syscall(SYS_rt_sigaction, SIGILL, &raw, NULL, 8), EPERM));
    /* The filter lets queries through: they work, and show nothing was installed. */
    failed |= report("query allowed", query_is_default());

    if (deny_sigill_calls(0, EACCES) != 0) {
        perror("seccomp");
        return 2;
    }
    struct sigaction old;
    failed |= report("query denied", expect_errno(sigaction(SIGILL, NULL, &old), EACCES));
    failed |= report("install still denied", expect_errno(sigaction(SIGILL, &sa, &old), EPERM));
    /* Other signals are the filters' business too, and these let them through. */
    failed |= report("other signals allowed", sigaction(SIGUSR1, &sa, NULL) == 0 ? NULL : strerror(errno));
    return failed;
}
