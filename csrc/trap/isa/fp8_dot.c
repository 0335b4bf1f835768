/* AMX-FP8 dot products of the trap mode (docs/semantics.md, AMX-FP8), default
 * numerics only: written from the pseudo-code of Intel's AMX-FP8 text (as
 * clang's amxfp8intrin.h transcribes it) and, where that is silent, GCC's run
 * test, not from the Python emulator, so the cross-checks compare two
 * readings.
 *
 * Per output element the whole K-sum is exact: each fp8 value is an integer
 * "image" times a fixed power of two (BF8 = E5M2: value * 2^16, HF8 = E4M3:
 * value * 2^9, both integers below 2^32, denormals included), a product of
 * two images fits 64 bits and a K-sum of at most 64 products fits a signed
 * 128-bit integer. That sum is rounded once to fp32 (nearest even; it is
 * always zero or inside the normal range: 2^-32 <= |sum| < 2^39), then
 * added to C with one IEEE add (nearest even, denormals kept), whatever
 * MXCSR the interrupted program had.
 */
#include "internal.h"
#include "fp32.h"

#include <immintrin.h>
#include <string.h>

/* Every NaN result of these instructions is PYAMX_F32_DEFAULT_NAN (GCC's
 * reference returns it for NaN inputs, Inf * 0, +Inf + -Inf and a NaN
 * already in C); C + t is the plain IEEE add, under PYAMX_MXCSR_IEEE. */

enum { FP8_FINITE = 0, FP8_INF = 1, FP8_NAN_CODE = 2 };

struct fp8_value {
    uint64_t image; /* |value| * 2^scale, an integer */
    int negative;
    int kind; /* FP8_FINITE, FP8_INF, FP8_NAN_CODE */
};

static struct fp8_value decode_fp8(uint8_t v, int hf8)
{
    struct fp8_value r = {0, v >> 7, FP8_FINITE};
    if (hf8) { /* E4M3, bias 7: no infinity, S.1111.111 the only NaN */
        unsigned e = (v >> 3) & 15, f = v & 7;
        if (e == 15 && f == 7)
            r.kind = FP8_NAN_CODE;
        else
            r.image = e ? (uint64_t)(8 + f) << (e - 1) : f;
    } else { /* E5M2, bias 15: S.11111.00 infinite, S.11111.xx NaN */
        unsigned e = (v >> 2) & 31, f = v & 3;
        if (e == 31)
            r.kind = f ? FP8_NAN_CODE : FP8_INF;
        else
            r.image = e ? (uint64_t)(4 + f) << (e - 1) : f;
    }
    return r;
}

/* sum * 2^-scale rounded once to fp32 (nearest even); +0 for an exact zero. */
static uint32_t round_scaled_to_fp32(__int128 sum, int scale)
{
    if (sum == 0)
        return 0;
    uint32_t sign = sum < 0 ? 0x80000000u : 0;
    unsigned __int128 u = sum < 0 ? -(unsigned __int128)sum : (unsigned __int128)sum;
    int top = 127;
    while (!((u >> top) & 1))
        top--;
    uint64_t mant;
    if (top > 23) {
        int shift = top - 23;
        mant = (uint64_t)(u >> shift);
        unsigned __int128 rem = u & (((unsigned __int128)1 << shift) - 1);
        unsigned __int128 half = (unsigned __int128)1 << (shift - 1);
        if (rem > half || (rem == half && (mant & 1)))
            mant++;
        if (mant == (1u << 24)) {
            mant >>= 1;
            top++;
        }
    } else {
        mant = (uint64_t)(u << (23 - top));
    }
    int biased = top - scale + 127; /* within 1..254 for every sum of these formats */
    return sign | ((uint32_t)biased << 23) | ((uint32_t)mant & 0x7FFFFFu);
}

static uint32_t ieee_add(uint32_t c, uint32_t t)
{
    unsigned int saved = _mm_getcsr();
    _mm_setcsr(PYAMX_MXCSR_IEEE);
    volatile float r = bits_f(c) + bits_f(t);
    uint32_t out = f_bits(r);
    _mm_setcsr(saved);
    return out;
}

/* C[m][n] += the K-sum of row m of a and column n of b; shapes already
 * checked by the caller (do_dot). a_hf8/b_hf8: the operands' formats. */
void trap_dp_fp8_rows(struct tile_state *st, int d, int s1, int s2, int a_hf8, int b_hf8)
{
    int M = st->rows[d], K = st->rows[s2], N = st->colsb[d] / 4;
    int scale = (a_hf8 ? 9 : 16) + (b_hf8 ? 9 : 16);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            __int128 sum = 0;
            int nan = 0, pos_inf = 0, neg_inf = 0;
            for (int k = 0; k < K; k++) {
                const uint8_t *a = &st->tiles[s1][m][4 * k];
                const uint8_t *b = &st->tiles[s2][k][4 * n];
                for (int i = 0; i < 4; i++) {
                    struct fp8_value x = decode_fp8(a[i], a_hf8), y = decode_fp8(b[i], b_hf8);
                    int negative = x.negative ^ y.negative;
                    if (x.kind == FP8_NAN_CODE || y.kind == FP8_NAN_CODE) {
                        nan = 1;
                    } else if (x.kind == FP8_INF || y.kind == FP8_INF) {
                        if ((x.kind == FP8_FINITE && x.image == 0) || (y.kind == FP8_FINITE && y.image == 0))
                            nan = 1; /* Inf * 0 */
                        else if (negative)
                            neg_inf = 1;
                        else
                            pos_inf = 1;
                    } else {
                        __int128 p = (__int128)((unsigned __int128)x.image * y.image);
                        sum += negative ? -p : p;
                    }
                }
            }
            uint8_t *cp = &st->tiles[d][m][4 * n];
            uint32_t c;
            memcpy(&c, cp, 4);
            uint32_t out;
            if (nan || (pos_inf && neg_inf) || pyamx_f32_is_nan(c))
                out = PYAMX_F32_DEFAULT_NAN;
            else if (pos_inf || neg_inf)
                out = ieee_add(c, pos_inf ? 0x7F800000u : 0xFF800000u);
            else
                out = ieee_add(c, round_scaled_to_fp32(sum, scale));
            memcpy(cp, &out, 4);
        }
    }
}
