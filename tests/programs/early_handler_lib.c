/* A library whose constructor installs signal handlers, linked into
 * early_handler.c: the loader runs its constructor before the preload's
 * (dependencies first, and the preload is nobody's dependency), so under
 * `pyamx run` these handlers exist before the preload's constructor
 * runs.  It records whether the preload's trap was in place yet. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <signal.h>
#include <string.h>

void early_plain_handler(int sig);
void early_info_handler(int sig, siginfo_t *si, void *uc);

/* 0: no preload in the process; 1: its trap was not installed yet; 2: it was. */
int early_preload_state;

__attribute__((constructor)) static void install_early(void)
{
    int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "pyamx_preload_active");
    early_preload_state = active == NULL ? 0 : active() ? 2 : 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = early_plain_handler;
    sa.sa_flags = SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGUSR1, &sa, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = early_info_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
}
