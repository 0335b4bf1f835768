/* The program's signal handler frames, for the full trap mode: a handler
 * starts with the init tile state and the interrupted code has its tiles
 * back after the handler returns, as Linux does with the XSAVE image of
 * the signal frame.
 *
 * pyamx run's preload calls the program's handlers through a trampoline
 * (csrc/preload/handlers.c) that opens a record here on entry and closes
 * it on return.  Opening costs a few stores: the interrupted state is
 * saved only when the first tile instruction traps inside the handler
 * (hframes_at_trap), into memory of the thread's tile state slot (thread_state.c),
 * never onto the signal stack, which may be a few hundred bytes.
 *
 * A handler that leaves by siglongjmp never closes its record, and the
 * state it leaves is its own, as on Linux: what it left if it touched
 * tiles, else the init state it started with.  The preload drops such
 * records when it sees the jump (its longjmp interposers).  A jump it
 * cannot see (a call inside libc, an exception unwinding out of a handler)
 * leaves a stale record, so a record also counts as live only while the
 * context that traps runs inside the handler's part of the stack (below
 * the kernel's frame, on the stack the handler was given) and a word the
 * trampoline keeps in its own frame still holds the record's value; each
 * trapping instruction drops the stale records on top (a new handler does
 * too when the records are full).  A stale record taken for live after all
 * changes nothing visible: its handler never returns, and the save and
 * init at the first tile instruction under it is what Linux's jump out of
 * a handler that used no tiles leaves; a record it took for stale in a
 * live handler that switched stacks would lose that handler's frame.
 *
 * Everything here runs in signal handlers: no locks, no malloc.
 */
#define _GNU_SOURCE 1
#include "frames.h"

#include <string.h>

static hframes_fn g_source;

void hframes_set_source(hframes_fn fn) { __atomic_store_n(&g_source, fn, __ATOMIC_RELEASE); }

/* Whether code running with stack pointer rsp is inside f's handler. */
static int frame_holds(const struct hframe *f, uintptr_t rsp)
{
    return rsp >= f->lo && rsp < f->top && *f->cookie_at == f->cookie;
}

/* Drops the records of the handlers the context at rsp has left.  The
 * state is then the innermost dropped handler's, as on Linux after a jump
 * out of it: what it left when it touched tiles (st holds that already),
 * else the init state it started with.  st: the thread's state, or NULL to
 * look it up only when needed. */
static void prune(struct hframes *h, uintptr_t rsp, struct tile_state *st)
{
    int unsaved = -1;
    while (h->depth > 0 && !frame_holds(&h->f[h->depth - 1], rsp)) {
        if (unsaved < 0)
            unsaved = !h->f[h->depth - 1].saved;
        h->depth--;
    }
    /* The complement mode's state is a scratch copy of the frame's registers. */
    if (unsaved == 1 && !state_scratch()) {
        if (st == NULL)
            st = state_current();
        if (st)
            state_init(st);
    }
}

int hframes_enter(struct hframes *h, const ucontext_t *uc, const volatile uint64_t *cookie_at, uint64_t cookie)
{
    uintptr_t top = (uintptr_t)uc;
    /* Pruned here only when full: the interrupted context may be the trap's
     * own handler on a stack of its own (own_stack.c), inside a live handler
     * without lying in its part of the program's stack. */
    if (h->depth >= HFRAME_MAX)
        prune(h, (uintptr_t)uc->uc_mcontext.gregs[REG_RSP], NULL);
    /* A signal nested into this entry (its handler returns before this one
     * goes on) takes the slot above the one being written. */
    int32_t busy = h->busy;
    int32_t index = h->depth > busy ? h->depth : busy;
    if (index >= HFRAME_MAX)
        return -1;
    h->busy = index + 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    struct hframe *f = &h->f[index];
    /* The kernel records the thread's sigaltstack in the frame; the handler
     * runs on it when the frame itself lies there. */
    uintptr_t ss = (uintptr_t)uc->uc_stack.ss_sp;
    int alt = !((unsigned)uc->uc_stack.ss_flags & SS_DISABLE) && top >= ss && top - ss < uc->uc_stack.ss_size;
    f->lo = alt ? ss : 0;
    f->top = top;
    f->cookie_at = cookie_at;
    f->cookie = cookie;
    f->saved = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    h->depth = index + 1;
    h->busy = busy;
    return index;
}

void hframes_leave(struct hframes *h, int index, uint64_t cookie)
{
    if (index < 0 || index >= h->depth || h->f[index].cookie != cookie)
        return; /* untracked, or pruned: the tiles stay as the handler left them */
    struct hframe *f = &h->f[index];
    if (f->saved) {
        struct tile_state *st = state_current();
        struct tile_state *save = state_save_area(st, index);
        if (st && save)
            memcpy(st, save, sizeof *st);
    }
    h->depth = index;
}

void hframes_jump(struct hframes *h, uintptr_t target_rsp)
{
    prune(h, target_rsp, NULL);
}

struct hframes *hframes_current(void)
{
    hframes_fn get = __atomic_load_n(&g_source, __ATOMIC_ACQUIRE);
    return get ? get() : NULL;
}

void hframes_at_trap(struct tile_state *st, const ucontext_t *uc)
{
    struct hframes *h = hframes_current();
    if (h == NULL || h->depth == 0)
        return;
    prune(h, (uintptr_t)uc->uc_mcontext.gregs[REG_RSP], st);
    if (h->depth == 0)
        return;
    int index = h->depth - 1;
    struct hframe *f = &h->f[index];
    if (f->saved)
        return;
    struct tile_state *save = state_save_area(st, index);
    if (save == NULL)
        return; /* no memory for it: the handler shares the interrupted state, as before */
    /* The whole state, scratch included: the handler may have interrupted
     * this module's own handler halfway through an instruction on it. */
    memcpy(save, st, sizeof *st);
    state_init(st);
    f->saved = 1;
}
