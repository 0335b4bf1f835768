/* The handler's own stacks.
 *
 * The kernel runs the SIGILL handler on whatever stack the thread gave it:
 * a sigaltstack exactly AT_MINSIGSTKSZ bytes big is legal, and so is a
 * small thread stack.  Silicon needs none of it for a tile instruction, so
 * the emulation must not either: the registered handler (trap_handler, the
 * assembly entry below) moves to a stack of this module's own before it
 * pushes a single byte, and decoding and emulating run there.  The
 * program's stack holds only the kernel's frame.  A handler of the program
 * that the trap passes a signal on to still runs on the program's stack,
 * below the kernel's frame, as the kernel would run it.
 *
 * Stacks come from a small pool kept for the life of the process: a thread
 * holds one only while its handler runs, so the pool needs one per
 * concurrently trapping thread, not one per thread.  They are mapped ahead
 * of need, from normal context (hstack_prearm: one at install, one more
 * for each thread that prepares itself), because the entry, holding no
 * stack, cannot call mmap.  When no mapped stack is free (an unprepared
 * thread trapping alongside the others, or a nested trap), the entry hands
 * the signal to the C handler on the program's stack, which maps one in
 * the handler (mmap is a plain system call, safe there) at the cost of a
 * few dozen bytes below the kernel's frame, the behaviour before the
 * assembly entry.  When even that fails, the work runs where it is.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <ucontext.h>

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1u << 31) /* linux/signal.h; glibc headers name it only from 2.36 on */
#endif

#define HSTACK_BYTES (128 * 1024) /* room for sanitizer builds too; a plain build needs ~4 KiB */
#define HSTACK_GUARD 4096
#define HSTACK_POOL 64

/* The top of each mapped stack (0: not mapped yet; never unmapped), and
 * whether a handler holds it.  Read by the assembly entry by name. */
__attribute__((visibility("hidden"))) uint8_t *trap_hstack_top[HSTACK_POOL];
__attribute__((visibility("hidden"))) int32_t trap_hstack_busy[HSTACK_POOL];
__attribute__((visibility("hidden"))) const uint64_t trap_hstack_all_signals = ~(uint64_t)0;
static int32_t g_want;

/* The entry reads these fields by offset. */
_Static_assert(offsetof(siginfo_t, si_code) == 8, "si_code offset");
_Static_assert(offsetof(ucontext_t, uc_stack) == 16 && offsetof(stack_t, ss_sp) == 0 &&
                   offsetof(stack_t, ss_flags) == 8 && offsetof(stack_t, ss_size) == 16,
               "uc_stack layout");
_Static_assert(SS_DISABLE == 2 && SIG_SETMASK == 2 && SYS_rt_sigprocmask == 14, "constants in the entry");

#if defined(__CET__) && (__CET__ & 1)
#define ENDBR "endbr64\n"
#else
#define ENDBR ""
#endif

/* trap_handler(sig, info, uc), the registered SIGILL handler.
 *
 * A SIGILL the CPU raised (si_code > 0) is worked on a pool stack: the
 * entry claims one with a compare-and-swap, blocks every signal if the
 * kernel's frame lies on a sigaltstack that stays armed (once rsp has left
 * it, the kernel would start the next SA_ONSTACK frame at its top, over
 * this one), moves rsp there and only then calls trap_handler_work(), so
 * nothing at all is written below the kernel's frame.  The words it keeps
 * (the program's rsp, the slot, the saved mask, the arguments) lie at the
 * top of the claimed stack.  Back on the program's stack it restores the
 * mask, frees the slot and returns to the kernel's restorer, or tail-calls
 * trap_handler_pass() with rsp as the kernel left it when the signal goes
 * on to a handler of the program.  A sent SIGILL (si_code <= 0), a call
 * without info or context (a program calling the handler it read back as a
 * function), or an empty pool: trap_handler_c() on the program's stack.
 *
 * It follows the C ABI (only caller-saved registers are used), because a
 * program may call the handler directly.  No CFI: nothing unwinds through
 * it (the C frames above it end at the kernel's signal frame, which
 * debuggers recognise by the restorer, not by this code); a backtrace taken
 * inside trap_handler_work stops at the switch. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl trap_handler\n"
        ".hidden trap_handler\n"
        ".type trap_handler,@function\n"
        "trap_handler:\n" ENDBR
        "testq %rsi, %rsi\n"
        "jz trap_handler_c\n"
        "testq %rdx, %rdx\n"
        "jz trap_handler_c\n"
        "cmpl $0, 8(%rsi)\n"
        "jle trap_handler_c\n"
        /* claim: the first mapped, free slot */
        "leaq trap_hstack_top(%rip), %r8\n"
        "leaq trap_hstack_busy(%rip), %r9\n"
        "xorl %ecx, %ecx\n"
        "1:\n"
        "cmpq $0, (%r8,%rcx,8)\n"
        "je 2f\n"
        "cmpl $0, (%r9,%rcx,4)\n"
        "jne 2f\n"
        "xorl %eax, %eax\n"
        "movl $1, %r10d\n"
        "lock cmpxchgl %r10d, (%r9,%rcx,4)\n"
        "je 3f\n"
        "2:\n"
        "incl %ecx\n"
        "cmpl $" "64" ", %ecx\n"
        "jb 1b\n"
        "jmp trap_handler_c\n"
        "3:\n"
        "movq (%r8,%rcx,8), %r11\n"
        /* the kept words: -8 rsp, -16 slot, -24 masked, -32 old mask, -40 sig, -48 info, -56 uc */
        "movq %rsp, -8(%r11)\n"
        "movq %rcx, -16(%r11)\n"
        "movq $0, -24(%r11)\n"
        "movq %rdi, -40(%r11)\n"
        "movq %rsi, -48(%r11)\n"
        "movq %rdx, -56(%r11)\n"
        /* exposed: uc_stack armed (no SS_DISABLE, no SS_AUTODISARM) and holding uc */
        "testl $0x80000002, 24(%rdx)\n"
        "jnz 4f\n"
        "movq %rdx, %rax\n"
        "subq 16(%rdx), %rax\n"
        "cmpq 32(%rdx), %rax\n"
        "jae 4f\n"
        "movq %r11, %r8\n"
        "movl $2, %edi\n"
        "leaq trap_hstack_all_signals(%rip), %rsi\n"
        "leaq -32(%r8), %rdx\n"
        "movl $8, %r10d\n"
        "movl $14, %eax\n"
        "syscall\n"
        "testq %rax, %rax\n"
        "jnz 5f\n"
        "movq $1, -24(%r8)\n"
        "5:\n"
        "movq %r8, %r11\n"
        "movq -40(%r11), %rdi\n"
        "movq -48(%r11), %rsi\n"
        "movq -56(%r11), %rdx\n"
        "4:\n"
        "leaq -64(%r11), %rsp\n" /* 16-byte aligned: the top is page aligned */
        "call trap_handler_work\n"
        "leaq 64(%rsp), %r8\n"
        "movl %eax, %r9d\n"
        "movq -8(%r8), %rsp\n" /* the program's stack again, as the kernel left it */
        "cmpq $0, -24(%r8)\n"
        "je 6f\n"
        "movl $2, %edi\n"
        "leaq -32(%r8), %rsi\n"
        "xorl %edx, %edx\n"
        "movl $8, %r10d\n"
        "movl $14, %eax\n"
        "syscall\n"
        "6:\n"
        "movq -16(%r8), %rcx\n"
        "movq -40(%r8), %rdi\n"
        "movq -48(%r8), %rsi\n"
        "movq -56(%r8), %rdx\n"
        "leaq trap_hstack_busy(%rip), %rax\n"
        "movl $0, (%rax,%rcx,4)\n" /* a plain store releases on x86 */
        "testl %r9d, %r9d\n"
        "jz 7f\n"
        "movl %r9d, %ecx\n"
        "jmp trap_handler_pass\n"
        "7:\n"
        "ret\n"
        ".size trap_handler, .-trap_handler\n");

/* fn(arg) with rsp at `top` (16-byte aligned); returns on the caller's
 * stack.  CFI keeps debuggers' and profilers' backtraces whole across it. */
void trap_call_on_stack(void (*fn)(void *), void *arg, void *top);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl trap_call_on_stack\n"
        ".hidden trap_call_on_stack\n"
        ".type trap_call_on_stack,@function\n"
        "trap_call_on_stack:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "movq %rsp, %rbp\n"
        ".cfi_def_cfa_register %rbp\n"
        "movq %rdx, %rsp\n"
        "movq %rdi, %rax\n"
        "movq %rsi, %rdi\n"
        "call *%rax\n"
        "movq %rbp, %rsp\n"
        "popq %rbp\n"
        ".cfi_def_cfa %rsp, 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size trap_call_on_stack, .-trap_call_on_stack\n");

static long raw_sigprocmask(int how, const uint64_t *set, uint64_t *old)
{
    return syscall(SYS_rt_sigprocmask, how, set, old, sizeof(uint64_t));
}

/* Maps slot s's stack, which the caller holds; 0 or -1. */
static int map_slot(int s)
{
    void *p = mmap(NULL, HSTACK_GUARD + HSTACK_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    mprotect(p, HSTACK_GUARD, PROT_NONE); /* an overflow faults instead of writing below */
    __atomic_store_n(&trap_hstack_top[s], (uint8_t *)p + HSTACK_GUARD + HSTACK_BYTES, __ATOMIC_RELEASE);
    return 0;
}

static int take(int s)
{
    int32_t expect = 0;
    return __atomic_load_n(&trap_hstack_busy[s], __ATOMIC_RELAXED) == 0 &&
           __atomic_compare_exchange_n(&trap_hstack_busy[s], &expect, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static uint8_t *claim(int *index)
{
    unsigned start = (unsigned)trap_tid() % HSTACK_POOL;
    for (unsigned n = 0; n < HSTACK_POOL; n++) {
        unsigned s = (start + n) % HSTACK_POOL;
        if (!take((int)s))
            continue;
        if (__atomic_load_n(&trap_hstack_top[s], __ATOMIC_ACQUIRE) == NULL && map_slot((int)s) != 0) {
            __atomic_store_n(&trap_hstack_busy[s], 0, __ATOMIC_RELEASE);
            return NULL;
        }
        *index = (int)s;
        return trap_hstack_top[s];
    }
    return NULL;
}

int hstack_holds(const void *p)
{
    uintptr_t at = (uintptr_t)p;
    for (int s = 0; s < HSTACK_POOL; s++) {
        uintptr_t top = (uintptr_t)__atomic_load_n(&trap_hstack_top[s], __ATOMIC_ACQUIRE);
        if (top && at < top && at >= top - HSTACK_BYTES)
            return 1;
    }
    return 0;
}

void hstack_prearm(void)
{
    int want = __atomic_add_fetch(&g_want, 1, __ATOMIC_RELAXED);
    int mapped = 0;
    for (int s = 0; s < HSTACK_POOL; s++)
        mapped += __atomic_load_n(&trap_hstack_top[s], __ATOMIC_ACQUIRE) != NULL;
    for (int s = 0; s < HSTACK_POOL && mapped < want; s++) {
        if (__atomic_load_n(&trap_hstack_top[s], __ATOMIC_ACQUIRE) != NULL || !take(s))
            continue;
        if (__atomic_load_n(&trap_hstack_top[s], __ATOMIC_ACQUIRE) == NULL && map_slot(s) == 0)
            mapped++;
        __atomic_store_n(&trap_hstack_busy[s], 0, __ATOMIC_RELEASE);
    }
}

/* Whether the kernel would put another signal's frame over this one: the
 * frame lies on the sigaltstack, which stays armed (no SS_AUTODISARM), and
 * once rsp has left it the kernel starts the next SA_ONSTACK frame at its
 * top again. */
static int frame_exposed(const ucontext_t *uc)
{
    const stack_t *ss = &uc->uc_stack;
    uintptr_t at = (uintptr_t)uc, lo = (uintptr_t)ss->ss_sp;
    if (ss->ss_flags & (SS_DISABLE | SS_AUTODISARM))
        return 0;
    return at >= lo && at - lo < ss->ss_size;
}

void trap_on_own_stack(void (*fn)(void *), void *arg, const ucontext_t *uc)
{
    int index = -1;
    uint8_t *top = claim(&index);
    if (top == NULL) {
        fn(arg);
        return;
    }
    uint64_t all = ~(uint64_t)0, old = 0;
    int masked = uc != NULL && frame_exposed(uc) && raw_sigprocmask(SIG_SETMASK, &all, &old) == 0;
    trap_call_on_stack(fn, arg, top);
    if (masked)
        raw_sigprocmask(SIG_SETMASK, &old, NULL);
    __atomic_store_n(&trap_hstack_busy[index], 0, __ATOMIC_RELEASE);
}
