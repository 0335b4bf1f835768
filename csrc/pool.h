/* The persistent worker pool (pool.c) of the native kernels and the compiled engines; not part of the Python API. */
#ifndef PYAMX_POOL_H
#define PYAMX_POOL_H

typedef void (*pyamx_pool_fn)(void *arg, int part);

/* fn(arg, part) once for every part in 0..parts-1, on the calling thread and
 * up to parts - 1 pool workers (created on first need), returning when all
 * have run. tiles: the parts execute tile instructions, so a worker first
 * claims its tile state (trap mode) and leaves its parts to the others when
 * it cannot. Never fails: without workers the caller runs every part. */
void pyamx_internal_pool_run(pyamx_pool_fn fn, void *arg, int parts, int tiles);

#endif
