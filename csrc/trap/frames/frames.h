/* The program's own signal handler frames, as the trap sees them
 * (docs/trap.md, "The parts"): a tile state per frame in the full trap mode
 * (handler_frames.c) and the threads inside the trap's call to the program's
 * SIGILL handler (chain_marks.c).  Everything here runs in signal handlers:
 * no locks, no malloc.  Includes the per-thread state, the instruction set
 * and the base.
 */
#ifndef PYAMX_TRAP_FRAMES_H
#define PYAMX_TRAP_FRAMES_H

#include "../state/state.h"

#include <ucontext.h>

/* ---- handler_frames.c: the program's signal handler frames (full trap mode) ---- */

/* Nesting past this many handlers of one thread is not tracked: such a
 * handler shares the tile state of the handler it interrupted. */
enum { HFRAME_MAX = STATE_SAVE_AREAS };

struct hframe {
    uintptr_t lo, top; /* the handler runs on [lo, top): its stack, below the kernel's frame */
    const volatile uint64_t *cookie_at; /* a word in the trampoline's frame ... */
    uint64_t cookie;                    /* ... and what it holds while the frame lives */
    int32_t saved;                      /* the interrupted state is in the slot's save area */
};

/* One thread's open handler frames, outermost first; written only by that
 * thread (its handlers included). */
struct hframes {
    int32_t depth;
    int32_t busy; /* while a record is being written: its index + 1 */
    struct hframe f[HFRAME_MAX];
};

/* Where the calling thread's records live (the preload's initial-exec TLS);
 * until one is set, no handler is tracked and traps cost one load. */
typedef struct hframes *(*hframes_fn)(void);
void hframes_set_source(hframes_fn fn);
struct hframes *hframes_current(void);
/* A handler of the program begins on frame uc; cookie_at: a word in the
 * caller's frame holding cookie until hframes_leave.  Returns the record's
 * index, or -1 past HFRAME_MAX. */
int hframes_enter(struct hframes *h, const ucontext_t *uc, const volatile uint64_t *cookie_at, uint64_t cookie);
/* The handler of record `index` returned: the interrupted state back if it was saved. */
void hframes_leave(struct hframes *h, int index, uint64_t cookie);
/* A jump to a context whose stack pointer is target_rsp: records it leaves are dropped. */
void hframes_jump(struct hframes *h, uintptr_t target_rsp);
/* From the full trap mode's handler before it runs a tile instruction on st
 * for context uc: the first one inside a handler saves the interrupted state
 * and gives the handler the init state. */
void hframes_at_trap(struct tile_state *st, const ucontext_t *uc);

/* ---- chain_marks.c: the threads inside a call to the program's SIGILL handler ---- */

/* The calling thread begins a call to the program's handler from the frame
 * `frame`; live_at: a word in that frame, set here, cleared by
 * chainmark_leave.  Returns the mark's index, or -1 when not marked. */
int chainmark_enter(uintptr_t frame, volatile uint64_t *live_at);
void chainmark_leave(int index, volatile uint64_t *live_at);
/* Whether code running with stack pointer interrupted_sp on the calling
 * thread is inside one of its live calls. */
int chainmark_inside(uintptr_t interrupted_sp);
/* A jump to a context whose stack pointer is target_sp: the calls it
 * leaves are over. */
void chainmark_jump(uintptr_t target_sp);

#endif
