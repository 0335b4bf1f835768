/* The kernel's AMX permission interface, emulated: arch_prctl with
 * ARCH_GET_XCOMP_SUPP, ARCH_GET_XCOMP_PERM and ARCH_REQ_XCOMP_PERM answered
 * as a kernel on an AMX CPU answers them, for code this module did not
 * compile (a preloaded program, another extension module).  The granted
 * permission is the trap's own (pyamx_trap_grant_permission), so a tile
 * instruction before the request still dies with SIGILL, as on silicon.
 * Every other system call, and arch_prctl with any other code, runs
 * untouched.
 *
 * Two ways in, however the call is made (libc's syscall(), libc's
 * arch_prctl(), a raw syscall instruction):
 *
 * - Where the guard is on (seccomp_guard.c), its listener is notified of exactly
 *   those three calls, and its supervisor answers them here
 *   (xcomp_notified) for the tasks this module emulates: this process, and
 *   a fork of it that still runs this image (it holds this process's
 *   cookie at the same address).  Everyone else -- a program exec'd
 *   without the preload, a static one -- gets the real kernel's answer
 *   (EOPNOTSUPP on a CPU without AMX), as it would on that CPU.  A
 *   preloaded child installs its own trap filter (below), which outranks
 *   the notification in that child.
 * - Otherwise a seccomp filter (all threads) traps them (SECCOMP_RET_TRAP)
 *   and a SIGSYS handler, inherited by fork, writes the answer into rax.
 *   Filters survive exec, so a program exec'd WITHOUT this module
 *   (LD_PRELOAD removed, a static program) that asks for AMX permission
 *   then dies of SIGSYS -- docs/run.md.
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "../../cpu_features.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <ucontext.h>

#if defined(__has_include)
#if __has_include(<linux/seccomp.h>) && __has_include(<linux/filter.h>) && __has_include(<linux/audit.h>)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#endif
#endif

#define XCOMP_GET_SUPP 0x1021
#define XCOMP_GET_PERM 0x1022
#define XCOMP_REQ_PERM 0x1023
#define XTILECFG 17
#define XTILEDATA 18
#define XTILE_MASK ((1ull << XTILECFG) | (1ull << XTILEDATA))
#define LINUX_XFEATURE_MAX 20 /* Linux 6.18 (APX is component 19); 19 on kernels before APX */

static uint64_t g_supp;      /* what this kernel supports, without AMX */
static uint64_t g_perm_base; /* what this process may use, without AMX */
static uint64_t g_calls;
static int32_t g_requests;
static int g_result = -1;
static struct ksigaction g_prev_sigsys;
static int32_t g_routed;   /* answered through the guard's listener, not a trap filter */
static uint64_t g_cookie;  /* nonzero, random, once routed: what a fork of this process still holds */
static xcomp_observer_fn g_xobserver;

void xcomp_set_observer(xcomp_observer_fn fn) { __atomic_store_n(&g_xobserver, fn, __ATOMIC_RELEASE); }

uint64_t pyamx_trap_xcomp_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }
int32_t pyamx_trap_xcomp_requests(void) { return __atomic_load_n(&g_requests, __ATOMIC_RELAXED); }

/* Set while install asks the real kernel: a SIGSYS then means the filter
 * is already there, inherited across exec from a process that installed
 * it (pyamx run's preload in the parent program). */
static volatile int g_probing, g_inherited;

/* How an answer reaches the task that asked: it writes the queried bits
 * into the caller's memory and grants it the permission.  The caller is
 * this process (the SIGSYS handler; the guard's supervisor for a thread of
 * this process) or a fork of this image (the supervisor, or the guard's
 * standby once this image is gone). */
struct xcomp_caller {
    long (*put_u64)(const struct xcomp_caller *c, uint64_t addr, uint64_t value); /* 0 or -EFAULT */
    long (*grant)(const struct xcomp_caller *c);                                  /* 0 or -EINVAL */
    pid_t tid;
    int own;
    int32_t granted; /* the permission the caller holds now */
};

/* The kernel's answers, as Linux 6.18 on Sapphire Rapids gives them
 * (measured 2026-12-03, docs/run.md): XTILECFG is permitted from the start
 * and only XTILEDATA is requestable; every other component below
 * XFEATURE_MAX (20 there) is EOPNOTSUPP, beyond it EINVAL. */
static long kernel_answer(const struct xcomp_caller *c, long code, uint64_t arg)
{
    uint64_t mine = (c->granted ? (1ull << XTILEDATA) : 0) | (1ull << XTILECFG);
    switch (code) {
    case XCOMP_GET_SUPP: return c->put_u64(c, arg, g_supp | XTILE_MASK);
    case XCOMP_GET_PERM: return c->put_u64(c, arg, g_perm_base | mine);
    default: /* XCOMP_REQ_PERM */
        if (c->own)
            __atomic_fetch_add(&g_requests, 1, __ATOMIC_RELAXED);
        if (arg == XTILEDATA)
            return c->grant(c);
        return arg < LINUX_XFEATURE_MAX ? -EOPNOTSUPP : -EINVAL;
    }
}

/* A bad pointer is EFAULT for the caller, as from the kernel, never a
 * SIGSEGV here (self_copy.c). */
static long own_put_u64(const struct xcomp_caller *c, uint64_t addr, uint64_t value)
{
    (void)c;
    return self_copy((void *)(uintptr_t)addr, &value, sizeof value) == 0 ? 0 : -EFAULT;
}

static long own_grant(const struct xcomp_caller *c)
{
    (void)c;
    return pyamx_trap_grant_permission() == 0 ? 0 : -EINVAL;
}

/* Another process's memory is touched only through the kernel. */
static long fork_put_u64(const struct xcomp_caller *c, uint64_t addr, uint64_t value)
{
    struct iovec local = {&value, sizeof value};
    struct iovec remote = {(void *)(uintptr_t)addr, sizeof value};
    return process_vm_writev(c->tid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof value ? 0 : -EFAULT;
}

static long fork_grant(const struct xcomp_caller *c)
{
    int32_t one = 1;
    struct iovec local = {&one, sizeof one};
    struct iovec remote = {trap_permission_word(), sizeof one};
    return process_vm_writev(c->tid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof one ? 0 : -EINVAL;
}

static long answer(long code, uint64_t arg)
{
    if (g_probing) {
        g_inherited = 1;
        return -ENOSYS;
    }
    struct xcomp_caller me = {own_put_u64, own_grant, 0, 1, pyamx_trap_permission_granted()};
    return kernel_answer(&me, code, arg);
}

static void pass_on_sigsys(int sig, siginfo_t *si, void *ctx)
{
    struct ksigaction prev = g_prev_sigsys;
    if (prev.handler != (uint64_t)(uintptr_t)SIG_DFL && prev.handler != (uint64_t)(uintptr_t)SIG_IGN) {
        if (prev.flags & SA_SIGINFO)
            ((void (*)(int, siginfo_t *, void *))(uintptr_t)prev.handler)(sig, si, ctx);
        else
            ((void (*)(int))(uintptr_t)prev.handler)(sig);
        return;
    }
    struct ksigaction dfl = {(uint64_t)(uintptr_t)SIG_DFL, 0, 0, 0};
    trap_raw_sigaction(SIGSYS, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGSYS);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    syscall(SYS_tgkill, getpid(), trap_tid(), SIGSYS);
}

static void sigsys_handler(int sig, siginfo_t *si, void *vctx)
{
    int saved_errno = errno;
    ucontext_t *uc = vctx;
    greg_t *g = uc->uc_mcontext.gregs;
    /* si_code 1 is SYS_SECCOMP; anything else (another filter's trap
     * for another call, a SIGSYS sent with kill) is not ours. */
    if (si == NULL || si->si_code != 1 || si->si_syscall != SYS_arch_prctl) {
        pass_on_sigsys(sig, si, vctx);
    } else {
        long code = (long)(int)g[REG_RDI];
        long r = answer(code, (uint64_t)g[REG_RSI]);
        g[REG_RAX] = (greg_t)r;
        __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
        xcomp_observer_fn obs = __atomic_load_n(&g_xobserver, __ATOMIC_ACQUIRE);
        if (obs && !g_probing) /* install's own probe is not the program's call */
            obs(code, (uint64_t)g[REG_RSI], r);
    }
    errno = saved_errno;
}

/* The real kernel's answers, asked once before this process's filter
 * exists; a kernel older than 5.16 has no such codes, and an inherited
 * filter hides them: then XCR0 says what the kernel enabled.  Runs with
 * the SIGSYS handler installed, in probing mode. */
static void read_real_answers(void)
{
    uint64_t v = 0;
    g_probing = 1;
    long r = syscall(SYS_arch_prctl, XCOMP_GET_SUPP, &v);
    g_probing = 0;
    if (r == 0 && !g_inherited)
        g_supp = v & ~XTILE_MASK;
    else {
        pyamx_cpu_xcr0(&v); /* 0 where XGETBV would be #UD */
        g_supp = v & ~XTILE_MASK;
    }
    if (!g_inherited && syscall(SYS_arch_prctl, XCOMP_GET_PERM, &v) == 0)
        g_perm_base = v & ~XTILE_MASK;
    else
        g_perm_base = g_supp;
}

/* ---- answers through the guard's listener (seccomp_guard.c's supervisor) ---- */

static int vm_read(pid_t tid, const void *addr, void *out, size_t n)
{
    struct iovec local = {out, n};
    struct iovec remote = {(void *)(uintptr_t)addr, n};
    return process_vm_readv(tid, &local, 1, &remote, 1, 0) == (ssize_t)n ? 0 : -1;
}

static uint64_t fresh_cookie(void)
{
    uint64_t c = 0;
#ifdef SYS_getrandom
    if (syscall(SYS_getrandom, &c, sizeof c, 0) != (long)sizeof c)
        c = 0;
#endif
    if (c == 0)
        c = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&c ^ 0x9e3779b97f4a7c15ull;
    return c | 1;
}

void xcomp_export(struct xcomp_routed *out)
{
    out->cookie = __atomic_load_n(&g_cookie, __ATOMIC_RELAXED);
    out->supp = g_supp;
    out->perm_base = g_perm_base;
}

/* In the standby, a copy of this process made before routing began: the
 * cookie and the permission word sit at the same addresses as in the forks
 * it answers. */
void xcomp_adopt(const struct xcomp_routed *in)
{
    g_supp = in->supp;
    g_perm_base = in->perm_base;
    g_result = 0;
    __atomic_store_n(&g_cookie, in->cookie, __ATOMIC_RELAXED);
    __atomic_store_n(&g_routed, in->cookie != 0, __ATOMIC_RELEASE);
}

int xcomp_notified(pid_t tid, int own, long code, uint64_t arg, int (*still_valid)(void *), void *ctx,
                   long *result)
{
    if (!__atomic_load_n(&g_routed, __ATOMIC_ACQUIRE))
        return 0;
    struct xcomp_caller c = own ? (struct xcomp_caller){own_put_u64, own_grant, tid, 1, 0}
                                : (struct xcomp_caller){fork_put_u64, fork_grant, tid, 0, 0};
    if (own) {
        c.granted = pyamx_trap_permission_granted();
    } else {
        /* A fork that still runs this image holds the cookie where this
         * process does; after exec the address holds something else or
         * nothing. */
        uint64_t theirs = 0;
        if (vm_read(tid, &g_cookie, &theirs, sizeof theirs) != 0)
            return errno == EPERM ? -1 : 0;
        if (theirs != g_cookie || vm_read(tid, trap_permission_word(), &c.granted, sizeof c.granted) != 0)
            return 0;
    }
    /* The task (and its pid) may have gone since the notification came: act
     * only on one that still waits for this answer. */
    if (!still_valid(ctx))
        return 0;
    long r = kernel_answer(&c, code, arg);
    if (own)
        __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
    xcomp_observer_fn obs = __atomic_load_n(&g_xobserver, __ATOMIC_ACQUIRE);
    if (obs)
        obs(code, arg, r);
    *result = r;
    return 1;
}

void xcomp_unreadable_line(struct msg *m, pid_t tid, long code)
{
    m_str(m, "pyamx trap emulation: task ");
    m_dec(m, tid);
    m_str(m, " asked arch_prctl(");
    m_hex(m, (uint64_t)code);
    m_str(m, ") and the guard may not read its memory (ptrace rules: Yama's ptrace_scope, another ptracer), "
             "so the kernel answers it; if it still runs the emulated program, it sees no AMX");
}

#if defined(SECCOMP_SET_MODE_FILTER) && defined(SECCOMP_RET_TRAP) && defined(SYS_seccomp)

#define LD_ABS(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (field))
#define JEQ(k, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (t), (f))

static long attach_filter(void)
{
    struct sock_filter code[] = {
        LD_ABS(offsetof(struct seccomp_data, arch)),
        JEQ(AUDIT_ARCH_X86_64, 0, 6),
        LD_ABS(offsetof(struct seccomp_data, nr)),
        JEQ(SYS_arch_prctl, 0, 4),
        LD_ABS(offsetof(struct seccomp_data, args[0])), /* int code: low half */
        JEQ(XCOMP_GET_SUPP, 3, 0),
        JEQ(XCOMP_GET_PERM, 2, 0),
        JEQ(XCOMP_REQ_PERM, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

int pyamx_trap_xcomp_install(void)
{
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    if (!pyamx_trap_installed())
        return EINVAL;
    pthread_mutex_lock(&once);
    if (g_result < 0) {
        struct ksigaction act = {(uint64_t)(uintptr_t)sigsys_handler,
                                 SA_SIGINFO | SA_ONSTACK | SA_RESTART | 0x04000000 /* SA_RESTORER */,
                                 trap_restorer(), 0};
        if (trap_raw_sigaction(SIGSYS, &act, &g_prev_sigsys) != 0) {
            g_result = EPERM;
        } else {
            /* Under the guard the probe reaches its supervisor, which lets
             * it through to the kernel: nothing is routed yet. */
            read_real_answers();
            long r = 0;
            if (chain_guarded() && !g_inherited) {
                __atomic_store_n(&g_cookie, fresh_cookie(), __ATOMIC_RELAXED);
                __atomic_store_n(&g_routed, 1, __ATOMIC_RELEASE);
                standby_share_xcomp();
            } else if (!g_inherited) {
                r = attach_filter();
            }
            /* TSYNC returns a thread id (> 0) when another thread's filters differ. */
            g_result = r == 0 ? 0 : r > 0 ? ESRCH : errno;
            if (g_result != 0)
                trap_raw_sigaction(SIGSYS, &g_prev_sigsys, NULL);
        }
    }
    int r = g_result;
    pthread_mutex_unlock(&once);
    return r;
}

#else

int pyamx_trap_xcomp_install(void) { return ENOSYS; }

#endif

/* Whether the answers still come: through the guard, or from this module's
 * SIGSYS handler while it is the disposition (a program may install its
 * own, which breaks the emulation). */
int32_t pyamx_trap_xcomp_active(void)
{
    struct ksigaction cur;
    if (g_result != 0)
        return 0;
    if (__atomic_load_n(&g_routed, __ATOMIC_ACQUIRE))
        return chain_guarded();
    if (trap_raw_sigaction(SIGSYS, NULL, &cur) != 0)
        return 0;
    return cur.handler == (uint64_t)(uintptr_t)sigsys_handler;
}
