/* Which tile instructions fault on this CPU, decided by the CPU itself.
 *
 * pyamx's native tile machine refuses every #UD/#GP case in C before it runs
 * an instruction, so it can never tell what silicon does there. This program
 * runs each case raw: it reads lines from stdin,
 *
 *     OP A B C IMAGE
 *
 * (IMAGE: the 64-byte LDTILECFG image as 128 hex digits), loads it, runs OP on tiles A (B, C) with
 * a 64-byte stride over a buffer large enough for any tile, and prints one
 * line per case: "ok START_ROW_AFTER", "UD" (SIGILL) or "GP" (SIGSEGV, from
 * LDTILECFG for an illegal image). OP is one of
 * ldtilecfg, tilezero, tileloadd, tileloaddt1, tilestored, tdpbf16ps,
 * tdpbssd. tests/cpu/test_silicon_rules.py compares the answers with the
 * emulator's rules (docs/semantics.md section 7).
 *
 * Needs the XTILEDATA permission, which it requests first.
 */
#include <immintrin.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static sigjmp_buf escape;
static volatile sig_atomic_t caught;
static uint8_t memory[16 * 64 + 64] __attribute__((aligned(64)));

static void on_fault(int sig)
{
    caught = sig;
    siglongjmp(escape, 1);
}

/* Tile numbers are immediates in the encoding: one case per register. */
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

__attribute__((target("amx-tile"))) static void tilezero(int t)
{
#define Z(n) case n: _tile_zero(n); break;
    switch (t) { EACH(Z) }
#undef Z
}

__attribute__((target("amx-tile"))) static void tileloadd(int t, int hint)
{
#define L(n) case n: if (hint) _tile_stream_loadd(n, memory, 64); else _tile_loadd(n, memory, 64); break;
    switch (t) { EACH(L) }
#undef L
}

__attribute__((target("amx-tile"))) static void tilestored(int t)
{
#define S(n) case n: _tile_stored(n, memory, 64); break;
    switch (t) { EACH(S) }
#undef S
}

/* Dot products: the assembler refuses the register triples that #UD (equal
 * registers), so each one is encoded here, into an executable page, as
 * VEX.128.<pp>.0F38.W0 <opcode> /r with ModRM.reg = tsrcdest, ModRM.rm =
 * tsrc1 and VEX.vvvv = tsrc2, followed by RET. */
static uint8_t *code_page;

static void dot_product(int pp, int opcode, int dst, int src1, int src2)
{
    uint8_t insn[] = {
        0xC4, 0xE2, (uint8_t)(((~src2 & 0xF) << 3) | pp), (uint8_t)opcode,
        (uint8_t)(0xC0 | (dst << 3) | src1), 0xC3,
    };
    memcpy(code_page, insn, sizeof insn);
    __builtin___clear_cache((char *)code_page, (char *)code_page + sizeof insn);
    ((void (*)(void))code_page)();
}

__attribute__((target("amx-tile"))) static void load_config(const uint8_t *cfg) { _tile_loadconfig(cfg); }
__attribute__((target("amx-tile"))) static void store_config(uint8_t *cfg) { _tile_storeconfig(cfg); }
__attribute__((target("amx-tile"))) static void release(void) { _tile_release(); }

static const char *run_case(const char *op, int a, int b, int c, const uint8_t *cfg, int *start_row_after)
{
    uint8_t after[64] __attribute__((aligned(64)));
    caught = 0;
    if (sigsetjmp(escape, 1)) {
        release();
        return caught == SIGILL ? "UD" : "GP";
    }
    load_config(cfg);
    if (strcmp(op, "tilezero") == 0)
        tilezero(a);
    else if (strcmp(op, "tileloadd") == 0)
        tileloadd(a, 0);
    else if (strcmp(op, "tileloaddt1") == 0)
        tileloadd(a, 1);
    else if (strcmp(op, "tilestored") == 0)
        tilestored(a);
    else if (strcmp(op, "tdpbf16ps") == 0)
        dot_product(2, 0x5C, a, b, c); /* F3 */
    else if (strcmp(op, "tdpbssd") == 0)
        dot_product(3, 0x5E, a, b, c); /* F2 */
    else if (strcmp(op, "ldtilecfg") != 0)
        return "unknown-op";
    store_config(after);
    *start_row_after = after[1];
    release();
    return "ok";
}

int main(void)
{
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM)");
        return 2;
    }
    code_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code_page == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fault;
    sigaction(SIGILL, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);

    char op[32], hex[129];
    int a, b, c;
    while (scanf("%31s %d %d %d %128s", op, &a, &b, &c, hex) == 5) {
        uint8_t cfg[64] __attribute__((aligned(64)));
        for (int i = 0; i < 64; i++) {
            unsigned byte;
            if (sscanf(hex + 2 * i, "%2x", &byte) != 1)
                return 3;
            cfg[i] = (uint8_t)byte;
        }
        if (a < 0 || a > 7 || b < 0 || b > 7 || c < 0 || c > 7)
            return 3;
        int start_row_after = -1;
        const char *outcome = run_case(op, a, b, c, cfg, &start_row_after);
        if (start_row_after >= 0)
            printf("%s %d\n", outcome, start_row_after);
        else
            printf("%s\n", outcome);
    }
    return 0;
}
