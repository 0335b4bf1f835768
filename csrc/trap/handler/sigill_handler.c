/* The SIGILL handler of the trap mode, passing on what is not its own,
 * and its installation.
 *
 * Every AMX instruction raises #UD (SIGILL) on a CPU without AMX.  The
 * handler decodes the faulting instruction (decode.c), performs it on the
 * thread's emulated tile state (thread_state.c, semantics.c), moves RIP past it
 * and returns.  Anything it does not recognise, and every case in which
 * silicon would fault, is passed on so that the process sees the signal it
 * would see on silicon.  docs/trap.md explains the design.
 *
 * Everything reachable from the handler is async-signal-safe: no malloc,
 * no stdio, no locks, no Python, no lazily allocated TLS.
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "../../cpu_features.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#ifndef PYAMX_VERSION
#define PYAMX_VERSION "unknown"
#endif

const char *pyamx_trap_build_version(void) { return PYAMX_VERSION; }

static int32_t g_installed;  /* handler installed at least once */
static int32_t g_permission; /* emulated ARCH_REQ_XCOMP_PERM; process-wide like the kernel's */
static uint64_t g_count;
static uint64_t g_op_count[N_OPS];

static trap_observer_fn g_observer;

void trap_set_observer(trap_observer_fn fn) { __atomic_store_n(&g_observer, fn, __ATOMIC_RELEASE); }

static trap_fatal_observer_fn g_fatal_observer;

void trap_set_fatal_observer(trap_fatal_observer_fn fn) { __atomic_store_n(&g_fatal_observer, fn, __ATOMIC_RELEASE); }

/* clock_gettime through the vDSO: async-signal-safe, tens of ns. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static sigset_t g_lock_saved;

/* SIGILL stays blocked while the lock is held, so the handler (which may
 * end up asking the guard's supervisor, which takes this lock) can never
 * run on the thread that holds it. */
void trap_lock(void)
{
    sigset_t ill, old;
    sigemptyset(&ill);
    sigaddset(&ill, SIGILL);
    pthread_sigmask(SIG_BLOCK, &ill, &old);
    pthread_mutex_lock(&g_lock);
    g_lock_saved = old;
}

void trap_unlock(void)
{
    sigset_t old = g_lock_saved;
    pthread_mutex_unlock(&g_lock);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

const char *pyamx_trap_strerror(int32_t code)
{
    switch (code) {
    case PYAMX_TRAP_OK: return "ok";
    case PYAMX_TRAP_E_HAS_AMX:
        return "this CPU has usable AMX (CPUID.7.0:EDX[24] and XCR0[17,18]); "
               "trap emulation is refused so that real and emulated tile state never mix";
    case PYAMX_TRAP_E_NO_FMA:
        return "the CPU lacks FMA/AVX (or the OS does not enable AVX state), "
               "which the emulated fp32 arithmetic relies on";
    case PYAMX_TRAP_E_SIGACTION: return "sigaction(SIGILL) failed";
    case PYAMX_TRAP_E_NOT_ACTIVE: return "trap emulation is not installed";
    case PYAMX_TRAP_E_TABLE_FULL: return "the per-thread tile state table is full";
    case PYAMX_TRAP_E_NO_SILICON: return "the CPU has no usable AMX for the complement mode to complement";
    default: return "unknown trap error";
    }
}


/* ------------------------------------------------------------------------
 * Passing signals on.
 * ---------------------------------------------------------------------- */

#define K_SIG_DFL ((uint64_t)(uintptr_t)SIG_DFL)
#define K_SIG_IGN ((uint64_t)(uintptr_t)SIG_IGN)

int trap_is_ours(const struct ksigaction *k)
{
    return (k->flags & SA_SIGINFO) && k->handler == (uint64_t)(uintptr_t)trap_handler;
}

static int is_dfl_or_ign(const struct ksigaction *k)
{
    return k->handler == K_SIG_DFL || k->handler == K_SIG_IGN;
}

/* The real disposition back to the default action: through this module's
 * own call site, because this one must not be answered by the guard (the
 * process is about to die of the signal, as it would on silicon). */
static void real_default(int sig)
{
    struct ksigaction dfl = {K_SIG_DFL, 0, 0, 0};
    trap_raw_sigaction(sig, &dfl, NULL);
}

static void raise_unblocked(int sig)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    syscall(SYS_tgkill, getpid(), trap_tid(), sig);
}

void trap_take_default_action(int sig)
{
    real_default(sig);
    raise_unblocked(sig);
}

/* Runs a handler the way the kernel would have: its sa_mask blocked,
 * SA_RESETHAND honoured.  Returns after the handler returns.  The reset
 * goes through libc's sigaction, so that under the guard it resets the
 * disposition the handler's owner sees (the guard answers it), and
 * without the guard the real one, as the kernel would. */
static void call_handler(const struct ksigaction *h, int sig, siginfo_t *si, void *ctx)
{
    sigset_t old, mask;
    sigemptyset(&mask);
    memcpy(&mask, &h->mask, sizeof h->mask); /* signals 1..64, the kernel's layout */
    if (!(h->flags & SA_NODEFER))
        sigaddset(&mask, sig);
    if (h->flags & SA_RESETHAND) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
    }
    pthread_sigmask(SIG_BLOCK, &mask, &old);
    if (h->flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))(uintptr_t)h->handler)(sig, si, ctx);
    else
        ((void (*)(int))(uintptr_t)h->handler)(sig);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Behave as if this handler had never been installed.  `fault` is true for
 * a SIGILL the CPU raised at the current RIP: returning re-executes the
 * instruction, so with the default action the kernel kills the process
 * with the faulting RIP in the core file, as on silicon. */
/* The last word before the default action ends the program for a SIGILL at
 * RIP: what is there (address, up to 8 bytes of the page it is on, the AMX
 * mnemonic where the decoder knows one), so that a program dying of an
 * instruction no emulation covers says which. */
static void say_fatal_sigill(const ucontext_t *uc)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t rip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    size_t room = 4096 - (rip & 4095), n = room < 8 ? room : 8;
    const uint8_t *p = (const uint8_t *)(uintptr_t)rip;
    struct msg m = {.n = 0};
    struct pyamx_trap_insn in;
    m_str(&m, "pyamx trap emulation: SIGILL at ");
    m_hex(&m, rip);
    m_str(&m, ", bytes");
    for (size_t i = 0; i < n; i++) {
        char b[4] = {' ', hex[p[i] >> 4], hex[p[i] & 15], 0};
        m_str(&m, b);
    }
    int32_t len = pyamx_trap_decode(p, n, NULL, rip, &in);
    if (len > 0 || len == PYAMX_TRAP_DECODE_UD || len == PYAMX_TRAP_DECODE_UNSUPPORTED) {
        m_str(&m, " (");
        m_str(&m, pyamx_trap_op_name(in.op));
        m_str(&m, len > 0 ? ")" : ", a form silicon rejects)");
    } else {
        m_str(&m, " (not an AMX instruction)");
    }
    m_str(&m, ": no handler of the program takes it, so the default action ends the program");
    m_emit(&m);
}

static void say_fatal_entry(void *uc)
{
    say_fatal_sigill(uc);
    trap_fatal_observer_fn observer = __atomic_load_n(&g_fatal_observer, __ATOMIC_ACQUIRE);
    if (observer)
        observer();
}

static void pass_on_sigill(siginfo_t *si, void *ctx, int fault)
{
    ucontext_t *uc = ctx;
    struct ksigaction prev;
    chain_get(&prev);
    /* A previous handler that re-raises (faulthandler does) may land back
     * here if it restored this handler as its own "previous"; the second
     * time round, take the default action instead of looping. Only a sent
     * SIGILL (raise, kill) can loop that way, and only from code running
     * inside the chained call, whether that call was for a fault
     * (faulthandler on a bad instruction) or for a sent SIGILL: marking
     * only the latter let faulthandler print twice before the loop was
     * caught. chain_marks.c keeps the marks per thread and tells a live one
     * from one a siglongjmp left (a CPU-feature probe). A fault is always
     * handed on, nested or not, as silicon hands a SA_NODEFER handler its
     * own faults.
     *   While the guard answers every sigaction(SIGILL), the handler a
     * re-raise reaches is the one the program installed last (here, this
     * very handler when it restored it: trap_is_ours below), as on
     * silicon, and no mark is needed; a stale one could only do harm. */
    int watch = !chain_guarded();
    int nested = watch && !fault && chainmark_inside((uintptr_t)uc->uc_mcontext.gregs[REG_RSP]);

    if (!nested && !trap_is_ours(&prev) && !is_dfl_or_ign(&prev)) {
        greg_t rip_before = uc->uc_mcontext.gregs[REG_RIP];
        volatile uint64_t live = 0;
        int mark = watch ? chainmark_enter((uintptr_t)__builtin_frame_address(0), &live) : -1;
        call_handler(&prev, SIGILL, si, ctx);
        chainmark_leave(mark, &live);
        if (fault && uc->uc_mcontext.gregs[REG_RIP] == rip_before) {
            /* The previous handler returned without moving RIP: on
             * silicon the instruction would fault forever.  Die instead
             * of hanging CI. */
            real_default(SIGILL);
        }
        return;
    }
    if (!fault && !nested && prev.handler == K_SIG_IGN)
        return; /* a sent SIGILL that was ignored before this handler came */
    if (fault)
        trap_on_own_stack(say_fatal_entry, uc, uc);
    real_default(SIGILL);
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
    struct ksigaction cur;
    siginfo_t si;
    if (trap_raw_sigaction(SIGSEGV, NULL, &cur) != 0)
        cur.handler = K_SIG_DFL;
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
    trap_take_default_action(SIGSEGV);
}

/* ------------------------------------------------------------------------
 * The handler.
 * ---------------------------------------------------------------------- */

/* Whether the instruction reads or writes XTILEDATA, the one component the
 * kernel's permission (and XFD) guards. */
static int touches_tile_data(int op)
{
    return op <= 0 || op >= N_OPS || pyamx_op_traits[op].kind != PYAMX_KIND_CONFIG; /* the whole-state rows */
}

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

/* The line for an instruction trap_execute() refused: the prefix, the rule
 * it wrote into `rule`, then `outcome`.  Built only on that path, so that
 * an emulated instruction costs no formatting. */
__attribute__((noinline)) static void emit_refusal(int op, uint64_t rip, struct msg *rule, const char *outcome)
{
    struct msg m;
    m_prefix(&m, op, rip);
    rule->buf[rule->n < sizeof rule->buf ? rule->n : sizeof rule->buf - 1] = 0;
    m_str(&m, rule->buf);
    m_str(&m, outcome);
    m_emit(&m);
}

/* A row instruction's zmm result into the interrupted context; 0 when done
 * (or not a row instruction), else the frame cannot carry it (no AVX-512
 * state) and m says so. */
static int put_zmm(ucontext_t *uc, const struct pyamx_trap_insn *in, const struct tile_state *st, struct msg *m)
{
    if (pyamx_op_traits[in->op].kind != PYAMX_KIND_ROW || pyamx_trap_set_zmm(uc, in->zdst, st->zmm) == 0)
        return 0;
    m_prefix(m, in->op, (uint64_t)uc->uc_mcontext.gregs[REG_RIP]);
    m_str(m, "cannot emulate: the signal frame carries no AVX-512 state for the zmm result -> SIGILL");
    m_emit(m);
    return -1;
}

static void count_done(const struct pyamx_trap_insn *in, uint64_t rip, trap_observer_fn observer, uint64_t t0)
{
    __atomic_fetch_add(&g_count, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_op_count[in->op], 1, __ATOMIC_RELAXED);
    if (observer)
        observer(in, rip, now_ns() - t0);
}

/* One line that says why an instruction is left to its SIGILL, then the SIGILL passed on. */
/* What the handler does once the work on its own stack is over. */
enum { ACT_DONE = 0, ACT_PASS_FAULT, ACT_PASS_SENT, ACT_SEGV }; /* ACT_DONE: 0, as the entry tests */

static int refuse(int op, uint64_t rip, const char *why)
{
    struct msg m;
    m_prefix(&m, op, rip);
    m_str(&m, why);
    m_emit(&m);
    return ACT_PASS_FAULT;
}

/* Runs a decoded instruction on st and ends the signal as the outcome says:
 * on to the next instruction (in the complement mode with the tiles put back
 * into the frame), or its #UD or #GP. */
static int execute(ucontext_t *uc, struct tile_state *st, const struct pyamx_trap_insn *in, int32_t len,
                   int complement, trap_observer_fn observer, uint64_t t0)
{
    struct msg m;
    greg_t *g = uc->uc_mcontext.gregs;
    uint64_t rip = (uint64_t)g[REG_RIP];
    m.n = 0;
    int r = trap_execute(st, in, &m);
    if (r == EXEC_OK && put_zmm(uc, in, st, &m) != 0)
        return ACT_PASS_FAULT;
    if (r == EXEC_OK) {
        if (complement)
            complement_store(uc, st);
        g[REG_RIP] = (greg_t)(rip + (uint64_t)len);
        count_done(in, rip, observer, t0);
        return ACT_DONE;
    }
    if (r == EXEC_UD) {
        emit_refusal(in->op, rip, &m, " -> #UD (SIGILL)");
        return ACT_PASS_FAULT;
    }
    emit_refusal(in->op, rip, &m, " -> #GP (SIGSEGV)");
    return ACT_SEGV;
}

static int complement_run(ucontext_t *uc, struct tile_state *st, struct tile_state *slot,
                          const struct pyamx_trap_insn *in, int32_t len, trap_observer_fn observer, uint64_t t0)
{
    uint64_t rip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    int loaded = complement_load(uc, st, &slot->enlarge_tried);
    if (loaded == COMPLEMENT_RETRY)
        return ACT_DONE; /* the kernel enlarged the FPU state: the instruction faults again, with room */
    if (loaded != COMPLEMENT_LOADED) {
        return refuse(in->op, rip, "cannot emulate: the signal frame carries no tile data -> SIGILL");
    }
    return execute(uc, st, in, len, 1, observer, t0);
}

/* ~11 KiB of frame: only on the handler's own stacks (128 KiB each). */
__attribute__((noinline)) static int complement_on_scratch(ucontext_t *uc, struct tile_state *slot,
                                                           const struct pyamx_trap_insn *in, int32_t len,
                                                           trap_observer_fn observer, uint64_t t0)
{
    struct tile_state scratch;
    return complement_run(uc, &scratch, slot, in, len, observer, t0);
}

/* The complement mode's SIGILL: a #UD (ILL_ILLOPN) at an instruction of an
 * extension this CPU lacks, with the AMX permission the real kernel granted.
 * Anything else is the program's own SIGILL, passed on untouched: an XFD
 * fault (ILL_ILLOPC, no permission) of an instruction the CPU has, a #UD of
 * an illegal form, any other instruction. */
static int complement_work(siginfo_t *si, ucontext_t *uc, trap_observer_fn observer, uint64_t t0)
{
    greg_t *g = uc->uc_mcontext.gregs;
    uint64_t rip = (uint64_t)g[REG_RIP];
    uint64_t gpr[16];
    struct pyamx_trap_insn in;
    if (si->si_code != ILL_ILLOPN) {
        return ACT_PASS_FAULT;
    }
    load_gprs(g, gpr);
    int32_t len = pyamx_trap_decode((const uint8_t *)(uintptr_t)rip, 15, gpr, rip, &in);
    if (len <= 0 || !complement_emulates(in.op)) {
        return ACT_PASS_FAULT;
    }
    if (!complement_permitted()) {
        return refuse(in.op, rip,
                      "no AMX permission (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) was not "
                      "called) -> SIGILL as on silicon");
    }
    struct tile_state *slot = state_current();
    if (slot == NULL) {
        return refuse(in.op, rip, "cannot emulate: all per-thread tile state slots are in use -> SIGILL");
    }
    /* The work on the handler's own stack (always, but where no stack could
     * be had or mapped) copies the frame's tiles into a scratch state on
     * that stack: a handler of the program that interrupts this work and
     * runs an emulated instruction of its own gets another stack, so
     * another scratch state, and the interrupted thread's tiles are written
     * back as they were. The thread's slot, shared by every frame of the
     * thread, is the scratch only where the work runs on the program's stack,
     * whose room is not known. */
    if (hstack_holds(__builtin_frame_address(0)))
        return complement_on_scratch(uc, slot, &in, len, observer, t0);
    return complement_run(uc, slot, slot, &in, len, observer, t0);
}

/* A SIGILL the CPU raised: emulate it, or say what the handler must do
 * with it instead.  Runs on the handler's own stack (own_stack.c). */
static int trap_work(siginfo_t *si, ucontext_t *uc)
{
    trap_observer_fn observer = __atomic_load_n(&g_observer, __ATOMIC_ACQUIRE);
    uint64_t t0 = observer ? now_ns() : 0;

    if (state_scratch())
        return complement_work(si, uc, observer, t0);
    greg_t *g = uc->uc_mcontext.gregs;
    uint64_t rip = (uint64_t)g[REG_RIP];
    uint64_t gpr[16];
    struct pyamx_trap_insn in;
    load_gprs(g, gpr);
    int32_t len = pyamx_trap_decode((const uint8_t *)(uintptr_t)rip, 15, gpr, rip, &in);
    if (len == PYAMX_TRAP_DECODE_NOT_AMX || len == PYAMX_TRAP_DECODE_TRUNCATED) {
        return ACT_PASS_FAULT;
    }
    if (len == PYAMX_TRAP_DECODE_UD) {
        return refuse(in.op, rip,
                      "#UD: encoding not valid (W/L/vvvv, EVEX masking/z/b, ModRM form or missing SIB; "
                      "docs/trap.md) -> SIGILL");
    }
    if (len == PYAMX_TRAP_DECODE_UNSUPPORTED) {
        return refuse(in.op, rip, "APX form (extended GPRs r16..r31) is not emulated -> SIGILL");
    }
    /* Only XTILEDATA needs the permission: LDTILECFG, STTILECFG and
     * TILERELEASE touch XTILECFG alone and run without it on silicon
     * (Sapphire Rapids, Linux 6.18, docs/run.md). */
    if (touches_tile_data(in.op) && !__atomic_load_n(&g_permission, __ATOMIC_ACQUIRE)) {
        return refuse(in.op, rip,
                      "no AMX permission yet (the emulated arch_prctl(ARCH_REQ_XCOMP_PERM), "
                      "pyamx_trap_grant_permission(), was not called) -> SIGILL as on silicon");
    }
    struct tile_state *st = state_current();
    if (st == NULL) {
        return refuse(in.op, rip, "cannot emulate: all per-thread tile state slots are in use -> SIGILL");
    }
    hframes_at_trap(st, uc);
    return execute(uc, st, &in, len, 0, observer, t0);
}

struct work_call {
    siginfo_t *si;
    ucontext_t *uc;
    int action;
};

static void work_entry(void *arg)
{
    struct work_call *c = arg;
    c->action = trap_work(c->si, c->uc);
}

/* The C halves of the registered handler, trap_handler (own_stack.c's entry):
 * the work, on the handler's own stack, then what is handed on to the
 * program's own handlers, on the program's stack below the kernel's frame,
 * as the kernel would run them (docs/run.md, "The guard, signal stacks and
 * the end of the process"). */
HIDDEN int trap_handler_work(int sig, siginfo_t *si, void *vctx)
{
    (void)sig;
    int saved_errno = errno;
    int action = trap_work(si, vctx);
    errno = saved_errno;
    return action;
}

HIDDEN void trap_handler_pass(int sig, siginfo_t *si, void *vctx, int action)
{
    (void)sig;
    int saved_errno = errno;
    if (action == ACT_PASS_FAULT || action == ACT_PASS_SENT)
        pass_on_sigill(si, vctx, action == ACT_PASS_FAULT);
    else if (action == ACT_SEGV)
        deliver_sigsegv(vctx);
    errno = saved_errno;
}

/* The entry's way when it has no pool stack to move to, or nothing to emulate
 * (a sent SIGILL): the same work from here, on a stack claimed (and mapped
 * if need be) by trap_on_own_stack, which takes a few dozen bytes of the
 * program's stack. */
HIDDEN void trap_handler_c(int sig, siginfo_t *si, void *vctx)
{
    int saved_errno = errno;
    struct work_call c = {si, vctx, ACT_PASS_SENT}; /* sent by kill/raise/tgkill unless si_code > 0 */
    if (si != NULL && si->si_code > 0)
        trap_on_own_stack(work_entry, &c, vctx);
    errno = saved_errno;
    if (c.action != ACT_DONE)
        trap_handler_pass(sig, si, vctx, c.action);
}

/* ------------------------------------------------------------------------
 * Installation and the C API.
 * ---------------------------------------------------------------------- */

/* 1: AMX-TILE (LDTILECFG's CPUID feature); 2: OSXSAVE, so XGETBV may run; 4: the OS saves the tiles. */
int32_t pyamx_trap_cpu_amx_bits(void)
{
    int32_t bits = 0;
    if (pyamx_cpu_has_row_feature(&pyamx_op_traits[PYAMX_OP_OF_LOAD_CONFIG]))
        bits |= 1;
    if (pyamx_cpu_has(PYAMX_CPU_OSXSAVE)) {
        bits |= 2;
        if (pyamx_cpu_os_saves(PYAMX_XCR0_XTILE))
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
    /* OSXSAVE first: the OS must save XMM and YMM state for the AVX code to run */
    return pyamx_cpu_has(PYAMX_CPU_FMA) && pyamx_cpu_has(PYAMX_CPU_AVX) && pyamx_cpu_has(PYAMX_CPU_OSXSAVE) &&
           pyamx_cpu_os_saves(PYAMX_XCR0_YMM);
}

/* SA_ONSTACK: run on faulthandler's altstack when there is one, as the
 * handlers we chain to expect; SA_NODEFER: a previous handler that
 * re-raises SIGILL (faulthandler) gets it delivered at once.  Installed
 * through the module's own call site, not libc, so that it works whatever
 * libc's sigaction meets (the guard, or an inherited filter whose
 * listener is gone). */
static void our_action(struct ksigaction *k)
{
    k->handler = (uint64_t)(uintptr_t)trap_handler;
    k->flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART | SA_RESTORER;
    k->restorer = trap_restorer();
    k->mask = 0;
}

/* Makes this module's handler the real disposition unless it already is;
 * whatever was there becomes the handler it chains to.  0: it was ours,
 * 1: installed. */
static int32_t install_now(void)
{
    struct ksigaction cur, ours;
    int32_t r = 0;
    our_action(&ours);
    trap_lock();
    if (trap_raw_sigaction(SIGILL, NULL, &cur) != 0) {
        r = PYAMX_TRAP_E_SIGACTION;
    } else if (!trap_is_ours(&cur)) {
        chain_set(&cur);
        r = trap_raw_sigaction(SIGILL, &ours, NULL) == 0 ? 1 : PYAMX_TRAP_E_SIGACTION;
    }
    trap_unlock();
    return r;
}

/* fork() while another thread (the guard's supervisor) holds the lock
 * would leave it locked for good in the child. */
static void setup_once(void)
{
    state_setup_once();
    trap_simd_setup();
    pthread_atfork(trap_lock, trap_unlock, trap_unlock);
}

int32_t pyamx_trap_install(void)
{
    if (pyamx_trap_cpu_has_amx())
        return PYAMX_TRAP_E_HAS_AMX;
    if (!cpu_has_fma())
        return PYAMX_TRAP_E_NO_FMA;
    pthread_once(&g_once, setup_once);
    hstack_prearm();
    int32_t r = install_now();
    if (r < 0)
        return r;
    __atomic_store_n(&g_installed, 1, __ATOMIC_RELEASE);
    return PYAMX_TRAP_OK;
}

int32_t pyamx_trap_install_complement(void)
{
    if (!pyamx_trap_cpu_has_amx())
        return PYAMX_TRAP_E_NO_SILICON;
    if (!cpu_has_fma())
        return PYAMX_TRAP_E_NO_FMA;
    if (complement_setup() == 0)
        return PYAMX_TRAP_E_HAS_AMX;
    pthread_once(&g_once, setup_once);
    hstack_prearm();
    state_set_scratch(1);
    int32_t r = install_now();
    if (r < 0) {
        state_set_scratch(0);
        return r;
    }
    __atomic_store_n(&g_installed, 1, __ATOMIC_RELEASE);
    return PYAMX_TRAP_OK;
}

int32_t pyamx_trap_complementing(void) { return state_scratch(); }

int32_t pyamx_trap_complement_emulates(int32_t op)
{
    return pyamx_trap_complementing() && complement_emulates(op);
}

int32_t pyamx_trap_ensure_installed(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return PYAMX_TRAP_E_NOT_ACTIVE;
    if (chain_guarded())
        return 0; /* nothing outside this module can change the disposition */
    return install_now();
}

int pyamx_trap_active(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return 0;
    struct ksigaction cur;
    if (trap_raw_sigaction(SIGILL, NULL, &cur) != 0)
        return 0;
    return trap_is_ours(&cur) ? 1 : 0;
}

int32_t pyamx_trap_installed(void) { return __atomic_load_n(&g_installed, __ATOMIC_ACQUIRE); }

int32_t pyamx_trap_thread_prepare(void)
{
    if (!pyamx_trap_installed())
        return PYAMX_TRAP_E_NOT_ACTIVE;
    int claimed;
    int32_t r = state_prepare_current(&claimed);
    if (claimed)
        hstack_prearm(); /* a new thread: one more stack the handler's entry can move to */
    return r;
}

int32_t pyamx_trap_uninstall(void)
{
    if (!__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE))
        return PYAMX_TRAP_E_NOT_ACTIVE;
    struct ksigaction cur, prev;
    trap_lock();
    __atomic_store_n(&g_installed, 0, __ATOMIC_RELEASE);
    if (trap_raw_sigaction(SIGILL, NULL, &cur) == 0 && trap_is_ours(&cur)) {
        chain_get(&prev);
        trap_raw_sigaction(SIGILL, &prev, NULL);
    }
    __atomic_store_n(&g_permission, 0, __ATOMIC_RELEASE);
    state_set_scratch(0);
    trap_unlock();
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

int32_t *trap_permission_word(void) { return &g_permission; }

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
