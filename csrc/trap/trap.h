/* The C API of pyamx._trap, the trap-and-emulate mode, declared once.
 *
 * build.py hands this file to cffi's cdef() with its preprocessor lines
 * stripped and pyamx_ops.h inlined, so it holds plain declarations only.
 * The module is built for x86-64 Linux alone (build.py skips it elsewhere);
 * it never executes a tile instruction itself, so any C compiler builds it.
 * Its one link to pyamx._native is a hook: pyamx/cpu/trap.py hands the
 * addresses of pyamx_trap_grant_permission and pyamx_trap_thread_prepare to
 * pyamx_set_trap_hook() in csrc/pyamx.h.
 */
#ifndef PYAMX_TRAP_H
#define PYAMX_TRAP_H

#include <stdint.h>
#include <stddef.h>

#include "../pyamx_ops.h"

/* pyamx_trap_decode results other than a length (> 0). */
enum pyamx_trap_decode_status {
    PYAMX_TRAP_DECODE_NOT_AMX = 0,   /* not an instruction this mode emulates */
    PYAMX_TRAP_DECODE_TRUNCATED = -1, /* ran out of bytes */
    PYAMX_TRAP_DECODE_UD = -2,        /* AMX opcode in a form silicon rejects with #UD */
    PYAMX_TRAP_DECODE_UNSUPPORTED = -3 /* a valid APX (extended GPR) form this mode does not emulate */
};

/* Status codes of the install/permission/thread functions. */
enum pyamx_trap_status {
    PYAMX_TRAP_OK = 0,
    PYAMX_TRAP_E_HAS_AMX = -2,    /* the CPU has usable AMX: refused */
    PYAMX_TRAP_E_NO_FMA = -3,     /* CPU/OS lacks FMA+AVX */
    PYAMX_TRAP_E_SIGACTION = -4,
    PYAMX_TRAP_E_NOT_ACTIVE = -5, /* pyamx_trap_install() not called */
    PYAMX_TRAP_E_TABLE_FULL = -6, /* no free per-thread tile state slot */
    PYAMX_TRAP_E_NO_SILICON = -7  /* complement mode: the CPU has no usable AMX to complement */
};

/* What pyamx_trap_guard_state() reports (see seccomp_guard.c). */
enum pyamx_trap_guard_status {
    PYAMX_TRAP_GUARD_OFF = 0,      /* never asked for */
    PYAMX_TRAP_GUARD_ACTIVE = 1,   /* seccomp keeps the handler installed */
    PYAMX_TRAP_GUARD_FAILED = 2    /* asked for, unavailable: reinstall-on-entry only */
};

/* Tile-state table size: at most this many threads hold emulated tile state. */
enum { PYAMX_TRAP_MAX_THREADS = 256 };

/* One decoded instruction.  Tile numbers are -1 when the form has no such
 * operand and may be 8..15 (VEX.R/B/vvvv), which palette 1 faults on.
 * base_reg: 0..15 (rax..r15), 16 for RIP-relative, -1 for none;
 * index_reg: 0..15 or -1.  addr: the effective address (for TILELOADD/
 * TILESTORED: base + disp, the address of row 0); stride: index * scale,
 * 0 without an index.  AMX-AVX512 row instructions: zdst is the destination
 * zmm (0..31), tsrc1 the source tile, and the row selector is either the
 * GPR row_gpr (0..15, imm8 = -1) or the immediate imm8 (row_gpr = -1);
 * row holds its value (the GPR's low 32 bits, 0 without gprs16, or the
 * imm8).  zdst, row_gpr and imm8 are -1 for every other instruction. */
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
    int32_t zdst;
    int32_t row_gpr;
    int32_t imm8;
    uint32_t row;
};

/* ---- complement mode (complement.c, sigill_handler.c) ---- */

/* On a CPU with usable AMX: installs the SIGILL handler for the AMX
 * instructions of the extensions this CPU lacks (AMX-FP8, AMX-COMPLEX,
 * AMX-MOVRS on a Sapphire Rapids), which it emulates on the tile registers
 * saved in the signal frame; everything else runs on silicon, arch_prctl
 * included. PYAMX_TRAP_E_NO_SILICON without usable AMX (the full trap mode,
 * pyamx_trap_install, is the one there); PYAMX_TRAP_E_HAS_AMX when the CPU
 * has every extension pyamx knows (nothing to complement). */
int32_t pyamx_trap_install_complement(void);
/* 1 when the handler installed is the complement mode's. */
int32_t pyamx_trap_complementing(void);
/* 1 when the complement mode emulates op on this CPU. */
int32_t pyamx_trap_complement_emulates(int32_t op);

/* ---- decode.c: the pure decoder ---- */

/* gprs16: register values in x86 numbering (rax, rcx, rdx, rbx, rsp, rbp,
 * rsi, rdi, r8..r15), may be NULL (then addresses hold only displacements);
 * rip: address of the instruction.  Returns the length or a
 * PYAMX_TRAP_DECODE_* code; *out is filled as far as decoded. */
int32_t pyamx_trap_decode(const uint8_t *insn, size_t len, const uint64_t *gprs16,
                          uint64_t rip, struct pyamx_trap_insn *out);
const char *pyamx_trap_op_name(int32_t op);

/* ---- fp32.c: the scalar primitives on fp32 bit patterns (docs/trap.md "Arithmetic") ---- */

uint32_t pyamx_trap_fma32(uint32_t a, uint32_t b, uint32_t c);
uint32_t pyamx_trap_add32(uint32_t x, uint32_t y);
uint32_t pyamx_trap_f16_to_f32(uint16_t h);
/* The dot products' AVX2 paths (simd_dot.c), on where the CPU has AVX2: 0 turns
 * them off (the scalar paths run, as on a CPU without AVX2), 1 back on where
 * supported, -1 only asks.  Returns whether they are on.  For the tests that
 * compare both paths bit for bit. */
int32_t pyamx_trap_set_simd(int32_t on);
/* Dot products the AVX2 paths computed (process-wide; the float path
 * declines operands holding an inf or NaN). */
uint64_t pyamx_trap_simd_count(void);

/* ---- direct.c: the decoder and the semantics without a signal ---- */

/* pyamx_trap_execute_direct results. */
enum pyamx_trap_direct_status {
    PYAMX_TRAP_DIRECT_OK = 0,
    PYAMX_TRAP_DIRECT_UD = 1,         /* the instruction raises #UD (silicon: SIGILL); why says the rule */
    PYAMX_TRAP_DIRECT_GP = 2,         /* it raises #GP (silicon: SIGSEGV) */
    PYAMX_TRAP_DIRECT_E_DECODE = -1,  /* not an instruction the trap emulates, truncated, or an APX form */
    PYAMX_TRAP_DIRECT_E_MEMORY = -2,  /* it has a memory operand: not taken */
    PYAMX_TRAP_DIRECT_E_CONFIG = -3,  /* cfg is not an image LDTILECFG accepts */
    PYAMX_TRAP_DIRECT_E_ARG = -4      /* a NULL pointer or no bytes */
};

/* One instruction without a memory operand (the bytes at code, up to 15 of
 * len; gprs16 as pyamx_trap_decode takes them, for a row selector in a GPR)
 * on the tile state cfg (64-byte STTILECFG image) and tiles (8 x 16 x 64
 * bytes), as the SIGILL handler would run it: the same decoder, rules and
 * arithmetic, with no signal and no per-thread state, on any CPU (AMX
 * silicon too). On OK, cfg and tiles hold the state after it and zmm (64
 * bytes) a row instruction's result; otherwise they are untouched and why
 * (why_size bytes, NUL-terminated) says what refused it. The caller's
 * MXCSR is left as it was. */
int32_t pyamx_trap_execute_direct(const uint8_t *code, size_t len, const uint64_t *gprs16, uint8_t *cfg,
                                  uint8_t *tiles, uint8_t *zmm, char *why, size_t why_size);

/* ---- thread_state.c: per-thread emulated tile state ---- */

/* Optional, from normal context on each thread that runs tile code: claims
 * the thread's slot and arms its release at thread exit. */
int32_t pyamx_trap_thread_prepare(void);
/* The calling thread's emulated state: 64-byte STTILECFG image and 8 KiB
 * of tile data (tmm0..7, 16 rows x 64 bytes).  Returns 0 when the thread
 * has no state yet (both outputs zeroed). */
int32_t pyamx_trap_thread_state(uint8_t *cfg_out, uint8_t *tiles_out);
int32_t pyamx_trap_slots_in_use(void);

/* ---- message.c ---- */

/* 0 silences the one-line reason the handler writes to fd 2 on a fault. */
void pyamx_trap_set_verbose(int32_t on);

/* ---- sigill_handler.c: the SIGILL handler, its install and the process-wide switches ---- */

const char *pyamx_trap_build_version(void);
const char *pyamx_trap_strerror(int32_t code);
/* bit 0: CPUID.7.0:EDX[24] AMX-TILE; bit 1: OSXSAVE; bit 2: XCR0[17] and [18] set. */
int32_t pyamx_trap_cpu_amx_bits(void);
/* 1 when all three bits are set: AMX is usable and trap mode is refused. */
int32_t pyamx_trap_cpu_has_amx(void);

/* Install the SIGILL handler (chaining to the current one).  Idempotent. */
int32_t pyamx_trap_install(void);
/* Call before each native entry: reinstalls if someone replaced the
 * handler.  Returns 0 when still installed (at once, without a system
 * call, while the guard is active), 1 when it reinstalled,
 * PYAMX_TRAP_E_NOT_ACTIVE when never installed. */
int32_t pyamx_trap_ensure_installed(void);
/* 1 when installed and the current SIGILL disposition is ours. */
int pyamx_trap_active(void);
/* 1 once pyamx_trap_install succeeded (even if since replaced). */
int32_t pyamx_trap_installed(void);
/* For tests: put the SIGILL disposition that other code last set (or the
 * one found at install) back in place and withdraw the emulated
 * permission.  An active guard then lets every sigaction through. */
int32_t pyamx_trap_uninstall(void);
/* The emulated arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA):
 * process-wide, inherited by fork, gone after exec.  Until it is called
 * every tile instruction dies with SIGILL, as on silicon.  Returns 0, or
 * an errno like the syscall (EINVAL: trap mode not installed). */
int pyamx_trap_grant_permission(void);
int32_t pyamx_trap_permission_granted(void);

/* Trapped-and-emulated instruction counters (process-wide). */
uint64_t pyamx_trap_count(void);
uint64_t pyamx_trap_op_count(int32_t op);
void pyamx_trap_reset_counts(void);

/* ---- seccomp_guard.c: keeping the handler installed whatever other code does ---- */

/* Installs a seccomp filter (all threads) under which every
 * rt_sigaction(SIGILL, ...) not made by this module is answered by a
 * supervisor thread of this module: the caller's new action becomes the
 * handler this mode chains to, its old action is the one it set before,
 * and the real disposition stays this module's handler.  Needs
 * pyamx_trap_install() first.  Returns 0, or an errno saying why not
 * (then pyamx_trap_ensure_installed() remains the only defence);
 * pyamx_trap_guard_reason() says it in words.  Sets PR_SET_NO_NEW_PRIVS
 * for the process and its children, and cannot be undone. */
int pyamx_trap_guard_install(void);
int32_t pyamx_trap_guard_state(void);
const char *pyamx_trap_guard_reason(void);
/* sigaction(SIGILL) calls of this process the guard has answered. */
uint64_t pyamx_trap_guard_calls(void);
/* seccomp(NEW_LISTENER) calls of the process tree that met the guard's listener (EBUSY). */
uint64_t pyamx_trap_guard_listeners_refused(void);

/* ---- the counters file of `pyamx run` (csrc/preload/preload.c) ----
 * One per run, shared (mmap) by every process of the program's tree and
 * updated from the handlers, so _exit, fatal signals and exec lose
 * nothing; pyamx/tools/run.py reads it through this declaration. */
enum { PYAMX_RUN_STATS_MAGIC = 0x72756e31 /* "run1" */ };
struct pyamx_run_stats {
    uint32_t magic;        /* PYAMX_RUN_STATS_MAGIC once a process has attached */
    uint32_t processes;    /* preload constructors run (exec'd programs included) */
    uint32_t installed;    /* of those, with the trap installed */
    uint32_t requests;     /* emulated ARCH_REQ_XCOMP_PERM calls */
    uint32_t granted;      /* of those, answered 0 */
    uint32_t xcomp_calls;  /* all emulated arch_prctl calls */
    uint32_t complemented; /* of the processes, on AMX silicon with the missing extensions emulated */
    uint32_t listeners_refused; /* the program's seccomp listener requests that met the guard's (EBUSY) */
    uint32_t sigill_named; /* faulting instructions the handler named before SIGILL's default action */
    uint64_t count[64];    /* emulated instructions, by enum pyamx_op */
    uint64_t ns[64];       /* time in the handler, by enum pyamx_op */
    char why[256];         /* the last reason a process could not install the trap */
};

/* ---- xcomp_permission.c: the kernel's AMX permission interface, emulated ---- */

/* Makes arch_prctl(ARCH_GET_XCOMP_SUPP / ARCH_GET_XCOMP_PERM /
 * ARCH_REQ_XCOMP_PERM) from any code of the process answer as a kernel
 * on an AMX CPU: REQ with XFEATURE_XTILEDATA is pyamx_trap_grant_permission().
 * Through the guard's listener where the guard is active (install it
 * first), else through a seccomp filter (all threads) and a SIGSYS handler.
 * Needs pyamx_trap_install() first.  Returns 0 or an errno.  Sets
 * PR_SET_NO_NEW_PRIVS; cannot be undone; a filter survives exec. */
int pyamx_trap_xcomp_install(void);
/* 1 while the answers still come: the guard is active, or the SIGSYS
 * disposition is still the one installed above. */
int32_t pyamx_trap_xcomp_active(void);
/* arch_prctl calls answered, and how many of them were ARCH_REQ_XCOMP_PERM. */
uint64_t pyamx_trap_xcomp_calls(void);
int32_t pyamx_trap_xcomp_requests(void);

#endif
