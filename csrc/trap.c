/* Trap-and-emulate test mode: run the extension's real AMX code on a CPU
 * without AMX.
 *
 * Every AMX instruction raises #UD (SIGILL) on such a CPU.  The SIGILL
 * handler below decodes the faulting instruction, performs it on a
 * per-thread emulated tile state, moves RIP past it and returns.  Anything
 * it does not recognise, and every case in which silicon would fault, is
 * passed on so that the process sees the signal it would see on silicon.
 * docs/trap.md explains the design; SEMANTICS.md is the reference for the
 * tile rules and the arithmetic.
 *
 * The arithmetic here is deliberately a second implementation, written from
 * SEMANTICS.md and not from the Python emulator, so that the cross-check
 * suite compares two independent readings of the same rules.
 *
 * Everything reachable from the handler is async-signal-safe: no malloc,
 * no stdio, no locks, no Python, no lazily allocated TLS.
 */
#define _GNU_SOURCE 1
#include "pyamx.h"

#include <stdint.h>
#include <stddef.h>

#if defined(__FAST_MATH__)
#error "trap.c must not be built with -ffast-math: its fp32 results must be bit-exact"
#endif

static const char *const op_names[] = {
    "(none)",    "LDTILECFG", "STTILECFG", "TILERELEASE", "TILEZERO",
    "TILELOADD", "TILELOADDT1", "TILESTORED", "TDPBF16PS", "TDPFP16PS",
    "TDPBSSD",   "TDPBSUD",   "TDPBUSD",   "TDPBUUD",
};
#define N_OPS ((int)(sizeof(op_names) / sizeof(op_names[0])))

const char *pyamx_trap_op_name(int32_t op)
{
    if (op < 0 || op >= N_OPS)
        return "(unknown)";
    return op_names[op];
}

const char *pyamx_trap_strerror(int32_t code)
{
    switch (code) {
    case PYAMX_TRAP_OK: return "ok";
    case PYAMX_TRAP_E_PLATFORM: return "trap emulation needs x86-64 Linux";
    case PYAMX_TRAP_E_HAS_AMX:
        return "this CPU has usable AMX (CPUID.7.0:EDX[24] and XCR0[17,18]); "
               "trap emulation is refused so that real and emulated tile state never mix";
    case PYAMX_TRAP_E_NO_FMA:
        return "the CPU lacks FMA/AVX (or the OS does not enable AVX state), "
               "which the emulated fp32 arithmetic relies on";
    case PYAMX_TRAP_E_SIGACTION: return "sigaction(SIGILL) failed";
    case PYAMX_TRAP_E_NOT_ACTIVE: return "trap emulation is not installed";
    case PYAMX_TRAP_E_TABLE_FULL: return "the per-thread tile state table is full";
    default: return "unknown trap error";
    }
}

/* ------------------------------------------------------------------------
 * Decoder.  Pure: used by the handler and, through cffi, by the tests.
 * It reads the bytes strictly in order and never looks past the end of
 * the instruction, so the handler can hand it RIP with len 15 even when
 * the instruction ends at the last byte of a mapped page.
 * ---------------------------------------------------------------------- */

int32_t pyamx_trap_decode(const uint8_t *p, size_t len, const uint64_t *gpr,
                          uint64_t rip, struct pyamx_trap_insn *out)
{
    size_t i = 0;
    struct pyamx_trap_insn d;

    d.op = PYAMX_OP_NONE;
    d.length = 0;
    d.tdst = d.tsrc1 = d.tsrc2 = -1;
    d.has_mem = 0;
    d.base_reg = d.index_reg = -1;
    d.scale = 1;
    d.disp = 0;
    d.rip_relative = 0;
    d.addr = 0;
    d.stride = 0;
    if (out)
        *out = d;

    /* Segment prefixes CS/DS/ES/SS are no-ops in 64-bit mode and may
     * legally precede VEX; anything else (66/F2/F3/REX/LOCK) before VEX is
     * #UD on silicon, and FS/GS would need the segment base, which this
     * mode does not fetch.  Both go the "not mine" way. */
    while (i < len && (p[i] == 0x2E || p[i] == 0x3E || p[i] == 0x26 || p[i] == 0x36))
        i++;
    if (i >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;
    if (p[i] == 0xC5)
        return PYAMX_TRAP_DECODE_NOT_AMX; /* 2-byte VEX implies map 0F; AMX lives in 0F38 */
    if (p[i] != 0xC4)
        return PYAMX_TRAP_DECODE_NOT_AMX;
    if (i + 3 >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;

    uint8_t v1 = p[i + 1], v2 = p[i + 2], opc = p[i + 3];
    if ((v1 & 0x1F) != 0x02)
        return PYAMX_TRAP_DECODE_NOT_AMX;
    if (opc != 0x49 && opc != 0x4B && opc != 0x5C && opc != 0x5E)
        return PYAMX_TRAP_DECODE_NOT_AMX;
    /* VEX stores R, X, B and vvvv inverted. */
    int R = !(v1 & 0x80), X = !(v1 & 0x40), B = !(v1 & 0x20);
    int W = (v2 >> 7) & 1, vvvv = (~v2 >> 3) & 0xF, L = (v2 >> 2) & 1, pp = v2 & 3;
    i += 4;
    if (i >= len)
        return PYAMX_TRAP_DECODE_TRUNCATED;
    uint8_t modrm = p[i++];
    int mod = modrm >> 6, reg3 = (modrm >> 3) & 7, rm3 = modrm & 7;
    int reg = reg3 | (R << 3), rm = rm3 | (B << 3);

    enum { PP_NP = 0, PP_66 = 1, PP_F3 = 2, PP_F2 = 3 };
    int op = PYAMX_OP_NONE, memform = 0, sibmem = 0, is_dp = 0;

    switch (opc) {
    case 0x49:
        if (mod != 3 && pp == PP_NP) { op = PYAMX_OP_LDTILECFG; memform = 1; }
        else if (mod != 3 && pp == PP_66) { op = PYAMX_OP_STTILECFG; memform = 1; }
        else if (mod == 3 && pp == PP_NP) op = PYAMX_OP_TILERELEASE;
        else if (mod == 3 && pp == PP_F2) op = PYAMX_OP_TILEZERO;
        break;
    case 0x4B:
        if (mod != 3 && pp == PP_F2) op = PYAMX_OP_TILELOADD;
        else if (mod != 3 && pp == PP_66) op = PYAMX_OP_TILELOADDT1;
        else if (mod != 3 && pp == PP_F3) op = PYAMX_OP_TILESTORED;
        memform = sibmem = (op != PYAMX_OP_NONE);
        break;
    case 0x5C:
        if (mod == 3 && pp == PP_F3) op = PYAMX_OP_TDPBF16PS;
        else if (mod == 3 && pp == PP_F2) op = PYAMX_OP_TDPFP16PS;
        is_dp = 1;
        break;
    case 0x5E:
        if (mod == 3) {
            static const int8_t by_pp[4] = {PYAMX_OP_TDPBUUD, PYAMX_OP_TDPBUSD,
                                            PYAMX_OP_TDPBSUD, PYAMX_OP_TDPBSSD};
            op = by_pp[pp];
        }
        is_dp = 1;
        break;
    }
    d.op = op;
    /* An opcode of the AMX space in a form no AMX instruction has is #UD
     * on silicon too; the caller passes it on as SIGILL either way. */
    if (op == PYAMX_OP_NONE)
        return PYAMX_TRAP_DECODE_UD;

    int ud = (W != 0) || (L != 0);
    if (!is_dp && vvvv != 0)
        ud = 1;
    switch (op) {
    case PYAMX_OP_LDTILECFG:
    case PYAMX_OP_STTILECFG:
        if (reg != 0) ud = 1;
        break;
    case PYAMX_OP_TILERELEASE:
        if (modrm != 0xC0 || R || B) ud = 1;
        break;
    case PYAMX_OP_TILEZERO:
        if (rm != 0) ud = 1;
        d.tdst = reg;
        break;
    case PYAMX_OP_TILESTORED:
        d.tsrc1 = reg;
        break;
    case PYAMX_OP_TILELOADD:
    case PYAMX_OP_TILELOADDT1:
        d.tdst = reg;
        break;
    default: /* dot products */
        d.tdst = reg;
        d.tsrc1 = rm;
        d.tsrc2 = vvvv;
        break;
    }
    if (sibmem && rm3 != 4)
        ud = 1; /* sibmem requires a SIB byte; also rules out RIP-relative */

    if (memform && !ud) {
        int has_base = 1, has_index = 0, base = rm, index = -1, scale = 1;
        int disp_bytes = 0;
        d.has_mem = 1;
        if (rm3 == 4) {
            if (i >= len)
                return PYAMX_TRAP_DECODE_TRUNCATED;
            uint8_t sib = p[i++];
            scale = 1 << (sib >> 6);
            index = ((sib >> 3) & 7) | (X << 3);
            base = (sib & 7) | (B << 3);
            has_index = (index != 4); /* 100b without VEX.X: no index; with it: r12 */
            if ((sib & 7) == 5 && mod == 0) {
                has_base = 0; /* [index*scale + disp32]; holds for r13 too */
                disp_bytes = 4;
            }
        } else if (rm3 == 5 && mod == 0) {
            has_base = 0;
            d.rip_relative = 1;
            disp_bytes = 4;
        }
        if (mod == 1)
            disp_bytes = 1;
        else if (mod == 2)
            disp_bytes = 4;
        if (i + (size_t)disp_bytes > len)
            return PYAMX_TRAP_DECODE_TRUNCATED;
        int32_t disp = 0;
        if (disp_bytes == 1) {
            disp = (int8_t)p[i];
        } else if (disp_bytes == 4) {
            uint32_t u = (uint32_t)p[i] | ((uint32_t)p[i + 1] << 8) |
                         ((uint32_t)p[i + 2] << 16) | ((uint32_t)p[i + 3] << 24);
            disp = (int32_t)u;
        }
        i += (size_t)disp_bytes;
        d.disp = disp;
        d.scale = scale;
        d.base_reg = d.rip_relative ? 16 : (has_base ? base : -1);
        d.index_reg = has_index ? index : -1;

        uint64_t a = (uint64_t)(int64_t)disp;
        if (d.rip_relative)
            a += rip + i; /* RIP-relative counts from the next instruction */
        else if (has_base && gpr)
            a += gpr[base];
        uint64_t idx = (has_index && gpr) ? gpr[index] : 0;
        if (sibmem) {
            /* For sibmem the index register is the row stride. */
            d.stride = (int64_t)(idx * (uint64_t)scale);
        } else {
            a += idx * (uint64_t)scale;
        }
        d.addr = a;
    }
    d.length = (int32_t)i;
    if (out)
        *out = d;
    return ud ? PYAMX_TRAP_DECODE_UD : (int32_t)i;
}

/* ------------------------------------------------------------------------
 * fp32 arithmetic (SEMANTICS.md sections 2-3, default numerics).
 * ---------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__linux__)

#include <immintrin.h>
#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* DAZ (bit 6) | all exceptions masked (bits 7-12) | RC = nearest (bits
 * 13-14 = 0) | FTZ (bit 15); the status flags start cleared and are
 * thrown away when the caller's MXCSR is restored. */
#define TRAP_MXCSR 0x9FC0u

#define QUIET_BIT 0x00400000u
#define DEFAULT_NAN 0xFFC00000u

static inline int is_nan32(uint32_t x) { return (x & 0x7FFFFFFFu) > 0x7F800000u; }
static inline int is_inf32(uint32_t x) { return (x & 0x7FFFFFFFu) == 0x7F800000u; }
static inline int is_zero32(uint32_t x) { return (x & 0x7FFFFFFFu) == 0; }
static inline int is_special32(uint32_t x) { return (x & 0x7F800000u) == 0x7F800000u; }

static inline uint32_t daz32(uint32_t x)
{
    return (x & 0x7F800000u) == 0 ? (x & 0x80000000u) : x;
}

static inline float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint32_t f_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

/* Hardware single-rounding FMA and add.  Callers run them under
 * TRAP_MXCSR, which supplies DAZ, FTZ (tininess after rounding, as x86
 * detects it) and round-to-nearest-even; the NaN cases never reach them
 * because the hardware's choice among several NaNs depends on which
 * register form the compiler picked. */
__attribute__((target("fma"))) static inline uint32_t hw_fma(uint32_t a, uint32_t b, uint32_t c)
{
    return f_bits(__builtin_fmaf(bits_f(a), bits_f(b), bits_f(c)));
}

static inline uint32_t hw_add(uint32_t x, uint32_t y)
{
    volatile float r = bits_f(x) + bits_f(y);
    return f_bits(r);
}

__attribute__((target("fma"))) static inline uint32_t fma32(uint32_t a, uint32_t b, uint32_t c)
{
    a = daz32(a);
    b = daz32(b);
    c = daz32(c);
    if (__builtin_expect(is_special32(a) | is_special32(b) | is_special32(c), 0)) {
        if (is_nan32(a)) return a | QUIET_BIT;
        if (is_nan32(b)) return b | QUIET_BIT;
        if (is_nan32(c)) return c | QUIET_BIT;
        int prod_inf = is_inf32(a) || is_inf32(b);
        if (prod_inf && (is_zero32(a) || is_zero32(b)))
            return DEFAULT_NAN; /* inf * 0 */
        if (prod_inf && is_inf32(c) && (((a ^ b) ^ c) & 0x80000000u))
            return DEFAULT_NAN; /* inf - inf */
    }
    return hw_fma(a, b, c);
}

static inline uint32_t add32(uint32_t x, uint32_t y)
{
    x = daz32(x);
    y = daz32(y);
    if (__builtin_expect(is_special32(x) | is_special32(y), 0)) {
        if (is_nan32(x)) return x | QUIET_BIT;
        if (is_nan32(y)) return y | QUIET_BIT;
        if (is_inf32(x) && is_inf32(y) && ((x ^ y) & 0x80000000u))
            return DEFAULT_NAN;
    }
    return hw_add(x, y);
}

/* fp16 -> fp32 is exact: every fp16 value, denormals included, is a
 * normal fp32 value, so DAZ never touches an fp16 input. */
static inline uint32_t f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F)
        return sign | 0x7F800000u | (m << 13); /* inf/NaN, payload and quiet bit kept */
    if (e == 0) {
        if (m == 0)
            return sign;
        uint32_t e32 = 127 - 15 + 1;
        while (!(m & 0x400)) {
            m <<= 1;
            e32--;
        }
        return sign | (e32 << 23) | ((m & 0x3FF) << 13);
    }
    return sign | ((e + 127 - 15) << 23) | (m << 13);
}

/* Out of line so that the compiler cannot move the arithmetic across the
 * MXCSR switches around it (as dp_float_rows, for the same reason). */
__attribute__((noinline, target("fma"))) static uint32_t fma32_isolated(uint32_t a, uint32_t b, uint32_t c)
{
    return fma32(a, b, c);
}

__attribute__((noinline)) static uint32_t add32_isolated(uint32_t x, uint32_t y) { return add32(x, y); }

uint32_t pyamx_trap_fma32(uint32_t a, uint32_t b, uint32_t c)
{
    unsigned int saved = _mm_getcsr();
    _mm_setcsr(TRAP_MXCSR);
    uint32_t r = fma32_isolated(a, b, c);
    _mm_setcsr(saved);
    return r;
}

uint32_t pyamx_trap_add32(uint32_t x, uint32_t y)
{
    unsigned int saved = _mm_getcsr();
    _mm_setcsr(TRAP_MXCSR);
    uint32_t r = add32_isolated(x, y);
    _mm_setcsr(saved);
    return r;
}

uint32_t pyamx_trap_f16_to_f32(uint16_t h) { return f16_to_f32(h); }

/* ------------------------------------------------------------------------
 * Per-thread tile state.
 *
 * A fixed table of slots keyed by the kernel thread id, claimed with a
 * compare-and-swap.  Chosen over __thread because a __thread variable of
 * a dlopen'ed module is reached through __tls_get_addr, which may call
 * malloc on a thread's first access -- from inside a signal handler that
 * can deadlock on the malloc lock the interrupted code holds.  The table
 * needs no preparation, so a thread that never called into the bindings'
 * prepare step still works.  Slots are returned by a pthread key
 * destructor (armed by pyamx_trap_thread_prepare) and, when the table
 * fills, by reaping slots whose thread no longer exists.  fork() moves the
 * forking thread's slot to the child's thread, as silicon keeps the tile
 * registers across fork.
 * ---------------------------------------------------------------------- */

#define MAX_SLOTS 256

struct tile_state {
    uint8_t tiles[8][16][64];
    /* tsrc2 widened to fp32 once per instruction: [k][even/odd][n].  Lives
     * here rather than on the (alternate) signal stack. */
    uint32_t bconv[16][2][16];
    uint8_t palette;
    uint8_t start_row;
    uint8_t rows[8];
    uint16_t colsb[8];
};

struct slot {
    int32_t tid; /* 0 = free; accessed with __atomic builtins */
    struct tile_state st;
} __attribute__((aligned(64)));

static struct slot slots[MAX_SLOTS];

static int32_t g_installed;  /* handler installed at least once */
static int32_t g_permission; /* emulated ARCH_REQ_XCOMP_PERM; process-wide like the kernel's */
static int32_t g_verbose = 1;
static uint64_t g_count;
static uint64_t g_op_count[N_OPS];
static uint64_t g_slot_full;
static int32_t g_chain_tid; /* thread currently inside a chained SIGILL handler */

/* The previously installed SIGILL disposition.  Two copies and an index:
 * reinstalling writes the idle copy and then flips, so a handler running
 * in another thread never reads a half-written struct. */
static struct sigaction g_prev[2];
static int32_t g_prev_idx;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int32_t g_fork_tid;

static inline int32_t my_tid(void) { return (int32_t)syscall(SYS_gettid); }

static void state_init(struct tile_state *st)
{
    memset(st, 0, sizeof(*st));
}

static int slot_find(int32_t tid)
{
    unsigned h = (unsigned)tid % MAX_SLOTS;
    for (unsigned n = 0; n < MAX_SLOTS; n++) {
        unsigned s = (h + n) % MAX_SLOTS;
        if (__atomic_load_n(&slots[s].tid, __ATOMIC_ACQUIRE) == tid)
            return (int)s;
    }
    return -1;
}

static int slot_claim(int32_t tid)
{
    unsigned h = (unsigned)tid % MAX_SLOTS;
    for (unsigned n = 0; n < MAX_SLOTS; n++) {
        unsigned s = (h + n) % MAX_SLOTS;
        int32_t expect = 0;
        if (__atomic_load_n(&slots[s].tid, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&slots[s].tid, &expect, tid, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            state_init(&slots[s].st);
            return (int)s;
        }
    }
    /* Full: take over the slot of a thread that has exited without its
     * destructor running (it never called pyamx_trap_thread_prepare). */
    pid_t pid = getpid();
    for (unsigned s = 0; s < MAX_SLOTS; s++) {
        int32_t old = __atomic_load_n(&slots[s].tid, __ATOMIC_ACQUIRE);
        if (old == 0 || old == tid)
            continue;
        if (syscall(SYS_tgkill, pid, old, 0) == -1 && errno == ESRCH &&
            __atomic_compare_exchange_n(&slots[s].tid, &old, tid, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            state_init(&slots[s].st);
            return (int)s;
        }
    }
    __atomic_fetch_add(&g_slot_full, 1, __ATOMIC_RELAXED);
    return -1;
}

static struct tile_state *state_for(int32_t tid)
{
    int s = slot_find(tid);
    if (s < 0)
        s = slot_claim(tid);
    return s < 0 ? NULL : &slots[s].st;
}

static void slot_release_destructor(void *v)
{
    int s = (int)((uintptr_t)v - 1);
    if (s < 0 || s >= MAX_SLOTS)
        return;
    int32_t tid = my_tid();
    int32_t expect = tid;
    /* A fork child can run this with a different tid than the parent
     * thread had; the slot then belongs to whoever the tid says. */
    if (__atomic_load_n(&slots[s].tid, __ATOMIC_ACQUIRE) == tid) {
        state_init(&slots[s].st);
        __atomic_compare_exchange_n(&slots[s].tid, &expect, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
}

static void atfork_prepare(void) { __atomic_store_n(&g_fork_tid, my_tid(), __ATOMIC_RELAXED); }

static void atfork_child(void)
{
    int32_t parent = __atomic_load_n(&g_fork_tid, __ATOMIC_RELAXED);
    int32_t me = my_tid();
    for (unsigned s = 0; s < MAX_SLOTS; s++) {
        int32_t t = __atomic_load_n(&slots[s].tid, __ATOMIC_RELAXED);
        if (t == 0)
            continue;
        __atomic_store_n(&slots[s].tid, t == parent ? me : 0, __ATOMIC_RELAXED);
    }
    /* The child's only thread keeps the parent thread's key value, and
     * the slot it names is now keyed by the child's tid, so the destructor
     * still finds it. */
}

static void init_once(void)
{
    pthread_key_create(&g_key, slot_release_destructor);
    pthread_atfork(atfork_prepare, NULL, atfork_child);
}

int32_t pyamx_trap_thread_prepare(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return PYAMX_TRAP_E_NOT_ACTIVE;
    int32_t tid = my_tid();
    int s = slot_find(tid);
    if (s < 0)
        s = slot_claim(tid);
    if (s < 0)
        return PYAMX_TRAP_E_TABLE_FULL;
    if (pthread_getspecific(g_key) != (void *)(uintptr_t)(s + 1))
        pthread_setspecific(g_key, (void *)(uintptr_t)(s + 1));
    return PYAMX_TRAP_OK;
}

int32_t pyamx_trap_thread_state(uint8_t *cfg_out, uint8_t *tiles_out)
{
    int s = slot_find(my_tid());
    if (cfg_out)
        memset(cfg_out, 0, 64);
    if (tiles_out)
        memset(tiles_out, 0, 8192);
    if (s < 0)
        return 0;
    const struct tile_state *st = &slots[s].st;
    if (cfg_out && st->palette) {
        cfg_out[0] = st->palette;
        cfg_out[1] = st->start_row;
        for (int t = 0; t < 8; t++) {
            cfg_out[16 + 2 * t] = (uint8_t)(st->colsb[t] & 0xFF);
            cfg_out[17 + 2 * t] = (uint8_t)(st->colsb[t] >> 8);
            cfg_out[48 + t] = st->rows[t];
        }
    }
    if (tiles_out)
        memcpy(tiles_out, st->tiles, 8192);
    return 1;
}

int32_t pyamx_trap_slots_in_use(void)
{
    int32_t n = 0;
    for (unsigned s = 0; s < MAX_SLOTS; s++)
        n += __atomic_load_n(&slots[s].tid, __ATOMIC_RELAXED) != 0;
    return n;
}

/* ------------------------------------------------------------------------
 * Messages from the handler: write(2) on a small stack buffer.
 * ---------------------------------------------------------------------- */

struct msg {
    char buf[320];
    unsigned n;
};

static void m_str(struct msg *m, const char *s)
{
    while (*s && m->n < sizeof(m->buf) - 1)
        m->buf[m->n++] = *s++;
}

static void m_dec(struct msg *m, int64_t v)
{
    char tmp[24];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[k++] = '-';
    while (k && m->n < sizeof(m->buf) - 1)
        m->buf[m->n++] = tmp[--k];
}

static void m_hex(struct msg *m, uint64_t v)
{
    char tmp[16];
    int k = 0;
    do {
        tmp[k++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    m_str(m, "0x");
    while (k && m->n < sizeof(m->buf) - 1)
        m->buf[m->n++] = tmp[--k];
}

static void m_tile(struct msg *m, const char *what, int t)
{
    m_str(m, what);
    m_str(m, " tmm");
    m_dec(m, t);
}

static void m_emit(struct msg *m)
{
    if (!__atomic_load_n(&g_verbose, __ATOMIC_RELAXED))
        return;
    m->buf[m->n++] = '\n';
    ssize_t r = write(2, m->buf, m->n);
    (void)r;
}

/* ------------------------------------------------------------------------
 * Instruction semantics (SEMANTICS.md section 1 and 2).
 * ---------------------------------------------------------------------- */

enum { EXEC_OK = 0, EXEC_UD = 1, EXEC_GP = 2 };

static int gp_cfg(struct msg *m, const char *rule, int64_t a, int64_t b)
{
    m_str(m, rule);
    if (a >= 0) {
        m_str(m, " ");
        m_dec(m, a);
    }
    if (b >= 0) {
        m_str(m, " value ");
        m_dec(m, b);
    }
    return EXEC_GP;
}

static int do_ldtilecfg(struct tile_state *st, const uint8_t *mem, struct msg *m)
{
    uint8_t c[64];
    memcpy(c, mem, 64); /* a bad address faults here: SIGSEGV, as the #PF would */
    if (c[0] == 0) {
        state_init(st);
        return EXEC_OK;
    }
    if (c[0] > 1)
        return gp_cfg(m, "palette_id (byte 0) is not 0 or 1:", -1, c[0]);
    for (int b = 2; b < 64; b++) {
        if ((b >= 2 && b < 16) || (b >= 32 && b < 48) || b >= 56) {
            if (c[b])
                return gp_cfg(m, "reserved byte is not zero: byte", b, c[b]);
        }
    }
    uint16_t colsb[8];
    for (int t = 0; t < 8; t++) {
        colsb[t] = (uint16_t)(c[16 + 2 * t] | (c[17 + 2 * t] << 8));
        if (colsb[t] > 64)
            return gp_cfg(m, "colsb > 64 for tile", t, colsb[t]);
        if (c[48 + t] > 16)
            return gp_cfg(m, "rows > 16 for tile", t, c[48 + t]);
        if ((colsb[t] == 0) != (c[48 + t] == 0))
            return gp_cfg(m, "exactly one of rows/colsb is zero for tile", t, -1);
    }
    state_init(st); /* a successful LDTILECFG zeroes all tile data */
    st->palette = 1;
    st->start_row = c[1];
    for (int t = 0; t < 8; t++) {
        st->colsb[t] = colsb[t];
        st->rows[t] = c[48 + t];
    }
    return EXEC_OK;
}

static void do_sttilecfg(const struct tile_state *st, uint8_t *mem)
{
    uint8_t c[64];
    memset(c, 0, 64);
    if (st->palette) {
        c[0] = st->palette;
        c[1] = st->start_row;
        for (int t = 0; t < 8; t++) {
            c[16 + 2 * t] = (uint8_t)(st->colsb[t] & 0xFF);
            c[17 + 2 * t] = (uint8_t)(st->colsb[t] >> 8);
            c[48 + t] = st->rows[t];
        }
    }
    memcpy(mem, c, 64);
}

static int need_configured(const struct tile_state *st, struct msg *m)
{
    if (st->palette)
        return 0;
    m_str(m, "tiles are not configured (init state; no LDTILECFG)");
    return 1;
}

static int need_register(const char *what, int t, struct msg *m)
{
    if (t < 8)
        return 0;
    m_tile(m, what, t);
    m_str(m, " does not exist in palette 1 (tmm0..tmm7)");
    return 1;
}

static int need_tile(const struct tile_state *st, const char *what, int t, struct msg *m)
{
    if (need_register(what, t, m))
        return 1;
    if (st->rows[t] == 0) {
        m_tile(m, what, t);
        m_str(m, " is not configured (rows=0, colsb=0)");
        return 1;
    }
    return 0;
}

static void zero_tail(struct tile_state *st, int t, int rows, int bytes)
{
    for (int r = 0; r < 16; r++) {
        int from = r < rows ? bytes : 0;
        if (from < 64)
            memset(&st->tiles[t][r][from], 0, (size_t)(64 - from));
    }
}

static void do_tileloadd(struct tile_state *st, int t, uint64_t base, int64_t stride)
{
    int rows = st->rows[t], colsb = st->colsb[t];
    for (int r = st->start_row; r < rows; r++) {
        /* start_row tracks progress so a fault on a row leaves the
         * restart point where silicon would. */
        st->start_row = (uint8_t)r;
        const uint8_t *src = (const uint8_t *)(uintptr_t)(base + (uint64_t)r * (uint64_t)stride);
        memcpy(st->tiles[t][r], src, (size_t)colsb);
        memset(&st->tiles[t][r][colsb], 0, (size_t)(64 - colsb));
    }
    for (int r = rows; r < 16; r++)
        memset(st->tiles[t][r], 0, 64);
    st->start_row = 0;
}

static void do_tilestored(struct tile_state *st, int t, uint64_t base, int64_t stride)
{
    int rows = st->rows[t], colsb = st->colsb[t];
    for (int r = st->start_row; r < rows; r++) {
        st->start_row = (uint8_t)r;
        uint8_t *dst = (uint8_t *)(uintptr_t)(base + (uint64_t)r * (uint64_t)stride);
        memcpy(dst, st->tiles[t][r], (size_t)colsb);
    }
    st->start_row = 0;
}

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static inline void widen_pair(uint32_t w, int fp16, uint32_t *lo, uint32_t *hi)
{
    if (fp16) {
        *lo = f16_to_f32((uint16_t)(w & 0xFFFF));
        *hi = f16_to_f32((uint16_t)(w >> 16));
    } else {
        *lo = w << 16; /* bf16 -> fp32 is a shift: exact, NaN payload kept */
        *hi = w & 0xFFFF0000u;
    }
}

/* Kept out of line so that no fp operation can be scheduled across the
 * MXCSR switch in its caller.
 *
 * Two paths with identical results.  When no used element of tsrc1 or
 * tsrc2 is an infinity or NaN, no product is special, so even/odd can
 * only become infinite by overflow and never NaN: the hardware FMA under
 * TRAP_MXCSR is then exactly fma32, and 8 lanes at a time are safe.
 * Otherwise the scalar fma32 with its explicit NaN order runs.  The final
 * two add32 per element are always scalar, as the destination may hold
 * NaNs whose order matters. */
__attribute__((noinline, target("avx,fma"))) static void dp_float_rows(struct tile_state *st,
                                                                        int d, int s1, int s2,
                                                                        int fp16)
{
    int M = st->rows[d], K = st->rows[s2], N = st->colsb[d] / 4;
    uint32_t special = 0;
    for (int k = 0; k < K; k++) {
        for (int n = 0; n < 16; n++) {
            uint32_t lo, hi;
            widen_pair(rd32(&st->tiles[s2][k][4 * n]), fp16, &lo, &hi);
            st->bconv[k][0][n] = lo;
            st->bconv[k][1][n] = hi;
            if (n < N)
                special |= (uint32_t)(is_special32(lo) | is_special32(hi));
        }
    }
    for (int m = 0; m < M && !special; m++) {
        for (int k = 0; k < K; k++) {
            uint32_t lo, hi;
            widen_pair(rd32(&st->tiles[s1][m][4 * k]), fp16, &lo, &hi);
            special |= (uint32_t)(is_special32(lo) | is_special32(hi));
        }
    }

    for (int m = 0; m < M; m++) {
        uint32_t even[16], odd[16];
        if (!special) {
            __m256 e0 = _mm256_setzero_ps(), e1 = _mm256_setzero_ps();
            __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps();
            for (int k = 0; k < K; k++) {
                uint32_t lo, hi;
                widen_pair(rd32(&st->tiles[s1][m][4 * k]), fp16, &lo, &hi);
                __m256 a0 = _mm256_set1_ps(bits_f(lo)), a1 = _mm256_set1_ps(bits_f(hi));
                const float *b0 = (const float *)st->bconv[k][0];
                const float *b1 = (const float *)st->bconv[k][1];
                e0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0), e0);
                e1 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0 + 8), e1);
                o0 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1), o0);
                o1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1 + 8), o1);
            }
            _mm256_storeu_ps((float *)even, e0);
            _mm256_storeu_ps((float *)even + 8, e1);
            _mm256_storeu_ps((float *)odd, o0);
            _mm256_storeu_ps((float *)odd + 8, o1);
        } else {
            for (int n = 0; n < N; n++)
                even[n] = odd[n] = 0; /* +0.0 */
            for (int k = 0; k < K; k++) {
                uint32_t a0, a1;
                widen_pair(rd32(&st->tiles[s1][m][4 * k]), fp16, &a0, &a1);
                for (int n = 0; n < N; n++) {
                    even[n] = fma32(a0, st->bconv[k][0][n], even[n]);
                    odd[n] = fma32(a1, st->bconv[k][1][n], odd[n]);
                }
            }
        }
        for (int n = 0; n < N; n++) {
            uint32_t t = add32(even[n], odd[n]);
            uint8_t *cp = &st->tiles[d][m][4 * n];
            wr32(cp, add32(rd32(cp), t));
        }
    }
}

static void dp_int8_rows(struct tile_state *st, int d, int s1, int s2, int s1_signed, int s2_signed)
{
    int M = st->rows[d], K = st->rows[s2], N = st->colsb[d] / 4;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            uint32_t acc = rd32(&st->tiles[d][m][4 * n]);
            for (int k = 0; k < K; k++) {
                const uint8_t *a = &st->tiles[s1][m][4 * k];
                const uint8_t *b = &st->tiles[s2][k][4 * n];
                for (int i = 0; i < 4; i++) {
                    int32_t x = s1_signed ? (int32_t)(int8_t)a[i] : (int32_t)a[i];
                    int32_t y = s2_signed ? (int32_t)(int8_t)b[i] : (int32_t)b[i];
                    acc += (uint32_t)(x * y); /* |x*y| <= 2^14: no int overflow; wrap is in acc */
                }
            }
            wr32(&st->tiles[d][m][4 * n], acc);
        }
    }
}

static int do_dot(struct tile_state *st, const struct pyamx_trap_insn *in, struct msg *m)
{
    int d = in->tdst, s1 = in->tsrc1, s2 = in->tsrc2;
    if (need_configured(st, m) || need_tile(st, "tsrcdest", d, m) ||
        need_tile(st, "tsrc1", s1, m) || need_tile(st, "tsrc2", s2, m))
        return EXEC_UD;
    if (d == s1 || d == s2 || s1 == s2) {
        m_str(m, "operands are not three different tiles: ");
        m_tile(m, "tsrcdest", d);
        m_tile(m, ", tsrc1", s1);
        m_tile(m, ", tsrc2", s2);
        return EXEC_UD;
    }
    const int ts[3] = {d, s1, s2};
    const char *const names[3] = {"tsrcdest", "tsrc1", "tsrc2"};
    for (int i = 0; i < 3; i++) {
        if (st->colsb[ts[i]] % 4) {
            m_tile(m, names[i], ts[i]);
            m_str(m, " colsb is not a multiple of 4: ");
            m_dec(m, st->colsb[ts[i]]);
            return EXEC_UD;
        }
    }
    if (st->colsb[d] != st->colsb[s2]) {
        m_str(m, "tsrcdest colsb ");
        m_dec(m, st->colsb[d]);
        m_str(m, " != tsrc2 colsb ");
        m_dec(m, st->colsb[s2]);
        return EXEC_UD;
    }
    if (st->colsb[s1] / 4 != st->rows[s2]) {
        m_str(m, "tsrc1 colsb/4 ");
        m_dec(m, st->colsb[s1] / 4);
        m_str(m, " != tsrc2 rows ");
        m_dec(m, st->rows[s2]);
        return EXEC_UD;
    }
    if (st->rows[d] != st->rows[s1]) {
        m_str(m, "tsrcdest rows ");
        m_dec(m, st->rows[d]);
        m_str(m, " != tsrc1 rows ");
        m_dec(m, st->rows[s1]);
        return EXEC_UD;
    }
    if (st->rows[s2] > 16 || st->colsb[d] > 64) {
        m_str(m, "K or N exceeds tmul_maxk/tmul_maxn");
        return EXEC_UD;
    }

    switch (in->op) {
    case PYAMX_OP_TDPBF16PS:
    case PYAMX_OP_TDPFP16PS: {
        unsigned int saved = _mm_getcsr();
        _mm_setcsr(TRAP_MXCSR);
        dp_float_rows(st, d, s1, s2, in->op == PYAMX_OP_TDPFP16PS);
        _mm_setcsr(saved);
        break;
    }
    case PYAMX_OP_TDPBSSD: dp_int8_rows(st, d, s1, s2, 1, 1); break;
    case PYAMX_OP_TDPBSUD: dp_int8_rows(st, d, s1, s2, 1, 0); break;
    case PYAMX_OP_TDPBUSD: dp_int8_rows(st, d, s1, s2, 0, 1); break;
    case PYAMX_OP_TDPBUUD: dp_int8_rows(st, d, s1, s2, 0, 0); break;
    }
    zero_tail(st, d, st->rows[d], st->colsb[d]);
    st->start_row = 0;
    return EXEC_OK;
}

static int execute(struct tile_state *st, const struct pyamx_trap_insn *in, struct msg *m)
{
    switch (in->op) {
    case PYAMX_OP_LDTILECFG:
        return do_ldtilecfg(st, (const uint8_t *)(uintptr_t)in->addr, m);
    case PYAMX_OP_STTILECFG:
        do_sttilecfg(st, (uint8_t *)(uintptr_t)in->addr);
        return EXEC_OK;
    case PYAMX_OP_TILERELEASE:
        state_init(st);
        return EXEC_OK;
    case PYAMX_OP_TILEZERO:
        /* Only TILES_CONFIGURED and the register number are checked
         * (SDM class AMX-E5); the whole 16x64 tile is zeroed. */
        if (need_configured(st, m) || need_register("tdest", in->tdst, m))
            return EXEC_UD;
        memset(st->tiles[in->tdst], 0, 1024);
        st->start_row = 0;
        return EXEC_OK;
    /* Loads and stores check TILES_CONFIGURED and the register number only
     * (SDM class AMX-E3, and the pseudo-code: an unconfigured tile has rows = 0,
     * so a load zeroes it and a store writes nothing), as the emulator does. */
    case PYAMX_OP_TILELOADD:
    case PYAMX_OP_TILELOADDT1:
        if (need_configured(st, m) || need_register("tdest", in->tdst, m))
            return EXEC_UD;
        do_tileloadd(st, in->tdst, in->addr, in->stride);
        return EXEC_OK;
    case PYAMX_OP_TILESTORED:
        if (need_configured(st, m) || need_register("tsrc", in->tsrc1, m))
            return EXEC_UD;
        do_tilestored(st, in->tsrc1, in->addr, in->stride);
        return EXEC_OK;
    default:
        return do_dot(st, in, m);
    }
}

/* ------------------------------------------------------------------------
 * Passing signals on.
 * ---------------------------------------------------------------------- */

static void trap_handler(int sig, siginfo_t *si, void *vctx);

static int is_ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == trap_handler;
}

static int is_dfl_or_ign(const struct sigaction *sa)
{
    return !(sa->sa_flags & SA_SIGINFO) &&
           (sa->sa_handler == SIG_DFL || sa->sa_handler == SIG_IGN);
}

static void set_default(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
}

static void raise_unblocked(int sig)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    syscall(SYS_tgkill, getpid(), my_tid(), sig);
}

/* Runs a handler the way the kernel would have: its sa_mask blocked,
 * SA_RESETHAND honoured.  Returns after the handler returns. */
static void call_handler(const struct sigaction *h, int sig, siginfo_t *si, void *ctx)
{
    sigset_t old;
    sigset_t mask = h->sa_mask;
    if (!(h->sa_flags & SA_NODEFER))
        sigaddset(&mask, sig);
    if (h->sa_flags & SA_RESETHAND)
        set_default(sig);
    pthread_sigmask(SIG_BLOCK, &mask, &old);
    if (h->sa_flags & SA_SIGINFO)
        h->sa_sigaction(sig, si, ctx);
    else
        h->sa_handler(sig);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Behave as if this handler had never been installed.  `fault` is true for
 * a SIGILL the CPU raised at the current RIP: returning re-executes the
 * instruction, so with the default action the kernel kills the process
 * with the faulting RIP in the core file, as on silicon. */
static void pass_on_sigill(siginfo_t *si, void *ctx, int fault)
{
    ucontext_t *uc = ctx;
    int32_t me = my_tid();
    struct sigaction prev = g_prev[__atomic_load_n(&g_prev_idx, __ATOMIC_ACQUIRE)];
    /* A previous handler that re-raises (faulthandler does) may land back
     * here if it restored this handler as its own "previous"; the second
     * time round, take the default action instead of looping. */
    int nested = __atomic_load_n(&g_chain_tid, __ATOMIC_ACQUIRE) == me;

    if (!nested && !is_ours(&prev) && !is_dfl_or_ign(&prev)) {
        greg_t rip_before = uc->uc_mcontext.gregs[REG_RIP];
        __atomic_store_n(&g_chain_tid, me, __ATOMIC_RELEASE);
        call_handler(&prev, SIGILL, si, ctx);
        __atomic_store_n(&g_chain_tid, 0, __ATOMIC_RELEASE);
        if (fault && uc->uc_mcontext.gregs[REG_RIP] == rip_before) {
            /* The previous handler returned without moving RIP: on
             * silicon the instruction would fault forever.  Die instead
             * of hanging CI. */
            set_default(SIGILL);
        }
        return;
    }
    if (!fault && !nested && !(prev.sa_flags & SA_SIGINFO) && prev.sa_handler == SIG_IGN)
        return; /* a sent SIGILL that was ignored before this handler came */
    set_default(SIGILL);
    if (!fault)
        raise_unblocked(SIGILL);
    /* For a fault, returning re-executes the instruction and the kernel
     * applies the default action with RIP at the instruction. */
}

/* #GP on silicon: the kernel sends SIGSEGV (si_code SI_KERNEL, si_addr 0)
 * with RIP at the faulting instruction.  Deliver exactly that to the
 * current SIGSEGV disposition, with the interrupted context. */
static void deliver_sigsegv(void *ctx)
{
    ucontext_t *uc = ctx;
    struct sigaction cur;
    siginfo_t si;
    sigaction(SIGSEGV, NULL, &cur);
    memset(&si, 0, sizeof si);
    si.si_signo = SIGSEGV;
    si.si_code = SI_KERNEL;
    si.si_addr = NULL;
    if (!is_dfl_or_ign(&cur)) {
        greg_t rip_before = uc->uc_mcontext.gregs[REG_RIP];
        call_handler(&cur, SIGSEGV, &si, ctx);
        if (uc->uc_mcontext.gregs[REG_RIP] != rip_before)
            return;
    }
    /* Default action (a fault is never ignorable), or a handler that
     * returned without fixing anything up. */
    set_default(SIGSEGV);
    raise_unblocked(SIGSEGV);
}

/* ------------------------------------------------------------------------
 * The handler.
 * ---------------------------------------------------------------------- */

static void load_gprs(const greg_t *g, uint64_t *r)
{
    /* x86 register numbers 0..15 in ModRM/SIB order. */
    r[0] = (uint64_t)g[REG_RAX];
    r[1] = (uint64_t)g[REG_RCX];
    r[2] = (uint64_t)g[REG_RDX];
    r[3] = (uint64_t)g[REG_RBX];
    r[4] = (uint64_t)g[REG_RSP];
    r[5] = (uint64_t)g[REG_RBP];
    r[6] = (uint64_t)g[REG_RSI];
    r[7] = (uint64_t)g[REG_RDI];
    r[8] = (uint64_t)g[REG_R8];
    r[9] = (uint64_t)g[REG_R9];
    r[10] = (uint64_t)g[REG_R10];
    r[11] = (uint64_t)g[REG_R11];
    r[12] = (uint64_t)g[REG_R12];
    r[13] = (uint64_t)g[REG_R13];
    r[14] = (uint64_t)g[REG_R14];
    r[15] = (uint64_t)g[REG_R15];
}

static void m_prefix(struct msg *m, int op, uint64_t rip)
{
    m->n = 0;
    m_str(m, "pyamx trap emulation: ");
    m_str(m, pyamx_trap_op_name(op));
    m_str(m, " at ");
    m_hex(m, rip);
    m_str(m, ": ");
}

static void trap_handler(int sig, siginfo_t *si, void *vctx)
{
    (void)sig;
    int saved_errno = errno;
    ucontext_t *uc = vctx;
    struct msg m;

    if (si == NULL || si->si_code <= 0) {
        /* Sent by kill/raise/tgkill, not raised by an instruction. */
        pass_on_sigill(si, vctx, 0);
        goto out;
    }
    greg_t *g = uc->uc_mcontext.gregs;
    uint64_t rip = (uint64_t)g[REG_RIP];
    uint64_t gpr[16];
    struct pyamx_trap_insn in;
    load_gprs(g, gpr);
    int32_t len = pyamx_trap_decode((const uint8_t *)(uintptr_t)rip, 15, gpr, rip, &in);
    if (len == PYAMX_TRAP_DECODE_NOT_AMX || len == PYAMX_TRAP_DECODE_TRUNCATED) {
        pass_on_sigill(si, vctx, 1);
        goto out;
    }
    m_prefix(&m, in.op, rip);
    if (len == PYAMX_TRAP_DECODE_UD) {
        m_str(&m, "#UD: encoding not valid (VEX.W/L/vvvv, ModRM form or missing SIB) -> SIGILL");
        m_emit(&m);
        pass_on_sigill(si, vctx, 1);
        goto out;
    }
    if (!__atomic_load_n(&g_permission, __ATOMIC_ACQUIRE)) {
        m_str(&m, "no AMX permission yet (the emulated arch_prctl(ARCH_REQ_XCOMP_PERM), "
                  "pyamx_trap_grant_permission(), was not called) -> SIGILL as on silicon");
        m_emit(&m);
        pass_on_sigill(si, vctx, 1);
        goto out;
    }
    struct tile_state *st = state_for(my_tid());
    if (st == NULL) {
        m_str(&m, "cannot emulate: all per-thread tile state slots are in use -> SIGILL");
        m_emit(&m);
        pass_on_sigill(si, vctx, 1);
        goto out;
    }
    int r = execute(st, &in, &m);
    if (r == EXEC_OK) {
        g[REG_RIP] = (greg_t)(rip + (uint64_t)len);
        __atomic_fetch_add(&g_count, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&g_op_count[in.op], 1, __ATOMIC_RELAXED);
    } else if (r == EXEC_UD) {
        m_str(&m, " -> #UD (SIGILL)");
        m_emit(&m);
        pass_on_sigill(si, vctx, 1);
    } else {
        m_str(&m, " -> #GP (SIGSEGV)");
        m_emit(&m);
        deliver_sigsegv(vctx);
    }
out:
    errno = saved_errno;
}

/* ------------------------------------------------------------------------
 * Installation and the C API.
 * ---------------------------------------------------------------------- */

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

int32_t pyamx_trap_cpu_amx_bits(void)
{
    unsigned a, b, c, d;
    int32_t bits = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24)))
        bits |= 1;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) {
        bits |= 2;
        uint64_t xcr0 = xgetbv0();
        if ((xcr0 & (3ull << 17)) == (3ull << 17))
            bits |= 4;
    }
    return bits;
}

int32_t pyamx_trap_cpu_has_amx(void)
{
    return pyamx_trap_cpu_amx_bits() == 7;
}

static int cpu_has_fma(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int fma = (c >> 12) & 1, avx = (c >> 28) & 1, osxsave = (c >> 27) & 1;
    if (!(fma && avx && osxsave))
        return 0;
    return (xgetbv0() & 6) == 6; /* XMM and YMM state enabled by the OS */
}

int32_t pyamx_trap_supported(void) { return 1; }

static int32_t install_now(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = trap_handler;
    /* SA_ONSTACK: run on faulthandler's altstack when there is one, as the
     * handlers we chain to expect; SA_NODEFER: a previous handler that
     * re-raises SIGILL (faulthandler) gets it delivered at once. */
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGILL, NULL, &old) != 0)
        return PYAMX_TRAP_E_SIGACTION;
    if (is_ours(&old))
        return 0;
    int idle = 1 - __atomic_load_n(&g_prev_idx, __ATOMIC_ACQUIRE);
    g_prev[idle] = old;
    __atomic_store_n(&g_prev_idx, idle, __ATOMIC_RELEASE);
    if (sigaction(SIGILL, &sa, NULL) != 0)
        return PYAMX_TRAP_E_SIGACTION;
    return 1;
}

int32_t pyamx_trap_install(void)
{
    if (pyamx_trap_cpu_has_amx())
        return PYAMX_TRAP_E_HAS_AMX;
    if (!cpu_has_fma())
        return PYAMX_TRAP_E_NO_FMA;
    pthread_once(&g_once, init_once);
    int32_t r = install_now();
    if (r < 0)
        return r;
    __atomic_store_n(&g_installed, 1, __ATOMIC_RELEASE);
    return PYAMX_TRAP_OK;
}

int32_t pyamx_trap_ensure_installed(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return PYAMX_TRAP_E_NOT_ACTIVE;
    return install_now();
}

int pyamx_trap_active(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return 0;
    struct sigaction cur;
    if (sigaction(SIGILL, NULL, &cur) != 0)
        return 0;
    return is_ours(&cur) ? 1 : 0;
}

int32_t pyamx_trap_installed(void) { return __atomic_load_n(&g_installed, __ATOMIC_ACQUIRE); }

int32_t pyamx_trap_uninstall(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return PYAMX_TRAP_E_NOT_ACTIVE;
    struct sigaction cur;
    if (sigaction(SIGILL, NULL, &cur) == 0 && is_ours(&cur))
        sigaction(SIGILL, &g_prev[__atomic_load_n(&g_prev_idx, __ATOMIC_ACQUIRE)], NULL);
    __atomic_store_n(&g_permission, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&g_installed, 0, __ATOMIC_RELEASE);
    return PYAMX_TRAP_OK;
}

int pyamx_trap_grant_permission(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return EINVAL;
    __atomic_store_n(&g_permission, 1, __ATOMIC_RELEASE);
    return PYAMX_TRAP_OK;
}

int32_t pyamx_trap_permission_granted(void) { return __atomic_load_n(&g_permission, __ATOMIC_ACQUIRE); }

void pyamx_trap_set_verbose(int32_t on) { __atomic_store_n(&g_verbose, on ? 1 : 0, __ATOMIC_RELAXED); }

uint64_t pyamx_trap_count(void) { return __atomic_load_n(&g_count, __ATOMIC_RELAXED); }

uint64_t pyamx_trap_op_count(int32_t op)
{
    if (op < 0 || op >= N_OPS)
        return 0;
    return __atomic_load_n(&g_op_count[op], __ATOMIC_RELAXED);
}

void pyamx_trap_reset_counts(void)
{
    __atomic_store_n(&g_count, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < N_OPS; i++)
        __atomic_store_n(&g_op_count[i], 0, __ATOMIC_RELAXED);
}

#else /* not x86-64 Linux: the API exists and reports unavailability */

uint32_t pyamx_trap_fma32(uint32_t a, uint32_t b, uint32_t c) { (void)a; (void)b; (void)c; return 0; }
uint32_t pyamx_trap_add32(uint32_t x, uint32_t y) { (void)x; (void)y; return 0; }
uint32_t pyamx_trap_f16_to_f32(uint16_t h) { (void)h; return 0; }
int32_t pyamx_trap_supported(void) { return 0; }
int32_t pyamx_trap_cpu_amx_bits(void) { return 0; }
int32_t pyamx_trap_cpu_has_amx(void) { return 0; }
int32_t pyamx_trap_install(void) { return PYAMX_TRAP_E_PLATFORM; }
int32_t pyamx_trap_ensure_installed(void) { return PYAMX_TRAP_E_PLATFORM; }
int pyamx_trap_active(void) { return 0; }
int32_t pyamx_trap_installed(void) { return 0; }
int32_t pyamx_trap_uninstall(void) { return PYAMX_TRAP_E_PLATFORM; }
int pyamx_trap_grant_permission(void) { return 38; /* ENOSYS; errno.h may be absent */ }
int32_t pyamx_trap_permission_granted(void) { return 0; }
int32_t pyamx_trap_thread_prepare(void) { return PYAMX_TRAP_E_PLATFORM; }
int32_t pyamx_trap_thread_state(uint8_t *cfg_out, uint8_t *tiles_out) { (void)cfg_out; (void)tiles_out; return 0; }
int32_t pyamx_trap_slots_in_use(void) { return 0; }
void pyamx_trap_set_verbose(int32_t on) { (void)on; }
uint64_t pyamx_trap_count(void) { return 0; }
uint64_t pyamx_trap_op_count(int32_t op) { (void)op; return 0; }
void pyamx_trap_reset_counts(void) {}

#endif
