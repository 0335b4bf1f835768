/* Linux's rule for tile state across a signal handler, as a check: the
 * handler starts in the init state (STTILECFG reads all zeros), and what it
 * loads is gone when it returns, the interrupted configuration and tile
 * data back.  A program's handlers call handler_uses_tiles(); its cases
 * call tiles_across(sig) after tiles_across_prepare().  Needs case_kit.h. */
#ifndef PYAMX_TEST_TILES_ACROSS_H
#define PYAMX_TEST_TILES_ACROSS_H

#include <signal.h>

static uint8_t across_cfg_main[64] __attribute__((aligned(64)));
static uint8_t across_cfg_seen[64] __attribute__((aligned(64)));
static int32_t across_tile_main[16][16], across_tile_back[16][16];
static volatile sig_atomic_t across_handler_runs;

static inline void tiles_across_prepare(void)
{
    memset(across_cfg_main, 0, 64);
    across_cfg_main[0] = 1;
    across_cfg_main[16] = 64;
    across_cfg_main[48] = 16;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            across_tile_main[i][j] = i * 1000 + j;
}

/* From a handler: notes the TILECFG it started with, then loads a
 * configuration (3 rows of 12 bytes) and a tile of its own, which the
 * interrupted code must not see. */
static inline void handler_uses_tiles(void)
{
    static uint8_t cfg[64] __attribute__((aligned(64)));
    static int32_t junk[16][16];
    sttilecfg(across_cfg_seen);
    memset(cfg, 0, 64);
    cfg[0] = 1;
    cfg[16] = 12;
    cfg[48] = 3;
    memset(junk, 0x5a, sizeof junk);
    ldtilecfg(cfg);
    load0(junk, 64);
    across_handler_runs++;
}

/* Tiles live, sig raised (its handler must call handler_uses_tiles once),
 * then: did the handler run and start in the init state, and are the
 * interrupted configuration and tile back?  NULL when all holds. */
static inline const char *tiles_across(int sig)
{
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    int before = across_handler_runs;
    memset(across_cfg_seen, 0xAA, 64);
    memset(across_tile_back, 0, sizeof across_tile_back);
    ldtilecfg(across_cfg_main);
    load0(across_tile_main, 64);
    raise(sig);
    sttilecfg(cfg_now);
    store0(across_tile_back, 64);
    tilerelease();
    if (across_handler_runs != before + 1)
        return "the handler did not run once";
    if (!all_zero(across_cfg_seen, 64))
        return "the handler did not start with TILECFG in the init state";
    if (memcmp(cfg_now, across_cfg_main, 64) != 0)
        return "the interrupted TILECFG was not back after the handler";
    if (memcmp(across_tile_back, across_tile_main, sizeof across_tile_main) != 0)
        return "the interrupted tile data was not back after the handler";
    return NULL;
}

#endif
