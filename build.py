"""Build the private C extension ``pyamx._native`` with cffi (API mode, out of line).

``python build.py`` builds it in place (``pyamx/_native*.so``) for
development; ``pip install .`` builds it through setup.py's
``cffi_modules=["build.py:ffibuilder"]``.

The C API is declared once, in csrc/pyamx.h, and fed whole to cdef(); every
csrc/*.c file is compiled, so a new source file joins by existing. Whether
the AMX kernels are compiled in is decided here by test-compiling the AMX
target attributes and intrinsics with the compiler that will build the
module: GCC >= 11 and clang >= 12 on x86-64 pass; anything else builds the
module without kernels (detection still works and says so). Building never
needs AMX hardware.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
MODULE = "pyamx._native"

# Forces a build without kernels, to exercise that configuration on any machine.
DISABLE_ENV = "PYAMX_DISABLE_AMX_KERNELS"

_AMX_TEST_SOURCE = r"""
#include <immintrin.h>
#if !defined(__x86_64__) || !defined(__linux__)
#error "AMX kernels are built for x86-64 Linux only"
#endif
__attribute__((target("amx-tile,amx-bf16"))) void pyamx_probe_bf16(void *p, long s)
{ _tile_loadd(1, p, s); _tile_dpbf16ps(0, 1, 2); _tile_stored(0, p, s); _tile_release(); }
__attribute__((target("amx-tile,amx-int8"))) void pyamx_probe_int8(void)
{ _tile_dpbssd(0, 1, 2); _tile_dpbuud(3, 4, 5); }
__attribute__((target("amx-tile"))) void pyamx_probe_cfg(void *p)
{ _tile_loadconfig(p); _tile_storeconfig(p); _tile_stream_loadd(0, p, 64); _tile_zero(0); }
"""


def read_version() -> str:
    """The package version, from pyamx/_version.py (the single source)."""
    text = (HERE / "pyamx" / "_version.py").read_text(encoding="utf-8")
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.M)
    if not match:
        raise RuntimeError("pyamx/_version.py does not define __version__")
    return match.group(1)


def cdef_text(header: Path = CSRC / "pyamx.h") -> str:
    """The header without preprocessor lines: what cffi's cdef() can parse.

    A local header it includes with quotes (csrc/pyamx_ops.h, shared by
    both modules) is inlined in its place; system headers are not.
    """
    out = []
    for line in header.read_text(encoding="utf-8").splitlines():
        included = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if included:
            out.append(cdef_text((header.parent / included.group(1)).resolve()))
        elif not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out)


def c_sources() -> list[str]:
    """Every csrc/*.c file, sorted, relative to this directory when possible.

    setuptools wants relative source paths; cffi's in-place compile runs in
    its own temporary directory and needs absolute ones, so main() asks for
    those.
    """
    return [str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))]


def _new_compiler():
    import setuptools  # noqa: F401  (installs setuptools' distutils)
    from distutils.ccompiler import new_compiler
    from distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    return compiler


def amx_kernels_supported() -> tuple[bool, str]:
    """Test-compile the AMX intrinsics; ``(supported, why)``."""
    if os.environ.get(DISABLE_ENV) == "1":
        return False, f"{DISABLE_ENV}=1"
    tmp = tempfile.mkdtemp(prefix="pyamx-amx-test-")
    try:
        src = Path(tmp) / "amx_test.c"
        src.write_text(_AMX_TEST_SOURCE, encoding="utf-8")
        compiler = _new_compiler()
        # The compiler's diagnostics are expected on old toolchains; keep the
        # build log readable by collecting them instead of printing.
        with open(Path(tmp) / "log", "w") as log:
            stdout, stderr = os.dup(1), os.dup(2)
            try:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                compiler.compile([str(src)], output_dir=tmp)
            finally:
                os.dup2(stdout, 1)
                os.dup2(stderr, 2)
                os.close(stdout)
                os.close(stderr)
        return True, "the compiler accepts the AMX target attributes and intrinsics"
    except Exception as exc:  # any failure means: build without kernels
        log_path = Path(tmp) / "log"
        detail = log_path.read_text(errors="replace").strip().splitlines()[:3] if log_path.exists() else []
        return False, f"test compile failed ({type(exc).__name__}): {' | '.join(detail) or exc}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_ffibuilder(absolute_paths: bool = False) -> FFI:
    """The cffi builder of ``pyamx._native``; prints whether the kernels are in."""
    version = read_version()
    have_amx, why = amx_kernels_supported()
    state = "WITH" if have_amx else "WITHOUT"
    print(f"pyamx build: compiling pyamx._native {version} {state} the AMX kernels ({why})", file=sys.stderr)
    macros = [("PYAMX_VERSION", f'"{version}"')]
    if have_amx:
        macros.append(("PYAMX_HAVE_AMX", "1"))
    sources = c_sources()
    include = "csrc"
    if absolute_paths:
        sources = [str(HERE / s) for s in sources]
        include = str(CSRC)
    builder = FFI()
    # The compiled emulator engine keeps its API in its own header (csrc/engine.h).
    builder.cdef(cdef_text() + "\n" + cdef_text(CSRC / "engine.h"))
    builder.set_source(
        MODULE,
        '#include "pyamx.h"\n#include "engine.h"\n',
        sources=sources,
        include_dirs=[include],
        define_macros=macros,
        extra_compile_args=["-O2", "-std=gnu11", "-pthread"] if os.name != "nt" else [],
        extra_link_args=["-pthread"] if os.name != "nt" else [],
    )
    return builder


TRAP_MODULE = "pyamx._trap"
TRAP_SRC = CSRC / "trap"


def trap_supported() -> bool:
    """The trap mode (pyamx._trap) exists for x86-64 Linux only; elsewhere it is not built."""
    import platform

    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


def trap_c_sources() -> list[str]:
    """Every csrc/trap/*.c file, sorted, relative to this directory (as c_sources())."""
    return [str(p.relative_to(HERE)) for p in sorted(TRAP_SRC.glob("*.c"))]


def make_trap_ffibuilder(absolute_paths: bool = False) -> FFI:
    """The cffi builder of ``pyamx._trap`` (csrc/trap/*.c, API in csrc/trap/trap.h).

    It never executes a tile instruction, so any C compiler for x86-64 Linux
    builds it; setup.py lists it on the same condition as :func:`trap_supported`.
    """
    sources = trap_c_sources()
    include = "csrc/trap"
    if absolute_paths:
        sources = [str(HERE / s) for s in sources]
        include = str(TRAP_SRC)
    builder = FFI()
    builder.cdef(cdef_text(TRAP_SRC / "trap.h"))
    builder.set_source(
        TRAP_MODULE,
        '#include "trap.h"\n',
        sources=sources,
        include_dirs=[include],
        define_macros=[("PYAMX_VERSION", f'"{read_version()}"')],
        extra_compile_args=["-O2", "-std=gnu11", "-pthread"],  # the guard starts a thread
        extra_link_args=["-pthread"],
        depends=[str(p) for p in sorted(CSRC.glob("*.h")) + sorted(TRAP_SRC.glob("*.h"))],
    )
    return builder


PRELOAD_MODULE = "pyamx._amxpreload"


def preload_extension():
    """The library ``pyamx run`` preloads into programs (csrc/trap/*.c + csrc/preload/*.c).

    A plain shared library that links no Python (it is LD_PRELOADed into
    any program), built as a setuptools Extension only so that it ships in
    the wheel; it is never imported. x86-64 Linux only, like the trap.
    """
    from setuptools import Extension

    sources = trap_c_sources() + [str(p.relative_to(HERE)) for p in sorted((CSRC / "preload").glob("*.c"))]
    return Extension(
        PRELOAD_MODULE,
        sources=sources,
        include_dirs=["csrc/trap"],
        define_macros=[("PYAMX_VERSION", f'"{read_version()}"')],
        # hidden: the trap's functions stay private to the preload, so a
        # Python program that also loads pyamx._trap keeps two separate copies.
        extra_compile_args=["-O2", "-std=gnu11", "-pthread", "-fvisibility=hidden"],
        extra_link_args=["-pthread", "-ldl"],
        depends=[str(p) for p in sorted(CSRC.glob("*.h")) + sorted(TRAP_SRC.glob("*.h"))],
        py_limited_api=True,
    )


def _build_preload_in_place() -> None:
    """Compile and link the preload library into pyamx/ (what setup.py's Extension does)."""
    ext = preload_extension()
    compiler = _new_compiler()
    objdir = HERE / "build" / "preload"
    objdir.mkdir(parents=True, exist_ok=True)
    objects = compiler.compile([str(HERE / s) for s in ext.sources], output_dir=str(objdir),
                               macros=ext.define_macros, include_dirs=[str(HERE / d) for d in ext.include_dirs],
                               extra_postargs=ext.extra_compile_args)
    for stale in (HERE / "pyamx").glob("_amxpreload*.so"):
        stale.unlink()
    target = HERE / "pyamx" / "_amxpreload.abi3.so"
    compiler.link_shared_object(objects, str(target), extra_postargs=ext.extra_link_args)
    print(f"pyamx build: wrote {target.relative_to(HERE)}", file=sys.stderr)


def _compile_in_place(builder: FFI, stem: str) -> None:
    tmpdir = HERE / "build" / "cffi"
    tmpdir.mkdir(parents=True, exist_ok=True)
    built = Path(builder.compile(tmpdir=str(tmpdir), verbose=False))
    target = HERE / "pyamx" / built.name
    for stale in (HERE / "pyamx").glob(f"{stem}*.so"):
        stale.unlink()
    shutil.copy2(built, target)
    print(f"pyamx build: wrote {target.relative_to(HERE)}", file=sys.stderr)


def main() -> None:
    """Build in place: the modules land in pyamx/, the intermediates in build/."""
    _compile_in_place(make_ffibuilder(absolute_paths=True), "_native")
    if trap_supported():
        _compile_in_place(make_trap_ffibuilder(absolute_paths=True), "_trap")
        _build_preload_in_place()


# cffi_modules=["build.py:ffibuilder"] calls this when it is not an FFI, so
# importing this file (tests do) compiles nothing.
ffibuilder = make_ffibuilder
trap_ffibuilder = make_trap_ffibuilder

if __name__ == "__main__":
    main()
