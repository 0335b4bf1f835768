/* Test-only kernels for the trap mode, built by tests/trap_selftest_build.py
 * into a throwaway module (never part of the package).  They execute real
 * AMX instructions, so outside trap mode they need AMX; the compiler must
 * know the AMX target attributes and mnemonics.  This file is also the
 * module's cffi cdef, with pyamx_ops.h inlined.
 */
#ifndef PYAMX_TRAP_SELFTEST_H
#define PYAMX_TRAP_SELFTEST_H

#include <stdint.h>
#include <stddef.h>

#include "pyamx_ops.h"

/* LDTILECFG cfg; TILELOADD tmm0 <- c, tmm1 <- a, tmm2 <- b; op tmm0, tmm1,
 * tmm2 (op: PYAMX_OP_TDP*); TILESTORED tmm0 -> c; TILERELEASE. */
int32_t pyamx_trap_selftest_dot(int32_t op, const uint8_t *cfg, const void *a, int64_t lda,
                                const void *b, int64_t ldb, void *c, int64_t ldc);
/* Loads a tile from src and stores it to dst with addressing form `form`
 * (0..5, see trap_selftest.c); cfg configures the tiles first. */
int32_t pyamx_trap_selftest_addressing(int32_t form, const uint8_t *cfg, const void *src,
                                       int64_t stride, void *dst);
/* LDTILECFG from a stack copy of cfg, sleep, STTILECFG into cfg_out. */
void pyamx_trap_selftest_hold(const uint8_t *cfg, int32_t usleep_us, uint8_t *cfg_out);
/* LDTILECFG/STTILECFG through a RIP-relative static buffer. */
void pyamx_trap_selftest_cfg_riprel(const uint8_t *cfg, uint8_t *cfg_out);
void pyamx_trap_selftest_ldtilecfg(const uint8_t *cfg);
void pyamx_trap_selftest_sttilecfg(uint8_t *cfg_out);
void pyamx_trap_selftest_tilezero(int32_t tile);
void pyamx_trap_selftest_release(void);
/* tdpbf16ps tmm0, tmm0, tmm1: operands not distinct. */
void pyamx_trap_selftest_dp_same(void);
/* A genuine illegal instruction (ud2). */
void pyamx_trap_selftest_ud2(void);
/* n iterations of one instruction kind: 0 STTILECFG, 1 TILEZERO,
 * 2 TILELOADD 16x64, 3 TDPBF16PS 16x16x16 (after one LDTILECFG). */
int32_t pyamx_trap_selftest_loop(int32_t kind, int64_t n);
/* Does nothing: the reference cost of a cffi call. */
int32_t pyamx_trap_selftest_nop(void);
/* Nanoseconds for n ud2 traps caught by a trivial handler that only skips
 * them: the kernel's bare SIGILL round trip.  Swaps the SIGILL disposition
 * for the duration, so single-threaded benchmarks only, and before the
 * trap's guard is installed (under the guard the swap only changes the
 * handler the trap chains to). */
int64_t pyamx_trap_selftest_raw_sigill_ns(int64_t n);

/* Other code's SIGILL handler, as a C library would install it: one that
 * counts the SIGILLs it receives and skips a ud2.  how: 0 through libc's
 * sigaction, 1 through a raw syscall instruction in this module, 2 puts
 * SIG_DFL back through libc.  Returns 0 or -errno. */
int32_t pyamx_trap_selftest_set_sigill(int32_t how);
/* SIGILLs the handler above received (ud2 only, as nothing else reaches it). */
int64_t pyamx_trap_selftest_sigill_seen(void);

#endif
