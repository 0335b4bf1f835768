/* The persistent worker pool of the native kernels (matmul_amx.c, pack_b.c)
 * and the compiled emulator engines (engine.c, engine_fp8.c): one set of
 * threads for every multi-threaded call pyamx makes.
 *
 * A pthread_create per call cost ~20 us on silicon, a visible share of a
 * small product, so the workers are created once (lazily, as many as the
 * largest call asked for) and then wait on a condition variable. Callers say
 * whether their parts run tile code (`tiles`): only those make a worker claim
 * its tile state first (trap mode); the engines' parts do not.
 *
 * A call is a number of parts; the caller and the woken workers *claim*
 * parts from one counter, so a worker the scheduler has not run yet never
 * delays the call: the caller takes its parts. Parts are independent and
 * each runs exactly once, so who ran which never changes a result.
 *
 * One call uses the pool at a time; a call that finds it busy (another
 * Python thread's product) runs its parts on its own thread rather than
 * waiting for the other call to end.
 *
 * fork(): only the forking thread exists in the child, so the child forgets
 * the workers (pthread_atfork) and creates new ones on its next call.
 * pyamx_pool_shutdown() stops and joins the workers (Python's atexit calls
 * it, so no worker is inside the library while the interpreter finalizes).
 */
#include "pyamx.h"
#include "internal.h"
#include "pool.h"

#if !defined(_WIN32)
#include <pthread.h>
#include <signal.h>

struct task {
    pyamx_pool_fn fn;
    void *arg;
    int parts;
    int tiles;     /* workers run tile code: each claims its tile state first */
    int next;      /* atomic: the next unclaimed part */
    int finished;  /* parts run (under g_lock) */
    int active;    /* workers holding this task (under g_lock) */
};

static pthread_mutex_t g_call = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_t g_tids[PYAMX_MATMUL_MAX_THREADS];
static int g_workers;          /* created and not joined (under g_call) */
static unsigned long g_generation; /* bumped per task and at shutdown (under g_lock) */
static struct task *g_task;    /* the task being run, or NULL (under g_lock) */
static int g_stop;             /* under g_lock */

static int run_claimed(struct task *t)
{
    int ran = 0;
    for (;;) {
        int part = __atomic_fetch_add(&t->next, 1, __ATOMIC_ACQ_REL);
        if (part >= t->parts)
            return ran;
        t->fn(t->arg, part);
        ran++;
    }
}

static void *worker_main(void *unused)
{
    (void)unused;
    /* 0, not the current generation: a worker created for a call that has
     * already been posted joins it. */
    unsigned long seen = 0;
    pthread_mutex_lock(&g_lock);
    for (;;) {
        while (!g_stop && g_generation == seen)
            pthread_cond_wait(&g_wake, &g_lock);
        if (g_stop)
            break;
        seen = g_generation;
        struct task *t = g_task;
        if (!t)
            continue;
        t->active++;
        pthread_mutex_unlock(&g_lock);
        /* A worker that cannot hold tile state (the trap's table is full)
         * claims nothing: the caller runs those parts. */
        int ran = t->tiles && pyamx_internal_thread_prepare() != 0 ? 0 : run_claimed(t);
        pthread_mutex_lock(&g_lock);
        t->finished += ran;
        t->active--;
        pthread_cond_broadcast(&g_done);
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

static void before_fork(void)
{
    pthread_mutex_lock(&g_call);
    pthread_mutex_lock(&g_lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_call);
}

static void after_fork_child(void)
{
    /* The workers did not come along: forget them (their stacks are lost
     * with the parent's address space copy, which is fine). */
    g_workers = 0;
    g_task = 0;
    g_stop = 0;
    pthread_cond_init(&g_wake, 0);
    pthread_cond_init(&g_done, 0);
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_call);
}

static void register_fork_handlers(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

/* Up to `wanted` workers in all (under g_call). Workers take no
 * asynchronous signals, so SIGINT and friends keep reaching Python's
 * threads; the synchronous ones (the trap mode's SIGILL, a fault) stay
 * deliverable. */
static void grow(int wanted)
{
    if (wanted > PYAMX_MATMUL_MAX_THREADS)
        wanted = PYAMX_MATMUL_MAX_THREADS;
    if (g_workers >= wanted)
        return;
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGTRAP);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (g_workers < wanted && pthread_create(&g_tids[g_workers], 0, worker_main, 0) == 0)
        g_workers++;
    pthread_sigmask(SIG_SETMASK, &old, 0);
}

void pyamx_internal_pool_run(pyamx_pool_fn fn, void *arg, int parts, int tiles)
{
    struct task t = {fn, arg, parts, tiles, 0, 0, 0};
    if (parts <= 1 || pthread_mutex_trylock(&g_call) != 0) {
        run_claimed(&t);
        return;
    }
    pthread_once(&g_once, register_fork_handlers);
    grow(parts - 1);
    pthread_mutex_lock(&g_lock);
    g_task = &t;
    g_generation++;
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_lock);
    int ran = run_claimed(&t);
    pthread_mutex_lock(&g_lock);
    t.finished += ran;
    while (t.finished < parts || t.active > 0)
        pthread_cond_wait(&g_done, &g_lock);
    g_task = 0;
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_call);
}

int pyamx_pool_workers(void)
{
    pthread_mutex_lock(&g_call);
    int n = g_workers;
    pthread_mutex_unlock(&g_call);
    return n;
}

int pyamx_pool_shutdown(void)
{
    /* A call in flight (a daemon thread's, at exit) keeps its workers. */
    if (pthread_mutex_trylock(&g_call) != 0)
        return -1;
    pthread_mutex_lock(&g_lock);
    g_stop = 1;
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < g_workers; i++)
        pthread_join(g_tids[i], 0);
    int joined = g_workers;
    g_workers = 0;
    pthread_mutex_lock(&g_lock);
    g_stop = 0;
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_call);
    return joined;
}

#else /* no pthreads: every part on the calling thread */

void pyamx_internal_pool_run(pyamx_pool_fn fn, void *arg, int parts, int tiles)
{
    (void)tiles;
    for (int part = 0; part < parts; part++)
        fn(arg, part);
}

int pyamx_pool_workers(void) { return 0; }
int pyamx_pool_shutdown(void) { return 0; }

#endif
