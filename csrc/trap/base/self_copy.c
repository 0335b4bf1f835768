/* Copies within this process through the kernel, so that a bad address
 * given by a caller becomes EFAULT, as the system call it emulates would
 * answer, instead of a SIGSEGV in the handler or supervisor doing the copy.
 *
 * process_vm_readv on this very process is the quick way (always permitted
 * by ptrace's rules for one's own process).  Where a seccomp profile forbids
 * it (Docker's default profile does without CAP_SYS_PTRACE: EPERM) or the
 * kernel lacks it (ENOSYS), the bytes go through a pipe instead: write()
 * reads the source and read() writes the destination, each of them EFAULT
 * on an address it cannot use.  Async-signal-safe: only system calls. */
#define _GNU_SOURCE 1
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>

int self_copy(void *dst, const void *src, size_t n)
{
    if (n == 0)
        return 0;
    struct iovec local = {dst, n};
    struct iovec remote = {(void *)src, n};
    long r = syscall(SYS_process_vm_readv, (long)syscall(SYS_getpid), &local, 1L, &remote, 1L, 0L);
    if (r == (long)n)
        return 0;
    if (r >= 0 || (errno != EPERM && errno != ENOSYS))
        return EFAULT;
    /* At most a few dozen bytes here: well within the pipe's atomic size. */
    int p[2];
    if (syscall(SYS_pipe2, p, O_CLOEXEC | O_NONBLOCK) != 0)
        return EFAULT; /* no descriptor left: refused rather than risked */
    long w = syscall(SYS_write, p[1], src, n);
    r = w == (long)n ? syscall(SYS_read, p[0], dst, n) : -1;
    syscall(SYS_close, p[0]);
    syscall(SYS_close, p[1]);
    return r == (long)n ? 0 : EFAULT;
}
