/* What the case programs in this folder share: tile instructions spelled as
 * bytes (so any x86-64 compiler builds them, with no AMX flag, and a CPU
 * without AMX traps on them), the permission request, the kernel's struct
 * sigaction, the "CASE ok" / "CASE FAIL: why" line, and a seccomp filter
 * that forbids process_vm_* as Docker's default profile does.
 *
 * Header-only, every function static inline: each program takes what it
 * uses and -Wall says nothing of the rest. */
#ifndef PYAMX_TEST_CASE_KIT_H
#define PYAMX_TEST_CASE_KIT_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

/* Register operands are fixed by the encodings: the address in rdi, the
 * stride in rsi (sibmem [rdi+rsi*1]). */
static inline void ldtilecfg(const uint8_t *cfg) { __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0x07" ::"D"(cfg) : "memory"); }
static inline void sttilecfg(uint8_t *cfg) { __asm__ volatile(".byte 0xc4,0xe2,0x79,0x49,0x07" ::"D"(cfg) : "memory"); }
static inline void tilerelease(void) { __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0xc0" ::: "memory"); }
static inline void load0(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x04,0x37" ::"D"(p), "S"(s) : "memory"); }
static inline void load1(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x0c,0x37" ::"D"(p), "S"(s) : "memory"); }
static inline void load2(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x14,0x37" ::"D"(p), "S"(s) : "memory"); }
static inline void store0(void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7a,0x4b,0x04,0x37" ::"D"(p), "S"(s) : "memory"); }
static inline void tilezero0(void) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x49,0xc0" ::: "memory"); }
/* TDPBSSD tmm0, tmm1, tmm2 */
static inline void dp_ss(void) { __asm__ volatile(".byte 0xc4,0xe2,0x6b,0x5e,0xc1" ::: "memory"); }
/* TDPBF16PS tmm0, tmm1, tmm2 */
static inline void tdpbf16ps(void) { __asm__ volatile(".byte 0xc4,0xe2,0x6a,0x5c,0xc1" ::: "memory"); }

/* ARCH_REQ_XCOMP_PERM for XTILEDATA, as every AMX program must; a program
 * that cannot have it has nothing to test (exit status 2). */
static inline void request_tile_permission(void)
{
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM)");
        exit(2);
    }
}

/* The kernel's struct sigaction on x86-64, for raw rt_sigaction calls. */
struct ksa {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

static inline int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* One line for a case (why: NULL when it passed), flushed at once so that
 * a case that kills the process leaves the earlier lines; 1 if it failed. */
static inline int report(const char *name, const char *why)
{
    if (why)
        printf("%s FAIL: %s\n", name, why);
    else
        printf("%s ok\n", name);
    fflush(stdout);
    return why != NULL;
}

/* process_vm_readv/writev fail with EPERM from now on; flags: 0 or
 * SECCOMP_FILTER_FLAG_TSYNC (every thread, an emulation's own included).
 * 0, or -1 with errno. */
static inline int forbid_process_vm(unsigned int flags)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

#endif
