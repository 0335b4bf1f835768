/* What the guard's own files share, private to the guard part (guard/). */
#ifndef PYAMX_TRAP_GUARD_INTERNAL_H
#define PYAMX_TRAP_GUARD_INTERNAL_H

#include "guard.h"

/* ---- seccomp_guard.c ---- */

/* Counts a program's refused request for a listener of its own (task tid)
 * and writes into m the line that says why; async-signal-safe. */
void guard_listener_refused_line(struct msg *m, pid_t tid);

/* ---- xcomp_permission.c ---- */

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

/* ---- raw_sigaction.c ---- */

/* The registered wrapper, or NULL. */
rawsig_fn rawsig_wrapper(void);
/* From the guard's supervisor: rt_sigaction(sig, act, oact, sigsetsize) of
 * a thread of this process, made through fn in the kernel's order
 * (sigsetsize, read act, change, write oact), the caller's pointers read
 * and written through self_copy.  still_valid(ctx) is asked before
 * anything changes.  0 or -errno. */
long rawsig_call(rawsig_fn fn, int sig, uint64_t act, uint64_t oact, uint64_t sigsetsize, int (*still_valid)(void *),
                 void *ctx);

/* ---- standby.c: the process that keeps the guard's listener after this image ---- */

/* Before the guard's filter exists (the standby must not be under it): 0,
 * or errno where none started (Linux < 5.8, clone refused). */
int standby_start(void);
/* The filter is attached: the standby gets a copy of its listener. */
void standby_arm(int listener);
/* The filter could not be attached: the standby ends, reaped here. */
void standby_cancel(void);
/* xcomp_permission.c routes through the guard: the standby learns how to answer forks. */
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
