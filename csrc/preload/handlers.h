/* The program's signal handlers, called through a trampoline that gives
 * each one a tile state frame of its own (handlers.c). */
#ifndef PYAMX_PRELOAD_HANDLERS_H
#define PYAMX_PRELOAD_HANDLERS_H

#include <signal.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

struct ksigaction;

/* From the preload's constructor once the trap is installed: wraps the
 * handlers already installed (by constructors that ran before it) and the
 * ones installed from then on.  Resolves libc's functions now, so that
 * nothing later calls dlsym from a signal handler. */
void handlers_enable(void);
/* sigaction(2) for a signal other than SIGILL, as libc's `real` does it
 * (which it still does for the signals the wrapping leaves alone). */
int handlers_sigaction(sigaction_fn real, int sig, const struct sigaction *act, struct sigaction *old);
/* The rt_sigaction system call for a signal other than SIGILL, answered
 * as the kernel would for the program's own action: 0 or -errno. */
long handlers_ksigaction(int sig, const struct ksigaction *act, struct ksigaction *old);
/* Nonzero once enabled. */
int handlers_wrapping(void);

#endif
