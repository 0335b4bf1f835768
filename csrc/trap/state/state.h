/* Per-thread emulated tile state: a fixed table of slots keyed by the
 * kernel thread id (docs/trap.md, "The parts").  Includes the instruction
 * set (the tile state) and the base.
 */
#ifndef PYAMX_TRAP_STATE_H
#define PYAMX_TRAP_STATE_H

#include "../isa/isa.h"

/* Tile states a slot keeps for the program's nested signal handlers
 * (frames/, HFRAME_MAX). */
enum { STATE_SAVE_AREAS = 8 };

/* The calling thread's state, claimed on first use; NULL when the table is full. */
struct tile_state *state_for(int32_t tid);
/* The same for the handler's hot path: the slot a prepared thread's pthread
 * key names, without the gettid system call; state_for() otherwise. */
struct tile_state *state_current(void);
/* The calling thread's state as Linux starts a new thread: the creating
 * thread's STTILECFG image (64 bytes, from pyamx_trap_thread_state), tile
 * data in the init state.  From normal context. */
int32_t state_inherit_config(const uint8_t *cfg);
/* The calling thread's slot claimed (*claimed: 1 when new) and named by its
 * pthread key; PYAMX_TRAP_OK or PYAMX_TRAP_E_TABLE_FULL.  From normal context. */
int32_t state_prepare_current(int *claimed);
/* The complement mode (1) or the full trap mode (0): in the former a slot's
 * tile_state is a scratch copy of the signal frame's registers. */
void state_set_scratch(int on);
int state_scratch(void);
/* Gives up the calling thread's slot, if any (a thread of this module's own). */
void state_forget_current(void);
/* pthread key and fork handler; from pthread_once in install. */
void state_setup_once(void);
/* Room for st's thread to keep a whole tile_state for handler frame `index`
 * (0..STATE_SAVE_AREAS-1), mapped on first need and kept with the slot; NULL
 * when st is NULL or the mapping fails.  Async-signal-safe. */
struct tile_state *state_save_area(struct tile_state *st, int index);

#endif
