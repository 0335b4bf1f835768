/* csrc/trap/handler/frame_zmm.c on a real signal frame (tests/trap/test_case_programs.py builds and
 * runs this).  All 32 zmm registers are loaded with known bytes, a ud2
 * raises SIGILL, the handler writes zmm22, zmm3 and zmm31 through
 * pyamx_trap_set_zmm and skips the ud2, and after sigreturn every register
 * is stored back: the written ones must hold the new bytes, the others their
 * old ones.  The load, the fault and the store are one asm block, so no
 * compiled code runs in between that could use the registers.  Run twice:
 * with every register non-zero, and after vzeroupper (the upper halves'
 * XSAVE components in the init state, their XSTATE_BV bits clear).
 * Exit 0: passed; 77: no AVX-512 here; 1: failed (the reason on stdout).
 */
#define _GNU_SOURCE /* REG_RIP */
#include "handler/internal.h"

#include <cpuid.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static const int written[3] = {22, 3, 31};
static uint8_t before[32][64] __attribute__((aligned(64)));
static uint8_t after[32][64] __attribute__((aligned(64)));
static uint8_t writes[3][64];
static int set_rc[3], get_mismatch;
static uint64_t bv_seen;

static void handler(int sig, siginfo_t *si, void *v)
{
    (void)sig, (void)si;
    ucontext_t *uc = v;
    uint8_t got[64];
    for (int r = 0; r < 32; r++)
        if (pyamx_trap_get_zmm(uc, r, got) != PYAMX_TRAP_ZMM_OK || memcmp(got, before[r], 64) != 0)
            get_mismatch++;
    memcpy(&bv_seen, (uint8_t *)uc->uc_mcontext.fpregs + 512, 8);
    /* XSAVE may leave a component in its init state unwritten: garbage
     * there must not reach the registers once set_zmm marks the component. */
    for (int bit = 2; bit <= 7; bit++)
        if (!(bv_seen & (1ull << bit))) {
            unsigned int size, offset, ecx, edx;
            __cpuid_count(0xD, bit, size, offset, ecx, edx);
            memset((uint8_t *)uc->uc_mcontext.fpregs + offset, 0xCC, size);
        }
    for (int k = 0; k < 3; k++)
        set_rc[k] = pyamx_trap_set_zmm(uc, written[k], writes[k]);
    uc->uc_mcontext.gregs[REG_RIP] += 2; /* past the ud2 */
}

#define LD(n) "vmovdqu64 " #n "*64(%0), %%zmm" #n "\n\t"
#define ST(n) "vmovdqu64 %%zmm" #n ", " #n "*64(%1)\n\t"
#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)

#define CLOBBERS "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
    "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", \
    "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31"

static void load_fault_store(int upper_init)
{
    /* vzeroupper puts YMM_Hi128 and ZMM_Hi256 in their init state, so the
     * frame's XSTATE_BV has bits 2 and 6 clear and set_zmm must initialize
     * those components before it marks them. */
    if (upper_init)
        __asm__ volatile(ALL(LD) "vzeroupper\n\tud2\n\t" ALL(ST) : : "r"(before), "r"(after) : CLOBBERS);
    else
        __asm__ volatile(ALL(LD) "ud2\n\t" ALL(ST) : : "r"(before), "r"(after) : CLOBBERS);
}

static int run(const char *name, int upper_init)
{
    for (int r = 0; r < 32; r++)
        for (int b = 0; b < 64; b++)
            before[r][b] = (upper_init && r < 16 && b >= 16) ? 0 : (uint8_t)((r * 64 + b + 1) | (b == 63 ? 0x80 : 0));
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 64; b++)
            writes[k][b] = (uint8_t)(0xA5 ^ (k * 77 + b * 3));
    memset(after, 0xEE, sizeof after);
    get_mismatch = 0;
    load_fault_store(upper_init);
    int bad = 0;
    for (int k = 0; k < 3; k++)
        if (set_rc[k] != PYAMX_TRAP_ZMM_OK) {
            printf("%s: set_zmm(%d) returned %d\n", name, written[k], set_rc[k]);
            bad = 1;
        }
    if (get_mismatch) {
        printf("%s: get_zmm disagreed with the loaded bytes for %d registers\n", name, get_mismatch);
        bad = 1;
    }
    for (int r = 0; r < 32; r++) {
        const uint8_t *want = before[r];
        for (int k = 0; k < 3; k++)
            if (written[k] == r)
                want = writes[k];
        for (int b = 0; b < 64; b++)
            if (after[r][b] != want[b]) {
                printf("%s: zmm%d byte %d is 0x%02x, expected 0x%02x\n", name, r, b, after[r][b], want[b]);
                bad = 1;
                break;
            }
    }
    printf("%s: XSTATE_BV in the frame was 0x%llx\n", name, (unsigned long long)bv_seen);
    return bad;
}

/* Frames the function must refuse without touching memory it was not given. */
static int refusals(void)
{
    static uint8_t image[1024] __attribute__((aligned(64)));
    ucontext_t uc;
    uint8_t z[64] = {0};
    int bad = 0;
    memset(&uc, 0, sizeof uc);
    uc.uc_mcontext.fpregs = NULL;
    bad |= pyamx_trap_set_zmm(&uc, 3, z) != PYAMX_TRAP_ZMM_E_NO_XSTATE;
    uc.uc_mcontext.fpregs = (void *)image;
    bad |= pyamx_trap_set_zmm(&uc, 3, z) != PYAMX_TRAP_ZMM_E_NO_XSTATE; /* no magic: an FXSAVE-only frame */
    uint32_t magic1 = 0x46505853, magic2 = 0x46505845, size = 576;
    uint64_t features = 0x7; /* x87, SSE, AVX: no AVX-512 */
    memcpy(image + 464, &magic1, 4);
    memcpy(image + 472, &features, 8);
    memcpy(image + 480, &size, 4);
    memcpy(image + 576, &magic2, 4);
    bad |= pyamx_trap_set_zmm(&uc, 3, z) != PYAMX_TRAP_ZMM_E_NO_AVX512;
    bad |= pyamx_trap_set_zmm(&uc, 20, z) != PYAMX_TRAP_ZMM_E_NO_AVX512;
    bad |= pyamx_trap_get_zmm(&uc, 31, z) != PYAMX_TRAP_ZMM_E_NO_AVX512;
    bad |= pyamx_trap_set_zmm(&uc, 32, z) != PYAMX_TRAP_ZMM_E_REG;
    bad |= pyamx_trap_set_zmm(&uc, -1, z) != PYAMX_TRAP_ZMM_E_REG;
    features = 0xE7; /* AVX-512 claimed, but the image is too small to hold it */
    memcpy(image + 472, &features, 8);
    bad |= pyamx_trap_set_zmm(&uc, 3, z) != PYAMX_TRAP_ZMM_E_NO_AVX512;
    if (bad)
        printf("refusals: a malformed frame was not refused with the right code\n");
    return bad;
}

int main(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        printf("no AVX-512F on this CPU/OS\n");
        return 77;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &sa, NULL);
    int bad = run("every component in use", 0) | run("upper halves in the init state", 1) | refusals();
    if (!bad)
        printf("ok\n");
    return bad;
}
