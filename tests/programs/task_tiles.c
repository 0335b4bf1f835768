/* Tile state is per task, as Linux keeps it: a vfork child and a
 * clone(CLONE_VM) child that shares its creator's TLS each start with the
 * creator's TILECFG and tile data in the init state, and what they load
 * leaves the creator's configuration and tiles as they were.
 *
 * Measured on Sapphire Rapids silicon (docs/run.md); under `pyamx run`'s
 * full trap mode the emulated state used to follow the creator's thread
 * descriptor, so a vfork child's LDTILECFG replaced its parent's.
 * Prints one line per case, "CASE ok" or "CASE FAIL: why"; exit status 0
 * when every case is ok. */
#define _GNU_SOURCE 1
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case_kit.h"

static uint8_t cfg_parent[64] __attribute__((aligned(64)));
static uint8_t cfg_child[64] __attribute__((aligned(64)));
static uint8_t pattern[1024], seen_cfg[64] __attribute__((aligned(64)));
static uint8_t seen_tile[1024];

static void configure(uint8_t *cfg, int rows, int colsb)
{
    memset(cfg, 0, 64);
    cfg[0] = 1;
    cfg[16] = (uint8_t)colsb;
    cfg[48] = (uint8_t)rows;
}

/* In the child: what it starts with, then a configuration of its own. */
static void child_work(void)
{
    sttilecfg(seen_cfg);
    store0(seen_tile, 64);
    ldtilecfg(cfg_child);
    load0(pattern, 16);
}

static int clone_child(void *arg)
{
    (void)arg;
    child_work();
    return 0;
}

static int check(const char *name)
{
    uint8_t cfg_now[64] __attribute__((aligned(64)));
    static uint8_t tile_now[1024], zero[1024];
    const char *why = NULL;
    sttilecfg(cfg_now);
    store0(tile_now, 64);
    if (memcmp(seen_cfg, cfg_parent, 64) != 0)
        why = "the child did not start with its creator's TILECFG";
    else if (memcmp(seen_tile, zero, sizeof zero) != 0)
        why = "the child did not start with tile data in the init state";
    else if (memcmp(cfg_now, cfg_parent, 64) != 0)
        why = "the child's LDTILECFG changed its creator's TILECFG";
    else if (memcmp(tile_now, pattern, sizeof pattern) != 0)
        why = "the child changed its creator's tile data";
    return report(name, why);
}

int main(void)
{
    request_tile_permission();
    for (int i = 0; i < 1024; i++)
        pattern[i] = (uint8_t)(i * 7 + 1);
    configure(cfg_parent, 16, 64);
    configure(cfg_child, 4, 16);
    int failed = 0;

    ldtilecfg(cfg_parent);
    load0(pattern, 64);
    memset(seen_cfg, 0xff, sizeof seen_cfg);
    memset(seen_tile, 0xff, sizeof seen_tile);
    pid_t pid = vfork();
    if (pid == 0) {
        child_work();
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    failed |= check("vfork");

    static uint8_t stack[256 * 1024] __attribute__((aligned(16)));
    ldtilecfg(cfg_parent);
    load0(pattern, 64);
    memset(seen_cfg, 0xff, sizeof seen_cfg);
    memset(seen_tile, 0xff, sizeof seen_tile);
    pid = clone(clone_child, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
    if (pid < 0) {
        perror("clone");
        return 2;
    }
    waitpid(pid, NULL, 0);
    failed |= check("clone_vm");
    fflush(stdout);
    return failed;
}
