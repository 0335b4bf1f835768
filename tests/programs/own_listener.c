/* Asks seccomp for a listener of its own, as a sandbox or supervisor does,
 * and says what the kernel answered.
 *
 *     own_listener
 *
 * Prints "listener ok", "listener EBUSY", or "unsupported ERRNO" where
 * this kernel or container permits no seccomp listener at all; exit 0.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
    struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_fprog prog = {1, allow};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        printf("unsupported %d\n", errno);
        return 0;
    }
    long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (fd >= 0)
        printf("listener ok\n");
    else if (errno == EBUSY)
        printf("listener EBUSY\n");
    else
        printf("unsupported %d\n", errno);
    return 0;
}
