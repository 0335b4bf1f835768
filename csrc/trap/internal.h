/* Declarations shared by the trap module's source files, kept out of its
 * cffi API (trap.h).  Everything declared here that the SIGILL handler
 * reaches is async-signal-safe: no malloc, no stdio, no locks, no Python,
 * no lazily allocated TLS.
 */
#ifndef PYAMX_TRAP_INTERNAL_H
#define PYAMX_TRAP_INTERNAL_H

#if !defined(__x86_64__) || !defined(__linux__)
#error "pyamx._trap is built for x86-64 Linux only (build.py skips it elsewhere)"
#endif

#include "trap.h"
#include "../pyamx_op_traits.h"

#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Op ids 0..N_OPS-1, every row of the table (plus PYAMX_OP_NONE); counters are indexed by id. */
#define N_OPS ((int)(sizeof pyamx_op_traits / sizeof pyamx_op_traits[0]))

static inline int32_t trap_tid(void) { return (int32_t)syscall(SYS_gettid); }

/* ---- zmm.c: zmm0..31 of an interrupted context (its signal frame's XSAVE image) ---- */

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

/* ---- state.c ---- */

struct tile_state {
    uint8_t tiles[8][16][64];
    /* tsrc2 widened to fp32 once per instruction: [k][even/odd][n].  Lives
     * here rather than on the (alternate) signal stack. */
    uint32_t bconv[16][2][16];
    /* tsrc1 as it was, while a complex dot product runs the fp16 one on a
     * rearranged copy in its place (semantics.c, complex_rows). */
    uint8_t saved_src1[16][64];
    /* complement mode, in the thread's slot: the handler already made the
     * kernel enlarge this thread's FPU state once for the fault being retried */
    uint8_t enlarge_tried;
    /* a row instruction's result, for the handler to put into zmm<zdst> */
    uint8_t zmm[64];
    uint8_t palette;
    uint8_t start_row;
    uint8_t rows[8];
    uint16_t colsb[8];
};

void state_init(struct tile_state *st);
/* st's configuration as the 64-byte STTILECFG image (all zeros in the init state). */
void state_config_to_bytes(const struct tile_state *st, uint8_t cfg[64]);
/* The palette, start_row, colsb and rows of a 64-byte image into st, unchecked: the
 * caller validated it, or it is one the CPU or this module wrote. Tile data untouched. */
void state_config_from_bytes(struct tile_state *st, const uint8_t cfg[64]);
/* The calling thread's state, claimed on first use; NULL when the table is full. */
struct tile_state *state_for(int32_t tid);
/* The same for the handler's hot path: the slot a prepared thread's pthread
 * key names, without the gettid system call; state_for() otherwise. */
struct tile_state *state_current(void);
/* The calling thread's state as Linux starts a new thread: the creating
 * thread's STTILECFG image (64 bytes, from pyamx_trap_thread_state), tile
 * data in the init state.  From normal context. */
int32_t state_inherit_config(const uint8_t *cfg);
/* The calling thread's slot claimed (*claimed: 1 when new) and named by its
 * pthread key; PYAMX_TRAP_OK or PYAMX_TRAP_E_TABLE_FULL.  From normal context. */
int32_t state_prepare_current(int *claimed);
/* The complement mode (1) or the full trap mode (0): in the former a slot's
 * tile_state is a scratch copy of the signal frame's registers. */
void state_set_scratch(int on);
int state_scratch(void);
/* Gives up the calling thread's slot, if any (a thread of this module's own). */
void state_forget_current(void);
/* pthread key and fork handler; from pthread_once in install. */
void state_setup_once(void);
/* Room for st's thread to keep a whole tile_state for handler frame `index`
 * (0..HFRAME_MAX-1), mapped on first need and kept with the slot; NULL
 * when st is NULL or the mapping fails.  Async-signal-safe. */
struct tile_state *state_save_area(struct tile_state *st, int index);

/* ---- hframes.c: the program's signal handler frames (full trap mode) ---- */

/* Nesting past this many handlers of one thread is not tracked: such a
 * handler shares the tile state of the handler it interrupted. */
enum { HFRAME_MAX = 8 };

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

/* ---- chainmark.c: the threads inside a call to the program's SIGILL handler ---- */

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

/* ---- msg.c: one line for fd 2, built on the stack ---- */

struct msg {
    char buf[320];
    unsigned n;
};

void m_str(struct msg *m, const char *s);
void m_dec(struct msg *m, int64_t v);
void m_hex(struct msg *m, uint64_t v);
void m_tile(struct msg *m, const char *what, int t);
/* Writes the line unless pyamx_trap_set_verbose(0). */
void m_emit(struct msg *m);

/* ---- semantics.c ---- */

enum { EXEC_OK = 0, EXEC_UD = 1, EXEC_GP = 2 };

/* Performs one decoded, permitted instruction on st; on EXEC_UD/EXEC_GP the
 * rule that failed is appended to m. */
int trap_execute(struct tile_state *st, const struct pyamx_trap_insn *in, struct msg *m);

/* ---- complement.c: on AMX silicon, the missing extensions only ---- */

#include <ucontext.h>

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

/* ---- rows.c: AMX-AVX512's row instructions, into 64 bytes for a zmm ---- */

int trap_do_row(struct tile_state *st, const struct pyamx_trap_insn *in, uint8_t out[64], struct msg *m);

/* ---- fp8.c: the AMX-FP8 dot products (exact K-sum, one rounding) ---- */

void trap_dp_fp8_rows(struct tile_state *st, int d, int s1, int s2, int a_hf8, int b_hf8);

/* ---- simd.c: AVX2 dot products, bit-identical to the scalar ones ---- */

/* Probes the CPU once (from pyamx_trap_install) and turns them on where supported. */
void trap_simd_setup(void);
int32_t trap_simd_enabled(void);
/* 0 when done; 1 (nothing written) when tsrc1/tsrc2 hold an inf or NaN.
 * Under PYAMX_MXCSR_DAZ_FTZ. */
int trap_simd_dp_float(struct tile_state *st, int d, int s1, int s2, int fp16);
void trap_simd_dp_int8(struct tile_state *st, int d, int s1, int s2, int s1_signed, int s2_signed);

/* ---- sigaction.c: the kernel's view of a disposition ---- */

/* The kernel's flag for a handler's own signal return, which glibc's
 * headers do not export. */
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

/* struct sigaction as the rt_sigaction system call takes it on x86-64. */
struct ksigaction {
    uint64_t handler;
    uint64_t flags;
    uint64_t restorer;
    uint64_t mask;
};

/* Loaded into r9 (seccomp's args[5]) by this module's rt_sigaction site:
 * the same in every build and process, so the guard's filter recognises
 * the site after exec too. */
#define TRAP_SITE_MARK 0x70796d7874726170ull

/* rt_sigaction from this module's one syscall site, which the guard's
 * filter lets through; returns 0 or -errno. */
long trap_raw_sigaction(int sig, const struct ksigaction *act, struct ksigaction *old);
/* A signal-return trampoline (sa_restorer) for handlers this module installs. */
uint64_t trap_restorer(void);
/* fn(arg) on a stack of the handler's own (hstack.c); uc: the frame being handled, or NULL. */
void trap_on_own_stack(void (*fn)(void *), void *arg, const ucontext_t *uc);
/* Whether p lies on one of the handler's own stacks (the work of one SIGILL
 * holds its stack alone until it ends: no nested SIGILL shares it). */
int hstack_holds(const void *p);
/* Maps one more pool stack, from normal context: the entry can use only stacks
 * mapped before the signal (one at install, one per prepared thread). */
void hstack_prearm(void);

/* The SIGILL disposition the process believes in (what other code last
 * set, or what was there at install): the handler this mode chains to.
 * A sequence lock: readers in signal handlers retry, never wait. */
void chain_get(struct ksigaction *out);
/* Writers run in normal context, serialised by the caller. */
void chain_set(const struct ksigaction *in);
/* Nonzero while the guard answers this process's sigaction(SIGILL) calls:
 * the disposition above is then the program's last word (set by guard.c). */
int chain_guarded(void);
void chain_set_guarded(int on);

/* ---- signals.c ---- */

#define HIDDEN __attribute__((visibility("hidden")))

/* The registered SIGILL handler: an assembly entry (hstack.c) that calls
 * the C halves below on the handler's own stack and the program's. */
HIDDEN void trap_handler(int sig, siginfo_t *si, void *ctx);
HIDDEN int trap_handler_work(int sig, siginfo_t *si, void *ctx);
HIDDEN void trap_handler_pass(int sig, siginfo_t *si, void *ctx, int action);
HIDDEN void trap_handler_c(int sig, siginfo_t *si, void *ctx);
int trap_is_ours(const struct ksigaction *k);
/* The word pyamx_trap_grant_permission() sets: at the same address in a fork. */
int32_t *trap_permission_word(void);
/* Serialises chain_set() and real installs between normal-context callers
 * (install, reinstall, uninstall, the guard's supervisor). */
void trap_lock(void);
void trap_unlock(void);

/* Called after each emulated instruction while set (by the preload's
 * --verbose and --stats), from the handler: must be async-signal-safe.
 * ns: time the handler spent on the instruction. */
typedef void (*trap_observer_fn)(const struct pyamx_trap_insn *in, uint64_t rip, uint64_t ns);
void trap_set_observer(trap_observer_fn fn);
/* Called each time the handler names a faulting instruction on fd 2 before
 * SIGILL's default action ends the process, while set; async-signal-safe. */
typedef void (*trap_fatal_observer_fn)(void);
void trap_set_fatal_observer(trap_fatal_observer_fn fn);
/* sig's real disposition back to SIG_DFL, then sig sent to the calling
 * thread and unblocked: the kernel's default action for it, from a handler. */
void trap_take_default_action(int sig);

/* ---- selfcopy.c ---- */

/* memcpy within this process that answers EFAULT (returned) instead of
 * faulting on a bad address; async-signal-safe. */
int self_copy(void *dst, const void *src, size_t n);

/* ---- xcomp.c ---- */

/* Called by the SIGSYS handler after each emulated arch_prctl (code is
 * the ARCH_* value), while set; async-signal-safe like the observer. */
typedef void (*xcomp_observer_fn)(long code, uint64_t arg, long result);
void xcomp_set_observer(xcomp_observer_fn fn);
/* From the guard's supervisor (or its standby): task tid's arch_prctl(code,
 * arg) (own: a thread of this process), notified by the guard's filter.  1
 * with *result (0 or -errno) when this module answered for it; 0 to let the
 * kernel answer; -1 to let the kernel answer a task whose memory may not be
 * read (it may still run this image: say so, xcomp_unreadable_line).
 * still_valid(ctx) is asked before anything is written or granted. */
int xcomp_notified(pid_t tid, int own, long code, uint64_t arg, int (*still_valid)(void *), void *ctx,
                   long *result);
/* What the answers to a fork of this image depend on, for the guard's
 * standby (standby.c), which answers them once this image is gone. */
struct xcomp_routed {
    uint64_t cookie, supp, perm_base;
};
void xcomp_export(struct xcomp_routed *out);
void xcomp_unreadable_line(struct msg *m, pid_t tid, long code);
void xcomp_adopt(const struct xcomp_routed *in);

/* ---- rawsig.c ---- */

/* rt_sigaction for a signal other than SIGILL as the kernel answers it,
 * with whatever the wrapper puts in place of the handler: 0 or -errno. */
typedef long (*rawsig_fn)(int sig, const struct ksigaction *act, struct ksigaction *old);
/* Set before the guard is installed: its filter is then notified of every
 * signal's rt_sigaction, not only SIGILL's. */
void rawsig_set_wrapper(rawsig_fn fn);
/* The registered wrapper, or NULL. */
rawsig_fn rawsig_wrapper(void);
/* From the guard's supervisor: rt_sigaction(sig, act, oact, sigsetsize) of
 * a thread of this process, made through fn in the kernel's order
 * (sigsetsize, read act, change, write oact), the caller's pointers read
 * and written through self_copy.  still_valid(ctx) is asked before
 * anything changes.  0 or -errno. */
long rawsig_call(rawsig_fn fn, int sig, uint64_t act, uint64_t oact, uint64_t sigsetsize, int (*still_valid)(void *),
                 void *ctx);

/* ---- guard.c ---- */

/* Called by the supervisor each time a program's request for a seccomp
 * listener meets the guard's (it gets EBUSY); async-signal-safe like the
 * observer. */
typedef void (*guard_observer_fn)(void);
void guard_set_observer(guard_observer_fn fn);
/* Counts a program's refused request for a listener of its own (task tid)
 * and writes into m the line that says why; async-signal-safe. */
void guard_listener_refused_line(struct msg *m, pid_t tid);

/* ---- standby.c: the process that keeps the guard's listener after this image ---- */

/* Before the guard's filter exists (the standby must not be under it): 0,
 * or errno where none started (Linux < 5.8, clone refused). */
int standby_start(void);
/* The filter is attached: the standby gets a copy of its listener. */
void standby_arm(int listener);
/* The filter could not be attached: the standby ends, reaped here. */
void standby_cancel(void);
/* xcomp.c routes through the guard: the standby learns how to answer forks. */
void standby_share_xcomp(void);
/* In a forked child (atfork). */
void standby_after_fork(void);
/* Whether a notified seccomp call (struct seccomp_data) is a later image's
 * request that the standby let go of the listener: not a program's. */
int standby_is_release_request(const void *seccomp_data);
/* After EBUSY: asks a standby that kept the listener of the image this
 * process exec'd from to let go; 0 when it did (attach again). */
int standby_release_previous(void);

#endif
