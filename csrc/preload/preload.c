/* The library `pyamx run` preloads (LD_PRELOAD) into a program it did not
 * build: the trap mode (csrc/trap/) installed before the program's own code
 * runs, plus the kernel's AMX permission interface emulated (xcomp_permission.c).
 *
 * It links no Python: it goes into any dynamically linked x86-64 program.
 * Built with -fvisibility=hidden, so the trap's functions stay private to
 * it (a Python program that also loads pyamx._trap keeps two separate
 * copies); only the functions it interposes (pthread_create, the
 * sigaction family, the longjmp family in handlers.c) and pyamx_preload_*
 * are exported.
 *
 * Environment (set by pyamx run, inherited by children and exec'd programs):
 *   PYAMX_RUN_STATS    FD:DEV:INO, an inherited descriptor of the counters
 *                      file shared by the whole process tree (struct
 *                      pyamx_run_stats, csrc/trap/trap.h), updated from the
 *                      handler itself, so _exit, signals and exec lose
 *                      nothing; pyamx run prints it after the program ends.
 *                      The file has no name (pyamx run unlinks it at once),
 *                      so nothing can be swapped in under one; a descriptor
 *                      that is no longer that file (device, inode), not this
 *                      user's, or not of the struct's size is left alone.
 *   PYAMX_RUN_VERBOSE  1: one line on fd 2 per emulated instruction.
 * docs/run.md describes the behaviour and the limits.
 */
#define _GNU_SOURCE 1
#include "../trap/guard/guard.h"
#include "handlers.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define run_stats pyamx_run_stats
_Static_assert(N_OPS <= 64, "pyamx_run_stats holds 64 op counters");

static struct run_stats *g_stats;
static int g_verbose;

static void add(uint64_t *p, uint64_t v)
{
    if (g_stats)
        __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static void add32(uint32_t *p)
{
    if (g_stats)
        __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}

static void observe(const struct pyamx_trap_insn *in, uint64_t rip, uint64_t ns)
{
    if (g_stats) {
        add(&g_stats->count[in->op], 1);
        add(&g_stats->ns[in->op], ns);
    }
    if (g_verbose) {
        struct msg m = {.n = 0};
        m_str(&m, "pyamx run: [");
        m_dec(&m, getpid());
        m_str(&m, "/");
        m_dec(&m, trap_tid());
        m_str(&m, "] ");
        m_str(&m, pyamx_trap_op_name(in->op));
        if (in->tdst >= 0)
            m_tile(&m, "", in->tdst);
        if (in->tsrc1 >= 0)
            m_tile(&m, ",", in->tsrc1);
        if (in->tsrc2 >= 0)
            m_tile(&m, ",", in->tsrc2);
        if (in->has_mem) {
            m_str(&m, " mem=");
            m_hex(&m, in->addr);
            if (in->stride) {
                m_str(&m, " stride=");
                m_dec(&m, in->stride);
            }
        }
        m_str(&m, " at ");
        m_hex(&m, rip);
        m_str(&m, " (");
        m_dec(&m, (int64_t)ns);
        m_str(&m, " ns)");
        m.buf[m.n++] = '\n';
        ssize_t w = write(2, m.buf, m.n);
        (void)w;
    }
}

static void observe_xcomp(long code, uint64_t arg, long result)
{
    (void)arg;
    add32(&g_stats->xcomp_calls);
    if (code == 0x1023) {
        add32(&g_stats->requests);
        if (result == 0)
            add32(&g_stats->granted);
    }
    if (g_verbose) {
        struct msg m = {.n = 0};
        m_str(&m, "pyamx run: [");
        m_dec(&m, getpid());
        m_str(&m, "] arch_prctl(");
        m_hex(&m, (uint64_t)code);
        m_str(&m, ", ");
        m_hex(&m, arg);
        m_str(&m, ") emulated -> ");
        m_dec(&m, result);
        m.buf[m.n++] = '\n';
        ssize_t w = write(2, m.buf, m.n);
        (void)w;
    }
}

static void observe_listener_refused(void) { add32(&g_stats->listeners_refused); }
static void observe_sigill_named(void) { add32(&g_stats->sigill_named); }

static void map_stats(void)
{
    const char *value = getenv("PYAMX_RUN_STATS");
    int fd;
    unsigned long long dev, ino;
    if (!value || sscanf(value, "%d:%llu:%llu", &fd, &dev, &ino) != 3 || fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (unsigned long long)st.st_dev != dev ||
        (unsigned long long)st.st_ino != ino || st.st_uid != geteuid() ||
        st.st_size != (off_t)sizeof(struct run_stats))
        return;
    /* The descriptor stays open: exec'd descendants inherit it and map it too. */
    void *p = mmap(NULL, sizeof(struct run_stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return;
    g_stats = p;
    /* pyamx run creates the file zeroed and sized; the first process marks it
     * (a file of another layout would not carry this magic afterwards). */
    uint32_t zero = 0;
    __atomic_compare_exchange_n(&g_stats->magic, &zero, PYAMX_RUN_STATS_MAGIC, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_RELAXED);
}

static void say_why(const char *what, const char *why)
{
    struct msg m = {.n = 0};
    m_str(&m, "pyamx run: ");
    m_str(&m, what);
    m_str(&m, ": ");
    m_str(&m, why);
    if (g_stats) {
        size_t n = m.n < sizeof g_stats->why - 1 ? m.n : sizeof g_stats->why - 1;
        memcpy(g_stats->why, m.buf, n);
        g_stats->why[n] = 0;
    }
    m.buf[m.n++] = '\n';
    ssize_t w = write(2, m.buf, m.n);
    (void)w;
}

static int guard_switched_off(void)
{
    const char *v = getenv("PYAMX_TRAP_GUARD");
    return v && (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0);
}

/* Runs before main() (and before the constructors of libraries loaded
 * after this one), in every process that starts with the variable set. */
__attribute__((constructor)) static void preload_init(void)
{
    const char *v = getenv("PYAMX_RUN_VERBOSE");
    g_verbose = v && v[0] == '1';
    map_stats();
    add32(&g_stats->processes);
    if (g_stats)
        trap_set_fatal_observer(observe_sigill_named);
    int32_t rc = pyamx_trap_install();
    if (rc == PYAMX_TRAP_E_HAS_AMX) {
        /* Real AMX here: the program's instructions and arch_prctl run on
         * silicon, and the complement mode emulates the extensions this CPU
         * lacks, if any.  Recorded for pyamx run's report, not printed per
         * process. */
        if (g_stats && !g_stats->why[0])
            memcpy(g_stats->why, "silicon", sizeof "silicon");
        if (pyamx_trap_install_complement() == PYAMX_TRAP_OK) {
            add32(&g_stats->complemented);
            pyamx_trap_thread_prepare();
            /* Silicon keeps each frame's tiles itself; the handlers are
             * wrapped all the same, so the wrapping runs (and is tested)
             * wherever pyamx run does. */
            handlers_enable();
            if (g_stats || g_verbose)
                trap_set_observer(observe);
        }
        return;
    }
    if (rc != PYAMX_TRAP_OK) {
        say_why("AMX emulation not installed", pyamx_trap_strerror(rc));
        return;
    }
    add32(&g_stats->installed);
    /* The main thread's slot, keyed for the handler's fast lookup (new
     * threads do the same in thread_start). */
    pyamx_trap_thread_prepare();
    handlers_enable();
    if (g_stats || g_verbose) {
        trap_set_observer(observe);
        xcomp_set_observer(observe_xcomp);
    }
    /* Without the guard a raw rt_sigaction(SIGILL) system call of the
     * program would displace the handler (libc's sigaction and signal are
     * interposed below); emulation then stops where it does.  Say so only
     * when the program depends on it (verbose).  PYAMX_TRAP_GUARD=0 (pyamx
     * run --no-guard, validated by pyamx run) leaves it out: it costs every
     * system call of the process some tens of ns (docs/run.md).  First, so
     * that the permission calls go through its listener where it is on
     * (xcomp_permission.c): then programs exec'd without the preload get the kernel's
     * answer instead of SIGSYS. */
    if (g_stats)
        guard_set_observer(observe_listener_refused);
    if (!guard_switched_off() && pyamx_trap_guard_install() != 0 && g_verbose)
        say_why("SIGILL guard unavailable", pyamx_trap_guard_reason());
    int err = pyamx_trap_xcomp_install();
    if (err != 0)
        say_why("arch_prctl(ARCH_REQ_XCOMP_PERM) cannot be emulated", strerror(err));
}

/* Threads: each one claims its tile state slot from normal context, which
 * arms the release at thread exit (thread_state.c), so a program that creates
 * thousands of threads never fills the table; and starts, as on Linux, with
 * its creator's TILECFG and tile data in the init state. */
struct start {
    void *(*fn)(void *);
    void *arg;
    uint8_t cfg[64]; /* the creating thread's TILECFG: Linux copies it to the new thread */
};

static void *thread_start(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    if (pyamx_trap_installed() && pyamx_trap_thread_prepare() == PYAMX_TRAP_OK)
        state_inherit_config(s.cfg);
    return s.fn(s.arg);
}

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static pthread_create_fn real;
    pthread_create_fn r = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!r) {
        r = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
        if (!r)
            return EAGAIN;
        __atomic_store_n(&real, r, __ATOMIC_RELEASE);
    }
    struct start *s = malloc(sizeof *s);
    if (!s)
        return r(t, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    pyamx_trap_thread_state(s->cfg, NULL);
    int rc = r(t, attr, thread_start, s);
    if (rc != 0)
        free(s);
    return rc;
}

/* The program's own SIGILL handlers, through libc: answered on the trap's
 * virtual disposition (the handler it chains to), as the guard answers raw
 * rt_sigaction calls; the real disposition stays the trap's.  Needed besides
 * the guard because the kernel allows one seccomp listener per process tree:
 * a program started by a preloaded shell or make (fork, then exec) has no
 * guard of its own.  signal(), bsd_signal() and sysv_signal() go through
 * glibc-internal aliases, so they are interposed too. */
static sigaction_fn real_sigaction(void)
{
    static sigaction_fn real;
    sigaction_fn r = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!r) {
        r = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
        __atomic_store_n(&real, r, __ATOMIC_RELEASE);
    }
    return r;
}

/* 0 where the process's seccomp filters let the program's own rt_sigaction
 * for SIGILL through, else what they answer (-errno; SECCOMP_RET_KILL and
 * _TRAP act on the probe itself, as on the program's call).  libc's
 * sigaction() would make that system call, and a program's filter that
 * denies it (a sandbox) must still deny it: answered on the virtual
 * disposition alone the call succeeded.  The probe has the call's shape --
 * the signal, act and oact null or not, the size -- with pointers the
 * kernel refuses (EFAULT) before it reads or changes anything, so where
 * the filters allow it nothing happens.  Made through the trap's own call
 * site, which the guard's filter lets through: only filters other than
 * pyamx's decide. */
static long filters_answer(const struct sigaction *act, const struct sigaction *old)
{
    /* Not a user-space address: access_ok() fails, the kernel says EFAULT. */
    void *unusable = (void *)(uintptr_t)0xffffffffffff0000ull;
    long r = trap_raw_sigaction(SIGILL, act ? unusable : NULL, old ? unusable : NULL);
    return r == -EFAULT || (r == 0 && !act && !old) ? 0 : r;
}

static int virtual_sigill(const struct sigaction *act, struct sigaction *old)
{
    struct ksigaction prev, next;
    long denied = filters_answer(act, old);
    if (denied) {
        errno = (int)-denied;
        return -1;
    }
    if (act) {
        memset(&next, 0, sizeof next);
        next.handler = (act->sa_flags & SA_SIGINFO) ? (uint64_t)(uintptr_t)act->sa_sigaction
                                                    : (uint64_t)(uintptr_t)act->sa_handler;
        next.flags = (uint64_t)(unsigned)act->sa_flags;
        memcpy(&next.mask, &act->sa_mask, sizeof next.mask); /* signals 1..64, the kernel's layout */
    }
    trap_lock();
    chain_get(&prev);
    if (act)
        chain_set(&next);
    trap_unlock();
    if (old) {
        memset(old, 0, sizeof *old);
        if (prev.flags & SA_SIGINFO)
            old->sa_sigaction = (void (*)(int, siginfo_t *, void *))(uintptr_t)prev.handler;
        else
            old->sa_handler = (void (*)(int))(uintptr_t)prev.handler;
        old->sa_flags = (int)prev.flags;
        memcpy(&old->sa_mask, &prev.mask, sizeof prev.mask);
    }
    return 0;
}

static int intercepts(int sig) { return sig == SIGILL && pyamx_trap_installed(); }

/* signal() and its kin call glibc's internal sigaction, which this library
 * cannot interpose: while handlers are wrapped they are rebuilt on the
 * interposed one, and so is siginterrupt(), which changes what signal()
 * installs. */
static int rebuilt(int sig) { return intercepts(sig) || handlers_wrapping(); }

/* glibc's _sigintr: the signals siginterrupt(sig, 1) made interrupting,
 * which signal() and bsd_signal() then install without SA_RESTART. */
static uint64_t g_sigintr;

static int restart_flag(int sig)
{
    uint64_t bit = sig > 0 && sig < 65 ? 1ull << (sig - 1) : 0;
    return __atomic_load_n(&g_sigintr, __ATOMIC_ACQUIRE) & bit ? 0 : SA_RESTART;
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (intercepts(sig))
        return virtual_sigill(act, old);
    sigaction_fn r = real_sigaction();
    if (!r) {
        errno = ENOSYS;
        return -1;
    }
    return handlers_sigaction(r, sig, act, old);
}

static sighandler_t set_handler(int sig, sighandler_t h, int flags)
{
    struct sigaction sa, old;
    if (h == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    /* glibc's signal() blocks the signal in its handler (SA_RESTART without SA_NODEFER) */
    if (sig != SIGILL && !(flags & SA_NODEFER))
        sigaddset(&sa.sa_mask, sig);
    if (sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

typedef sighandler_t (*signal_fn)(int, sighandler_t);

static sighandler_t forward(const char *name, int sig, sighandler_t h)
{
    signal_fn r = (signal_fn)dlsym(RTLD_NEXT, name);
    if (!r) {
        errno = ENOSYS;
        return SIG_ERR;
    }
    return r(sig, h);
}

EXPORT sighandler_t signal(int sig, sighandler_t h)
{
    return rebuilt(sig) ? set_handler(sig, h, restart_flag(sig)) : forward("signal", sig, h);
}

EXPORT sighandler_t bsd_signal(int sig, sighandler_t h)
{
    return rebuilt(sig) ? set_handler(sig, h, restart_flag(sig)) : forward("bsd_signal", sig, h);
}

/* As glibc's: the current action with SA_RESTART cleared or set, and the
 * choice remembered for signal(). */
EXPORT int siginterrupt(int sig, int interrupt)
{
    if (!rebuilt(sig)) {
        int (*real)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "siginterrupt");
        if (!real) {
            errno = ENOSYS;
            return -1;
        }
        return real(sig, interrupt);
    }
    struct sigaction sa;
    if (sigaction(sig, NULL, &sa) < 0)
        return -1;
    uint64_t bit = 1ull << (sig - 1);
    if (interrupt) {
        __atomic_fetch_or(&g_sigintr, bit, __ATOMIC_ACQ_REL);
        sa.sa_flags &= ~SA_RESTART;
    } else {
        __atomic_fetch_and(&g_sigintr, ~bit, __ATOMIC_ACQ_REL);
        sa.sa_flags |= SA_RESTART;
    }
    return sigaction(sig, &sa, NULL) < 0 ? -1 : 0;
}

EXPORT sighandler_t sysv_signal(int sig, sighandler_t h)
{
    return rebuilt(sig) ? set_handler(sig, h, SA_RESETHAND | SA_NODEFER) : forward("sysv_signal", sig, h);
}

EXPORT sighandler_t __sysv_signal(int sig, sighandler_t h)
{
    return rebuilt(sig) ? set_handler(sig, h, SA_RESETHAND | SA_NODEFER) : forward("__sysv_signal", sig, h);
}

/* System V's sigset(), on the interposed sigaction() as glibc's does it on
 * its internal one: SIG_HOLD blocks the signal, anything else installs the
 * disposition (no flags, empty mask) and unblocks it; the result is
 * SIG_HOLD when the signal was blocked. */
EXPORT sighandler_t sigset(int sig, sighandler_t disp)
{
    if (!rebuilt(sig))
        return forward("sigset", sig, disp);
    sigset_t one, was;
    struct sigaction sa, old;
    if (sigemptyset(&one) != 0 || sigaddset(&one, sig) != 0 || disp == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    if (disp == SIG_HOLD) {
        if (sigaction(sig, NULL, &old) != 0 || sigprocmask(SIG_BLOCK, &one, &was) != 0)
            return SIG_ERR;
        return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = disp;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &old) != 0 || sigprocmask(SIG_UNBLOCK, &one, &was) != 0)
        return SIG_ERR;
    return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
}

/* For test programs (through dlsym): how many tile state slots are held. */
EXPORT int pyamx_preload_slots_in_use(void) { return pyamx_trap_slots_in_use(); }
EXPORT int pyamx_preload_active(void) { return pyamx_trap_active(); }
