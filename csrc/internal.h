/* Declarations shared between pyamx's C files but kept out of the Python API
 * (pyamx.h is fed whole to cffi's cdef; this file is not). */
#ifndef PYAMX_INTERNAL_H
#define PYAMX_INTERNAL_H

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define PYAMX_X86_64_LINUX 1
#else
#define PYAMX_X86_64_LINUX 0
#endif

/* build.py defines PYAMX_HAVE_AMX=1 only after test-compiling the AMX
 * target attributes and intrinsics with this very compiler. */
#if !defined(PYAMX_HAVE_AMX) || !PYAMX_X86_64_LINUX
#undef PYAMX_HAVE_AMX
#define PYAMX_HAVE_AMX 0
#endif

/* Non-zero once permission was granted and a tile instruction was seen to
 * work (silicon), or the trap mode granted its emulated permission. */
int pyamx_internal_ready(void);

/* LDTILECFG + TILEZERO + TILERELEASE; only ever called in the forked child
 * of pyamx_probe_child(). */
void pyamx_internal_probe_tile_instruction(void);

#endif
