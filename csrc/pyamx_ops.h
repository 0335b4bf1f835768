/* The one numbering of the AMX instructions, shared by every layer.
 *
 * Generated from pyamx/table/isa.py: do not edit; python pyamx/table/generate.py regenerates it.
 *
 * Plain declarations only: build.py feeds this file to cffi's cdef(), so
 * Python reads the same ids from each module's lib. The rows' traits are
 * csrc/pyamx_op_traits.h.
 */
#ifndef PYAMX_OPS_H
#define PYAMX_OPS_H

/* Instruction ids in the order of pyamx/table/isa.py's TABLE; 0 is no instruction. */
enum pyamx_op {
    PYAMX_OP_NONE = 0,
    PYAMX_OP_LDTILECFG = 1,
    PYAMX_OP_STTILECFG = 2,
    PYAMX_OP_TILERELEASE = 3,
    PYAMX_OP_TILEZERO = 4,
    PYAMX_OP_TILELOADD = 5,
    PYAMX_OP_TILELOADDT1 = 6,
    PYAMX_OP_TILESTORED = 7,
    PYAMX_OP_TDPBF16PS = 8,
    PYAMX_OP_TDPFP16PS = 9,
    PYAMX_OP_TDPBSSD = 10,
    PYAMX_OP_TDPBSUD = 11,
    PYAMX_OP_TDPBUSD = 12,
    PYAMX_OP_TDPBUUD = 13,
    PYAMX_OP_TCMMIMFP16PS = 14,
    PYAMX_OP_TCMMRLFP16PS = 15,
    PYAMX_OP_TDPBF8PS = 16,
    PYAMX_OP_TDPBHF8PS = 17,
    PYAMX_OP_TDPHBF8PS = 18,
    PYAMX_OP_TDPHF8PS = 19,
    PYAMX_OP_TCVTROWD2PS = 20,
    PYAMX_OP_TCVTROWPS2BF16H = 21,
    PYAMX_OP_TCVTROWPS2BF16L = 22,
    PYAMX_OP_TCVTROWPS2PHH = 23,
    PYAMX_OP_TCVTROWPS2PHL = 24,
    PYAMX_OP_TILEMOVROW = 25,
    PYAMX_OP_TILELOADDRS = 26,
    PYAMX_OP_TILELOADDRST1 = 27
};

#endif
