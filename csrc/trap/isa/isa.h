/* The instruction set: a tile state and what one decoded instruction does
 * to it (docs/trap.md, "The parts").  Pure: no signals, no threads, no
 * system calls; the decoder's API (pyamx_trap_decode) is the module's own,
 * in trap.h.  Includes only the base.
 */
#ifndef PYAMX_TRAP_ISA_H
#define PYAMX_TRAP_ISA_H

#include "../base/base.h"

struct tile_state {
    uint8_t tiles[8][16][64];
    /* tsrc2 widened to fp32 once per instruction: [k][even/odd][n].  Lives
     * here rather than on the (alternate) signal stack. */
    uint32_t bconv[16][2][16];
    /* tsrc1 as it was, while a complex dot product runs the fp16 one on a
     * rearranged copy in its place (semantics.c, complex_rows). */
    uint8_t saved_src1[16][64];
    /* complement mode, in the thread's slot: the handler already made the
     * kernel enlarge this thread's FPU state once for the fault being retried */
    uint8_t enlarge_tried;
    /* a row instruction's result, for the handler to put into zmm<zdst> */
    uint8_t zmm[64];
    uint8_t palette;
    uint8_t start_row;
    uint8_t rows[8];
    uint16_t colsb[8];
};

/* ---- tile_config.c ---- */

void state_init(struct tile_state *st);
/* st's configuration as the 64-byte STTILECFG image (all zeros in the init state). */
void state_config_to_bytes(const struct tile_state *st, uint8_t cfg[64]);
/* The palette, start_row, colsb and rows of a 64-byte image into st, unchecked: the
 * caller validated it, or it is one the CPU or this module wrote. Tile data untouched. */
void state_config_from_bytes(struct tile_state *st, const uint8_t cfg[64]);

/* ---- semantics.c ---- */

enum { EXEC_OK = 0, EXEC_UD = 1, EXEC_GP = 2 };

/* Performs one decoded, permitted instruction on st; on EXEC_UD/EXEC_GP the
 * rule that failed is appended to m. */
int trap_execute(struct tile_state *st, const struct pyamx_trap_insn *in, struct msg *m);

/* ---- simd_dot.c ---- */

/* Probes the CPU once (from pyamx_trap_install) and turns the AVX2 dot
 * products on where supported. */
void trap_simd_setup(void);

#endif
