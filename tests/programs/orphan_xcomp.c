/* A daemon's fork that outlives its emulating parent, then runs a program
 * no preload reaches.
 *
 *     orphan_xcomp STATIC_PROGRAM
 *
 * The parent forks and exits at once.  The child waits until it is
 * orphaned (its parent is gone), then asks for AMX permission, as the
 * emulated program it still is, and prints what it was told; then it execs
 * STATIC_PROGRAM in place, which prints what the kernel told it.  Under an
 * emulating parent the first answers must be the ones the parent's
 * emulation gives (as silicon gives them: 0, and XTILEDATA permitted
 * afterwards), and the static program's the ones it gets when run on its
 * own -- never ENOSYS.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: orphan_xcomp STATIC_PROGRAM\n");
        return 2;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0)
        _exit(0);
    for (int i = 0; getppid() == parent; i++) {
        if (i > 30000) { /* 30 s */
            fprintf(stderr, "orphan_xcomp: the parent never went\n");
            return 1;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    errno = 0;
    long r = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    printf("orphan ARCH_REQ_XCOMP_PERM %ld errno=%d\n", r, r == 0 ? 0 : errno);
    uint64_t bits = 0;
    errno = 0;
    r = syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits);
    printf("orphan ARCH_GET_XCOMP_PERM %ld errno=%d xtiledata=%d\n", r, r == 0 ? 0 : errno,
           r == 0 && (bits >> XFEATURE_XTILEDATA) & 1);
    fflush(stdout);
    execl(argv[1], argv[1], (char *)NULL);
    perror("orphan_xcomp: exec");
    return 1;
}
