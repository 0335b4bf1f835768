/* Signal-safe messages: the one line the handler writes to fd 2 when it
 * refuses an instruction, built in a stack buffer and written with write(2)
 * (no stdio, no malloc: the handler may have interrupted either).
 */
#include "base.h"

#include <unistd.h>

static int32_t g_verbose = 1;

void pyamx_trap_set_verbose(int32_t on) { __atomic_store_n(&g_verbose, on ? 1 : 0, __ATOMIC_RELAXED); }

void m_str(struct msg *m, const char *s)
{
    while (*s && m->n < sizeof(m->buf) - 1)
        m->buf[m->n++] = *s++;
}

void m_dec(struct msg *m, int64_t v)
{
    char tmp[24];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[k++] = '-';
    while (k && m->n < sizeof(m->buf) - 1)
        m->buf[m->n++] = tmp[--k];
}

void m_hex(struct msg *m, uint64_t v)
{
    char tmp[16];
    int k = 0;
    do {
        tmp[k++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    m_str(m, "0x");
    while (k && m->n < sizeof(m->buf) - 1)
        m->buf[m->n++] = tmp[--k];
}

void m_tile(struct msg *m, const char *what, int t)
{
    m_str(m, what);
    m_str(m, " tmm");
    m_dec(m, t);
}

void m_emit(struct msg *m)
{
    if (!__atomic_load_n(&g_verbose, __ATOMIC_RELAXED))
        return;
    m->buf[m->n++] = '\n';
    ssize_t r = write(2, m->buf, m->n);
    (void)r;
}
