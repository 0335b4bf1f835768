/* The SIGILL disposition in the kernel's terms: this module's own
 * rt_sigaction call site, and the disposition other code believes in (the
 * handler this mode chains to).
 *
 * The module changes the real disposition only through one syscall
 * instruction, so that the guard's seccomp filter can tell these calls
 * from everyone else's by their address alone (a filter cannot read
 * memory, and rt_sigaction has no spare argument to mark them with).
 */
#include "internal.h"

/* rdi, rsi, rdx, rcx -> the syscall's rdi, rsi, rdx, r10.  r9, which
 * rt_sigaction ignores, carries TRAP_SITE_MARK: the guard's filter lets
 * calls with it through.  A mark rather than the site's address because
 * filters survive exec: the filter of a program that exec'd another
 * preloaded one (pyamx run) must still let the new program's site through,
 * which sits at another address. */
__asm__(".text\n"
        ".globl pyamx_trap__sigaction_site\n"
        ".hidden pyamx_trap__sigaction_site\n"
        ".type pyamx_trap__sigaction_site, @function\n"
        "pyamx_trap__sigaction_site:\n"
        "    movq %rcx, %r10\n"
        "    movabsq $0x70796d7874726170, %r9\n" /* TRAP_SITE_MARK */
        "    movl $13, %eax\n" /* __NR_rt_sigaction on x86-64 */
        "    syscall\n"
        ".globl pyamx_trap__sigaction_after\n"
        ".hidden pyamx_trap__sigaction_after\n"
        "pyamx_trap__sigaction_after:\n"
        /* The mark must not outlive the call: a raw rt_sigaction the
         * program makes next with r9 untouched would pass for this site's. */
        "    xorl %r9d, %r9d\n"
        "    ret\n"
        ".size pyamx_trap__sigaction_site, .-pyamx_trap__sigaction_site\n");

long pyamx_trap__sigaction_site(long sig, const void *act, void *old, unsigned long size);

/* The signal-return trampoline the kernel needs for a handler installed
 * without libc.  These exact bytes (mov $15, %rax; syscall) are what gdb
 * and libgcc's unwinder recognise as a signal frame, as glibc's own. */
__asm__(".text\n"
        ".globl pyamx_trap__restore_rt\n"
        ".hidden pyamx_trap__restore_rt\n"
        ".type pyamx_trap__restore_rt, @function\n"
        "    nop\n" /* unwinders look at pc - 1 */
        "pyamx_trap__restore_rt:\n"
        "    movq $15, %rax\n" /* __NR_rt_sigreturn */
        "    syscall\n"
        ".size pyamx_trap__restore_rt, .-pyamx_trap__restore_rt\n");
extern const char pyamx_trap__restore_rt[];

uint64_t trap_restorer(void) { return (uint64_t)(uintptr_t)pyamx_trap__restore_rt; }

_Static_assert(TRAP_SITE_MARK == 0x70796d7874726170ull, "the call site hard-codes the mark");
_Static_assert(SYS_rt_sigaction == 13, "the call site hard-codes rt_sigaction's number");

long trap_raw_sigaction(int sig, const struct ksigaction *act, struct ksigaction *old)
{
    return pyamx_trap__sigaction_site(sig, act, old, sizeof(uint64_t));
}


/* A sequence lock: even = stable.  The one writer at a time is serialised
 * by trap_lock() and never runs on a thread that could be interrupted by
 * this module's handler in the middle (writers block SIGILL, the guard's
 * supervisor blocks everything), so a reader's retry loop always ends. */
static uint32_t g_seq;
static uint64_t g_chain[4];

void chain_get(struct ksigaction *out)
{
    for (;;) {
        uint32_t s1 = __atomic_load_n(&g_seq, __ATOMIC_ACQUIRE);
        uint64_t v[4];
        for (int i = 0; i < 4; i++)
            v[i] = __atomic_load_n(&g_chain[i], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (!(s1 & 1) && __atomic_load_n(&g_seq, __ATOMIC_RELAXED) == s1) {
            out->handler = v[0];
            out->flags = v[1];
            out->restorer = v[2];
            out->mask = v[3];
            return;
        }
    }
}

void chain_set(const struct ksigaction *in)
{
    uint32_t s = __atomic_load_n(&g_seq, __ATOMIC_RELAXED);
    __atomic_store_n(&g_seq, s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&g_chain[0], in->handler, __ATOMIC_RELAXED);
    __atomic_store_n(&g_chain[1], in->flags, __ATOMIC_RELAXED);
    __atomic_store_n(&g_chain[2], in->restorer, __ATOMIC_RELAXED);
    __atomic_store_n(&g_chain[3], in->mask, __ATOMIC_RELAXED);
    __atomic_store_n(&g_seq, s + 2, __ATOMIC_RELEASE);
}

/* Set by the guard while its supervisor answers this process's calls
 * (seccomp_guard.c); read by the handler and the arch_prctl emulation, which sit
 * below the guard and so learn it here rather than from the guard. */
static int32_t g_guarded;

int chain_guarded(void) { return __atomic_load_n(&g_guarded, __ATOMIC_ACQUIRE); }

void chain_set_guarded(int on) { __atomic_store_n(&g_guarded, on ? 1 : 0, __ATOMIC_RELEASE); }
