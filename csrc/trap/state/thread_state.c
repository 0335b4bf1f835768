/* Per-thread emulated tile state.
 *
 * A fixed table of slots keyed by the kernel thread id, claimed with a
 * compare-and-swap.  Chosen over __thread because a __thread variable of
 * a dlopen'ed module is reached through __tls_get_addr, which may call
 * malloc on a thread's first access -- from inside a signal handler that
 * can deadlock on the malloc lock the interrupted code holds.  The table
 * needs no preparation, so a thread that never called into the bindings'
 * prepare step still works.  Slots are returned by a pthread key
 * destructor (armed by pyamx_trap_thread_prepare) and, when the table
 * fills, by reaping slots whose thread no longer exists.  fork() moves the
 * forking thread's slot to the child's thread with its tile data in the
 * init state (zero) and its TILECFG kept, as Linux does: fpu_clone()
 * copies only the non-dynamic xstate components, and XTILEDATA is the
 * dynamic one (the kernel selftest x86/amx.c checks that tile data does
 * not survive fork).  state_inherit_config() gives a new thread the same.
 */
#include "state.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SLOTS PYAMX_TRAP_MAX_THREADS

struct slot {
    int32_t tid; /* 0 = free; accessed with __atomic builtins */
    struct tile_state st;
    /* STATE_SAVE_AREAS states saved for handler frames (handler_frames.c).  Kept when
     * the slot changes hands, so the table bounds the memory; inherited
     * by a fork child like the rest of the slot (a child forked inside a
     * handler returns from it too). */
    struct tile_state *saves;
} __attribute__((aligned(64)));

static struct slot slots[MAX_SLOTS];
static pthread_key_t g_key;
static int32_t g_fork_tid;
static int32_t g_key_ready;
/* 1 in the complement mode: a slot's tile_state is scratch, loaded from the
 * signal frame for each instruction, not the thread's tiles. */
static int32_t g_scratch;

void state_set_scratch(int on) { __atomic_store_n(&g_scratch, on ? 1 : 0, __ATOMIC_RELEASE); }

int state_scratch(void) { return __atomic_load_n(&g_scratch, __ATOMIC_ACQUIRE); }

static int slot_find(int32_t tid)
{
    unsigned h = (unsigned)tid % MAX_SLOTS;
    for (unsigned n = 0; n < MAX_SLOTS; n++) {
        unsigned s = (h + n) % MAX_SLOTS;
        if (__atomic_load_n(&slots[s].tid, __ATOMIC_ACQUIRE) == tid)
            return (int)s;
    }
    return -1;
}

static int slot_claim(int32_t tid)
{
    unsigned h = (unsigned)tid % MAX_SLOTS;
    for (unsigned n = 0; n < MAX_SLOTS; n++) {
        unsigned s = (h + n) % MAX_SLOTS;
        int32_t expect = 0;
        if (__atomic_load_n(&slots[s].tid, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&slots[s].tid, &expect, tid, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            state_init(&slots[s].st);
            return (int)s;
        }
    }
    /* Full: take over the slot of a thread that has exited without its
     * destructor running (it never called pyamx_trap_thread_prepare). */
    pid_t pid = getpid();
    for (unsigned s = 0; s < MAX_SLOTS; s++) {
        int32_t old = __atomic_load_n(&slots[s].tid, __ATOMIC_ACQUIRE);
        if (old == 0 || old == tid)
            continue;
        if (syscall(SYS_tgkill, pid, old, 0) == -1 && errno == ESRCH &&
            __atomic_compare_exchange_n(&slots[s].tid, &old, tid, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            state_init(&slots[s].st);
            return (int)s;
        }
    }
    return -1;
}

struct tile_state *state_for(int32_t tid)
{
    int s = slot_find(tid);
    if (s < 0)
        s = slot_claim(tid);
    return s < 0 ? NULL : &slots[s].st;
}

/* A prepared thread's key value is its own slot for the thread's whole
 * life: slots are released only by that thread's own destructor (glibc
 * clears the value first), re-keyed to the same thread by the fork
 * handler, and reaped only when their tid no longer exists.  Reading it
 * is a load from the thread descriptor (keys below 32 live there; a
 * higher key is read from an array pthread_setspecific allocated from
 * normal context).
 *
 * The slot must also be this task's: a vfork child, or a clone(CLONE_VM)
 * child without a TLS of its own, reads its creator's thread descriptor,
 * so the key names the creator's slot.  On Linux such a task has tile
 * state of its own that starts with the creator's TILECFG and tile data in
 * the init state (measured on Sapphire Rapids, docs/run.md), so it gets a
 * slot of its own, keyed by its tid, started that way.  The tid costs one
 * gettid, a small part of the signal's round trip. */
struct tile_state *state_current(void)
{
    int32_t tid = trap_tid();
    int creator = -1;
    if (__atomic_load_n(&g_key_ready, __ATOMIC_ACQUIRE)) {
        uintptr_t v = (uintptr_t)pthread_getspecific(g_key);
        if (v >= 1 && v <= MAX_SLOTS) {
            int32_t owner = __atomic_load_n(&slots[v - 1].tid, __ATOMIC_ACQUIRE);
            if (owner == tid)
                return &slots[v - 1].st;
            if (owner != 0)
                creator = (int)(v - 1);
        }
    }
    int s = slot_find(tid);
    if (s >= 0)
        return &slots[s].st;
    s = slot_claim(tid);
    if (s < 0)
        return NULL;
    if (creator >= 0) {
        const struct tile_state *from = &slots[creator].st;
        struct tile_state *st = &slots[s].st;
        st->palette = from->palette;
        st->start_row = from->start_row;
        memcpy(st->rows, from->rows, sizeof st->rows);
        memcpy(st->colsb, from->colsb, sizeof st->colsb);
    }
    return &slots[s].st;
}

struct tile_state *state_save_area(struct tile_state *st, int index)
{
    if (st == NULL || index < 0 || index >= STATE_SAVE_AREAS)
        return NULL;
    struct slot *sl = (struct slot *)(void *)((char *)st - offsetof(struct slot, st));
    struct tile_state *saves = __atomic_load_n(&sl->saves, __ATOMIC_ACQUIRE);
    if (saves == NULL) {
        /* mmap is a plain system call: safe here, where malloc is not. */
        void *p = mmap(NULL, STATE_SAVE_AREAS * sizeof *saves, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        saves = p;
        __atomic_store_n(&sl->saves, saves, __ATOMIC_RELEASE);
    }
    return &saves[index];
}

static void slot_release_destructor(void *v)
{
    int s = (int)((uintptr_t)v - 1);
    if (s < 0 || s >= MAX_SLOTS)
        return;
    int32_t tid = trap_tid();
    int32_t expect = tid;
    /* A fork child can run this with a different tid than the parent
     * thread had; the slot then belongs to whoever the tid says. */
    if (__atomic_load_n(&slots[s].tid, __ATOMIC_ACQUIRE) == tid) {
        state_init(&slots[s].st);
        __atomic_compare_exchange_n(&slots[s].tid, &expect, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
}

void state_forget_current(void)
{
    int32_t tid = trap_tid();
    int s = slot_find(tid);
    if (__atomic_load_n(&g_key_ready, __ATOMIC_ACQUIRE))
        pthread_setspecific(g_key, NULL);
    if (s >= 0) {
        int32_t expect = tid;
        state_init(&slots[s].st);
        __atomic_compare_exchange_n(&slots[s].tid, &expect, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    }
}

static void atfork_prepare(void) { __atomic_store_n(&g_fork_tid, trap_tid(), __ATOMIC_RELAXED); }

static void atfork_child(void)
{
    int32_t parent = __atomic_load_n(&g_fork_tid, __ATOMIC_RELAXED);
    int32_t me = trap_tid();
    for (unsigned s = 0; s < MAX_SLOTS; s++) {
        int32_t t = __atomic_load_n(&slots[s].tid, __ATOMIC_RELAXED);
        if (t == 0)
            continue;
        if (t == parent)
            memset(slots[s].st.tiles, 0, sizeof slots[s].st.tiles);
        __atomic_store_n(&slots[s].tid, t == parent ? me : 0, __ATOMIC_RELAXED);
    }
    /* The child's only thread keeps the parent thread's key value, and
     * the slot it names is now keyed by the child's tid, so the destructor
     * still finds it. */
}

void state_setup_once(void)
{
    if (pthread_key_create(&g_key, slot_release_destructor) == 0)
        __atomic_store_n(&g_key_ready, 1, __ATOMIC_RELEASE);
    pthread_atfork(atfork_prepare, NULL, atfork_child);
}

int32_t state_prepare_current(int *claimed)
{
    int32_t tid = trap_tid();
    int s = slot_find(tid);
    *claimed = 0;
    if (s < 0 && (s = slot_claim(tid)) >= 0)
        *claimed = 1;
    if (s < 0)
        return PYAMX_TRAP_E_TABLE_FULL;
    if (__atomic_load_n(&g_key_ready, __ATOMIC_ACQUIRE) &&
        pthread_getspecific(g_key) != (void *)(uintptr_t)(s + 1))
        pthread_setspecific(g_key, (void *)(uintptr_t)(s + 1));
    return PYAMX_TRAP_OK;
}

int32_t pyamx_trap_thread_state(uint8_t *cfg_out, uint8_t *tiles_out)
{
    int s = slot_find(trap_tid());
    if (cfg_out)
        memset(cfg_out, 0, 64);
    if (tiles_out)
        memset(tiles_out, 0, 8192);
    if (s < 0)
        return 0;
    const struct tile_state *st = &slots[s].st;
    if (cfg_out)
        state_config_to_bytes(st, cfg_out);
    if (tiles_out)
        memcpy(tiles_out, st->tiles, 8192);
    return 1;
}

int32_t pyamx_trap_slots_in_use(void)
{
    int32_t n = 0;
    for (unsigned s = 0; s < MAX_SLOTS; s++)
        n += __atomic_load_n(&slots[s].tid, __ATOMIC_RELAXED) != 0;
    return n;
}

int32_t state_inherit_config(const uint8_t *cfg)
{
    struct tile_state *st = state_for(trap_tid());
    if (st == NULL)
        return PYAMX_TRAP_E_TABLE_FULL;
    state_init(st);
    if (cfg[0])
        state_config_from_bytes(st, cfg);
    return PYAMX_TRAP_OK;
}
