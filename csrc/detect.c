/* Build facts and the raw values of AMX detection.
 *
 * Compiled for baseline x86-64: nothing here executes a tile instruction in
 * this process. The judgement of the raw values lives in pyamx/cpu/detect.py
 * (pure, tested with recorded values); this file only reads registers and
 * asks the kernel, and owns the flag that lets the kernels run.
 */
#include "pyamx.h"
#include "internal.h"
#include "cpu_features.h"

#include <errno.h>

#if PYAMX_X86_64_LINUX
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#ifndef PYAMX_VERSION
#define PYAMX_VERSION "unknown"
#endif
#ifndef PYAMX_BUILD_KERNELS_REASON
#define PYAMX_BUILD_KERNELS_REASON "not recorded: this module was not built by build.py"
#endif

#define XFEATURE_XTILEDATA 18
#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023

/* 0: nothing granted; 1: the kernel granted permission but no tile
 * instruction has been seen to work yet; 2: kernels may run. Written only
 * by the permission request and the child probe, read by every kernel. */
static volatile int g_native_state = 0;

/* Set by pyamx/cpu/trap.py: the trap module's emulated permission request and
 * its per-thread preparation (the one link between pyamx._trap and this
 * module). */
static int (*volatile g_trap_grant)(void);
static int32_t (*volatile g_trap_thread_prepare)(void);

void pyamx_set_trap_hook(int (*grant)(void), int32_t (*thread_prepare)(void))
{
    g_trap_thread_prepare = thread_prepare;
    g_trap_grant = grant;
}

int pyamx_internal_ready(void) { return g_native_state == 2; }

/* Set with g_native_state = 2 when the grant came from the trap mode. */
static volatile int g_trapped = 0;

int pyamx_internal_trapped(void) { return g_trapped; }

static volatile int g_complemented = 0;

void pyamx_set_complemented(int on) { g_complemented = on != 0; }

int pyamx_internal_emulated(void) { return g_trapped || g_complemented; }


int pyamx_internal_thread_prepare(void)
{
    /* Without it a worker's emulated tile state would stay claimed after
     * the thread ends (until the trap's table fills and reaps it). */
    int32_t (*prepare)(void) = g_trap_thread_prepare;
    if (g_trapped && prepare)
        return prepare() == 0 ? 0 : -1;
    return 0;
}

const char *pyamx_build_version(void) { return PYAMX_VERSION; }

const char *pyamx_build_compiler(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#elif defined(_MSC_VER)
    return "msvc";
#else
    return "unknown";
#endif
}

int pyamx_build_kernels(void)
{
#if PYAMX_HAVE_AMX
    return PYAMX_KERNEL_BF16 | PYAMX_KERNEL_INT8 | PYAMX_KERNEL_FP16 | PYAMX_KERNEL_FP8 | PYAMX_KERNEL_COMPLEX;
#else
    return 0;
#endif
}

const char *pyamx_build_kernels_reason(void) { return PYAMX_BUILD_KERNELS_REASON; }

/* CPUID answers by op id, asked once: CPUID is a VM exit under a hypervisor
 * (microseconds), and a row's bit never changes. 0 unknown, 1 yes, 2 no. */
static unsigned char g_cpu_has_row[64];

int pyamx_cpu_has_op_feature(int op)
{
    if (op <= PYAMX_OP_NONE || op >= PYAMX_OP_TRAITS_COUNT)
        return 0;
    if (!PYAMX_X86_64_LINUX)
        return 0;
    if (op >= (int)sizeof g_cpu_has_row)
        return pyamx_cpu_has_row_feature(&pyamx_op_traits[op]);
    unsigned char known = __atomic_load_n(&g_cpu_has_row[op], __ATOMIC_RELAXED);
    if (!known) {
        known = pyamx_cpu_has_row_feature(&pyamx_op_traits[op]) ? 1 : 2;
        __atomic_store_n(&g_cpu_has_row[op], known, __ATOMIC_RELAXED);
    }
    return known == 1;
}

int pyamx_internal_row_runnable(int op)
{
    const struct pyamx_op_traits *t = pyamx_dot_traits(op);
    if (!t)
        return 0;
    int group = pyamx_dot_kernel_group(t);
    if (!group || !(pyamx_build_kernels() & group))
        return 0;
    if (g_trapped || g_complemented)
        return 1; /* the trap mode emulates every dot row; the complement mode the ones the CPU lacks */
    return pyamx_cpu_has_op_feature(op);
}

int pyamx_build_x86_64_linux(void) { return PYAMX_X86_64_LINUX; }

int pyamx_native_ready(void) { return pyamx_internal_ready(); }

int pyamx_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *out4)
{
#if PYAMX_X86_64_LINUX
    return pyamx_cpu_cpuid(leaf, subleaf, out4) ? PYAMX_OK : PYAMX_E_ARG;
#else
    (void)leaf; (void)subleaf;
    out4[0] = out4[1] = out4[2] = out4[3] = 0;
    return PYAMX_E_UNSUPPORTED;
#endif
}

int pyamx_xgetbv0(uint64_t *out)
{
#if PYAMX_X86_64_LINUX
    return pyamx_cpu_xcr0(out) ? PYAMX_OK : PYAMX_E_ARG;
#else
    *out = 0;
    return PYAMX_E_UNSUPPORTED;
#endif
}

/* Returns 0 or the errno of ARCH_GET_XCOMP_SUPP / ARCH_GET_XCOMP_PERM. */
int pyamx_arch_prctl_get(int code, uint64_t *out)
{
    *out = 0;
#if PYAMX_X86_64_LINUX
    if (code != ARCH_GET_XCOMP_SUPP && code != ARCH_GET_XCOMP_PERM)
        return EINVAL;
    unsigned long value = 0;
    if (syscall(SYS_arch_prctl, code, &value) != 0)
        return errno;
    *out = value;
    return 0;
#else
    (void)code;
    return PYAMX_E_UNSUPPORTED;
#endif
}

/* Returns 0 or the errno of ARCH_REQ_XCOMP_PERM (or of the trap mode's
 * emulated grant, when the trap mode set its hook). */
int pyamx_request_permission(void)
{
#if PYAMX_X86_64_LINUX
    int (*grant)(void) = g_trap_grant;
    if (grant) {
        /* No tile instruction reaches silicon in trap mode, so the grant
         * is final: there is nothing for a child probe to prove. */
        int err = grant();
        if (err == 0) {
            g_trapped = 1;
            g_native_state = 2;
        }
        return err;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, (unsigned long)XFEATURE_XTILEDATA) != 0)
        return errno;
    if (g_native_state == 0)
        g_native_state = 1;
    return 0;
#else
    return PYAMX_E_UNSUPPORTED;
#endif
}

#if PYAMX_X86_64_LINUX
/* LDTILECFG + TILEZERO + TILERELEASE; only ever called in the forked child
 * of pyamx_probe_child().  Raw encodings rather than mnemonics: the probe
 * must exist in every x86-64 build, whatever the assembler knows, because it
 * is how detection catches a hypervisor that advertises AMX without
 * delivering it. */
static void probe_tile_instruction(void)
{
    static const uint8_t cfg[64] __attribute__((aligned(64))) = {[0] = 1, [16] = 4, [48] = 1};
    __asm__ volatile(
        ".byte 0xc4, 0xe2, 0x78, 0x49, 0x00\n\t" /* LDTILECFG (%rax) */
        ".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0\n\t" /* TILEZERO tmm0 */
        ".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0\n\t" /* TILERELEASE */
        :
        : "a"(cfg)
        : "memory");
}
#endif

/* Fork a child that runs LDTILECFG + TILEZERO + TILERELEASE, wait for it and
 * hand back its wait status. Returns 0, an errno (fork/waitpid), or
 * PYAMX_E_NOT_READY when permission was not granted first: the child would
 * die for that reason alone and prove nothing. A clean exit marks the
 * kernels usable in this process. */
int pyamx_probe_child(int *wait_status)
{
    *wait_status = 0;
#if PYAMX_X86_64_LINUX
    if (g_native_state == 0)
        return PYAMX_E_NOT_READY;
    pid_t pid = fork();
    if (pid < 0)
        return errno;
    if (pid == 0) {
        /* Only async-signal-safe calls here: the parent may have threads.
         * Default dispositions, so an inherited handler (faulthandler under
         * pytest) cannot turn the verdict into a traceback; no core file;
         * a watchdog in case a hypervisor hangs instead of faulting. */
        struct sigaction dfl;
        dfl.sa_handler = SIG_DFL;
        dfl.sa_flags = 0;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGILL, &dfl, 0);
        sigaction(SIGSEGV, &dfl, 0);
        sigaction(SIGBUS, &dfl, 0);
        sigaction(SIGALRM, &dfl, 0);
        struct rlimit nocore = {0, 0};
        setrlimit(RLIMIT_CORE, &nocore);
        alarm(10);
        probe_tile_instruction();
        _exit(0);
    }
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, 0);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return errno;
    }
    *wait_status = status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        g_native_state = 2;
    return 0;
#else
    return PYAMX_E_UNSUPPORTED;
#endif
}
