/* The fp32 facts that the trap's and the engine's arithmetic share: the
 * MXCSR values their hardware paths run under, the NaN bits, DAZ on a bit
 * pattern. Integer code and constants only, so it builds on every
 * architecture the engine builds on. Not fed to cffi.
 *
 * What stays apart on purpose: the trap's fp32 arithmetic (trap/fp32.h)
 * and the engine's (engine_scalar.c) are two readings of
 * docs/semantics.md that the cross-check suite compares, and their vector
 * widenings differ in what they may assume (see trap/simd.c).
 */
#ifndef PYAMX_FP32_BITS_H
#define PYAMX_FP32_BITS_H

#include <stdint.h>

/* DAZ (bit 6) | all exceptions masked (bits 7-12) | RC = nearest (bits
 * 13-14 = 0) | FTZ (bit 15): under it VFMADD is the default numerics' fma32
 * and VADDPS their add32, NaN order aside. The status flags start cleared
 * and are thrown away when the caller's MXCSR is restored. */
#define PYAMX_MXCSR_DAZ_FTZ 0x9FC0u
/* All exceptions masked, RC = nearest, nothing flushed: plain IEEE arithmetic
 * (the power-on value). */
#define PYAMX_MXCSR_IEEE 0x1F80u

#define PYAMX_F32_QUIET 0x00400000u
/* x86's answer to an invalid operation (inf * 0, inf - inf) */
#define PYAMX_F32_DEFAULT_NAN 0xFFC00000u

static inline int pyamx_f32_is_nan(uint32_t x) { return (x & 0x7FFFFFFFu) > 0x7F800000u; }

/* A denormal becomes the zero of its sign, as MXCSR.DAZ treats an operand. */
static inline uint32_t pyamx_f32_daz(uint32_t x) { return (x & 0x7F800000u) == 0 ? (x & 0x80000000u) : x; }

#endif
