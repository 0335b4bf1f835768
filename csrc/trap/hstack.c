/* The handler's own stacks.
 *
 * The kernel runs the SIGILL handler on whatever stack the thread gave it:
 * a small sigaltstack (a few hundred bytes above AT_MINSIGSTKSZ is legal)
 * or a small thread stack.  Silicon needs none of it for a tile
 * instruction, so the emulation must not either: decoding and emulating
 * run on a stack of this module's own, and the program's stack holds only
 * the kernel's frame and the few bytes of the entry function.  A handler
 * of the program that the trap passes a signal on to still runs on the
 * program's stack, below the kernel's frame, as the kernel would run it.
 *
 * Stacks come from a small pool, mapped on first use (mmap is a plain
 * system call, safe in a handler) and kept for the life of the process:
 * a thread holds one only while its handler runs, so the pool needs one
 * per concurrently trapping thread, not one per thread.  When the pool is
 * exhausted or a mapping fails, the work runs where it is, as before.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <signal.h>
#include <sys/mman.h>

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1u << 31) /* linux/signal.h; glibc headers name it only from 2.36 on */
#endif

#define HSTACK_BYTES (128 * 1024) /* room for sanitizer builds too; a plain build needs ~4 KiB */
#define HSTACK_GUARD 4096
#define HSTACK_POOL 64

static uint8_t *g_stack[HSTACK_POOL];
static int32_t g_busy[HSTACK_POOL];

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

static uint8_t *claim(int *index)
{
    unsigned start = (unsigned)trap_tid() % HSTACK_POOL;
    for (unsigned n = 0; n < HSTACK_POOL; n++) {
        unsigned s = (start + n) % HSTACK_POOL;
        int32_t expect = 0;
        if (__atomic_load_n(&g_busy[s], __ATOMIC_RELAXED) != 0 ||
            !__atomic_compare_exchange_n(&g_busy[s], &expect, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        uint8_t *base = __atomic_load_n(&g_stack[s], __ATOMIC_ACQUIRE);
        if (base == NULL) {
            void *p = mmap(NULL, HSTACK_GUARD + HSTACK_BYTES, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
            if (p == MAP_FAILED) {
                __atomic_store_n(&g_busy[s], 0, __ATOMIC_RELEASE);
                return NULL;
            }
            mprotect(p, HSTACK_GUARD, PROT_NONE); /* an overflow faults instead of writing below */
            base = p;
            __atomic_store_n(&g_stack[s], base, __ATOMIC_RELEASE);
        }
        *index = (int)s;
        return base + HSTACK_GUARD + HSTACK_BYTES;
    }
    return NULL;
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
    __atomic_store_n(&g_busy[index], 0, __ATOMIC_RELEASE);
}
