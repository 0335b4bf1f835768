/* The C API of pyamx._native, declared once.
 *
 * build.py hands this whole file to cffi's cdef() (after stripping the
 * preprocessor lines and inlining the local headers it includes with
 * quotes), so it must stay within what cdef() parses: plain declarations,
 * fixed-width integer types, no macros in declarations.
 *
 * Sections are owned by one source file each; keep them apart.
 */
#ifndef PYAMX_H
#define PYAMX_H

#include <stdint.h>
#include <stddef.h>

/* ---- every layer: the one numbering of the instructions (pyamx_ops.h) ---- */
#include "pyamx_ops.h"


/* ---- detect.c: build facts and detection (baseline x86-64, never a tile instruction) ---- */

/* Status codes of every int-returning function below that is not an errno
 * carrier. Negative so they never collide with errno values. */
enum pyamx_status {
    PYAMX_OK = 0,
    PYAMX_E_NOT_READY = -1,      /* detection/permission has not said yes */
    PYAMX_E_NO_KERNEL = -2,      /* this build lacks the kernel group */
    PYAMX_E_ARG = -3,            /* an argument the Python layer should have refused */
    PYAMX_E_START_ROW = -4,      /* tile state has a pending start_row that cannot be saved */
    PYAMX_E_UNSUPPORTED = -5,    /* not x86-64 Linux */
    /* The tile machine's own guards (kernels.c), decided against the
     * configuration loaded in the tile registers at the moment the
     * instruction would run; nothing executed when one is returned. */
    PYAMX_E_UD_UNCONFIGURED = -6, /* #UD: tiles not configured (palette 0) */
    PYAMX_E_UD_REGISTER = -7,     /* #UD: a tile register outside tmm0..tmm7 */
    PYAMX_E_UD_SHAPE = -8,        /* #UD: dot-product operands break a shape rule */
    PYAMX_E_GP_CONFIG = -9,       /* #GP: an illegal LDTILECFG image */
    PYAMX_E_MEMORY = -10          /* a row of the memory operand lies outside the buffer */
};

/* Kernel groups in pyamx_build_kernels(). */
enum pyamx_kernel_bits {
    PYAMX_KERNEL_BF16 = 1,
    PYAMX_KERNEL_INT8 = 2,
    PYAMX_KERNEL_FP16 = 4,
    PYAMX_KERNEL_FP8 = 8,
    PYAMX_KERNEL_COMPLEX = 16
};

const char *pyamx_build_version(void);
const char *pyamx_build_compiler(void);
int pyamx_build_kernels(void);
/* Why the build has (or lacks) the AMX kernels: build.py's decision, for `pyamx info`. */
const char *pyamx_build_kernels_reason(void);
int pyamx_build_x86_64_linux(void);

int pyamx_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *out4);
int pyamx_xgetbv0(uint64_t *out);
/* 1 where the CPU reports the CPUID feature of op's row (its generated traits), else 0; asked once
 * per op. The C guards ask it too, so a kernel of an extension the CPU lacks is never reached. */
int pyamx_cpu_has_op_feature(int op);
int pyamx_arch_prctl_get(int code, uint64_t *out);
int pyamx_request_permission(void);
int pyamx_probe_child(int *wait_status);
int pyamx_native_ready(void);
/* The one hook between this module and the trap mode (pyamx._trap),
 * registered by pyamx/cpu/trap.py after installing the trap with the addresses
 * of pyamx_trap_grant_permission and pyamx_trap_thread_prepare (NULL, NULL
 * clears it).  While set, pyamx_request_permission() calls `grant` (the
 * trap's emulated ARCH_REQ_XCOMP_PERM: 0 or an errno) instead of
 * arch_prctl, and the kernels' own worker threads call `thread_prepare`
 * (0 or a negative status) so their emulated tile state is released when
 * they end. */
void pyamx_set_trap_hook(int (*grant)(void), int32_t (*thread_prepare)(void));
/* On AMX silicon with pyamx._trap's complement mode installed in this process
 * (pyamx.cpu.trap.complement): the rows of the extensions the CPU lacks may run,
 * as their SIGILL is emulated on the tile registers. 1 on, 0 off. */
void pyamx_set_complemented(int on);

/* ---- fpenv.c: the calling thread's MXCSR (x86-64; elsewhere unsupported) ---- */

/* 1 where pyamx_get_mxcsr/pyamx_set_mxcsr reach the thread's MXCSR, else 0
 * (get then returns 0 and set PYAMX_E_UNSUPPORTED). set refuses values with
 * reserved bits 16-31 (PYAMX_E_ARG) rather than fault on them. */
int pyamx_fpenv_supported(void);
uint32_t pyamx_get_mxcsr(void);
int pyamx_set_mxcsr(uint32_t value);

/* ---- convert.c: float32/float64 <-> bf16/fp16 arrays (its own header) ---- */
#include "convert.h"

/* ---- kernels.c: AMX kernels (compiled with target("amx-...") only where supported) ---- */

int pyamx_dp_oneshot(int op, uint32_t *c, const void *a, const void *b, int m, int k, int n);

/* The tile machine, one instruction per call.  Each call reads the
 * configuration back from the tile registers (STTILECFG) and checks the
 * instruction against it before executing it, in the same C call, so no
 * caller-side copy of the configuration is ever trusted: a violation returns
 * a PYAMX_E_UD_* / PYAMX_E_GP_CONFIG / PYAMX_E_MEMORY code and runs nothing.
 * Memory operands are a buffer (base, len bytes) and the byte offset of
 * row 0 and the row stride inside it: rows start_row..rows-1, colsb bytes
 * each at offset + r * stride, must all lie inside [0, len). */
int pyamx_load_config(const uint8_t *cfg64);
int pyamx_store_config(uint8_t *cfg64);
/* The config and memory kernels are named by what they do, as pyamx/table/isa.py files their rows
 * (Instruction.action); kernels.c says which instruction each executes. pyamx_load_tile's hint is
 * the index of the row's action in pyamx.table.isa.LOAD_ACTIONS: 0 TILELOADD, 1 TILELOADDT1, 2 TILELOADDRS,
 * 3 TILELOADDRST1 (the last two return PYAMX_E_NO_KERNEL, running nothing, where CPUID lacks AMX-MOVRS). */
int pyamx_load_tile(int tmm, const uint8_t *buf, int64_t len, int64_t offset, int64_t stride, int t1);
/* An AMX-AVX512 row instruction (op of kind "row") on tile tmm with a GPR selector: the 64-byte
 * zmm result into out16. PYAMX_E_NO_KERNEL where CPUID lacks AMX-AVX512 or XCR0 the AVX-512 state;
 * PYAMX_E_UD_SHAPE for an unconfigured tile or a row index of 16 or more (nothing ran). */
int pyamx_tilerow(int op, int tmm, uint32_t selector, uint32_t *out16);
/* The same in the imm8 form (imm8 0..255; an index imm8[5:0] of 16 or more is PYAMX_E_UD_SHAPE). */
int pyamx_tilerow_imm(int op, int tmm, int imm8, uint32_t *out16);
int pyamx_store_tile(int tmm, uint8_t *buf, int64_t len, int64_t offset, int64_t stride);
int pyamx_zero_tile(int tmm);
int pyamx_release_tiles(void);
int pyamx_tdp(int op, int dst, int src1, int src2);
int pyamx_save_tiles(uint8_t *cfg64, uint8_t *tiles8192);
int pyamx_restore_tiles(const uint8_t *cfg64, const uint8_t *tiles8192);

/* The guards above as pure functions of a 64-byte STTILECFG image (baseline
 * C, in every build): PYAMX_OK or the status the instruction would return. */
int pyamx_check_memory_operand(const uint8_t *cfg64, int tmm, int64_t len, int64_t offset, int64_t stride);
int pyamx_check_dot_product(const uint8_t *cfg64, int dst, int src1, int src2);
int pyamx_check_tile_register(const uint8_t *cfg64, int tmm);
int pyamx_check_tile_configured(const uint8_t *cfg64, int tmm); /* TILEZERO */

/* ---- matmul_amx.c: native AMX matmul (owner: amxkernel) ---- */

enum pyamx_matmul_limits {
    PYAMX_MATMUL_MAX_THREADS = 256,  /* largest `threads` pyamx_matmul_amx() accepts */
    PYAMX_MATMUL_K_PANEL = 32,       /* default K panel: 32 blocks of 16 dwords (1024 bf16 values) */
    PYAMX_MATMUL_N_PANEL = 8         /* default N panel: 8 blocks of 32 columns (B panel 512 KiB) */
};

/* c (m x n dwords, row stride ldc_bytes) = c + a . b through tile
 * instructions, K consumed in blocks of 16 dwords in increasing order (the
 * pyamx.matmul schedule). op: PYAMX_OP_TDPBF16PS..TDPBUUD. a: m rows of
 * k_dwords dwords (bf16/fp16 pairs or byte quads), row stride lda_bytes.
 * b_vnni: k_dwords rows of n dwords, pair-/quad-interleaved as the
 * instruction takes tsrc2, row stride ldb_bytes. threads: 1..MAX, worker
 * threads splitting 32 x 32 output blocks (the result does not depend on
 * it). The calling thread's tile state is saved and restored. Returns
 * PYAMX_OK, PYAMX_E_NOT_READY, PYAMX_E_NO_KERNEL (not built, or AMX-FP16
 * missing), PYAMX_E_START_ROW or PYAMX_E_ARG (nothing ran). */
int pyamx_matmul_amx(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                     const void *b_vnni, int64_t ldb_bytes, uint32_t *c, int64_t ldc_bytes, int threads);
/* The same with the cache panels chosen (k_panel K blocks of 16 dwords, n_panel
 * block columns of 32, both >= 1): the bits do not depend on them. */
int pyamx_matmul_amx_panels(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                            const void *b_vnni, int64_t ldb_bytes, uint32_t *c, int64_t ldc_bytes, int threads,
                            int64_t k_panel, int64_t n_panel);
/* The same with B already in the tile-contiguous layout of pyamx_pack_b()
 * (b_tiles 64-byte aligned, b_bytes at least pyamx_packed_b_bytes(4,
 * k_dwords, n)): pyamx.pack()'s operand, packed once for many calls. */
int pyamx_matmul_amx_packed(int op, int64_t m, int64_t n, int64_t k_dwords, const void *a, int64_t lda_bytes,
                            const void *b_tiles, int64_t b_bytes, uint32_t *c, int64_t ldc_bytes, int threads,
                            int64_t k_panel, int64_t n_panel);

/* The peak probe of benchmarks/bench_native.py: `count` (>= 1) dot products
 * of row `op` chained into one full 16 x 16 tile (each waits for the last),
 * timed on CLOCK_MONOTONIC into *nanoseconds. The caller's tile state is
 * saved and restored. PYAMX_OK, PYAMX_E_NOT_READY, PYAMX_E_NO_KERNEL,
 * PYAMX_E_START_ROW or PYAMX_E_ARG. */
int pyamx_matmul_peak_probe(int op, int64_t count, int64_t *nanoseconds);

/* ---- pack_b.c: B in the native matmul's tile-contiguous layout (every build) ---- */

/* Bytes of the layout for `rows` rows of n items of item_bytes (1 or 2: K
 * values; 4: dword rows already interleaved); -1 for bad or overflowing sizes. */
int64_t pyamx_packed_b_bytes(int item_bytes, int64_t rows, int64_t n);
/* b (rows x n items, row stride ldb_bytes) into dst (dst_bytes >= the size
 * above), K padded with +0 to whole dwords, everything outside B zero; split
 * over `threads` (1..PYAMX_MATMUL_MAX_THREADS) pool threads. PYAMX_OK or
 * PYAMX_E_ARG (nothing written). */
int pyamx_pack_b(int item_bytes, const void *b, int64_t ldb_bytes, int64_t rows, int64_t n, void *dst,
                 int64_t dst_bytes, int threads);
/* The same layout of bf16/fp16 values rounded from float32/float64 B while it
 * is packed (op: PYAMX_CONVERT_F32_TO_BF16, _F64_TO_BF16, _F32_TO_FP16 or
 * _F64_TO_FP16; convert.h's rules), read once in place: element (i, j) at b +
 * i * row_stride + j * col_stride (bytes, any sign, multiples of the source
 * item size; b aligned to it). The bytes equal pyamx_convert() then
 * pyamx_pack_b(2, ...), whatever the caller's MXCSR. PYAMX_OK or PYAMX_E_ARG
 * (nothing written). */
int pyamx_pack_b_rounded(int op, const void *b, int64_t row_stride, int64_t col_stride, int64_t rows, int64_t n,
                         void *dst, int64_t dst_bytes, int threads);
/* The inverse: rows x n items back out of the layout, row stride ldd_bytes
 * (item 4 gives the interleaved dword rows). PYAMX_OK or PYAMX_E_ARG. */
int pyamx_unpack_b(int item_bytes, const void *src, int64_t src_bytes, int64_t rows, int64_t n, void *dst,
                   int64_t ldd_bytes);

/* ---- pool.c: the kernels' persistent worker threads ---- */

/* Workers alive now (created on a call's first need, reused by later calls). */
int pyamx_pool_workers(void);
/* Stops and joins them (atexit); a later call creates new ones. The number
 * joined, or -1 while a call is using the pool (nothing stopped). */
int pyamx_pool_shutdown(void);

#endif
