/* The program's signal handlers, called through a trampoline that gives
 * each one a tile state frame of its own (handlers.c). */
#ifndef PYAMX_PRELOAD_HANDLERS_H
#define PYAMX_PRELOAD_HANDLERS_H

#include <signal.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

/* From the preload's constructor once the trap is installed: wraps the
 * handlers installed from then on.  Resolves libc's functions now, so that
 * nothing later calls dlsym from a signal handler. */
void handlers_enable(void);
/* sigaction(2) for a signal other than SIGILL, through libc's `real`. */
int handlers_sigaction(sigaction_fn real, int sig, const struct sigaction *act, struct sigaction *old);
/* Nonzero once enabled. */
int handlers_wrapping(void);

#endif
