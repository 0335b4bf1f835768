/* csrc/trap/base/self_copy.c's copy, on its own: a bad address is EFAULT, never a
 * SIGSEGV, both where process_vm_readv works and where a seccomp profile
 * forbids it (as Docker's default one does), which this program then sets
 * up for itself.  Built with csrc/trap/base/self_copy.c.
 *
 *     self_copy
 *
 * Prints one line per case, "<case> <result>", the result being 0 (copied,
 * and the bytes arrived) or the errno the copy answered; then the way the
 * copies went ("process_vm_readv EPERM" once forbidden) and how many
 * descriptors the pipe path left open (0).
 */
#define _GNU_SOURCE 1
#include "base/base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "case_kit.h"

static void cases(const char *how, char *readonly, char *unmapped)
{
    uint64_t value = 0x0123456789abcdefull, out = 0;
    int r = self_copy(&out, &value, sizeof value);
    printf("%s good %d\n", how, r == 0 && out == value ? 0 : r ? r : -1);
    printf("%s bad-source %d\n", how, self_copy(&out, (void *)8, sizeof out));
    printf("%s bad-destination %d\n", how, self_copy((void *)8, &value, sizeof value));
    printf("%s read-only-destination %d\n", how, self_copy(readonly, &value, sizeof value));
    printf("%s unmapped-source %d\n", how, self_copy(&out, unmapped, sizeof out));
    /* Across the end of a readable page into an unmapped one. */
    printf("%s straddling-source %d\n", how, self_copy(&out, unmapped - 4, sizeof out));
}

int main(void)
{
    char *pages = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED || munmap(pages + 4096, 4096) != 0 || mprotect(pages, 4096, PROT_READ) != 0)
        return 1;
    cases("direct", pages, pages + 4096);
    if (forbid_process_vm(0) != 0) {
        perror("seccomp");
        return 1;
    }
    uint64_t a = 1, b = 0;
    struct iovec local = {&b, sizeof b}, remote = {&a, sizeof a};
    errno = 0;
    long r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    printf("process_vm_readv %s\n", r < 0 && errno == EPERM ? "EPERM" : "allowed");
    int before = dup(0);
    cases("pipe", pages, pages + 4096);
    int after = dup(0);
    printf("descriptors left open %d\n", after - before - 1);
    return 0;
}
