/* The decoder and the semantics on a tile state handed over whole, with no
 * signal, no handler and no per-thread table: the very code the SIGILL
 * handler runs, callable where the trap mode itself is refused (AMX
 * silicon), so that its arithmetic and its #UD rules are checked against
 * the emulator on every CPU (tests/trap/test_trap_direct.py), and where
 * both run, against the silicon by the lock-step leg's transitivity.
 *
 * Only instructions without a memory operand are taken: a memory operand's
 * address would be read or written as the handler does, unchecked, and a
 * bad one would crash the caller instead of faulting a program. The state
 * comes in as the STTILECFG image and the eight tiles, and the image is
 * validated by the LDTILECFG rules themselves before anything runs.
 */
#include "internal.h"

#include <string.h>

static void say(char *why, size_t why_size, const char *text, size_t n)
{
    if (why == NULL || why_size == 0)
        return;
    if (n >= why_size)
        n = why_size - 1;
    memcpy(why, text, n);
    why[n] = 0;
}

static void say_str(char *why, size_t why_size, const char *text)
{
    say(why, why_size, text, strlen(text));
}

int32_t pyamx_trap_execute_direct(const uint8_t *code, size_t len, const uint64_t *gprs16, uint8_t *cfg,
                                  uint8_t *tiles, uint8_t *zmm, char *why, size_t why_size)
{
    say_str(why, why_size, "");
    if (code == NULL || cfg == NULL || tiles == NULL || zmm == NULL || len == 0) {
        say_str(why, why_size, "code, cfg, tiles and zmm must all be given");
        return PYAMX_TRAP_DIRECT_E_ARG;
    }
    struct pyamx_trap_insn in;
    int32_t n = pyamx_trap_decode(code, len > 15 ? 15 : len, gprs16, 0, &in);
    if (n == PYAMX_TRAP_DECODE_UD) {
        say_str(why, why_size, "#UD: encoding not valid (W/L/vvvv, EVEX masking/z/b, ModRM form or missing SIB)");
        return PYAMX_TRAP_DIRECT_UD;
    }
    if (n <= 0) {
        say_str(why, why_size, n == PYAMX_TRAP_DECODE_TRUNCATED ? "the bytes end inside the instruction"
                               : n == PYAMX_TRAP_DECODE_UNSUPPORTED ? "an APX form (r16..r31), which the trap does not emulate"
                               : "not an instruction the trap mode emulates");
        return PYAMX_TRAP_DIRECT_E_DECODE;
    }
    if (in.has_mem) {
        say_str(why, why_size, "an instruction with a memory operand: not taken here (its address would be used unchecked)");
        return PYAMX_TRAP_DIRECT_E_MEMORY;
    }
    pyamx_trap_set_simd(-1); /* the AVX2 paths where the CPU has them, as pyamx_trap_install() sets up */

    /* ~11 KiB: the caller's stack (a normal thread's, not a signal stack). */
    struct tile_state st;
    struct msg m = {.n = 0};
    /* LDTILECFG copies the image before it checks it: cfg is only read here */
    struct pyamx_trap_insn load = {.op = PYAMX_OP_OF_LOAD_CONFIG, .has_mem = 1, .addr = (uint64_t)(uintptr_t)cfg};
    state_init(&st);
    m_str(&m, "cfg is not a configuration LDTILECFG accepts: "); /* the rule that refuses it follows */
    if (trap_execute(&st, &load, &m) != EXEC_OK) {
        say(why, why_size, m.buf, m.n);
        return PYAMX_TRAP_DIRECT_E_CONFIG;
    }
    if (st.palette)
        memcpy(st.tiles, tiles, sizeof st.tiles); /* the init state holds zeros, as LDTILECFG left them */

    m.n = 0;
    int r = trap_execute(&st, &in, &m);
    if (r != EXEC_OK) {
        say(why, why_size, m.buf, m.n);
        return r == EXEC_UD ? PYAMX_TRAP_DIRECT_UD : PYAMX_TRAP_DIRECT_GP;
    }
    state_config_to_bytes(&st, cfg);
    memcpy(tiles, st.tiles, sizeof st.tiles);
    memcpy(zmm, st.zmm, sizeof st.zmm);
    return PYAMX_TRAP_DIRECT_OK;
}
