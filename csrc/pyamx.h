/* The C API of pyamx._native, declared once.
 *
 * build.py hands this whole file to cffi's cdef() (after stripping the
 * preprocessor lines), so it must stay within what cdef() parses: plain
 * declarations, fixed-width integer types, no macros in declarations.
 *
 * Sections are owned by one source file each; keep them apart.
 */
#ifndef PYAMX_H
#define PYAMX_H

#include <stdint.h>
#include <stddef.h>

/* ---- every layer: the one numbering of the instructions ---- */

/* Instruction ids: the trap decoder's results, the dot-product op of
 * pyamx_dp_oneshot()/pyamx_tdp(), and the ids pyamx/isa.py reads from lib.
 * Dot products are the contiguous range TDPBF16PS..TDPBUUD. */
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
    PYAMX_OP_TDPBUUD = 13
};


/* ---- detect.c: build facts and detection (baseline x86-64, never a tile instruction) ---- */

/* Status codes of every int-returning function below that is not an errno
 * carrier. Negative so they never collide with errno values. */
enum pyamx_status {
    PYAMX_OK = 0,
    PYAMX_E_NOT_READY = -1,      /* detection/permission has not said yes */
    PYAMX_E_NO_KERNEL = -2,      /* this build lacks the kernel family */
    PYAMX_E_ARG = -3,            /* an argument the Python layer should have refused */
    PYAMX_E_START_ROW = -4,      /* tile state has a pending start_row that cannot be saved */
    PYAMX_E_UNSUPPORTED = -5     /* not x86-64 Linux */
};

/* Kernel families in pyamx_build_kernels(). */
enum pyamx_kernel_bits {
    PYAMX_KERNEL_BF16 = 1,
    PYAMX_KERNEL_INT8 = 2,
    PYAMX_KERNEL_FP16 = 4
};

const char *pyamx_build_version(void);
const char *pyamx_build_compiler(void);
int pyamx_build_kernels(void);
/* Why the build has (or lacks) the AMX kernels: build.py's decision, for `pyamx info`. */
const char *pyamx_build_kernels_reason(void);
int pyamx_build_x86_64_linux(void);

int pyamx_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *out4);
int pyamx_xgetbv0(uint64_t *out);
int pyamx_arch_prctl_get(int code, uint64_t *out);
int pyamx_request_permission(void);
int pyamx_probe_child(int *wait_status);
int pyamx_native_ready(void);
int pyamx_trap_linked(void);

/* ---- kernels.c: AMX kernels (compiled with target("amx-...") only where supported) ---- */

int pyamx_dp_oneshot(int op, uint32_t *c, const void *a, const void *b, int m, int k, int n);

int pyamx_ldtilecfg(const uint8_t *cfg64);
int pyamx_sttilecfg(uint8_t *cfg64);
int pyamx_tileloadd(int tmm, const uint8_t *base, int64_t stride, int t1);
int pyamx_tilestored(int tmm, uint8_t *base, int64_t stride);
int pyamx_tilezero(int tmm);
int pyamx_tilerelease(void);
int pyamx_tdp(int op, int dst, int src1, int src2);
int pyamx_save_tiles(uint8_t *cfg64, uint8_t *tiles8192);
int pyamx_restore_tiles(const uint8_t *cfg64, const uint8_t *tiles8192);

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

/* ---- trap.c: trap-and-emulate test mode (SIGILL handler) ---- */

/* pyamx_trap_decode results other than a length (> 0). */
enum {
    PYAMX_TRAP_DECODE_NOT_AMX = 0,   /* not an instruction this mode emulates */
    PYAMX_TRAP_DECODE_TRUNCATED = -1, /* ran out of bytes */
    PYAMX_TRAP_DECODE_UD = -2         /* AMX opcode in a form silicon rejects with #UD */
};

/* Status codes of the install/permission/thread functions. */
enum {
    PYAMX_TRAP_OK = 0,
    PYAMX_TRAP_E_PLATFORM = -1,   /* not x86-64 Linux */
    PYAMX_TRAP_E_HAS_AMX = -2,    /* the CPU has usable AMX: refused */
    PYAMX_TRAP_E_NO_FMA = -3,     /* CPU/OS lacks FMA+AVX */
    PYAMX_TRAP_E_SIGACTION = -4,
    PYAMX_TRAP_E_NOT_ACTIVE = -5, /* pyamx_trap_install() not called */
    PYAMX_TRAP_E_TABLE_FULL = -6  /* no free per-thread tile state slot */
};

/* One decoded instruction.  Tile numbers are -1 when the form has no such
 * operand and may be 8..15 (VEX.R/B/vvvv), which palette 1 faults on.
 * base_reg: 0..15 (rax..r15), 16 for RIP-relative, -1 for none;
 * index_reg: 0..15 or -1.  addr: the effective address (for TILELOADD/
 * TILESTORED: base + disp, the address of row 0); stride: index * scale,
 * 0 without an index. */
struct pyamx_trap_insn {
    int32_t op;
    int32_t length;
    int32_t tdst;
    int32_t tsrc1;
    int32_t tsrc2;
    int32_t has_mem;
    int32_t base_reg;
    int32_t index_reg;
    int32_t scale;
    int32_t disp;
    int32_t rip_relative;
    uint64_t addr;
    int64_t stride;
};

/* Pure decoder.  gprs16: register values in x86 numbering (rax, rcx, rdx,
 * rbx, rsp, rbp, rsi, rdi, r8..r15), may be NULL (then addresses hold only
 * displacements); rip: address of the instruction.  Returns the length or
 * a PYAMX_TRAP_DECODE_* code; *out is filled as far as decoded. */
int32_t pyamx_trap_decode(const uint8_t *insn, size_t len, const uint64_t *gprs16,
                          uint64_t rip, struct pyamx_trap_insn *out);
const char *pyamx_trap_op_name(int32_t op);
const char *pyamx_trap_strerror(int32_t code);

/* 1 when built for x86-64 Linux, else 0 (then everything reports E_PLATFORM). */
int32_t pyamx_trap_supported(void);
/* bit 0: CPUID.7.0:EDX[24] AMX-TILE; bit 1: OSXSAVE; bit 2: XCR0[17] and [18] set. */
int32_t pyamx_trap_cpu_amx_bits(void);
/* 1 when all three bits are set: AMX is usable and trap mode is refused. */
int32_t pyamx_trap_cpu_has_amx(void);

/* Install the SIGILL handler (chaining to the current one).  Idempotent. */
int32_t pyamx_trap_install(void);
/* Call before each native entry: reinstalls if someone (faulthandler)
 * replaced the handler.  Returns 0 when still installed, 1 when it
 * reinstalled, PYAMX_TRAP_E_NOT_ACTIVE when never installed. */
int32_t pyamx_trap_ensure_installed(void);
/* 1 when installed and the current SIGILL disposition is ours. */
int pyamx_trap_active(void);
/* 1 once pyamx_trap_install succeeded (even if since replaced). */
int32_t pyamx_trap_installed(void);
/* For tests: restore the previous SIGILL disposition (when ours is still
 * current) and withdraw the emulated permission. */
int32_t pyamx_trap_uninstall(void);
/* The emulated arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA):
 * process-wide, inherited by fork, gone after exec.  Until it is called
 * every tile instruction dies with SIGILL, as on silicon.  Returns 0, or
 * an errno like the syscall (EINVAL: trap mode not installed; ENOSYS:
 * not x86-64 Linux). */
int pyamx_trap_grant_permission(void);
int32_t pyamx_trap_permission_granted(void);
/* Optional, from normal context on each thread that runs tile code: claims
 * the thread's slot and arms its release at thread exit. */
int32_t pyamx_trap_thread_prepare(void);
/* The calling thread's emulated state: 64-byte STTILECFG image and 8 KiB
 * of tile data (tmm0..7, 16 rows x 64 bytes).  Returns 0 when the thread
 * has no state yet (both outputs zeroed). */
int32_t pyamx_trap_thread_state(uint8_t *cfg_out, uint8_t *tiles_out);
int32_t pyamx_trap_slots_in_use(void);
/* 0 silences the one-line reason the handler writes to fd 2 on a fault. */
void pyamx_trap_set_verbose(int32_t on);

/* Trapped-and-emulated instruction counters (process-wide). */
uint64_t pyamx_trap_count(void);
uint64_t pyamx_trap_op_count(int32_t op);
void pyamx_trap_reset_counts(void);

/* The emulator's scalar primitives on fp32 bit patterns (SEMANTICS.md 2-3). */
uint32_t pyamx_trap_fma32(uint32_t a, uint32_t b, uint32_t c);
uint32_t pyamx_trap_add32(uint32_t x, uint32_t y);
uint32_t pyamx_trap_f16_to_f32(uint16_t h);

/* (trap.c section, continued) Test-only kernels in trap_selftest.c; they
 * execute real AMX instructions, so outside trap mode they need AMX. */

/* LDTILECFG cfg; TILELOADD tmm0 <- c, tmm1 <- a, tmm2 <- b; op tmm0, tmm1,
 * tmm2 (op: PYAMX_OP_TDP*); TILESTORED tmm0 -> c; TILERELEASE. */
int32_t pyamx_trap_selftest_dot(int32_t op, const uint8_t *cfg, const void *a, int64_t lda,
                                const void *b, int64_t ldb, void *c, int64_t ldc);
/* Loads a tile from src and stores it to dst with addressing form `form`
 * (0..5, see trap_selftest.c); cfg configures the tiles first. */
int32_t pyamx_trap_selftest_addressing(int32_t form, const uint8_t *cfg, const void *src,
                                       int64_t stride, void *dst);
/* LDTILECFG from a stack copy of cfg, sleep, STTILECFG into cfg_out. */
void pyamx_trap_selftest_hold(const uint8_t *cfg, int32_t usleep_us, uint8_t *cfg_out);
/* LDTILECFG/STTILECFG through a RIP-relative static buffer. */
void pyamx_trap_selftest_cfg_riprel(const uint8_t *cfg, uint8_t *cfg_out);
void pyamx_trap_selftest_ldtilecfg(const uint8_t *cfg);
void pyamx_trap_selftest_sttilecfg(uint8_t *cfg_out);
void pyamx_trap_selftest_tilezero(int32_t tile);
void pyamx_trap_selftest_release(void);
/* tdpbf16ps tmm0, tmm0, tmm1: operands not distinct. */
void pyamx_trap_selftest_dp_same(void);
/* A genuine illegal instruction (ud2). */
void pyamx_trap_selftest_ud2(void);
/* n iterations of one instruction kind: 0 STTILECFG, 1 TILEZERO,
 * 2 TILELOADD 16x64, 3 TDPBF16PS 16x16x16 (after one LDTILECFG). */
int32_t pyamx_trap_selftest_loop(int32_t kind, int64_t n);
/* Does nothing: the reference cost of a cffi call. */
int32_t pyamx_trap_selftest_nop(void);
/* Nanoseconds for n ud2 traps caught by a trivial handler that only skips
 * them: the kernel's bare SIGILL round trip.  Swaps the SIGILL disposition
 * for the duration, so single-threaded benchmarks only. */
int64_t pyamx_trap_selftest_raw_sigill_ns(int64_t n);

#endif
