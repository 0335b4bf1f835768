/* The trap's base: what every part uses (docs/trap.md, "The parts").
 * One-line messages for fd 2 built on the stack, a copy that answers
 * EFAULT instead of faulting, the thread id, the op count.  Everything
 * here is async-signal-safe: no malloc, no stdio, no locks, no Python, no
 * lazily allocated TLS.  Includes no other part.
 */
#ifndef PYAMX_TRAP_BASE_H
#define PYAMX_TRAP_BASE_H

#if !defined(__x86_64__) || !defined(__linux__)
#error "pyamx._trap is built for x86-64 Linux only (build.py skips it elsewhere)"
#endif

#include "../trap.h"
#include "../../pyamx_op_traits.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Op ids 0..N_OPS-1, every row of the table (plus PYAMX_OP_NONE); counters are indexed by id. */
#define N_OPS ((int)(sizeof pyamx_op_traits / sizeof pyamx_op_traits[0]))

#define HIDDEN __attribute__((visibility("hidden")))

static inline int32_t trap_tid(void) { return (int32_t)syscall(SYS_gettid); }

/* ---- message.c: one line for fd 2, built on the stack ---- */

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

/* ---- self_copy.c ---- */

/* memcpy within this process that answers EFAULT (returned) instead of
 * faulting on a bad address; async-signal-safe. */
int self_copy(void *dst, const void *src, size_t n);

#endif
