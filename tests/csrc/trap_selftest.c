/* Test-only kernels for the trap-and-emulate mode (csrc/trap/), built only
 * for the tests (tests/trap_selftest_build.py), never shipped.
 *
 * They execute real AMX instructions.  Under trap mode on a CPU without
 * AMX each one traps and is emulated; on a CPU with AMX they would run on
 * silicon (after arch_prctl), which makes them usable as a reference there
 * too.  The addressing forms are pinned with inline asm and register
 * variables so the tests exercise r12/r13 bases, disp8/disp32, scaled and
 * missing indexes and VEX.R/X/B on real trapped instructions, not only in
 * the pure decoder.
 *
 * gcc 12's own intrinsics are used for the plain kernel because that is
 * what the extension's kernels use; note that its _tile_loadd/_tile_stored
 * asm has no "memory" clobber and _tile_loadconfig declares an 8-byte
 * operand, so every asm here carries a "memory" clobber of its own.
 */
#define _GNU_SOURCE 1 /* REG_RIP */
#include "trap_selftest.h"

#include <stdint.h>
#include <stddef.h>

#if !defined(__x86_64__) || !defined(__linux__)
#error "the trap self-test kernels are x86-64 Linux only"
#endif

#include <errno.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,amx-int8"), noinline))

#define LDTILECFG(p) __asm__ volatile("ldtilecfg %0" ::"m"(*(const uint8_t(*)[64])(p)) : "memory")
#define STTILECFG(p) __asm__ volatile("sttilecfg %0" : "=m"(*(uint8_t(*)[64])(p))::"memory")

AMX_TARGET int32_t pyamx_trap_selftest_dot(int32_t op, const uint8_t *cfg, const void *a,
                                           int64_t lda, const void *b, int64_t ldb, void *c,
                                           int64_t ldc)
{
    LDTILECFG(cfg);
    __asm__ volatile("" ::: "memory");
    _tile_loadd(0, c, ldc);
    _tile_loadd(1, a, lda);
    _tile_loadd(2, b, ldb);
    switch (op) {
    case PYAMX_OP_TDPBF16PS: _tile_dpbf16ps(0, 1, 2); break;
    case PYAMX_OP_TDPFP16PS:
        /* gcc 12 has no amx-fp16: tdpfp16ps %tmm2, %tmm1, %tmm0 */
        __asm__ volatile(".byte 0xc4, 0xe2, 0x6b, 0x5c, 0xc1" ::: "memory");
        break;
    case PYAMX_OP_TDPBSSD: _tile_dpbssd(0, 1, 2); break;
    case PYAMX_OP_TDPBSUD: _tile_dpbsud(0, 1, 2); break;
    case PYAMX_OP_TDPBUSD: _tile_dpbusd(0, 1, 2); break;
    case PYAMX_OP_TDPBUUD: _tile_dpbuud(0, 1, 2); break;
    default: _tile_release(); return -1;
    }
    _tile_stored(0, c, ldc);
    __asm__ volatile("" ::: "memory");
    _tile_release();
    return 0;
}

AMX_TARGET int32_t pyamx_trap_selftest_addressing(int32_t form, const uint8_t *cfg,
                                                  const void *src, int64_t stride, void *dst)
{
    uint64_t s = (uint64_t)(uintptr_t)src, d = (uint64_t)(uintptr_t)dst, st = (uint64_t)stride;
    LDTILECFG(cfg);
    switch (form) {
    case 0: /* whatever registers the compiler picks, base + index*1 */
        _tile_loadd(3, src, stride);
        __asm__ volatile("" ::: "memory");
        _tile_stored(3, dst, stride);
        break;
    case 1: { /* r12 base (SIB.base=100+B) / r13 base (mod=01 disp8 0) */
        register uint64_t r12 __asm__("r12") = s;
        register uint64_t r13 __asm__("r13") = st;
        __asm__ volatile("tileloadd (%%r12,%%r13,1), %%tmm3" ::"r"(r12), "r"(r13) : "memory");
        register uint64_t r13b __asm__("r13") = d;
        register uint64_t r12b __asm__("r12") = st;
        __asm__ volatile("tilestored %%tmm3, (%%r13,%%r12,1)" ::"r"(r13b), "r"(r12b) : "memory");
        break;
    }
    case 2: { /* disp8, scale 2 and 4 */
        register uint64_t r13 __asm__("r13") = s - 0x40;
        register uint64_t r12 __asm__("r12") = st / 2;
        __asm__ volatile("tileloadd 0x40(%%r13,%%r12,2), %%tmm5" ::"r"(r13), "r"(r12) : "memory");
        register uint64_t rbx __asm__("rbx") = d + 0x80;
        register uint64_t r8 __asm__("r8") = st / 4;
        __asm__ volatile("tilestored %%tmm5, -0x80(%%rbx,%%r8,4)" ::"r"(rbx), "r"(r8) : "memory");
        break;
    }
    case 3: { /* disp32, scale 8 */
        register uint64_t r9 __asm__("r9") = s - 0x1000;
        register uint64_t rax __asm__("rax") = st / 8;
        __asm__ volatile("tileloadd 0x1000(%%r9,%%rax,8), %%tmm7" ::"r"(r9), "r"(rax) : "memory");
        register uint64_t r12 __asm__("r12") = d;
        register uint64_t r15 __asm__("r15") = st;
        __asm__ volatile("tilestored %%tmm7, (%%r12,%%r15,1)" ::"r"(r12), "r"(r15) : "memory");
        break;
    }
    case 4: { /* no index: stride 0, every row is row 0 of src */
        register uint64_t r11 __asm__("r11") = s;
        __asm__ volatile("tileloadd (%%r11), %%tmm2" ::"r"(r11) : "memory");
        register uint64_t r14 __asm__("r14") = d - 8;
        register uint64_t rcx __asm__("rcx") = st;
        __asm__ volatile("tilestored %%tmm2, 8(%%r14,%%rcx,1)" ::"r"(r14), "r"(rcx) : "memory");
        break;
    }
    case 5: { /* r12 as index (VEX.X), disp8 0x7f */
        register uint64_t rsi __asm__("rsi") = s;
        register uint64_t r12 __asm__("r12") = st;
        __asm__ volatile("tileloadd (%%rsi,%%r12,1), %%tmm1" ::"r"(rsi), "r"(r12) : "memory");
        register uint64_t rdi __asm__("rdi") = d - 0x7f;
        register uint64_t r9 __asm__("r9") = st;
        __asm__ volatile("tilestored %%tmm1, 0x7f(%%rdi,%%r9,1)" ::"r"(rdi), "r"(r9) : "memory");
        break;
    }
    default:
        _tile_release();
        return -1;
    }
    _tile_release();
    return 0;
}

AMX_TARGET void pyamx_trap_selftest_hold(const uint8_t *cfg, int32_t usleep_us, uint8_t *cfg_out)
{
    uint8_t local[64]; /* the compiler addresses it off rsp/rbp */
    uint8_t back[64];
    memcpy(local, cfg, 64);
    LDTILECFG(local);
    if (usleep_us > 0)
        usleep((useconds_t)usleep_us);
    STTILECFG(back);
    memcpy(cfg_out, back, 64);
}

static uint8_t riprel_cfg[64] __attribute__((aligned(64), used));

AMX_TARGET void pyamx_trap_selftest_cfg_riprel(const uint8_t *cfg, uint8_t *cfg_out)
{
    memcpy(riprel_cfg, cfg, 64);
    __asm__ volatile("ldtilecfg riprel_cfg(%%rip)" ::: "memory");
    memset(riprel_cfg, 0xAA, 64);
    __asm__ volatile("sttilecfg riprel_cfg(%%rip)" ::: "memory");
    memcpy(cfg_out, riprel_cfg, 64);
}

AMX_TARGET void pyamx_trap_selftest_ldtilecfg(const uint8_t *cfg) { LDTILECFG(cfg); }

AMX_TARGET void pyamx_trap_selftest_sttilecfg(uint8_t *cfg_out) { STTILECFG(cfg_out); }

AMX_TARGET void pyamx_trap_selftest_tilezero(int32_t tile)
{
    switch (tile) {
    case 0: _tile_zero(0); break;
    case 1: _tile_zero(1); break;
    case 2: _tile_zero(2); break;
    case 3: _tile_zero(3); break;
    case 4: _tile_zero(4); break;
    case 5: _tile_zero(5); break;
    case 6: _tile_zero(6); break;
    default: _tile_zero(7); break;
    }
}

AMX_TARGET void pyamx_trap_selftest_release(void) { _tile_release(); }

AMX_TARGET void pyamx_trap_selftest_dp_same(void)
{
    /* gas refuses to assemble it: tdpbf16ps %tmm1, %tmm0, %tmm0 */
    __asm__ volatile(".byte 0xc4, 0xe2, 0x72, 0x5c, 0xc0" ::: "memory");
}

void pyamx_trap_selftest_ud2(void) { __asm__ volatile("ud2" ::: "memory"); }

AMX_TARGET int32_t pyamx_trap_selftest_loop(int32_t kind, int64_t n)
{
    static uint8_t buf[16 * 64] __attribute__((aligned(64)));
    uint8_t cfg[64] = {0};
    cfg[0] = 1;
    for (int t = 0; t < 8; t++) {
        cfg[16 + 2 * t] = 64;
        cfg[48 + t] = 16;
    }
    LDTILECFG(cfg);
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: STTILECFG(cfg); break;
        case 1: _tile_zero(1); break;
        case 2: _tile_loadd(1, buf, 64); __asm__ volatile("" ::: "memory"); break;
        case 3: _tile_dpbf16ps(0, 1, 2); break;
        default: _tile_release(); return -1;
        }
    }
    _tile_release();
    return 0;
}

int32_t pyamx_trap_selftest_nop(void) { return 0; }

static void skip_ud2(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP] += 2;
}

int64_t pyamx_trap_selftest_raw_sigill_ns(int64_t n)
{
    struct sigaction sa, old;
    struct timespec t0, t1;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = skip_ud2;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGILL, &sa, &old) != 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t i = 0; i < n; i++)
        __asm__ volatile("ud2" ::: "memory");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sigaction(SIGILL, &old, NULL);
    return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}

/* ---- other code's SIGILL handler ---- */

static int64_t g_seen;

static void count_and_skip_ud2(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ctx;
    const uint8_t *rip = (const uint8_t *)uc->uc_mcontext.gregs[REG_RIP];
    __atomic_fetch_add(&g_seen, 1, __ATOMIC_RELAXED);
    if (rip[0] == 0x0F && rip[1] == 0x0B)
        uc->uc_mcontext.gregs[REG_RIP] += 2;
}

/* The signal-return trampoline a raw rt_sigaction must name itself. */
__asm__(".text\n"
        "pyamx_trap_selftest_restorer:\n"
        "    movl $15, %eax\n" /* rt_sigreturn */
        "    syscall\n");
extern char pyamx_trap_selftest_restorer[];

struct kact {
    uint64_t handler, flags, restorer, mask;
};

int32_t pyamx_trap_selftest_set_sigill(int32_t how)
{
    if (how == 1) {
        struct kact k = {(uint64_t)(uintptr_t)count_and_skip_ud2,
                         SA_SIGINFO | SA_NODEFER | 0x04000000 /* SA_RESTORER */,
                         (uint64_t)(uintptr_t)pyamx_trap_selftest_restorer, 0};
        long ret;
        register long r10 __asm__("r10") = 8;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "0"((long)SYS_rt_sigaction), "D"((long)SIGILL), "S"(&k), "d"(0L), "r"(r10)
                         : "rcx", "r11", "memory");
        return (int32_t)ret;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    if (how == 2) {
        sa.sa_handler = SIG_DFL;
    } else {
        sa.sa_sigaction = count_and_skip_ud2;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    }
    return sigaction(SIGILL, &sa, NULL) == 0 ? 0 : -errno;
}

int64_t pyamx_trap_selftest_sigill_seen(void) { return __atomic_load_n(&g_seen, __ATOMIC_RELAXED); }
