/* The guard's standby: a process that keeps the guard's seccomp listener
 * open after the image that installed the guard is gone, and answers it.
 *
 * The guard's supervisor is a thread of the emulating process, and the
 * listener is close-on-exec.  When that process execs in place (a shell's
 * last command, `env -u LD_PRELOAD prog`) or exits while a fork of it still
 * runs (a daemon's double fork), nobody reads the listener any more, and the
 * kernel answers every call the filter notifies -- the AMX arch_prctl codes,
 * rt_sigaction -- with ENOSYS, where the same program on a CPU without AMX
 * gets the kernel's real answer.  Nothing can be removed from a filter, and a
 * listener nobody reads would hang those calls, so someone must keep reading:
 * this process, started before the filter exists (so that it is not under
 * it), holding a copy of the listener.
 *
 * While the emulating image lives, the standby only waits: the supervisor
 * answers.  The image is gone when the supervisor thread is no longer in
 * /proc, which the standby checks when its end of a socketpair reports end
 * of file (the image's end is close-on-exec; forks drop theirs in the atfork
 * child) and now and then besides (a fork made without atfork handlers may
 * still hold it).  Then it answers
 * alone: CONTINUE for everything (the kernel answers as it would anywhere),
 * except the AMX arch_prctl of forks that still run the emulating image,
 * answered as their supervisor would (xcomp_permission.c).  It exits when the listener
 * reports POLLHUP, that is when no task uses the filter any more (Linux >=
 * 5.8; older kernels get no standby and keep the old behaviour).
 *
 * It is invisible to the program: started by a raw clone with exit signal 0
 * (no SIGCHLD, not seen by wait() without __WCLONE, no atfork handler runs),
 * own session, every signal blocked, no descriptor but its socket and the
 * listener (a pipe it kept would hold `subprocess.run(capture_output=True)`
 * of the program open), / as its directory, named "pyamx-guard".  The parent
 * may be multithreaded (CPython), so the standby uses system calls only: no
 * lock another thread could have held at the clone.
 *
 * A program that execs in place into another preloaded image wants a guard
 * of its own, which the kernel refuses (EBUSY) while this listener is open:
 * that guard asks the standby to let go (standby_release_previous), and the
 * new image's guard then works as before the standby existed.
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

#if HAVE_LISTENER

/* seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER, NULL) with these in args[4]
 * and args[5]: not the guard's own mark, so its filter notifies the call;
 * should nobody take it for a release request, the kernel answers EFAULT. */
#define RELEASE_TAG 0x70796d7872656c73ull  /* "pymxrels" */
#define RELEASE_MARK 0x70796d786c657473ull /* "pymxlets" */

/* How often the waiting standby looks for the supervisor thread in /proc. */
#define IMAGE_CHECK_MS 500

enum { MSG_LISTENER = 1, MSG_XCOMP = 2 };

struct standby_msg {
    uint32_t kind;
    struct xcomp_routed xcomp;
};

static int g_sock = -1;          /* the emulating image's end of the socketpair */
static pid_t g_standby;          /* in the image and its forks */
static pid_t g_image, g_thread;  /* in the standby: the emulating process and its supervisor thread */

#define SYS0(name, ...) syscall(SYS_##name, __VA_ARGS__)

static int kernel_at_least(long major, long minor)
{
    struct utsname u;
    if (uname(&u) != 0)
        return 0;
    char *p = u.release;
    long a = strtol(p, &p, 10);
    if (*p != '.')
        return 0;
    long b = strtol(p + 1, NULL, 10);
    return a > major || (a == major && b >= minor);
}

static char *put_dec(char *p, long v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* ---- in the standby: system calls only ---- */

static void close_all_but(int keep)
{
    if (SYS0(close_range, 3, keep - 1, 0) == 0 && SYS0(close_range, keep + 1, ~0u, 0) == 0)
        return;
    /* Linux 5.8 has no close_range: the descriptors /proc lists. */
    long dir = SYS0(open, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return;
    char buf[4096];
    for (;;) {
        long n = SYS0(getdents64, dir, buf, sizeof buf);
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            const char *name = buf + off + 19;
            long fd = 0;
            int digits = name[0] != 0;
            for (const char *c = name; *c; c++) {
                if (*c < '0' || *c > '9')
                    digits = 0;
                fd = fd * 10 + (*c - '0');
            }
            if (digits && fd > 2 && fd != keep && fd != dir)
                SYS0(close, fd);
            off += reclen;
        }
    }
    SYS0(close, dir);
}

/* The command line ps and pgrep -f show is the program's, in this copy of
 * its memory: a `pkill -f prog` would hit the standby too, and a check that
 * prog has ended would find it.  Overwritten in place (fields 48 and 49 of
 * /proc/self/stat say where it is). */
static void rename_command_line(void)
{
    char buf[2048];
    long fd = SYS0(open, "/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    long n = SYS0(read, fd, buf, sizeof buf - 1);
    SYS0(close, fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    char *p = buf + n;
    while (p > buf && *p != ')') /* the name may hold spaces and parentheses */
        p--;
    unsigned long value[2] = {0, 0};
    for (int field = 2; *p && field < 49; p++) {
        if (*p == ' ') {
            field++;
            if (field >= 48) {
                unsigned long v = 0;
                for (const char *d = p + 1; *d >= '0' && *d <= '9'; d++)
                    v = v * 10 + (unsigned long)(*d - '0');
                value[field - 48] = v;
            }
        }
    }
    static const char name[] = "pyamx-guard";
    if (value[0] == 0 || value[1] <= value[0] + sizeof name)
        return;
    /* Through the kernel: a program may have pointed it at memory this
     * copy cannot write (PR_SET_MM_ARG_START). */
    static const char zeros[256];
    char *start = (char *)value[0];
    for (unsigned long at = value[0]; at < value[1]; at += sizeof zeros) {
        unsigned long left = value[1] - at;
        if (self_copy((char *)at, zeros, left < sizeof zeros ? left : sizeof zeros) != 0)
            return;
    }
    self_copy(start, name, sizeof name);
}

/* Returns the socket's descriptor after the move. */
static int become_invisible(int sock)
{
    SYS0(setsid, 0);
    SYS0(prctl, PR_SET_NAME, "pyamx-guard", 0, 0, 0);
    rename_command_line();
    long s = SYS0(fcntl, sock, F_DUPFD_CLOEXEC, 3);
    if (s >= 0) {
        SYS0(close, sock);
        sock = (int)s;
    }
    close_all_but(sock);
    long null = SYS0(open, "/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3; fd++) {
        if (null >= 0 && null != fd)
            SYS0(dup2, null, fd);
        else if (null < 0)
            SYS0(close, fd);
    }
    if (null > 2)
        SYS0(close, null);
    SYS0(chdir, "/");
    return sock;
}

/* Whether task tid is a thread of the process that was the emulating image. */
static int thread_of_image(pid_t tid)
{
    char path[64] = "/proc/";
    char *p = put_dec(path + 6, g_image);
    memcpy(p, "/task/", 6);
    p = put_dec(p + 6, tid);
    *p = 0;
    return SYS0(faccessat, AT_FDCWD, path, F_OK, 0) == 0 ? 1 : errno == ENOENT ? 0 : -1;
}

/* 1: the supervisor thread is there; 0: gone; -1: no /proc to tell (then
 * the socket alone decides). */
static int image_state(void)
{
    int t = thread_of_image(g_thread);
    if (t != 0)
        return t;
    return SYS0(faccessat, AT_FDCWD, "/proc/self/task", F_OK, 0) == 0 ? 0 : -1;
}

/* 1: a message was taken; 0: end of file (the image is gone); -1: error. */
static int receive(int sock, int *listener)
{
    struct standby_msg m;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {&m, sizeof m};
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    long n = SYS0(recvmsg, sock, &h, MSG_CMSG_CLOEXEC);
    if (n == 0)
        return 0;
    if (n < 0)
        return errno == EINTR ? 1 : -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&h);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int fd;
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
        if (m.kind == MSG_LISTENER && *listener < 0)
            *listener = fd;
        else
            SYS0(close, fd);
    }
    if (n == (long)sizeof m && m.kind == MSG_XCOMP)
        xcomp_adopt(&m.xcomp);
    return 1;
}

/* The listener, or -1 if the image went before handing it over. */
static int wait_for_the_image(int sock)
{
    int listener = -1;
    for (;;) {
        struct pollfd p = {sock, POLLIN, 0};
        long n = SYS0(poll, &p, 1, IMAGE_CHECK_MS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0) {
            if (image_state() == 0)
                break;
            continue;
        }
        if (n < 0 || !(p.revents & POLLIN) || receive(sock, &listener) <= 0)
            break;
    }
    SYS0(close, sock);
    if (listener < 0)
        return -1; /* nothing to hold: the guard was refused (standby_cancel) or the image went first */
    /* End of file alone is not enough: the program may have closed the
     * descriptor itself (closefrom, dup2 over it) while the supervisor still
     * answers, and two readers of one listener would split its calls.  At
     * exec the other threads are gone before the descriptors close; at exit
     * the supervisor may still be on its way out for a moment. */
    for (int i = 0; image_state() == 1; i++) {
        struct timespec t = {0, (i < 20 ? 5 : IMAGE_CHECK_MS) * 1000000L};
        SYS0(nanosleep, &t, NULL);
    }
    return listener;
}

struct pending {
    int fd;
    uint64_t id;
};

static int still_pending(void *arg)
{
    struct pending *p = arg;
    return SYS0(ioctl, p->fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &p->id) == 0;
}

static int is_release_request(const struct seccomp_data *d)
{
    return d->nr == SYS_seccomp && d->args[4] == RELEASE_TAG && d->args[5] == RELEASE_MARK;
}

/* A line on the caller's stderr: the standby has none of its own, and the
 * report belongs to the program that met the difference. */
static void say_to(pid_t tid, struct msg *m)
{
    char path[64] = "/proc/";
    char *p = put_dec(path + 6, tid);
    memcpy(p, "/fd/2", 6);
    long fd = SYS0(open, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return;
    m->buf[m->n++] = '\n';
    SYS0(write, fd, m->buf, m->n);
    SYS0(close, fd);
}

/* 1 when the listener was handed back (the caller's new image takes over). */
static int answer_one(int fd)
{
    struct seccomp_notif req;
    struct seccomp_notif_resp resp;
    memset(&req, 0, sizeof req);
    if (SYS0(ioctl, fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0)
        return 0; /* EINTR, or ENOENT: the caller went meanwhile */
    memset(&resp, 0, sizeof resp);
    resp.id = req.id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    int released = 0;
    if (req.data.nr == SYS_arch_prctl) {
        struct pending p = {fd, req.id};
        long r = 0;
        long code = (long)(int)req.data.args[0];
        int answered = xcomp_notified((pid_t)req.pid, 0, code, req.data.args[1], still_pending, &p, &r);
        if (answered > 0) {
            resp.flags = 0;
            resp.error = r < 0 ? (int32_t)r : 0;
            resp.val = r < 0 ? 0 : r;
        } else if (answered < 0) {
            struct msg m = {.n = 0};
            xcomp_unreadable_line(&m, (pid_t)req.pid, code);
            say_to((pid_t)req.pid, &m);
        }
    } else if (is_release_request(&req.data)) {
        /* Only for the process that was the emulating image, now another
         * one after an exec in place (its guard asks from a thread of its
         * own). */
        if (thread_of_image((pid_t)req.pid) == 1) {
            resp.flags = 0;
            resp.val = SYS0(getpid, 0);
            released = 1;
        }
    } else if (req.data.nr == SYS_seccomp) {
        struct msg m = {.n = 0};
        guard_listener_refused_line(&m, (pid_t)req.pid);
        say_to((pid_t)req.pid, &m);
    }
    SYS0(ioctl, fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    return released;
}

static void answer_alone(int fd)
{
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        long n = SYS0(poll, &p, 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return;
        if (p.revents & POLLIN) {
            if (answer_one(fd))
                return;
        } else if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) {
            return; /* no task uses the filter any more */
        }
    }
}

static __attribute__((noreturn)) void standby_main(int sock)
{
    sock = become_invisible(sock);
    /* The image waits for this: until then the standby still has the program's name and descriptors. */
    static const char ready = 'r';
    SYS0(sendto, sock, &ready, 1, MSG_NOSIGNAL, NULL, 0);
    int listener = wait_for_the_image(sock);
    if (listener >= 0)
        answer_alone(listener);
    for (;;)
        SYS0(exit_group, 0);
}

/* ---- in the emulating image ---- */

int standby_start(void)
{
    int sv[2];
    if (!kernel_at_least(5, 8))
        return ENOSYS; /* no POLLHUP on the listener: the standby could not tell when to go */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return errno;
    g_image = getpid();
    g_thread = trap_tid();
    /* Exit signal 0: the program's wait() and SIGCHLD never see it. */
    long pid = syscall(SYS_clone, 0L, NULL, NULL, NULL, 0L);
    if (pid == 0)
        standby_main(sv[1]);
    int err = errno;
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return err;
    }
    /* Back only once the standby is invisible (its own name, no descriptor of the program's): a pipe
     * it still held would keep the program's reader waiting, and the program could see it as a child
     * of its own. End of file (it died first) ends the wait too. */
    char ready;
    while (recv(sv[0], &ready, 1, 0) < 0 && errno == EINTR)
        ;
    g_sock = sv[0];
    g_standby = (pid_t)pid;
    return 0;
}

static void send_msg(const struct standby_msg *m, int fd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {(void *)m, sizeof *m};
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&control, 0, sizeof control);
        h.msg_control = control.buf;
        h.msg_controllen = sizeof control.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof fd);
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    while (sendmsg(g_sock, &h, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

void standby_arm(int listener)
{
    if (g_sock < 0)
        return;
    struct standby_msg m = {.kind = MSG_LISTENER};
    send_msg(&m, listener);
}

void standby_cancel(void)
{
    if (g_sock < 0)
        return;
    close(g_sock);
    g_sock = -1;
    /* It exits at once on end of file; reaped here, since no one else will while this process lives. */
    while (waitpid(g_standby, NULL, __WCLONE) < 0 && errno == EINTR)
        ;
    g_standby = 0;
}

void standby_share_xcomp(void)
{
    if (g_sock < 0)
        return;
    struct standby_msg m = {.kind = MSG_XCOMP};
    xcomp_export(&m.xcomp);
    send_msg(&m, -1);
}

void standby_after_fork(void)
{
    if (g_sock >= 0) {
        close(g_sock);
        g_sock = -1;
    }
    /* Under Yama's ptrace_scope 1 only ancestors may read a process's
     * memory: the standby, a sibling, must read this fork's to answer it
     * once the parent is gone.  EINVAL without Yama. */
    if (g_standby > 0)
        prctl(PR_SET_PTRACER, (unsigned long)g_standby, 0, 0, 0);
}

int standby_is_release_request(const void *seccomp_data) { return is_release_request(seccomp_data); }

int standby_release_previous(void)
{
    long pid = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, NULL, 0L,
                       (long)RELEASE_TAG, (long)RELEASE_MARK);
    if (pid <= 0)
        return -1;
    /* The previous image's standby, a child of this process (exec keeps
     * children): once it has exited its listener is closed and the kernel
     * allows a new one.  Reaped here, as nobody else will. */
    while (waitpid((pid_t)pid, NULL, __WCLONE) < 0 && errno == EINTR)
        ;
    return 0;
}

#else

int standby_start(void) { return ENOSYS; }
void standby_arm(int listener) { (void)listener; }
void standby_cancel(void) {}
void standby_share_xcomp(void) {}
void standby_after_fork(void) {}
int standby_is_release_request(const void *seccomp_data)
{
    (void)seccomp_data;
    return 0;
}
int standby_release_previous(void) { return -1; }

#endif
