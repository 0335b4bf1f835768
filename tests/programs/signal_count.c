/* Counts the SIGINTs and SIGTERMs it gets in about two seconds, then prints the counts.
 *
 * tests/trap/test_run_signals.py runs it under `pyamx run` in a pseudo-terminal: a Ctrl-C typed there
 * goes to the whole foreground process group, the program included, so pyamx run must not
 * forward it again; a SIGTERM sent to pyamx run itself must be forwarded, once.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t ints, terms;
static void on_int(int s) { (void)s; ints++; }
static void on_term(int s) { (void)s; terms++; }
int main(void) {
    signal(SIGINT, on_int); signal(SIGTERM, on_term);
    printf("ready\n"); fflush(stdout);
    for (int i = 0; i < 40 && !(ints && terms); i++) usleep(50000);
    usleep(200000);
    printf("SIGINT %d SIGTERM %d\n", (int)ints, (int)terms); fflush(stdout);
    return 0;
}
