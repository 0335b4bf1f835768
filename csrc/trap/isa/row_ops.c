/* AMX-AVX512's row instructions in the trap mode (docs/semantics.md, AMX-AVX512),
 * default numerics: one tile row into the 64 bytes of a zmm register, which
 * the handler then writes into the interrupted context.
 *
 * Written from Intel's pseudo-code (clang's amxavx512intrin.h), not from the
 * Python emulator: row_index = r32[15:0] or imm8[5:0], row_chunk = r32[31:16]
 * or imm8[7:6] times 64 bytes; a lane past colsb (dwords for the converts,
 * bytes for TILEMOVROW) is zero. The open points take pyamx's defaults: an
 * index below 16 reads the tile's storage row (zero at or past rows), 16 or
 * more is #UD; FP32 -> BF16/FP16 round to nearest even with denormals kept
 * and NaNs quieted; every instruction, TILEMOVROW included, resets start_row.
 * The conversions are integer code, so no MXCSR reaches them.
 */
#include "internal.h"

#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* m / 2^shift, nearest even (shift >= 1) */
static uint64_t round_shift(uint64_t m, int shift)
{
    if (shift >= 64)
        return 0;
    uint64_t q = m >> shift, r = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    return q + (r > half || (r == half && (q & 1)));
}

static uint32_t int32_to_fp32(uint32_t x)
{
    uint32_t sign = x & 0x80000000u;
    uint64_t m = sign ? (uint64_t)(~x) + 1 : x; /* -2^31 has magnitude 2^31 */
    if (m == 0)
        return 0;
    int e = 63 - __builtin_clzll(m);
    if (e > 23) {
        m = round_shift(m, e - 23);
        if (m >> 24) {
            m >>= 1;
            e++;
        }
    } else {
        m <<= 23 - e;
    }
    return sign | (uint32_t)(e + 127) << 23 | ((uint32_t)m & 0x7FFFFFu);
}

static uint32_t fp32_to_bf16(uint32_t x)
{
    if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu))
        return (x >> 16) | 0x40u; /* quiet, low payload bits dropped */
    return (x + 0x7FFFu + ((x >> 16) & 1)) >> 16;
}

static uint32_t fp32_to_fp16(uint32_t x)
{
    uint32_t sign = (x >> 16) & 0x8000u;
    int exponent = (x >> 23) & 0xFF;
    uint32_t mantissa = x & 0x7FFFFFu;
    if (exponent == 0xFF)
        return sign | 0x7C00u | (mantissa ? 0x200u | (mantissa >> 13) : 0);
    if (exponent == 0 && mantissa == 0)
        return sign;
    /* value = m * 2^s exactly; fp16's spacing at its magnitude is 2^q */
    uint64_t m = exponent ? (mantissa | 0x800000u) : mantissa;
    int s = exponent ? exponent - 150 : -149;
    int floor_log2 = s + 63 - __builtin_clzll(m);
    int q = (floor_log2 > -14 ? floor_log2 : -14) - 10;
    uint64_t r = q > s ? round_shift(m, q - s) : m << (s - q);
    uint64_t code = (uint64_t)(q + 24) * 1024 + r; /* denormal codes run on into the normal ones */
    return sign | (uint32_t)(code < 0x7C00u ? code : 0x7C00u);
}

int trap_do_row(struct tile_state *st, const struct pyamx_trap_insn *in, uint8_t out[64], struct msg *m)
{
    int t = in->tsrc1;
    if (st->palette == 0) {
        m_str(m, "tiles are not configured (palette 0)");
        return EXEC_UD;
    }
    if (t < 0 || t > 7 || st->rows[t] == 0) {
        m_tile(m, "tsrc", t);
        m_str(m, " is not a configured tile");
        return EXEC_UD;
    }
    int imm = in->imm8 >= 0;
    uint32_t row = in->row;
    unsigned index = imm ? row & 0x3F : row & 0xFFFF;
    unsigned chunk = (imm ? (row >> 6) & 3 : row >> 16) * 64u;
    if (index >= 16) {
        m_str(m, "row index ");
        m_dec(m, index);
        m_str(m, " is past the tile's 16 rows");
        return EXEC_UD;
    }
    const uint8_t *src = st->tiles[t][index];
    unsigned colsb = st->colsb[t];
    memset(out, 0, 64);
    const struct pyamx_op_traits *tr = &pyamx_op_traits[in->op];
    if (tr->a_format == PYAMX_FMT_UINT8) { /* TILEMOVROW: raw bytes */
        if (chunk < colsb)
            memcpy(out, src + chunk, colsb - chunk);
    } else {
        int high = in->op == PYAMX_OP_TCVTROWPS2BF16H || in->op == PYAMX_OP_TCVTROWPS2PHH;
        for (unsigned i = 0; i < 16 && chunk / 4 + i < colsb / 4; i++) {
            uint32_t v = rd32(src + chunk + 4 * i), w;
            if (tr->acc_format == PYAMX_FMT_FP32)
                w = int32_to_fp32(v);
            else if (tr->acc_format == PYAMX_FMT_BF16)
                w = fp32_to_bf16(v) << (high ? 16 : 0);
            else
                w = fp32_to_fp16(v) << (high ? 16 : 0);
            memcpy(out + 4 * i, &w, 4);
        }
    }
    st->start_row = 0;
    return EXEC_OK;
}
