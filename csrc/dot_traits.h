/* The dot-product rows of the generated traits table, as the C layers ask
 * for them: signedness, lanes and formats come from pyamx/isa.py's rows,
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
    return t->kind == PYAMX_KIND_DOT_PAIRS || t->kind == PYAMX_KIND_DOT_QUADS ? t : 0;
}

/* Floating-point rows accumulate in fp32; the others wrap in int32. */
static inline int pyamx_dot_is_float(const struct pyamx_op_traits *t) { return t->acc_format == PYAMX_FMT_FP32; }

/* Bytes of one operand value: a dword holds `lanes` of them. */
static inline int pyamx_dot_value_bytes(const struct pyamx_op_traits *t) { return 4 / t->lanes; }

#endif
