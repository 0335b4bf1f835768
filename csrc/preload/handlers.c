/* The program's signal handlers under pyamx run, each given a tile state
 * frame of its own (csrc/trap/frames/handler_frames.c), as Linux gives a handler the init
 * tile state and the interrupted code its tiles back at sigreturn.
 *
 * sigaction() for any signal but SIGILL (whose handler the trap chains to,
 * preload.c) installs a trampoline in place of the program's handler, with
 * the program's own flags and mask, so the kernel blocks, resets and
 * restarts as it would for the program's handler.  The program's handler
 * sits in a table, one word per signal, so the trampoline reads it with
 * one load, whatever a concurrent sigaction() is doing.  An old action
 * that is the trampoline is reported as the program's own, so the wrapping
 * is invisible to the program.  The handlers installed before the
 * preload's constructor are wrapped by it; raw rt_sigaction system calls
 * reach handlers_ksigaction() through the guard's supervisor where the
 * guard is on (csrc/trap/guard/raw_sigaction.c), and bypass the wrapping where it is
 * not (docs/run.md).
 *
 * The trampoline's records live in this library's initial-exec TLS: the
 * preload is loaded with the program, so its TLS is in every thread's
 * static block, reached from %fs without a call, safe in a handler.
 */
#define _GNU_SOURCE 1
#include "../trap/guard/guard.h"
#include "handlers.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* Signals 1..64, the kernel's range on x86-64. */
#define N_SIGNALS 65
/* User-space addresses stay below 2^47, so the top bit of a handler's
 * word is free to say it takes (sig, info, ucontext). */
#define SIGINFO_BIT (1ull << 63)

static uint64_t g_act[N_SIGNALS];
static int32_t g_enabled;
static int32_t g_lock;

static __thread struct hframes t_frames __attribute__((tls_model("initial-exec")));
static __thread uint64_t t_cookie __attribute__((tls_model("initial-exec")));

static struct hframes *frames_here(void) { return &t_frames; }

int handlers_wrapping(void) { return __atomic_load_n(&g_enabled, __ATOMIC_ACQUIRE); }

/* The default action of signal(7) for sig, from its handler: nothing for
 * the ones ignored by default (SIGCONT continued the process when it was
 * sent); for the others the real disposition goes back to SIG_DFL and the
 * signal is sent again and unblocked, so the kernel ends (or stops) the
 * process by it, core dump included. */
static void default_action(int sig)
{
    if (sig == SIGCHLD || sig == SIGURG || sig == SIGWINCH || sig == SIGCONT)
        return;
    /* A handler installed meanwhile keeps its place. */
    if (__atomic_load_n(&g_act[sig], __ATOMIC_ACQUIRE) != (uintptr_t)SIG_DFL)
        return;
    trap_take_default_action(sig);
}

static void trampoline(int sig, siginfo_t *si, void *ctx)
{
    uint64_t w = sig > 0 && sig < N_SIGNALS ? __atomic_load_n(&g_act[sig], __ATOMIC_ACQUIRE) : 0;
    uintptr_t fn = (uintptr_t)(w & ~SIGINFO_BIT);
    /* Reached only where the trampoline was installed without an entry: a
     * raw rt_sigaction that copied it from a raw query of another signal
     * (without the guard, which hides it). */
    if (fn == (uintptr_t)SIG_IGN)
        return;
    if (fn == (uintptr_t)SIG_DFL) {
        default_action(sig);
        return;
    }
    struct hframes *h = &t_frames;
    /* A value the thread never used before: a stale frame's word cannot
     * match a live one. */
    t_cookie += 0x9e3779b97f4a7c15ull;
    volatile uint64_t cookie = t_cookie;
    int index = ctx ? hframes_enter(h, ctx, &cookie, t_cookie) : -1;
    if (w & SIGINFO_BIT)
        ((void (*)(int, siginfo_t *, void *))fn)(sig, si, ctx);
    else
        ((void (*)(int))fn)(sig);
    hframes_leave(h, index, cookie);
}

static uint64_t encode(const struct ksigaction *act)
{
    return act->handler | (act->flags & SA_SIGINFO ? SIGINFO_BIT : 0);
}

/* old as the kernel would report the program's own action: the trampoline
 * was installed with the program's flags plus SA_SIGINFO. */
static void report(uint64_t w, struct ksigaction *old)
{
    old->handler = w & ~SIGINFO_BIT;
    if (!(w & SIGINFO_BIT))
        old->flags &= ~(uint64_t)SA_SIGINFO;
}

static int is_trampoline(const struct ksigaction *a)
{
    return (a->flags & SA_SIGINFO) && a->handler == (uint64_t)(uintptr_t)trampoline;
}

static int wraps(uint64_t handler) { return handler != (uintptr_t)SIG_DFL && handler != (uintptr_t)SIG_IGN; }

/* What the kernel gets in place of act: the trampoline, with act's flags
 * (plus SA_SIGINFO), mask and restorer. */
static struct ksigaction through_trampoline(const struct ksigaction *act)
{
    struct ksigaction mine = *act;
    mine.handler = (uint64_t)(uintptr_t)trampoline;
    mine.flags |= SA_SIGINFO;
    return mine;
}

/* Writers hold all signals blocked while they hold the lock, so a handler
 * that calls sigaction() can never spin on its own thread's lock. */
static void lock(sigset_t *saved)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, saved);
    while (__atomic_exchange_n(&g_lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void unlock(const sigset_t *saved)
{
    __atomic_store_n(&g_lock, 0, __ATOMIC_RELEASE);
    pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* The two signals glibc keeps for itself (thread cancellation, setxid
 * across threads): its handlers for them are not the program's, and a
 * cancellation unwinds out of its handler. */
#define SIGCANCEL_GLIBC 32
#define SIGSETXID_GLIBC 33

/* Through the trap's marked call site: under the guard, whose filter is
 * notified of every other rt_sigaction, these never take the round trip
 * through its supervisor. */
long handlers_ksigaction(int sig, const struct ksigaction *act, struct ksigaction *old)
{
    if (!handlers_wrapping() || sig <= 0 || sig >= N_SIGNALS || sig == SIGCANCEL_GLIBC || sig == SIGSETXID_GLIBC)
        return trap_raw_sigaction(sig, act, old);
    if (act == NULL) {
        long rc = trap_raw_sigaction(sig, NULL, old);
        if (rc == 0 && old && is_trampoline(old))
            report(__atomic_load_n(&g_act[sig], __ATOMIC_ACQUIRE), old);
        return rc;
    }
    int wrap = wraps(act->handler);
    struct ksigaction mine = wrap ? through_trampoline(act) : *act;
    sigset_t saved;
    lock(&saved);
    uint64_t before = __atomic_load_n(&g_act[sig], __ATOMIC_RELAXED);
    /* The entry before the real action: a signal that finds the trampoline
     * finds the handler it stands for.  The kernel validates the rest
     * (SIGKILL, SIGSTOP), and the entry goes back if it refuses. */
    if (wrap)
        __atomic_store_n(&g_act[sig], encode(act), __ATOMIC_RELEASE);
    long rc = trap_raw_sigaction(sig, &mine, old);
    if (rc != 0 && wrap)
        __atomic_store_n(&g_act[sig], before, __ATOMIC_RELEASE);
    unlock(&saved);
    if (rc == 0 && old && is_trampoline(old))
        report(before, old);
    return rc;
}

/* glibc's sigaction, on the marked site: the same struct conversion, its
 * own restorer in place of glibc's (the same two instructions), and the
 * same refusal of the two signals glibc keeps for itself.  On the marked
 * site before the wrapping starts too: a process exec'd in place by a
 * guarded one sits under a filter whose listener is gone, which answers
 * every other rt_sigaction with ENOSYS until its own guard is in place
 * (a constructor that runs before the preload's). */
int handlers_sigaction(sigaction_fn real, int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig <= 0 || sig >= N_SIGNALS || sig == SIGCANCEL_GLIBC || sig == SIGSETXID_GLIBC)
        return real(sig, act, old);
    struct ksigaction k, o;
    if (act) {
        k.handler = (uint64_t)(uintptr_t)act->sa_handler;
        k.flags = (uint64_t)(unsigned)act->sa_flags | SA_RESTORER;
        k.restorer = trap_restorer();
        memcpy(&k.mask, &act->sa_mask, sizeof k.mask);
    }
    long rc = handlers_ksigaction(sig, act ? &k : NULL, old ? &o : NULL);
    if (rc < 0) {
        errno = (int)-rc;
        return -1;
    }
    if (old) {
        memset(old, 0, sizeof *old);
        old->sa_handler = (void (*)(int))(uintptr_t)o.handler;
        old->sa_flags = (int)o.flags;
        old->sa_restorer = (void (*)(void))(uintptr_t)o.restorer;
        memcpy(&old->sa_mask, &o.mask, sizeof o.mask);
    }
    return 0;
}

/* Handlers installed before handlers_enable(): by constructors that ran
 * before the preload's (exec leaves every other signal at SIG_DFL or
 * SIG_IGN, which need no wrapping).  Each is wrapped as if installed now,
 * under the lock, so a concurrent sigaction() either comes before (and is
 * wrapped here) or after (and wraps itself). */
static void wrap_existing(void)
{
    for (int sig = 1; sig < N_SIGNALS; sig++) {
        if (sig == SIGILL || sig == SIGKILL || sig == SIGSTOP || sig == SIGCANCEL_GLIBC || sig == SIGSETXID_GLIBC)
            continue;
        struct ksigaction cur, mine;
        sigset_t saved;
        lock(&saved);
        if (trap_raw_sigaction(sig, NULL, &cur) == 0 && wraps(cur.handler) && !is_trampoline(&cur)) {
            __atomic_store_n(&g_act[sig], encode(&cur), __ATOMIC_RELEASE);
            mine = through_trampoline(&cur);
            if (trap_raw_sigaction(sig, &mine, NULL) != 0)
                __atomic_store_n(&g_act[sig], 0, __ATOMIC_RELEASE);
        }
        unlock(&saved);
    }
}

/* ------------------------------------------------------------------------
 * Leaving a handler by a jump.  glibc keeps the target's stack pointer in
 * the jmp_buf mangled with the thread's pointer guard (%fs:0x30, rotated
 * left by 17 after the xor; glibc's x86-64 PTR_MANGLE, slot 6 of the
 * buffer); the records the jump leaves are dropped before it happens, so a
 * handler that siglongjmps out never leaves one that could later pass for
 * live.  So are the trap's marks of calls to the program's SIGILL handler
 * (chain_marks.c): a CPU-feature probe leaves its handler that way.
 * ---------------------------------------------------------------------- */

typedef void (*jump_fn)(struct __jmp_buf_tag *, int);
static jump_fn g_longjmp, g_siglongjmp, g_ulongjmp, g_longjmp_chk;

static void leaving(struct __jmp_buf_tag *env)
{
    uint64_t guard, v = (uint64_t)env->__jmpbuf[6];
    __asm__("movq %%fs:0x30, %0" : "=r"(guard));
    v = ((v >> 17) | (v << 47)) ^ guard;
    chainmark_jump((uintptr_t)v);
    struct hframes *h = &t_frames;
    if (h->depth > 0)
        hframes_jump(h, (uintptr_t)v);
}

/* Resolved by handlers_enable; a jump made before it (a constructor that
 * ran before the preload's) resolves on the spot, from normal context. */
static jump_fn resolve(const char *name) { return (jump_fn)dlsym(RTLD_NEXT, name); }

EXPORT void longjmp(struct __jmp_buf_tag env[1], int val)
{
    leaving(env);
    (g_longjmp ? g_longjmp : resolve("longjmp"))(env, val);
    __builtin_unreachable();
}

EXPORT void _longjmp(struct __jmp_buf_tag env[1], int val)
{
    leaving(env);
    (g_ulongjmp ? g_ulongjmp : resolve("_longjmp"))(env, val);
    __builtin_unreachable();
}

EXPORT void siglongjmp(struct __jmp_buf_tag env[1], int val)
{
    leaving(env);
    (g_siglongjmp ? g_siglongjmp : resolve("siglongjmp"))(env, val);
    __builtin_unreachable();
}

/* What longjmp becomes under _FORTIFY_SOURCE. */
void __longjmp_chk(struct __jmp_buf_tag env[1], int val);
EXPORT void __longjmp_chk(struct __jmp_buf_tag env[1], int val)
{
    leaving(env);
    (g_longjmp_chk ? g_longjmp_chk : resolve("__longjmp_chk"))(env, val);
    __builtin_unreachable();
}

/* A fork while another thread held the lock would leave it held for good
 * in the child, whose only thread is not that one. */
static void unlock_in_child(void) { __atomic_store_n(&g_lock, 0, __ATOMIC_RELAXED); }

void handlers_enable(void)
{
    g_longjmp = resolve("longjmp");
    g_ulongjmp = resolve("_longjmp");
    g_siglongjmp = resolve("siglongjmp");
    g_longjmp_chk = resolve("__longjmp_chk");
    /* Records are kept only where every jump out of a handler is seen. */
    if (!g_longjmp || !g_ulongjmp || !g_siglongjmp || !g_longjmp_chk)
        return;
    pthread_atfork(NULL, NULL, unlock_in_child);
    hframes_set_source(frames_here);
    __atomic_store_n(&g_enabled, 1, __ATOMIC_RELEASE);
    wrap_existing();
    /* Before the guard: its filter then covers every signal's raw calls. */
    rawsig_set_wrapper(handlers_ksigaction);
}

/* For test programs (through dlsym): 1 when sig's real disposition is the
 * trampoline, 0 when not, -1 when it cannot be read. */
EXPORT int pyamx_preload_wrapped(int sig)
{
    struct ksigaction cur;
    if (trap_raw_sigaction(sig, NULL, &cur) != 0)
        return -1;
    return is_trampoline(&cur);
}
