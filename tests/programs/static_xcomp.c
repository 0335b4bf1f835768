/* Asks the kernel about AMX as a program that falls back without it does,
 * and prints what it was told.  Built -static: no preload reaches it, so
 * under an emulating parent it must get the real kernel's answers, exactly
 * what it prints when run on its own (on a CPU without AMX:
 * ARCH_REQ_XCOMP_PERM fails with EOPNOTSUPP), and never die of SIGSYS.
 *
 *     static_xcomp
 *
 * Prints one line per call: the code, the return value, errno (0 on
 * success) and, for the two queries, the bits it was given.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static void query(const char *name, int code)
{
    uint64_t bits = 0;
    errno = 0;
    long r = syscall(SYS_arch_prctl, code, &bits);
    printf("%s %ld errno=%d bits=0x%llx\n", name, r, r == 0 ? 0 : errno, (unsigned long long)(r == 0 ? bits : 0));
}

int main(void)
{
    query("ARCH_GET_XCOMP_SUPP", ARCH_GET_XCOMP_SUPP);
    errno = 0;
    long r = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    printf("ARCH_REQ_XCOMP_PERM %ld errno=%d\n", r, r == 0 ? 0 : errno);
    query("ARCH_GET_XCOMP_PERM", ARCH_GET_XCOMP_PERM);
    /* A bad pointer: the kernel's EFAULT, not a crash. */
    errno = 0;
    r = syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, (void *)8);
    printf("ARCH_GET_XCOMP_SUPP(bad pointer) %ld errno=%d\n", r, r == 0 ? 0 : errno);
    fflush(stdout);
    return 0;
}
