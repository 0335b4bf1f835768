/* siginterrupt() and the signal() family, as glibc does them: a handler
 * installed by signal() restarts an interrupted read() (SA_RESTART) unless
 * siginterrupt(sig, 1) was called for its signal, before or after; then
 * the read() fails with EINTR.  sysv_signal() never restarts.
 *
 * A thread sends SIGALRM once the main thread is blocked in read() on an
 * empty pipe (/proc/self/task/TID/syscall names the call); the handler
 * writes one byte into the pipe, so a restarted read() returns 1.
 * One line per case, "CASE ok" or "CASE FAIL: why"; exit status 0 when
 * every case is ok. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "case_kit.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* siginterrupt(), what the test is about */

static int fds[2];
static pid_t main_tid;
static volatile sig_atomic_t runs;

static void handler(int sig)
{
    (void)sig;
    char c = 'x';
    ssize_t w = write(fds[1], &c, 1);
    (void)w;
    runs++;
}

/* Waits until the main thread sleeps in read() (system call 0), then
 * sends it SIGALRM. */
static void *sender(void *arg)
{
    (void)arg;
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)main_tid);
    for (int tries = 0; tries < 60000; tries++) {
        int fd = open(path, O_RDONLY);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n > 2 && buf[0] == '0' && buf[1] == ' ')
            break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    syscall(SYS_tgkill, getpid(), main_tid, SIGALRM);
    return NULL;
}

/* read()'s result on the empty pipe once SIGALRM arrived: 1 restarted,
 * -1 with errno EINTR interrupted. */
static ssize_t interrupted_read(int *err)
{
    pthread_t t;
    char c;
    int before = runs;
    if (pthread_create(&t, NULL, sender, NULL) != 0)
        return -2;
    ssize_t n = read(fds[0], &c, 1);
    *err = errno;
    pthread_join(t, NULL);
    if (n < 0) { /* the byte the handler wrote is still in the pipe */
        ssize_t r = read(fds[0], &c, 1);
        (void)r;
    }
    return runs == before + 1 ? n : -3;
}

static const char *expect(int restarts, int sig_flags_restart)
{
    int err = 0;
    struct sigaction sa;
    if (sigaction(SIGALRM, NULL, &sa) != 0)
        return "sigaction(SIGALRM) query failed";
    if (!!(sa.sa_flags & SA_RESTART) != sig_flags_restart)
        return sig_flags_restart ? "the action lacks SA_RESTART" : "the action has SA_RESTART";
    ssize_t n = interrupted_read(&err);
    if (n == -3)
        return "the handler did not run once";
    if (restarts && n != 1)
        return "read() was not restarted";
    if (!restarts && !(n == -1 && err == EINTR))
        return "read() did not fail with EINTR";
    return NULL;
}

int main(void)
{
    main_tid = (pid_t)syscall(SYS_gettid);
    if (pipe(fds) != 0)
        return 2;
    int failed = 0;
    signal(SIGALRM, handler);
    failed += report("signal", expect(1, 1));
    failed += report("interrupt_after", siginterrupt(SIGALRM, 1) != 0 ? "siginterrupt failed" : expect(0, 0));
    failed += report("restart_again", siginterrupt(SIGALRM, 0) != 0 ? "siginterrupt failed" : expect(1, 1));
    signal(SIGALRM, SIG_DFL);
    if (siginterrupt(SIGALRM, 1) != 0)
        failed += report("interrupt_before", "siginterrupt failed");
    else
        failed += report("interrupt_before", signal(SIGALRM, handler) != SIG_DFL ? "signal() failed" : expect(0, 0));
    siginterrupt(SIGALRM, 0);
    failed += report("sysv_signal", sysv_signal(SIGALRM, handler) == SIG_ERR ? "sysv_signal failed" : expect(0, 0));
    struct sigaction sa;
    failed += report("sysv_reset", sigaction(SIGALRM, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL
                                       ? NULL
                                       : "sysv_signal's handler was not reset to SIG_DFL by the delivery");
    failed += report("bad_signal", siginterrupt(0, 1) == -1 && errno == EINVAL && siginterrupt(65, 0) == -1 ? NULL
                                   : "siginterrupt() accepted a signal number out of range");
    return failed ? 1 : 0;
}
