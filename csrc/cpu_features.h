/* What the CPU and the OS offer, as CPUID and XCR0 report them: the one
 * place where the three compiled modules (pyamx._native, pyamx._trap,
 * pyamx._amxpreload) ask.
 *
 * Baseline x86-64 code with no target attributes: it runs before anything
 * knows what the CPU has. Off x86-64 every feature reads as absent. Not fed
 * to cffi (it holds inline functions); .c files include it.
 */
#ifndef PYAMX_CPU_FEATURES_H
#define PYAMX_CPU_FEATURES_H

#include <stdint.h>

#include "pyamx_op_traits.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PYAMX_CPU_X86 1
#include <cpuid.h>
#else
#define PYAMX_CPU_X86 0
#endif

/* CPUID result registers, numbered as the traits' feature_reg. */
enum { PYAMX_CPU_EAX = 0, PYAMX_CPU_EBX = 1, PYAMX_CPU_ECX = 2, PYAMX_CPU_EDX = 3 };

/* The features outside the instruction table that the SIMD code selects on,
 * spelled as the traits spell a row's: leaf, subleaf, register, bit. */
#define PYAMX_CPU_FMA 1, 0, PYAMX_CPU_ECX, 12
#define PYAMX_CPU_OSXSAVE 1, 0, PYAMX_CPU_ECX, 27
#define PYAMX_CPU_AVX 1, 0, PYAMX_CPU_ECX, 28
#define PYAMX_CPU_F16C 1, 0, PYAMX_CPU_ECX, 29
#define PYAMX_CPU_AVX2 7, 0, PYAMX_CPU_EBX, 5
#define PYAMX_CPU_AVX512F 7, 0, PYAMX_CPU_EBX, 16
#define PYAMX_CPU_AVX512BW 7, 0, PYAMX_CPU_EBX, 30

/* XCR0 state components: a register file is usable only where the OS saves it. */
#define PYAMX_XCR0_YMM 0x6ull          /* SSE, AVX */
#define PYAMX_XCR0_ZMM 0xE6ull         /* SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM */
#define PYAMX_XCR0_XTILE (3ull << 17)  /* XTILECFG, XTILEDATA */

/* CPUID.(leaf, subleaf) into r[0..3] (EAX..EDX). 0, and zeros, for a leaf
 * above the maximum of its range: Intel would answer with the data of the
 * highest leaf instead. */
static inline int pyamx_cpu_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t r[4])
{
#if PYAMX_CPU_X86
    unsigned a, b, c, d;
    if (__get_cpuid_count(leaf, subleaf, &a, &b, &c, &d)) {
        r[0] = a; r[1] = b; r[2] = c; r[3] = d;
        return 1;
    }
#else
    (void)leaf; (void)subleaf;
#endif
    r[0] = r[1] = r[2] = r[3] = 0;
    return 0;
}

/* One feature bit. A subleaf above the last valid one (sub-leaf 0's EAX, as
 * leaves 7 and 0x1E define it) reads as 0, not as another sub-leaf's data. */
static inline int pyamx_cpu_has(uint32_t leaf, uint32_t subleaf, unsigned reg, unsigned bit)
{
    uint32_t r[4];
    if (reg > 3 || bit > 31)
        return 0;
    if (subleaf && (!pyamx_cpu_cpuid(leaf, 0, r) || r[0] < subleaf))
        return 0;
    if (!pyamx_cpu_cpuid(leaf, subleaf, r))
        return 0;
    return (int)((r[reg] >> bit) & 1);
}

/* The CPUID feature an instruction row needs (the generated traits say
 * which): without it, executing the row is SIGILL. */
static inline int pyamx_cpu_has_row_feature(const struct pyamx_op_traits *t)
{
    return t && pyamx_cpu_has(t->feature_leaf, t->feature_subleaf, t->feature_reg, t->feature_bit);
}

/* XCR0 into *out; 0, and 0, where XGETBV would be #UD (the OS has not set
 * CR4.OSXSAVE). */
static inline int pyamx_cpu_xcr0(uint64_t *out)
{
#if PYAMX_CPU_X86
    if (pyamx_cpu_has(PYAMX_CPU_OSXSAVE)) {
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        *out = ((uint64_t)hi << 32) | lo;
        return 1;
    }
#endif
    *out = 0;
    return 0;
}

/* Whether the OS saves every state component of mask. */
static inline int pyamx_cpu_os_saves(uint64_t mask)
{
    uint64_t xcr0;
    return pyamx_cpu_xcr0(&xcr0) && (xcr0 & mask) == mask;
}

/* Where XSAVE component i lies in the standard-format image (CPUID.(0xD, i)
 * EBX) and its size (EAX); zeros where the CPU has no such leaf. */
static inline void pyamx_cpu_xsave_component(uint32_t i, uint32_t *offset, uint32_t *size)
{
    uint32_t r[4];
    pyamx_cpu_cpuid(0xD, i, r);
    *offset = r[1];
    *size = r[0];
}

#endif
