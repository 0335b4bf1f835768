/* The guard: this module's SIGILL handler stays the real disposition
 * whatever other code installs, from whichever thread, in whatever order.
 *
 * Without it, a handler installed while trapped instructions run (pytest's
 * faulthandler toggled by another thread, signal.signal(SIGILL, ...), a C
 * library's sigaction) receives the tile instructions' SIGILLs: faulthandler
 * kills the process, Python's handler returns and the instruction faults
 * again forever.  Reinstalling before each native entry only narrows that
 * window.
 *
 * A seccomp filter (all threads, SECCOMP_FILTER_FLAG_TSYNC) hands every
 * rt_sigaction(SIGILL, ...) of the process to a supervisor thread of this
 * module (SECCOMP_RET_USER_NOTIF), except the ones from this module's own
 * call site (disposition.c), recognised by the mark it loads into r9.  The
 * supervisor answers the caller as the kernel would -- the old action is
 * the one the process last set, the new one becomes the handler this mode
 * chains to -- and the real disposition never changes.  A listener rather
 * than SECCOMP_RET_TRAP because filters survive fork and exec: a trap
 * action would kill any child program that touches SIGILL (a child Python
 * enabling faulthandler) with SIGSYS, while a notification from another
 * process is simply let through (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
 *
 * Needs Linux >= 5.7 (TSYNC together with a listener) and a process that
 * does not already sit under a seccomp listener (the kernel allows one per
 * filter chain: a trap-mode child of a guarded trap-mode process gets
 * EBUSY).  Otherwise pyamx_trap_ensure_installed() remains the defence.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <semaphore.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/uio.h>

/* Kernel headers are optional: without them the module builds with the
 * guard reporting itself unavailable (listener.h decides). */
#include "listener.h"

#if defined(SECCOMP_SET_MODE_FILTER) && !defined(SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
#define SECCOMP_FILTER_FLAG_TSYNC_ESRCH (1UL << 4)
#endif

static int32_t g_state = PYAMX_TRAP_GUARD_OFF;
static const char *g_reason = "not requested";
static uint64_t g_calls;

int32_t pyamx_trap_guard_state(void) { return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE); }
const char *pyamx_trap_guard_reason(void) { return g_reason; }
uint64_t pyamx_trap_guard_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }

#if HAVE_LISTENER

static int g_listener = -1;
static pid_t g_pid;
static int g_result = -1; /* pyamx_trap_guard_install's answer, once decided */


/* SIGILL's action as the program sees it: the handler this mode chains
 * to (the virtual disposition), swapped under the trap's lock. */
static long virtual_sigill(int sig, const struct ksigaction *act, struct ksigaction *old)
{
    (void)sig;
    struct ksigaction prev;
    trap_lock();
    chain_get(&prev);
    if (act)
        chain_set(act);
    trap_unlock();
    __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
    if (old)
        *old = prev;
    return 0;
}

static int from_this_process(pid_t tid)
{
    return tid == g_pid || syscall(SYS_tgkill, g_pid, tid, 0) == 0;
}

struct pending {
    int fd;
    uint64_t id;
};

static int still_pending(void *arg)
{
    struct pending *p = arg;
    return ioctl(p->fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &p->id) == 0;
}

/* A program's seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER) under the guard:
 * the kernel will answer EBUSY (it is let through, so the program sees
 * exactly that); the one line says why and what to do, since nothing in the
 * error itself points at pyamx. */
static uint64_t g_listeners_refused;
static guard_observer_fn g_gobserver;

void guard_set_observer(guard_observer_fn fn) { __atomic_store_n(&g_gobserver, fn, __ATOMIC_RELEASE); }
uint64_t pyamx_trap_guard_listeners_refused(void) { return __atomic_load_n(&g_listeners_refused, __ATOMIC_RELAXED); }

void guard_listener_refused_line(struct msg *m, pid_t tid)
{
    __atomic_fetch_add(&g_listeners_refused, 1, __ATOMIC_RELAXED);
    guard_observer_fn obs = __atomic_load_n(&g_gobserver, __ATOMIC_ACQUIRE);
    if (obs)
        obs();
    m_str(m, "pyamx trap emulation: task ");
    m_dec(m, tid);
    m_str(m, " asked seccomp for a listener of its own: it gets EBUSY, because the SIGILL guard holds the "
             "one listener the kernel allows; run it with `pyamx run --no-guard` (PYAMX_TRAP_GUARD=0)");
}

static void say_listener_refused(pid_t tid)
{
    struct msg m = {.n = 0};
    guard_listener_refused_line(&m, tid);
    m_emit(&m);
}

/* An AMX arch_prctl: answered by xcomp_permission.c for the tasks it emulates (1),
 * else (0) the kernel answers, as it would on this CPU. */
static int answer_xcomp(int fd, const struct seccomp_notif *req, struct seccomp_notif_resp *resp)
{
    struct pending p = {fd, req->id};
    long r = 0;
    pid_t tid = (pid_t)req->pid;
    int own = chain_guarded() && from_this_process(tid);
    int answered = xcomp_notified(tid, own, (long)(int)req->data.args[0], req->data.args[1], still_pending, &p, &r);
    if (answered < 0) {
        struct msg m = {.n = 0};
        xcomp_unreadable_line(&m, tid, (long)(int)req->data.args[0]);
        m_emit(&m);
    }
    if (answered <= 0)
        return 0;
    resp->error = r < 0 ? (int32_t)r : 0;
    resp->val = r < 0 ? 0 : r;
    return 1;
}

/* rt_sigaction of a thread of this process: SIGILL's on the virtual
 * disposition, any other signal's (notified only where a wrapper is
 * registered) through the wrapper; raw_sigaction.c makes the call as the kernel
 * would. */
static void answer_rt_sigaction(int fd, const struct seccomp_notif *req, struct seccomp_notif_resp *resp)
{
    struct pending p = {fd, req->id};
    int sig = (int)req->data.args[0];
    rawsig_fn fn = sig == SIGILL ? virtual_sigill : rawsig_wrapper();
    if (fn == NULL) {
        resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        return;
    }
    resp->error = (int32_t)rawsig_call(fn, sig, req->data.args[1], req->data.args[2], req->data.args[3], still_pending, &p);
}

/* Whether any other thread of this process is still alive.  Not
 * /proc/self/stat's thread count: a main thread that left with
 * pthread_exit() stays a zombie, counted, until the whole group ends.
 * 1 when unknown (no /proc), so that nothing ends the process early. */
static int others_alive(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 1;
    int me = trap_tid(), alive = 0;
    struct dirent *e;
    while (!alive && (e = readdir(d)) != NULL) {
        int tid = atoi(e->d_name);
        if (tid <= 0 || tid == me)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; /* gone meanwhile */
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
        alive = !p || (p[1] == ' ' && p[2] != 'Z' && p[2] != 'X');
    }
    closedir(d);
    return alive;
}

/* The supervisor is a thread of the program's process, and a process lives
 * while any thread does: when the program's own threads have all ended
 * (main left with pthread_exit, the last worker returned), end the process
 * as glibc's last thread would have, with exit(0) (atexit handlers, stdio
 * flushed), instead of keeping it alive forever. */
#define LAST_THREAD_POLL_MS 100

static void serve(int fd)
{
    struct seccomp_notif req;
    struct seccomp_notif_resp resp;
    for (;;) {
        struct pollfd ready = {fd, POLLIN, 0};
        int n = poll(&ready, 1, LAST_THREAD_POLL_MS);
        if (n == 0) {
            if (!others_alive())
                exit(0);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (ready.revents & (POLLERR | POLLNVAL)))
            break;
        memset(&req, 0, sizeof req);
        if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
            if (errno == EINTR || errno == ENOENT)
                continue;
            break;
        }
        memset(&resp, 0, sizeof resp);
        resp.id = req.id;
        /* Other processes (children after fork or exec inherit the
         * filter), and this one after pyamx_trap_uninstall(), get the
         * real system call. */
        if (chain_guarded() && pyamx_trap_installed() && req.data.nr == SYS_rt_sigaction &&
            from_this_process((pid_t)req.pid))
            answer_rt_sigaction(fd, &req, &resp);
        else if (!(req.data.nr == SYS_arch_prctl && answer_xcomp(fd, &req, &resp)))
            resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        if (req.data.nr == SYS_seccomp && !standby_is_release_request(&req.data))
            say_listener_refused((pid_t)req.pid);
        /* ENOENT: the caller was interrupted by a signal meanwhile; the
         * kernel restarts its call, which arrives here again. */
        ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    /* Unreachable in practice; closing turns later calls into ENOSYS
     * instead of leaving them waiting for an answer. */
    chain_set_guarded(0);
    close(fd);
}

#define LD_ABS(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (field))
#define JEQ(k, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (t), (f))

/* Decided by architecture and number first, so the kernel's per-syscall
 * cache (Linux >= 5.11) skips the filter for every other system call.
 * Notified: rt_sigaction except from this module's own site, which carries
 * TRAP_SITE_MARK in r9 (args[5], unused by rt_sigaction; see disposition.c
 * for why a mark and not the address): SIGILL's only, or every signal's
 * where a wrapper of the program's handlers is registered (raw_sigaction.c);
 * arch_prctl with the three AMX permission codes (xcomp_permission.c answers those of
 * emulated tasks); and
 * seccomp(SECCOMP_SET_MODE_FILTER) asking for a listener of its own, which
 * the kernel refuses (EBUSY) while this one holds the process tree's, so
 * that the supervisor can say why -- except this module's own attempt (the
 * mark again: a preloaded child tries for its guard). */
#define XCOMP_GET_SUPP 0x1021
#define XCOMP_GET_PERM 0x1022
#define XCOMP_REQ_PERM 0x1023

/* Instruction indexes of the program below, for its jumps. */
enum {
    I_ARCH = 1,
    I_NR_SIGACTION = 3,
    I_MARK_LO = 5,
    I_MARK_HI = 7,
    I_LD_SIGNUM = 8,
    I_SIGNUM = 9,
    I_NR_ARCH_PRCTL = 10,
    I_SUPP = 12,
    I_PERM = 13,
    I_REQ = 14,
    I_NR_SECCOMP = 15,
    I_OP = 17,
    I_LISTENER = 19,
    I_OWN_LO = 21,
    I_OWN_HI = 23,
    I_ALLOW = 24,
    I_NOTIFY = 25
};
#define TO(from, to) ((to) - (from) - 1)

static long attach_filter(unsigned long extra_flags)
{
    uint32_t mark_lo = (uint32_t)TRAP_SITE_MARK, mark_hi = (uint32_t)(TRAP_SITE_MARK >> 32);
    int all_signals = rawsig_wrapper() != NULL;
    struct sock_filter code[] = {
        LD_ABS(offsetof(struct seccomp_data, arch)),
        JEQ(AUDIT_ARCH_X86_64, 0, TO(I_ARCH, I_ALLOW)),
        LD_ABS(offsetof(struct seccomp_data, nr)),
        JEQ(SYS_rt_sigaction, 0, TO(I_NR_SIGACTION, I_NR_ARCH_PRCTL)),
        LD_ABS(offsetof(struct seccomp_data, args[5])),
        JEQ(mark_lo, 0, TO(I_MARK_LO, I_LD_SIGNUM)),
        LD_ABS(offsetof(struct seccomp_data, args[5]) + 4),
        JEQ(mark_hi, TO(I_MARK_HI, I_ALLOW), TO(I_MARK_HI, I_LD_SIGNUM)),
        LD_ABS(offsetof(struct seccomp_data, args[0])), /* int signum: low half */
        JEQ(SIGILL, TO(I_SIGNUM, I_NOTIFY), TO(I_SIGNUM, all_signals ? I_NOTIFY : I_ALLOW)),
        JEQ(SYS_arch_prctl, 0, TO(I_NR_ARCH_PRCTL, I_NR_SECCOMP)), /* A still holds nr */
        LD_ABS(offsetof(struct seccomp_data, args[0])),            /* int code: low half */
        JEQ(XCOMP_GET_SUPP, TO(I_SUPP, I_NOTIFY), 0),
        JEQ(XCOMP_GET_PERM, TO(I_PERM, I_NOTIFY), 0),
        JEQ(XCOMP_REQ_PERM, TO(I_REQ, I_NOTIFY), TO(I_REQ, I_ALLOW)),
        JEQ(SYS_seccomp, 0, TO(I_NR_SECCOMP, I_ALLOW)), /* A still holds nr */
        LD_ABS(offsetof(struct seccomp_data, args[0])), /* unsigned int op */
        JEQ(SECCOMP_SET_MODE_FILTER, 0, TO(I_OP, I_ALLOW)),
        LD_ABS(offsetof(struct seccomp_data, args[1])), /* unsigned int flags */
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, SECCOMP_FILTER_FLAG_NEW_LISTENER, 0, TO(I_LISTENER, I_ALLOW)),
        LD_ABS(offsetof(struct seccomp_data, args[5])),
        JEQ(mark_lo, 0, TO(I_OWN_LO, I_NOTIFY)),
        LD_ABS(offsetof(struct seccomp_data, args[5]) + 4),
        JEQ(mark_hi, TO(I_OWN_HI, I_ALLOW), TO(I_OWN_HI, I_NOTIFY)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    _Static_assert(sizeof code / sizeof code[0] == I_NOTIFY + 1, "jump targets match the program");
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    unsigned long flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC |
                          SECCOMP_FILTER_FLAG_TSYNC_ESRCH | extra_flags;
    /* The mark in r9: where an outer guard listens, its filter lets this attempt
     * reach the kernel without a word (the kernel's EBUSY is reported by why()). */
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog, 0L, 0L, (long)TRAP_SITE_MARK);
}

struct start {
    sem_t done;
    int err;
};

static long attach_either(void)
{
    /* SPEC_ALLOW keeps older kernels from forcing the speculative
     * store bypass mitigation on the whole process. */
    long fd = attach_filter(SECCOMP_FILTER_FLAG_SPEC_ALLOW);
    if (fd < 0 && errno == EINVAL)
        fd = attach_filter(0);
    return fd;
}

static void *supervisor(void *arg)
{
    struct start *s = arg;
    long fd = -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        s->err = errno;
    } else {
        /* Started first: the standby must not be under the filter, whose
         * listener reports POLLHUP only once no task uses it. */
        standby_start();
        fd = attach_either();
        /* The listener may be the one of the image this process exec'd from,
         * kept by that image's standby. */
        if (fd < 0 && errno == EBUSY) {
            /* The reason stays EBUSY unless a listener could be had after all. */
            if (standby_release_previous() == 0)
                fd = attach_either();
            else
                errno = EBUSY;
        }
        s->err = fd < 0 ? errno : 0;
        if (fd >= 0)
            standby_arm((int)fd);
        else
            standby_cancel();
    }
    /* pthread_create may have given this thread a tile state slot (pyamx
     * run's interposer does, for every thread): the program's 256 are the
     * program's. */
    state_forget_current();
    if (fd >= 0) {
        g_listener = (int)fd;
        chain_set_guarded(1);
    }
    sem_post(&s->done); /* s is gone after this */
    if (fd >= 0)
        serve((int)fd);
    return NULL;
}

/* A forked child keeps the filter but not the supervisor thread: its calls
 * reach the parent's supervisor, which lets them through.  The child drops
 * its copy of the listener so that, once the parent is gone, its calls fail
 * (ENOSYS) instead of waiting for an answer nobody will give. */
static void atfork_child(void)
{
    if (g_listener >= 0) {
        close(g_listener);
        g_listener = -1;
    }
    standby_after_fork();
    chain_set_guarded(0);
    g_state = PYAMX_TRAP_GUARD_FAILED;
    g_result = ECHILD;
    g_reason = "this is a forked child: the guard's supervisor thread stayed in the parent";
}

static const char *why(int err)
{
    switch (err) {
    case EINVAL: return "the kernel lacks seccomp listeners with TSYNC (Linux >= 5.7 needed)";
    case EBUSY:
        return "this process already sits under a seccomp listener (a parent in trap mode with its "
               "guard, or a container supervisor); the kernel allows one";
    case ESRCH: return "another thread has its own seccomp filter, so one filter cannot cover all threads";
    case EACCES:
    case EPERM: return "seccomp filters are not permitted here";
    case ENOSYS: return "the kernel has no seccomp";
    case EAGAIN: return "could not start the supervisor thread";
    case ECHILD: return "this is a forked child: the guard's supervisor thread stayed in the parent";
    default: return "seccomp refused the filter";
    }
}

int pyamx_trap_guard_install(void)
{
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    if (!pyamx_trap_installed())
        return EINVAL;
    pthread_mutex_lock(&once);
    if (g_result < 0) {
        struct start s;
        pthread_t t;
        pthread_attr_t attr;
        sigset_t all, old;
        sem_init(&s.done, 0, 0);
        s.err = 0;
        g_pid = getpid();
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The supervisor must never run a signal handler: one that called
         * sigaction(SIGILL) there would wait for itself. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&t, &attr, supervisor, &s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            s.err = EAGAIN;
        } else {
            while (sem_wait(&s.done) != 0 && errno == EINTR)
                ;
        }
        sem_destroy(&s.done);
        g_result = s.err;
        if (g_result == 0) {
            pthread_atfork(NULL, NULL, atfork_child);
            g_reason = "active: seccomp answers every sigaction(SIGILL) of this process";
            __atomic_store_n(&g_state, PYAMX_TRAP_GUARD_ACTIVE, __ATOMIC_RELEASE);
        } else {
            g_reason = why(g_result);
            __atomic_store_n(&g_state, PYAMX_TRAP_GUARD_FAILED, __ATOMIC_RELEASE);
        }
    }
    int r = g_result;
    pthread_mutex_unlock(&once);
    return r;
}

#else /* headers without seccomp listeners */

int pyamx_trap_guard_install(void)
{
    if (!pyamx_trap_installed())
        return EINVAL;
    g_reason = "built against kernel headers without seccomp listeners";
    __atomic_store_n(&g_state, PYAMX_TRAP_GUARD_FAILED, __ATOMIC_RELEASE);
    return ENOSYS;
}

#endif
