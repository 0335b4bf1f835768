/* Which seccomp listener features the kernel headers give this build: the
 * standby (standby.c) needs the ones the guard (seccomp_guard.c) needs: both
 * include this one decision.  Without them the guard reports itself
 * unavailable and no standby starts. */
#ifndef PYAMX_TRAP_LISTENER_H
#define PYAMX_TRAP_LISTENER_H

#if defined(__has_include)
#if __has_include(<linux/seccomp.h>) && __has_include(<linux/filter.h>) && __has_include(<linux/audit.h>)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#endif
#endif

#if defined(SECCOMP_IOCTL_NOTIF_RECV) && defined(SECCOMP_IOCTL_NOTIF_ID_VALID) && defined(SECCOMP_USER_NOTIF_FLAG_CONTINUE) && \
    defined(SECCOMP_FILTER_FLAG_NEW_LISTENER) && defined(SYS_seccomp)
#define HAVE_LISTENER 1
#else
#define HAVE_LISTENER 0
#endif

#endif
