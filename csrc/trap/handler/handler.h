/* The SIGILL handler (docs/trap.md, "The parts"): its install, the SIGILL
 * disposition it chains to, its own stacks, the complement mode.  What the
 * parts above it (the guard, the preload) use of it is declared here.
 * Includes the frames, the per-thread state, the instruction set and the
 * base.
 */
#ifndef PYAMX_TRAP_HANDLER_H
#define PYAMX_TRAP_HANDLER_H

#include "../frames/frames.h"

#include <signal.h>

/* ---- disposition.c: the kernel's view of a disposition ---- */

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

/* The SIGILL disposition the process believes in (what other code last
 * set, or what was there at install): the handler this mode chains to.
 * A sequence lock: readers in signal handlers retry, never wait. */
void chain_get(struct ksigaction *out);
/* Writers run in normal context, serialised by the caller. */
void chain_set(const struct ksigaction *in);
/* Nonzero while the guard answers this process's sigaction(SIGILL) calls:
 * the disposition above is then the program's last word (set by the guard). */
int chain_guarded(void);
void chain_set_guarded(int on);

/* ---- sigill_handler.c ---- */

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

#endif
