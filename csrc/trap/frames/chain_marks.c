/* Which threads are inside a call the SIGILL handler made to the program's
 * own SIGILL handler (sigill_handler.c, pass_on_sigill), so that a SIGILL that
 * handler sends from inside itself (faulthandler re-raises) takes the
 * default action instead of going round again.  Used only while no guard
 * answers sigaction(SIGILL): with it, the handler a re-raise reaches is
 * known (sigill_handler.c).
 *
 * A thread's marks are its own: two threads in such calls at once never
 * see each other's.  A mark says where the call was made (the frame of
 * pass_on_sigill) and names a word in that frame that holds a fresh value
 * while the call lasts.  A handler that leaves by siglongjmp (a CPU-feature
 * probe) never returns to clear its mark; the stale mark must not make a
 * later SIGILL sent from deeper on the stack pass for a re-raise, so
 *   - pyamx run's preload sees the jump (its longjmp interposers) and drops
 *     the marks the jump leaves (chainmark_jump);
 *   - otherwise the word must still hold its value, read through the kernel
 *     (the stack it lies on may be gone); code that ran there since has
 *     usually written over it, not always (docs/trap.md says what remains).
 * A thread's entry stays claimed while it has marks; an entry whose thread
 * is gone (it jumped out unseen, then ended) is taken back when the table
 * runs out.
 *
 * Everything here runs in signal handlers: no locks, no malloc.
 */
#define _GNU_SOURCE 1
#include "frames.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

/* Threads inside chained calls at once; a thread that finds no room is
 * not marked (its handler's re-raise goes round once more, then is caught
 * by the mark it makes then, if room has come). */
enum { CHAIN_THREADS = 64, CHAIN_DEPTH = 4 };

/* How far below a mark's frame a re-raise from inside the chained call can
 * be: the handler's frames and raise()'s, far less than this; the nearest
 * other stack is farther (the kernel keeps 128 MiB or more between the
 * main stack and mappings, threads' stacks are separate mappings). */
#define CHAINED_CALL_REACH ((uintptr_t)256 << 10)

struct chain_thread {
    int32_t tid; /* 0: free; written by its thread only, once claimed */
    int32_t depth;
    struct {
        uintptr_t frame;
        const volatile uint64_t *live_at;
        uint64_t live;
    } mark[CHAIN_DEPTH];
};

static struct chain_thread g_threads[CHAIN_THREADS];
static uint64_t g_serial;
/* Entries claimed: while none is, a jump (every longjmp of the program,
 * under pyamx run) costs one load. */
static int32_t g_claimed;

static struct chain_thread *find(int32_t tid)
{
    if (__atomic_load_n(&g_claimed, __ATOMIC_ACQUIRE) == 0)
        return NULL;
    for (int i = 0; i < CHAIN_THREADS; i++)
        if (__atomic_load_n(&g_threads[i].tid, __ATOMIC_ACQUIRE) == tid)
            return &g_threads[i];
    return NULL;
}

static int thread_gone(int32_t tid)
{
    int saved = errno;
    int gone = syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH;
    errno = saved;
    return gone;
}

static struct chain_thread *claim(int32_t tid)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < CHAIN_THREADS; i++) {
            struct chain_thread *t = &g_threads[i];
            int32_t holder = __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE);
            if (holder != 0 && (pass == 0 || !thread_gone(holder)))
                continue;
            if (__atomic_compare_exchange_n(&t->tid, &holder, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (holder == 0)
                    __atomic_add_fetch(&g_claimed, 1, __ATOMIC_ACQ_REL);
                t->depth = 0;
                return t;
            }
        }
    return NULL;
}

static void drop_thread_if_unmarked(struct chain_thread *t)
{
    if (t->depth == 0) {
        __atomic_store_n(&t->tid, 0, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&g_claimed, 1, __ATOMIC_ACQ_REL);
    }
}

int chainmark_enter(uintptr_t frame, volatile uint64_t *live_at)
{
    int32_t me = trap_tid();
    struct chain_thread *t = find(me);
    if (t == NULL && (t = claim(me)) == NULL)
        return -1;
    if (t->depth >= CHAIN_DEPTH)
        return -1; /* the outer marks cover deeper calls: they lie above them */
    uint64_t live = __atomic_add_fetch(&g_serial, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull ^ frame;
    if (live == 0)
        live = 1;
    *live_at = live;
    int index = t->depth;
    t->mark[index].frame = frame;
    t->mark[index].live_at = live_at;
    t->mark[index].live = live;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t->depth = index + 1;
    return index;
}

void chainmark_leave(int index, volatile uint64_t *live_at)
{
    *live_at = 0;
    if (index < 0)
        return;
    struct chain_thread *t = find(trap_tid());
    if (t == NULL)
        return;
    /* A jump out of an inner call left its marks to this one: drop those too. */
    if (t->depth > index)
        t->depth = index;
    drop_thread_if_unmarked(t);
}

int chainmark_inside(uintptr_t interrupted_sp)
{
    struct chain_thread *t = find(trap_tid());
    if (t == NULL)
        return 0;
    for (int i = t->depth - 1; i >= 0; i--) {
        uintptr_t frame = t->mark[i].frame;
        if (interrupted_sp >= frame || frame - interrupted_sp >= CHAINED_CALL_REACH)
            continue;
        uint64_t word = 0;
        if (self_copy(&word, (const void *)t->mark[i].live_at, sizeof word) == 0 && word == t->mark[i].live)
            return 1;
    }
    return 0;
}

void chainmark_jump(uintptr_t target_sp)
{
    if (__atomic_load_n(&g_claimed, __ATOMIC_ACQUIRE) == 0)
        return;
    struct chain_thread *t = find(trap_tid());
    if (t == NULL)
        return;
    /* A mark's frame lies below the code that made the chained call; a jump
     * to a stack pointer above it leaves that call for good. */
    while (t->depth > 0 && t->mark[t->depth - 1].frame < target_sp)
        t->depth--;
    drop_thread_if_unmarked(t);
}
