/* The AMX instructions of the newer extensions, run raw, case by case.
 *
 * A program as its user would write it: it configures tiles, loads them,
 * runs one instruction and stores the result, with nothing of pyamx in it.
 * On a CPU that has the extension it runs on silicon; elsewhere it runs
 * under `pyamx run`, which emulates what the CPU lacks (the complement mode
 * on AMX silicon, the trap mode without it). tests/trap/test_new_extensions_run.py
 * feeds it cases on stdin and compares every answer with pyamx's emulator.
 *
 * Input, one case per line (hex: the bytes in memory order):
 *
 *     OP M K N CHEX AHEX BHEX
 *
 * M rows, K dwords of A per row (B has K rows), N dwords of C and B per row.
 * OP is a dot product (tdpbf8ps, tdpbhf8ps, tdphbf8ps, tdphf8ps,
 * tcmmimfp16ps, tcmmrlfp16ps, and AMX-FP16's tdpfp16ps, which some CPUs run
 * without reporting it in CPUID: tmm0 += tmm1 . tmm2, C/A/B loaded with
 * TILELOADD), a load (tileloaddrs, tileloaddrst1: tmm1 loaded from A with
 * the instruction, stored back with TILESTORED; C and B are ignored) or a
 * row instruction (tcvtrowd2ps, tcvtrowps2bf16h/l, tcvtrowps2phh/l,
 * tilemovrow: tmm1 loaded from A, row N-1 into zmm0, whose 64 bytes are
 * printed; C and B are ignored).
 * Output per case: the result bytes in hex, or "UD" when the instruction
 * raised SIGILL.
 *
 * The instructions are written as bytes, as the SDM's encodings give them,
 * so any C compiler builds this: with fixed registers dst = tmm0 (ModRM.reg),
 * src1 = tmm1 (ModRM.rm), src2 = tmm2 (VEX.vvvv = ~2), and for the loads
 * tmm1 <- [rdi + rsi*1] (ModRM 0x0c, SIB 0x37); the row instructions as
 * EVEX bytes with zmm0, tmm1 and edx. tests/trap/test_trap_decoder.py holds the
 * same encodings against clang's. With --no-permission the
 * program never asks the kernel for XTILEDATA, as a buggy program would.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static sigjmp_buf escape;

static void on_sigill(int sig)
{
    (void)sig;
    siglongjmp(escape, 1);
}

#define TILE_ASM(bytes) __asm__ volatile(bytes ::: "memory")

static void ldtilecfg(const uint8_t *cfg) { __asm__ volatile(".byte 0xc4,0xe2,0x78,0x49,0x07" ::"D"(cfg) : "memory"); }
static void tilerelease(void) { TILE_ASM(".byte 0xc4,0xe2,0x78,0x49,0xc0"); }

/* TILELOADD tmmN, [rdi + rsi]; TILESTORED [rdi + rsi], tmm0 / tmm1 */
static void load0(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x04,0x37" ::"D"(p), "S"(s) : "memory"); }
static void load1(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x0c,0x37" ::"D"(p), "S"(s) : "memory"); }
static void load2(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4b,0x14,0x37" ::"D"(p), "S"(s) : "memory"); }
static void store0(void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7a,0x4b,0x04,0x37" ::"D"(p), "S"(s) : "memory"); }
static void store1(void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7a,0x4b,0x0c,0x37" ::"D"(p), "S"(s) : "memory"); }

static void tdpbf8ps(void) { TILE_ASM(".byte 0xc4,0xe5,0x68,0xfd,0xc1"); }
static void tdpbhf8ps(void) { TILE_ASM(".byte 0xc4,0xe5,0x6b,0xfd,0xc1"); }
static void tdphbf8ps(void) { TILE_ASM(".byte 0xc4,0xe5,0x6a,0xfd,0xc1"); }
static void tdphf8ps(void) { TILE_ASM(".byte 0xc4,0xe5,0x69,0xfd,0xc1"); }
static void tdpfp16ps(void) { TILE_ASM(".byte 0xc4,0xe2,0x6b,0x5c,0xc1"); }
static void tcmmimfp16ps(void) { TILE_ASM(".byte 0xc4,0xe2,0x69,0x6c,0xc1"); }
static void tcmmrlfp16ps(void) { TILE_ASM(".byte 0xc4,0xe2,0x68,0x6c,0xc1"); }
static void tileloaddrs(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x7b,0x4a,0x0c,0x37" ::"D"(p), "S"(s) : "memory"); }
static void tileloaddrst1(const void *p, long s) { __asm__ volatile(".byte 0xc4,0xe2,0x79,0x4a,0x0c,0x37" ::"D"(p), "S"(s) : "memory"); }

/* AMX-AVX512, GPR form: zmm0 <- row edx of tmm1 (EVEX P0 f2: zmm0, tmm1, map 0F38; P1 6c|pp:
 * W0, vvvv = ~edx; P2 48: 512 bits, no masking), then the 64 bytes stored with VMOVDQU32. */
#define ROW_OP(name, p1, opc)                                                                    \
    static void name(unsigned row, void *out)                                                    \
    {                                                                                            \
        __asm__ volatile(".byte 0x62,0xf2," #p1 ",0x48," #opc ",0xc1\n\t"                        \
                         "vmovdqu32 %%zmm0, (%%rdi)" ::"d"(row), "D"(out) : "memory", "xmm0");    \
    }
ROW_OP(tcvtrowd2ps, 0x6e, 0x4a)
ROW_OP(tcvtrowps2bf16h, 0x6f, 0x6d)
ROW_OP(tcvtrowps2bf16l, 0x6e, 0x6d)
ROW_OP(tcvtrowps2phh, 0x6c, 0x6d)
ROW_OP(tcvtrowps2phl, 0x6d, 0x6d)
ROW_OP(tilemovrow, 0x6d, 0x4a)

static const struct {
    const char *name;
    void (*dot)(void);
    void (*load)(const void *, long);
    void (*row)(unsigned, void *);
} OPS[] = {
    {"tdpbf8ps", tdpbf8ps, 0},           {"tdpbhf8ps", tdpbhf8ps, 0},       {"tdphbf8ps", tdphbf8ps, 0},
    {"tdphf8ps", tdphf8ps, 0},           {"tcmmimfp16ps", tcmmimfp16ps, 0}, {"tcmmrlfp16ps", tcmmrlfp16ps, 0},
    {"tdpfp16ps", tdpfp16ps, 0},
    {"tileloaddrs", 0, tileloaddrs},     {"tileloaddrst1", 0, tileloaddrst1},
    {"tcvtrowd2ps", 0, 0, tcvtrowd2ps},         {"tcvtrowps2bf16h", 0, 0, tcvtrowps2bf16h},
    {"tcvtrowps2bf16l", 0, 0, tcvtrowps2bf16l}, {"tcvtrowps2phh", 0, 0, tcvtrowps2phh},
    {"tcvtrowps2phl", 0, 0, tcvtrowps2phl},     {"tilemovrow", 0, 0, tilemovrow},
};

static int unhex(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static void print_hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (!(argc > 1 && strcmp(argv[1], "--no-permission") == 0) &&
        syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM)");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigill;
    sigaction(SIGILL, &sa, NULL);

    static char line[1 << 16], op[32], chex[4096], ahex[4096], bhex[4096];
    static uint8_t c[1024], a[1024], b[1024], out[1024];
    static uint8_t cfg[64] __attribute__((aligned(64)));
    while (fgets(line, sizeof line, stdin)) {
        int m, k, n;
        if (sscanf(line, "%31s %d %d %d %4095s %4095s %4095s", op, &m, &k, &n, chex, ahex, bhex) != 7 ||
            m < 1 || m > 16 || k < 1 || k > 16 || n < 1 || n > 16 ||
            unhex(chex, c, (size_t)(m * n * 4)) || unhex(ahex, a, (size_t)(m * k * 4)) ||
            unhex(bhex, b, (size_t)(k * n * 4))) {
            fprintf(stderr, "bad case: %s", line);
            return 2;
        }
        unsigned i;
        for (i = 0; i < sizeof OPS / sizeof OPS[0] && strcmp(OPS[i].name, op); i++)
            ;
        if (i == sizeof OPS / sizeof OPS[0]) {
            fprintf(stderr, "unknown op %s\n", op);
            return 2;
        }
        memset(cfg, 0, sizeof cfg);
        cfg[0] = 1;
        cfg[16] = (uint8_t)(4 * n); cfg[48] = (uint8_t)m;          /* tmm0: C, M x N dwords */
        cfg[18] = (uint8_t)(4 * k); cfg[49] = (uint8_t)m;          /* tmm1: A, M x K dwords */
        cfg[20] = (uint8_t)(4 * n); cfg[50] = (uint8_t)k;          /* tmm2: B, K x N dwords */
        memset(out, 0, sizeof out);
        if (sigsetjmp(escape, 1)) {
            printf("UD\n");
            continue;
        }
        ldtilecfg(cfg);
        if (OPS[i].row) {
            /* tmm1 loaded from A; the zmm result of row N-1 (the GPR form, chunk 0) */
            load1(a, 4L * k);
            OPS[i].row((unsigned)(n - 1), out);
            print_hex(out, 64);
        } else if (OPS[i].load) {
            /* the load first, before any other tile-data instruction of the process */
            OPS[i].load(a, 4L * k);
            store1(out, 4L * k);
            print_hex(out, (size_t)(m * k * 4));
        } else {
            load0(c, 4L * n);
            load1(a, 4L * k);
            load2(b, 4L * n);
            OPS[i].dot();
            store0(out, 4L * n);
            print_hex(out, (size_t)(m * n * 4));
        }
        tilerelease();
        fflush(stdout);
    }
    return 0;
}
