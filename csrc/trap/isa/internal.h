/* The kernels semantics.c dispatches to, private to the instruction set
 * part (isa/): other parts reach them through trap_execute (isa.h). */
#ifndef PYAMX_TRAP_ISA_INTERNAL_H
#define PYAMX_TRAP_ISA_INTERNAL_H

#include "isa.h"

/* ---- row_ops.c: AMX-AVX512's row instructions, into 64 bytes for a zmm ---- */

int trap_do_row(struct tile_state *st, const struct pyamx_trap_insn *in, uint8_t out[64], struct msg *m);

/* ---- fp8_dot.c: the AMX-FP8 dot products (exact K-sum, one rounding) ---- */

void trap_dp_fp8_rows(struct tile_state *st, int d, int s1, int s2, int a_hf8, int b_hf8);

/* ---- simd_dot.c: AVX2 dot products, bit-identical to the scalar ones ---- */

int32_t trap_simd_enabled(void);
/* 0 when done; 1 (nothing written) when tsrc1/tsrc2 hold an inf or NaN.
 * Under PYAMX_MXCSR_DAZ_FTZ. */
int trap_simd_dp_float(struct tile_state *st, int d, int s1, int s2, int fp16);
void trap_simd_dp_int8(struct tile_state *st, int d, int s1, int s2, int s1_signed, int s2_signed);

#endif
