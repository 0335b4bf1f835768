/* The complement mode: on AMX silicon, emulate only the instructions of the
 * AMX extensions this CPU lacks (docs/run.md, "On AMX silicon").
 *
 * A Sapphire Rapids runs AMX-TILE/BF16/INT8 itself and raises #UD (SIGILL,
 * ILL_ILLOPN) for AMX-FP8, AMX-COMPLEX, AMX-AVX512 and AMX-MOVRS. Their
 * operands are in the real tile registers, which the kernel saved in the
 * signal frame's XSAVE image (components 17 XTILECFG and 18 XTILEDATA, at
 * the standard-format offsets CPUID leaf 0xD gives) and restores from it
 * at sigreturn. So the handler copies that image into the thread's
 * emulated tile state, runs the instruction there, and copies the tiles
 * back into the frame: the program continues on silicon with the result in
 * its tile registers. The permission and the arch_prctl calls are the real
 * kernel's: nothing is filtered, no seccomp.
 *
 * Checked on Sapphire Rapids, Linux 6.18: the frame holds the tile data
 * once the task's first tile-data instruction made the kernel enlarge its
 * FPU state; before that the frame has no room for it (xfeatures lacks bit
 * 18), so the handler touches tile data itself once (which makes the
 * kernel enlarge the state) and lets the instruction fault again.
 */
#include "internal.h"
#include "../../cpu_features.h"

#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define XFEATURE_XTILECFG 17
#define XFEATURE_XTILEDATA 18
#ifndef FP_XSTATE_MAGIC1
#define FP_XSTATE_MAGIC1 0x46505853u
#endif
#define ARCH_GET_XCOMP_PERM 0x1022

/* Where the Linux signal frame's fpstate keeps the XSAVE software bytes
 * (struct _fpx_sw_bytes in the legacy area's reserved tail) and the XSAVE
 * header's XSTATE_BV. */
#define SW_BYTES_OFFSET 464
#define XSTATE_BV_OFFSET 512

static uint32_t g_off_cfg, g_off_data;
static uint8_t g_missing[N_OPS];

int complement_setup(void)
{
    uint32_t size;
    pyamx_cpu_xsave_component(XFEATURE_XTILECFG, &g_off_cfg, &size);
    pyamx_cpu_xsave_component(XFEATURE_XTILEDATA, &g_off_data, &size);
    /* A row instruction writes a zmm register, which only a frame with
     * AVX-512 state can carry: the OS must have enabled opmask, ZMM_Hi256
     * and Hi16_ZMM (XCR0 bits 5-7); elsewhere they are left to SIGILL. */
    int zmm_state = pyamx_cpu_os_saves(PYAMX_XCR0_ZMM);
    int missing = 0;
    for (int op = 1; op < N_OPS; op++) {
        const struct pyamx_op_traits *t = &pyamx_op_traits[op];
        if (t->kind == PYAMX_KIND_ROW && !zmm_state)
            continue;
        g_missing[op] = !pyamx_cpu_has_row_feature(t);
        missing += g_missing[op];
    }
    return missing;
}

int complement_emulates(int op) { return op > 0 && op < N_OPS && g_missing[op]; }

int complement_permitted(void)
{
    uint64_t mask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask) != 0)
        return 0;
    return (int)((mask >> XFEATURE_XTILEDATA) & 1);
}

/* The frame's XSAVE image, or NULL where it holds no room for the tiles. */
static uint8_t *frame_xsave(ucontext_t *uc)
{
    uint8_t *fx = (uint8_t *)uc->uc_mcontext.fpregs;
    if (!fx)
        return NULL;
    uint32_t magic, size;
    uint64_t xfeatures;
    memcpy(&magic, fx + SW_BYTES_OFFSET, 4);
    memcpy(&xfeatures, fx + SW_BYTES_OFFSET + 8, 8);
    memcpy(&size, fx + SW_BYTES_OFFSET + 16, 4);
    if (magic != FP_XSTATE_MAGIC1 || !((xfeatures >> XFEATURE_XTILECFG) & 1) ||
        !((xfeatures >> XFEATURE_XTILEDATA) & 1) || size < g_off_data + 8192u)
        return NULL;
    return fx;
}

/* Raw bytes (the trap module is built without AMX code generation):
 * LDTILECFG (%rdi), TILEZERO tmm0, TILERELEASE. One 1x4-byte tile, zeroed
 * and released: the first tile-data instruction of the task, which is what
 * makes Linux enlarge its FPU state. The handler runs in the init tile state
 * of a signal handler, so the interrupted tiles are not touched. */
static void touch_tile_data(void)
{
    static const uint8_t cfg[64] __attribute__((aligned(64))) = {[0] = 1, [16] = 4, [48] = 1};
    __asm__ volatile(".byte 0xc4, 0xe2, 0x78, 0x49, 0x07\n\t"
                     ".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0\n\t"
                     ".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0"
                     :
                     : "D"(cfg)
                     : "memory");
}

int complement_load(ucontext_t *uc, struct tile_state *st, uint8_t *enlarge_tried)
{
    uint8_t *fx = frame_xsave(uc);
    if (!fx) {
        if (*enlarge_tried)
            return COMPLEMENT_NO_FRAME;
        *enlarge_tried = 1;
        touch_tile_data();
        return COMPLEMENT_RETRY;
    }
    *enlarge_tried = 0;
    uint64_t bv;
    memcpy(&bv, fx + XSTATE_BV_OFFSET, 8);
    /* A component in its init state (XSTATE_BV bit clear) is all zeros
     * whatever the buffer holds. */
    uint8_t cfg[64] = {0};
    if ((bv >> XFEATURE_XTILECFG) & 1)
        memcpy(cfg, fx + g_off_cfg, 64);
    state_config_from_bytes(st, cfg);
    if ((bv >> XFEATURE_XTILEDATA) & 1)
        memcpy(st->tiles, fx + g_off_data, sizeof st->tiles);
    else
        memset(st->tiles, 0, sizeof st->tiles);
    return COMPLEMENT_LOADED;
}

void complement_store(ucontext_t *uc, const struct tile_state *st)
{
    uint8_t *fx = frame_xsave(uc);
    uint64_t bv;
    memcpy(&bv, fx + XSTATE_BV_OFFSET, 8);
    memcpy(fx + g_off_data, st->tiles, sizeof st->tiles);
    bv |= 1ull << XFEATURE_XTILEDATA;
    if ((bv >> XFEATURE_XTILECFG) & 1)
        fx[g_off_cfg + 1] = st->start_row;
    memcpy(fx + XSTATE_BV_OFFSET, &bv, 8);
}
