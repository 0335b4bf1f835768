/* The guard (docs/trap.md, "The parts", "The guard"): a seccomp filter and
 * its supervisor that answer other code's sigaction(SIGILL), a raw
 * rt_sigaction and arch_prctl's AMX permission codes, and the standby
 * process that keeps answering after this image is gone.  What the preload
 * uses of it is declared here; the module's own entry points
 * (pyamx_trap_guard_*, pyamx_trap_xcomp_install) are in trap.h.  Includes
 * the handler and the parts below it.
 */
#ifndef PYAMX_TRAP_GUARD_H
#define PYAMX_TRAP_GUARD_H

#include "../handler/handler.h"

/* ---- seccomp_guard.c ---- */

/* Called by the supervisor each time a program's request for a seccomp
 * listener meets the guard's (it gets EBUSY); async-signal-safe like the
 * observer. */
typedef void (*guard_observer_fn)(void);
void guard_set_observer(guard_observer_fn fn);

/* ---- xcomp_permission.c ---- */

/* Called by the SIGSYS handler after each emulated arch_prctl (code is
 * the ARCH_* value), while set; async-signal-safe like the observer. */
typedef void (*xcomp_observer_fn)(long code, uint64_t arg, long result);
void xcomp_set_observer(xcomp_observer_fn fn);

/* ---- raw_sigaction.c ---- */

/* rt_sigaction for a signal other than SIGILL as the kernel answers it,
 * with whatever the wrapper puts in place of the handler: 0 or -errno. */
typedef long (*rawsig_fn)(int sig, const struct ksigaction *act, struct ksigaction *old);
/* Set before the guard is installed: its filter is then notified of every
 * signal's rt_sigaction, not only SIGILL's. */
void rawsig_set_wrapper(rawsig_fn fn);

#endif
