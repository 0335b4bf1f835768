/* A tile state's reset and its configuration as the 64-byte LDTILECFG /
 * STTILECFG image: pure, shared by the instruction semantics, the
 * per-thread table and the complement mode. */
#include "internal.h"

#include <string.h>

void state_init(struct tile_state *st)
{
    memset(st, 0, sizeof(*st));
}

void state_config_to_bytes(const struct tile_state *st, uint8_t cfg[64])
{
    memset(cfg, 0, 64);
    if (!st->palette)
        return;
    cfg[0] = st->palette;
    cfg[1] = st->start_row;
    for (int t = 0; t < 8; t++) {
        cfg[16 + 2 * t] = (uint8_t)(st->colsb[t] & 0xFF);
        cfg[17 + 2 * t] = (uint8_t)(st->colsb[t] >> 8);
        cfg[48 + t] = st->rows[t];
    }
}

void state_config_from_bytes(struct tile_state *st, const uint8_t cfg[64])
{
    st->palette = cfg[0];
    st->start_row = cfg[1];
    for (int t = 0; t < 8; t++) {
        st->colsb[t] = (uint16_t)(cfg[16 + 2 * t] | (cfg[17 + 2 * t] << 8));
        st->rows[t] = cfg[48 + t];
    }
}
