/* Bad pointers in the calls pyamx emulates for a program (raw
 * rt_sigaction(SIGILL), arch_prctl about AMX), with process_vm_readv and
 * process_vm_writev forbidden by the program's own seccomp filter (as
 * Docker's default profile forbids them): the kernel's EFAULT, as when the
 * program runs on its own, never a crash of the emulation copying into them.
 *
 *     no_process_vm
 *
 * Prints one line per call: its name, the return value and errno.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "case_kit.h"

#define ARCH_GET_XCOMP_SUPP 0x1021

static void show(const char *name, long r) { printf("%s %ld errno=%d\n", name, r, r == 0 ? 0 : errno); }

int main(void)
{
    /* TSYNC: every thread, an emulation's supervisor thread included. */
    if (forbid_process_vm(SECCOMP_FILTER_FLAG_TSYNC) != 0) {
        perror("seccomp");
        return 1;
    }
    errno = 0;
    show("rt_sigaction(SIGILL, bad act)", syscall(SYS_rt_sigaction, SIGILL, (void *)8, NULL, 8));
    errno = 0;
    show("rt_sigaction(SIGILL, NULL, bad oldact)", syscall(SYS_rt_sigaction, SIGILL, NULL, (void *)8, 8));
    uint64_t old[4];
    errno = 0;
    show("rt_sigaction(SIGILL, NULL, oldact)", syscall(SYS_rt_sigaction, SIGILL, NULL, old, 8));
    errno = 0;
    show("arch_prctl(ARCH_GET_XCOMP_SUPP, bad)", syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, (void *)8));
    fflush(stdout);
    return 0;
}
