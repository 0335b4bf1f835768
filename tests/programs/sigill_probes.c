/* CPU-feature probes, as libraries write them: a SIGILL handler, an
 * instruction that may not exist, and a way back with siglongjmp.
 *
 * Prints one line per probe. Run directly and under `pyamx run` (the trap
 * mode, or the complement mode on AMX silicon), the output must be the same:
 * the emulation's SIGILL handler hands every SIGILL that is not an
 * instruction it emulates to the program's handler, every time, including
 * after a handler that never returned (siglongjmp) and a SA_NODEFER handler
 * that faults inside itself. With --die it then executes ud2 without a
 * handler, which ends it; with --die-sent it raises SIGILL instead. tests/trap/test_sigill_probes.py runs it.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static sigjmp_buf escape;
static volatile sig_atomic_t depth, deepest;

static void leave(int sig)
{
    (void)sig;
    siglongjmp(escape, 1);
}

/* SA_NODEFER: the second ud2, inside the handler, re-enters it */
static void fault_inside(int sig)
{
    (void)sig;
    depth++;
    if (depth > deepest)
        deepest = depth;
    if (depth == 1)
        __asm__ volatile("ud2");
    siglongjmp(escape, 1);
}

/* A sent SIGILL from far deeper on the stack than the probes ran: a mark
 * the probes' jumps left behind must not make it look like a re-raise from
 * inside a handler. */
static __attribute__((noinline)) int raise_deep(int levels)
{
    volatile char frame[4096];
    frame[0] = (char)levels;
    if (levels > 0)
        return raise_deep(levels - 1) + frame[0];
    return raise(SIGILL);
}

static void install(void (*fn)(int), int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = flags;
    sigaction(SIGILL, &sa, NULL);
}

int main(int argc, char **argv)
{
    install(leave, 0);
    for (int i = 0; i < 5; i++) {
        if (sigsetjmp(escape, 1) == 0) {
            __asm__ volatile("ud2");
            printf("probe %d: no SIGILL\n", i);
        } else {
            printf("probe %d: SIGILL caught\n", i);
        }
    }
    if (sigsetjmp(escape, 1) == 0) {
        raise(SIGILL);
        printf("raised: returned\n");
    } else {
        printf("raised: SIGILL caught\n");
    }
    for (int levels = 1; levels <= 64; levels *= 4) {
        if (sigsetjmp(escape, 1) == 0) {
            raise_deep(levels);
            printf("raised %d KiB deeper: returned\n", 4 * levels);
        } else {
            printf("raised %d KiB deeper: SIGILL caught\n", 4 * levels);
        }
    }
    install(fault_inside, SA_NODEFER);
    depth = deepest = 0;
    if (sigsetjmp(escape, 1) == 0)
        __asm__ volatile("ud2");
    printf("nested fault: handler entered %d times\n", (int)deepest);
    install(leave, 0);
    if (sigsetjmp(escape, 1) == 0)
        __asm__ volatile("ud2");
    printf("after the nested fault: SIGILL caught\n");
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "--die") == 0) { /* no handler any more: ud2 ends the program */
        install(SIG_DFL, 0);
        __asm__ volatile("ud2");
    }
    if (argc > 1 && strcmp(argv[1], "--die-sent") == 0) { /* the same by a sent SIGILL: no instruction to name */
        install(SIG_DFL, 0);
        raise(SIGILL);
    }
    return 0;
}
