/* Traits of every AMX instruction row of pyamx/isa.py, for C.
 *
 * Generated from pyamx/isa.py by build.py: do not edit; python build.py regenerates it.
 *
 * PYAMX_FOR_EACH_OP(X) calls X(mnemonic, kind, a_format, b_format,
 * acc_format, a_signed, b_signed, lanes, prefix, map, pp, w, l, opcode,
 * form) once per row, in table order; pyamx_op_traits[] holds the same
 * fields by op id, and the imm8 form's imm_map, imm_pp, imm_opcode (0 where
 * the row has none). A format of NONE: the row has no such operand.
 * PYAMX_FOR_EACH_IMM_FORM(X) calls X(mnemonic, imm_map, imm_pp, imm_opcode)
 * once per row that has an imm8 form (AMX-AVX512's row instructions).
 */
#ifndef PYAMX_OP_TRAITS_H
#define PYAMX_OP_TRAITS_H

#include "pyamx_ops.h"

enum pyamx_op_kind {
    PYAMX_KIND_NONE = 0,
    PYAMX_KIND_CONFIG = 1,
    PYAMX_KIND_MEMORY = 2,
    PYAMX_KIND_DOT_PAIRS = 3,
    PYAMX_KIND_DOT_QUADS = 4,
    PYAMX_KIND_DOT_COMPLEX = 5,
    PYAMX_KIND_ROW = 6
};

enum pyamx_format {
    PYAMX_FMT_NONE = 0,
    PYAMX_FMT_BF16 = 1,
    PYAMX_FMT_FP16 = 2,
    PYAMX_FMT_INT8 = 3,
    PYAMX_FMT_UINT8 = 4,
    PYAMX_FMT_FP32 = 5,
    PYAMX_FMT_INT32 = 6,
    PYAMX_FMT_BF8 = 7,
    PYAMX_FMT_HF8 = 8,
    PYAMX_FMT_CFP16 = 9
};

enum pyamx_encoding_prefix {
    PYAMX_PREFIX_NONE = 0,
    PYAMX_PREFIX_VEX = 1,
    PYAMX_PREFIX_EVEX = 2
};

enum pyamx_modrm_form {
    PYAMX_FORM_NONE = 0,
    PYAMX_FORM_MEM = 1,
    PYAMX_FORM_REG = 2,
    PYAMX_FORM_SIBMEM = 3
};

#define PYAMX_FOR_EACH_OP(X) \
    X(LDTILECFG, CONFIG, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 0, 0, 0, 0x49, MEM) \
    X(STTILECFG, CONFIG, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 1, 0, 0, 0x49, MEM) \
    X(TILERELEASE, CONFIG, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 0, 0, 0, 0x49, REG) \
    X(TILEZERO, MEMORY, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 3, 0, 0, 0x49, REG) \
    X(TILELOADD, MEMORY, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 3, 0, 0, 0x4B, SIBMEM) \
    X(TILELOADDT1, MEMORY, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 1, 0, 0, 0x4B, SIBMEM) \
    X(TILESTORED, MEMORY, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 2, 0, 0, 0x4B, SIBMEM) \
    X(TDPBF16PS, DOT_PAIRS, BF16, BF16, FP32, 0, 0, 2, VEX, 0x2, 2, 0, 0, 0x5C, REG) \
    X(TDPFP16PS, DOT_PAIRS, FP16, FP16, FP32, 0, 0, 2, VEX, 0x2, 3, 0, 0, 0x5C, REG) \
    X(TDPBSSD, DOT_QUADS, INT8, INT8, INT32, 1, 1, 4, VEX, 0x2, 3, 0, 0, 0x5E, REG) \
    X(TDPBSUD, DOT_QUADS, INT8, UINT8, INT32, 1, 0, 4, VEX, 0x2, 2, 0, 0, 0x5E, REG) \
    X(TDPBUSD, DOT_QUADS, UINT8, INT8, INT32, 0, 1, 4, VEX, 0x2, 1, 0, 0, 0x5E, REG) \
    X(TDPBUUD, DOT_QUADS, UINT8, UINT8, INT32, 0, 0, 4, VEX, 0x2, 0, 0, 0, 0x5E, REG) \
    X(TCVTROWD2PS, ROW, INT32, NONE, FP32, 1, 0, 1, EVEX, 0x2, 2, 0, 2, 0x4A, REG) \
    X(TCVTROWPS2BF16H, ROW, FP32, NONE, BF16, 0, 0, 1, EVEX, 0x2, 3, 0, 2, 0x6D, REG) \
    X(TCVTROWPS2BF16L, ROW, FP32, NONE, BF16, 0, 0, 1, EVEX, 0x2, 2, 0, 2, 0x6D, REG) \
    X(TCVTROWPS2PHH, ROW, FP32, NONE, FP16, 0, 0, 1, EVEX, 0x2, 0, 0, 2, 0x6D, REG) \
    X(TCVTROWPS2PHL, ROW, FP32, NONE, FP16, 0, 0, 1, EVEX, 0x2, 1, 0, 2, 0x6D, REG) \
    X(TILEMOVROW, ROW, UINT8, NONE, UINT8, 0, 0, 4, EVEX, 0x2, 1, 0, 2, 0x4A, REG) \
    X(TILELOADDRS, MEMORY, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 3, 0, 0, 0x4A, SIBMEM) \
    X(TILELOADDRST1, MEMORY, NONE, NONE, NONE, 0, 0, 0, VEX, 0x2, 1, 0, 0, 0x4A, SIBMEM)

#define PYAMX_FOR_EACH_IMM_FORM(X) \
    X(TCVTROWD2PS, 0x3, 2, 0x07) \
    X(TCVTROWPS2BF16H, 0x3, 3, 0x07) \
    X(TCVTROWPS2BF16L, 0x3, 2, 0x77) \
    X(TCVTROWPS2PHH, 0x3, 0, 0x07) \
    X(TCVTROWPS2PHL, 0x3, 3, 0x77) \
    X(TILEMOVROW, 0x3, 1, 0x07)

struct pyamx_op_traits {
    unsigned char kind;       /* enum pyamx_op_kind */
    unsigned char a_format;   /* enum pyamx_format of src1, src2, dst */
    unsigned char b_format;
    unsigned char acc_format;
    unsigned char a_signed;   /* 1: an integer src1/src2 is sign-extended */
    unsigned char b_signed;
    unsigned char lanes;      /* operand values per dword; 0 for a non-dot row */
    unsigned char prefix;     /* enum pyamx_encoding_prefix */
    unsigned char map;        /* opcode map: 2 is 0F38 */
    unsigned char pp;         /* 0 NP, 1 66, 2 F3, 3 F2 */
    unsigned char w;
    unsigned char l;
    unsigned char opcode;
    unsigned char form;       /* enum pyamx_modrm_form */
    unsigned char imm_map;    /* the imm8 form's map, pp and opcode (AMX-AVX512's row instructions: */
    unsigned char imm_pp;     /* the row selector an imm8 instead of a GPR); imm_map 0: no such form */
    unsigned char imm_opcode;
};

static const struct pyamx_op_traits pyamx_op_traits[] = {
    [PYAMX_OP_LDTILECFG] = {PYAMX_KIND_CONFIG, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 0, 0, 0, 0x49, PYAMX_FORM_MEM, 0, 0, 0x00},
    [PYAMX_OP_STTILECFG] = {PYAMX_KIND_CONFIG, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 1, 0, 0, 0x49, PYAMX_FORM_MEM, 0, 0, 0x00},
    [PYAMX_OP_TILERELEASE] = {PYAMX_KIND_CONFIG, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 0, 0, 0, 0x49, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TILEZERO] = {PYAMX_KIND_MEMORY, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 3, 0, 0, 0x49, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TILELOADD] = {PYAMX_KIND_MEMORY, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 3, 0, 0, 0x4B, PYAMX_FORM_SIBMEM, 0, 0, 0x00},
    [PYAMX_OP_TILELOADDT1] = {PYAMX_KIND_MEMORY, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 1, 0, 0, 0x4B, PYAMX_FORM_SIBMEM, 0, 0, 0x00},
    [PYAMX_OP_TILESTORED] = {PYAMX_KIND_MEMORY, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 2, 0, 0, 0x4B, PYAMX_FORM_SIBMEM, 0, 0, 0x00},
    [PYAMX_OP_TDPBF16PS] = {PYAMX_KIND_DOT_PAIRS, PYAMX_FMT_BF16, PYAMX_FMT_BF16, PYAMX_FMT_FP32, 0, 0, 2, PYAMX_PREFIX_VEX, 0x2, 2, 0, 0, 0x5C, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TDPFP16PS] = {PYAMX_KIND_DOT_PAIRS, PYAMX_FMT_FP16, PYAMX_FMT_FP16, PYAMX_FMT_FP32, 0, 0, 2, PYAMX_PREFIX_VEX, 0x2, 3, 0, 0, 0x5C, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TDPBSSD] = {PYAMX_KIND_DOT_QUADS, PYAMX_FMT_INT8, PYAMX_FMT_INT8, PYAMX_FMT_INT32, 1, 1, 4, PYAMX_PREFIX_VEX, 0x2, 3, 0, 0, 0x5E, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TDPBSUD] = {PYAMX_KIND_DOT_QUADS, PYAMX_FMT_INT8, PYAMX_FMT_UINT8, PYAMX_FMT_INT32, 1, 0, 4, PYAMX_PREFIX_VEX, 0x2, 2, 0, 0, 0x5E, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TDPBUSD] = {PYAMX_KIND_DOT_QUADS, PYAMX_FMT_UINT8, PYAMX_FMT_INT8, PYAMX_FMT_INT32, 0, 1, 4, PYAMX_PREFIX_VEX, 0x2, 1, 0, 0, 0x5E, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TDPBUUD] = {PYAMX_KIND_DOT_QUADS, PYAMX_FMT_UINT8, PYAMX_FMT_UINT8, PYAMX_FMT_INT32, 0, 0, 4, PYAMX_PREFIX_VEX, 0x2, 0, 0, 0, 0x5E, PYAMX_FORM_REG, 0, 0, 0x00},
    [PYAMX_OP_TCVTROWD2PS] = {PYAMX_KIND_ROW, PYAMX_FMT_INT32, PYAMX_FMT_NONE, PYAMX_FMT_FP32, 1, 0, 1, PYAMX_PREFIX_EVEX, 0x2, 2, 0, 2, 0x4A, PYAMX_FORM_REG, 0x3, 2, 0x07},
    [PYAMX_OP_TCVTROWPS2BF16H] = {PYAMX_KIND_ROW, PYAMX_FMT_FP32, PYAMX_FMT_NONE, PYAMX_FMT_BF16, 0, 0, 1, PYAMX_PREFIX_EVEX, 0x2, 3, 0, 2, 0x6D, PYAMX_FORM_REG, 0x3, 3, 0x07},
    [PYAMX_OP_TCVTROWPS2BF16L] = {PYAMX_KIND_ROW, PYAMX_FMT_FP32, PYAMX_FMT_NONE, PYAMX_FMT_BF16, 0, 0, 1, PYAMX_PREFIX_EVEX, 0x2, 2, 0, 2, 0x6D, PYAMX_FORM_REG, 0x3, 2, 0x77},
    [PYAMX_OP_TCVTROWPS2PHH] = {PYAMX_KIND_ROW, PYAMX_FMT_FP32, PYAMX_FMT_NONE, PYAMX_FMT_FP16, 0, 0, 1, PYAMX_PREFIX_EVEX, 0x2, 0, 0, 2, 0x6D, PYAMX_FORM_REG, 0x3, 0, 0x07},
    [PYAMX_OP_TCVTROWPS2PHL] = {PYAMX_KIND_ROW, PYAMX_FMT_FP32, PYAMX_FMT_NONE, PYAMX_FMT_FP16, 0, 0, 1, PYAMX_PREFIX_EVEX, 0x2, 1, 0, 2, 0x6D, PYAMX_FORM_REG, 0x3, 3, 0x77},
    [PYAMX_OP_TILEMOVROW] = {PYAMX_KIND_ROW, PYAMX_FMT_UINT8, PYAMX_FMT_NONE, PYAMX_FMT_UINT8, 0, 0, 4, PYAMX_PREFIX_EVEX, 0x2, 1, 0, 2, 0x4A, PYAMX_FORM_REG, 0x3, 1, 0x07},
    [PYAMX_OP_TILELOADDRS] = {PYAMX_KIND_MEMORY, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 3, 0, 0, 0x4A, PYAMX_FORM_SIBMEM, 0, 0, 0x00},
    [PYAMX_OP_TILELOADDRST1] = {PYAMX_KIND_MEMORY, PYAMX_FMT_NONE, PYAMX_FMT_NONE, PYAMX_FMT_NONE, 0, 0, 0, PYAMX_PREFIX_VEX, 0x2, 1, 0, 0, 0x4A, PYAMX_FORM_SIBMEM, 0, 0, 0x00},
};

#endif
