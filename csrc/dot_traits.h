/* The dot-product rows of the generated traits table, as the C layers ask
 * for them: signedness, lanes and formats come from pyamx/table/isa.py's rows,
 * never from comparisons of op ids. Not fed to cffi's cdef (the table is an
 * initialised array); only .c files include it, through internal.h and
 * engine_internal.h.
 */
#ifndef PYAMX_DOT_TRAITS_H
#define PYAMX_DOT_TRAITS_H

#include "pyamx_op_traits.h"

#define PYAMX_OP_TRAITS_COUNT ((int)(sizeof pyamx_op_traits / sizeof pyamx_op_traits[0]))

/* op's row when op is a dot product, else NULL. Ops arrive from Python as
 * any int, so this is also the bounds check before the table is indexed. */
static inline const struct pyamx_op_traits *pyamx_dot_traits(int op)
{
    if (op <= PYAMX_OP_NONE || op >= PYAMX_OP_TRAITS_COUNT)
        return 0;
    const struct pyamx_op_traits *t = &pyamx_op_traits[op];
    return t->kind == PYAMX_KIND_DOT_PAIRS || t->kind == PYAMX_KIND_DOT_QUADS || t->kind == PYAMX_KIND_DOT_COMPLEX
               ? t
               : 0;
}

/* Floating-point rows accumulate in fp32; the others wrap in int32. */
static inline int pyamx_dot_is_float(const struct pyamx_op_traits *t) { return t->acc_format == PYAMX_FMT_FP32; }

/* AMX-COMPLEX rows: one complex fp16 (real low, imaginary high) per dword. Each
 * equals TDPFP16PS on a transformed A (docs/semantics.md section 8): the
 * imaginary row swaps the halves of each A dword, the real row negates the
 * imaginary half; B is read as it is. */
static inline int pyamx_dot_is_complex(const struct pyamx_op_traits *t) { return t->kind == PYAMX_KIND_DOT_COMPLEX; }
/* The two rows differ in the part they compute (isa's `part`: 1 real, 2 imaginary). */
static inline int pyamx_dot_complex_swaps(int op)
{
    return (unsigned)op < sizeof pyamx_op_traits / sizeof pyamx_op_traits[0] && pyamx_op_traits[op].part == 2;
}

/* Bytes of one operand value: a dword holds `lanes` of them. */
static inline int pyamx_dot_value_bytes(const struct pyamx_op_traits *t) { return 4 / t->lanes; }

/* PYAMX_FOR_EACH_DOT expands PYAMX_DOT_ROW(mnemonic, prefix, map, pp, w, l,
 * opcode) once per dot-product row, so a backend defines and registers one
 * kernel per row from the table: define PYAMX_DOT_ROW, expand, #undef it.
 * (The preprocessor cannot hand a macro name on through PYAMX_FOR_EACH_OP's
 * X, hence the fixed name.) */
#define PYAMX_DOT_IF_CONFIG(args)
#define PYAMX_DOT_IF_MEMORY(args)
#define PYAMX_DOT_IF_DOT_PAIRS(args) PYAMX_DOT_ROW args
#define PYAMX_DOT_IF_DOT_QUADS(args) PYAMX_DOT_ROW args
#define PYAMX_DOT_IF_DOT_COMPLEX(args) PYAMX_DOT_ROW args
#define PYAMX_DOT_IF_ROW(args)
#define PYAMX_DOT_FILTER(name, kind, af, bf, cf, as, bs, lanes, prefix, map, pp, w, l, opc, form, ...) \
    PYAMX_DOT_IF_##kind((name, prefix, map, pp, w, l, opc))
#define PYAMX_FOR_EACH_DOT PYAMX_FOR_EACH_OP(PYAMX_DOT_FILTER)

/* PYAMX_FOR_EACH_ROW expands PYAMX_ROW_ROW(mnemonic, prefix, map, pp, w, l,
 * opcode) once per AMX-AVX512 row instruction, as PYAMX_FOR_EACH_DOT does for
 * the dot products. */
#define PYAMX_ROW_IF_CONFIG(args)
#define PYAMX_ROW_IF_MEMORY(args)
#define PYAMX_ROW_IF_DOT_PAIRS(args)
#define PYAMX_ROW_IF_DOT_QUADS(args)
#define PYAMX_ROW_IF_DOT_COMPLEX(args)
#define PYAMX_ROW_IF_ROW(args) PYAMX_ROW_ROW args
#define PYAMX_ROW_FILTER(name, kind, af, bf, cf, as, bs, lanes, prefix, map, pp, w, l, opc, form, ...) \
    PYAMX_ROW_IF_##kind((name, prefix, map, pp, w, l, opc))
#define PYAMX_FOR_EACH_ROW PYAMX_FOR_EACH_OP(PYAMX_ROW_FILTER)

/* op's row when op is a row instruction (kind "row"), else NULL; also the bounds check. */
static inline const struct pyamx_op_traits *pyamx_row_traits(int op)
{
    if (op <= PYAMX_OP_NONE || op >= PYAMX_OP_TRAITS_COUNT)
        return 0;
    return pyamx_op_traits[op].kind == PYAMX_KIND_ROW ? &pyamx_op_traits[op] : 0;
}

/* kernels.c's ROW_BYTES spells EVEX.512.W0 map-0F38 register forms only. */
#define PYAMX_ASSERT_ROW_BYTES(name, prefix, map, w, l)                                         \
    _Static_assert(PYAMX_PREFIX_##prefix == PYAMX_PREFIX_EVEX && (map) == 2 && (w) == 0 && (l) == 2, \
                   "ROW_BYTES cannot encode " #name)

/* internal.h's DP_BYTES spells VEX.128.W0 register forms (any map): a row
 * encoded otherwise (EVEX) stops the build instead of running another
 * instruction. */
#define PYAMX_ASSERT_DP_BYTES(name, prefix, map, w, l)                                          \
    _Static_assert(PYAMX_PREFIX_##prefix == PYAMX_PREFIX_VEX && (map) >= 1 && (map) <= 31 && (w) == 0 && (l) == 0, \
                   "DP_BYTES cannot encode " #name)

#endif
