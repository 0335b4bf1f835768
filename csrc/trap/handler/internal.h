/* What the handler's own files share, private to the handler part
 * (handler/): its assembly entry and stacks, the zmm registers of a signal
 * frame, the complement mode. */
#ifndef PYAMX_TRAP_HANDLER_INTERNAL_H
#define PYAMX_TRAP_HANDLER_INTERNAL_H

#include "handler.h"

#include <ucontext.h>

/* ---- frame_zmm.c: zmm0..31 of an interrupted context (its signal frame's XSAVE image) ---- */

enum {
    PYAMX_TRAP_ZMM_OK = 0,
    PYAMX_TRAP_ZMM_E_REG = -1,        /* not 0..31 */
    PYAMX_TRAP_ZMM_E_NO_XSTATE = -2,  /* no XSAVE image in the frame (magic, size) */
    PYAMX_TRAP_ZMM_E_NO_AVX512 = -3   /* the image lacks the AVX-512 components */
};

/* 64 bytes of zmm<reg> as the context will resume with them / will hold
 * after sigreturn.  set marks the components in XSTATE_BV so XRSTOR loads
 * them.  Both return PYAMX_TRAP_ZMM_OK or an error above, never crash on a
 * frame without AVX-512 state. */
int32_t pyamx_trap_get_zmm(const ucontext_t *uc, int32_t reg, uint8_t bytes[64]);
int32_t pyamx_trap_set_zmm(ucontext_t *uc, int32_t reg, const uint8_t bytes[64]);

/* ---- complement.c: on AMX silicon, the missing extensions only ---- */

enum { COMPLEMENT_LOADED = 0, COMPLEMENT_RETRY = 1, COMPLEMENT_NO_FRAME = 2 };

/* From install: frame offsets and the ops this CPU lacks; their count. */
int complement_setup(void);
/* 1 when op is one the CPU lacks and this mode emulates. */
int complement_emulates(int op);
/* 1 when the kernel granted this process XTILEDATA (the real arch_prctl). */
int complement_permitted(void);
/* The interrupted tile registers (from the signal frame) into st (scratch:
 * every field the instruction reads is written here or by it);
 * enlarge_tried: the thread's flag that the enlargement was tried for the
 * fault being retried.
 * COMPLEMENT_LOADED; COMPLEMENT_RETRY after making the kernel enlarge the
 * thread's FPU state (return and let the instruction fault again);
 * COMPLEMENT_NO_FRAME when the frame cannot carry tile state. */
int complement_load(ucontext_t *uc, struct tile_state *st, uint8_t *enlarge_tried);
/* st's tiles and start_row back into the frame, restored at sigreturn. */
void complement_store(ucontext_t *uc, const struct tile_state *st);

/* ---- own_stack.c: the handler's assembly entry and its own stacks ---- */

/* fn(arg) on a stack of the handler's own; uc: the frame being handled, or NULL. */
void trap_on_own_stack(void (*fn)(void *), void *arg, const ucontext_t *uc);
/* Whether p lies on one of the handler's own stacks (the work of one SIGILL
 * holds its stack alone until it ends: no nested SIGILL shares it). */
int hstack_holds(const void *p);
/* Maps one more pool stack, from normal context: the entry can use only stacks
 * mapped before the signal (one at install, one per prepared thread). */
void hstack_prearm(void);

/* ---- sigill_handler.c ---- */

/* The registered SIGILL handler: an assembly entry (own_stack.c) that calls
 * the C halves below on the handler's own stack and the program's. */
HIDDEN void trap_handler(int sig, siginfo_t *si, void *ctx);
HIDDEN int trap_handler_work(int sig, siginfo_t *si, void *ctx);
HIDDEN void trap_handler_pass(int sig, siginfo_t *si, void *ctx, int action);
HIDDEN void trap_handler_c(int sig, siginfo_t *si, void *ctx);

#endif
