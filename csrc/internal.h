/* Declarations shared between pyamx's C files but kept out of the Python API
 * (pyamx.h is fed whole to cffi's cdef; this file is not). */
#ifndef PYAMX_INTERNAL_H
#define PYAMX_INTERNAL_H

#include "pyamx.h"
#include "dot_traits.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define PYAMX_X86_64_LINUX 1
#else
#define PYAMX_X86_64_LINUX 0
#endif

/* build.py defines PYAMX_HAVE_AMX=1 only after test-compiling the AMX
 * target attributes and intrinsics with this very compiler. */
#if !defined(PYAMX_HAVE_AMX) || !PYAMX_X86_64_LINUX
#undef PYAMX_HAVE_AMX
#define PYAMX_HAVE_AMX 0
#endif

/* Bytes of one source value of a pyamx_convert() op: 4 or 8 for the rounding ops (float32/float64
 * in), 2 for the widening ones, 0 for an unknown op. */
size_t pyamx_internal_convert_source_size(int op);
/* pyamx_convert()'s conversion of a rows x cols source (its op, strides and
 * dst layout) on the calling thread, unchecked: the same element functions and
 * vector loops, for pack_b.c's rounding of float B while it packs. */
void pyamx_internal_convert_rows(int op, const void *src, int64_t rows, int64_t cols, int64_t row_stride,
                                 int64_t col_stride, void *dst);

/* Non-zero once permission was granted and a tile instruction was seen to
 * work (silicon), or the trap mode granted its emulated permission. */
int pyamx_internal_ready(void);

/* Set when readiness came from the trap mode's emulated permission: no tile
 * instruction reaches silicon in this process. */
int pyamx_internal_trapped(void);
/* The trap mode, or the complement mode on AMX silicon (pyamx_set_complemented):
 * an instruction of an extension the CPU lacks is emulated, not a SIGILL. */
int pyamx_internal_emulated(void);

/* Whether a dot-product row's instructions can run here: its kernel group
 * (PYAMX_KERNEL_*) compiled in and the CPU reporting the row's CPUID feature
 * (the generated traits' feature_* fields) -- else executing one is SIGILL --
 * or the trap mode emulating every row. Not a dot row: 0. By op id, not by
 * row pointer: every .c file has its own copy of the static traits table. */
int pyamx_internal_row_runnable(int op);

/* The build's kernel group of a dot-product row, from its operand format:
 * the group decides whether this build compiled the row's instructions and
 * whether this CPU runs them. 0 for a format no group covers yet, which no
 * build has (PYAMX_E_NO_KERNEL). */
static inline int pyamx_dot_kernel_group(const struct pyamx_op_traits *t)
{
    switch (t->a_format) {
    case PYAMX_FMT_BF16: return PYAMX_KERNEL_BF16;
    case PYAMX_FMT_FP16: return PYAMX_KERNEL_FP16;
    case PYAMX_FMT_CFP16: return PYAMX_KERNEL_COMPLEX;
    case PYAMX_FMT_BF8:
    case PYAMX_FMT_HF8: return PYAMX_KERNEL_FP8;
    case PYAMX_FMT_INT8:
    case PYAMX_FMT_UINT8: return PYAMX_KERNEL_INT8;
    default: return 0;
    }
}

/* From normal context, at the start of a thread the bindings create (a
 * kernel's worker): in trap mode it claims the thread's emulated tile state
 * and arms its release at thread exit (pyamx_trap_thread_prepare); else a
 * no-op. 0 when the thread may execute tile instructions. */
int pyamx_internal_thread_prepare(void);

#include <stdint.h>

/* A thread's tile state as kernels save it around their own work: the
 * STTILECFG image and every configured tile stored with stride 64. */
typedef struct {
    uint8_t cfg[64] __attribute__((aligned(64)));
    uint8_t tiles[8][16][64] __attribute__((aligned(64)));
} pyamx_tile_state;

#if PYAMX_HAVE_AMX
/* kernels.c: save (PYAMX_OK, or PYAMX_E_START_ROW with nothing changed) and
 * restore the calling thread's tile state. */
int pyamx_internal_save_state(pyamx_tile_state *s);
void pyamx_internal_restore_state(const pyamx_tile_state *s);

/* The tile intrinsics are asm statements that do not tell the compiler they
 * touch memory; a barrier keeps C accesses to tile buffers on their side. */
#define BARRIER() __asm__ volatile("" ::: "memory")

/* A dot product on any register triple as raw bytes: the register numbers
 * are immediates, and GAS rejects the (unreachable, #UD) cases of equal
 * registers that a generated switch must still spell out; raw bytes are
 * also how a row the compiler has no intrinsic for is spelled (GCC 12 has
 * no -mamx-fp16, none has AMX-FP8's map 5), so any toolchain that builds
 * AMX-TILE builds every row. Encoding: VEX.128.<pp>.<map>.W0 <opc> /r,
 * three-byte VEX (C4), ModRM 11:dst:src1, VEX.vvvv = ~src2; `mpp` is
 * VEX_MAP_PP(map, pp) with map 2 = 0F38, 5 = MAP5 and pp 0 = NP, 1 = 66,
 * 2 = F3, 3 = F2. Checked against GAS's and clang's encodings with objdump. */
#define VEX_MAP_PP(map, pp) (((map) << 2) | (pp))
#define DP_BYTES(mpp, opc, d, s1, s2)                                       \
    __asm__ volatile(".byte 0xc4, %c0, %c1, " #opc ", %c2"                 \
                     :                                                      \
                     : "i"(0xe0 | ((mpp) >> 2)), "i"(((~(s2) & 15) << 3) | ((mpp) & 3)), \
                       "i"(0xc0 | ((d) << 3) | (s1)))
#endif

#endif
