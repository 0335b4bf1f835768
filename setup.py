"""setuptools entry point: builds pyamx._native from build.py's cffi builder.

The extension is optional. Without a working C compiler the package still
installs (the emulator is pure Python) and a loud warning says so, unless
PYAMX_REQUIRE_EXTENSION=1, which turns that into a build failure (CI, wheels).
"""

import os
import platform
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

REQUIRE_ENV = "PYAMX_REQUIRE_EXTENSION"


def _require_extension() -> bool:
    value = os.environ.get(REQUIRE_ENV, "")
    if value not in ("", "0", "1"):
        raise SystemExit(f"{REQUIRE_ENV} must be 0 or 1, not {value!r}")
    return value == "1"


class OptionalBuildExt(build_ext):
    """build_ext that lets the package install without its C extension when allowed."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all fails before build_extension
            self._give_up(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._give_up(exc, ext.name)

    def _give_up(self, exc, name="pyamx._native"):
        if _require_extension():
            raise exc
        bar = "*" * 78
        print(
            f"\n{bar}\nWARNING: building the C extension {name} failed:\n  {type(exc).__name__}: {exc}\n"
            "pyamx installs WITHOUT its native AMX backend; the bit-exact emulator still works.\n"
            "Install a C compiler (GCC >= 11 or clang >= 12 for the AMX kernels) and reinstall,\n"
            f"or set {REQUIRE_ENV}=1 to make this a build error.\n{bar}\n",
            file=sys.stderr,
        )


def _cffi_modules():
    modules = ["build.py:ffibuilder"]
    # The trap mode (pyamx._trap) exists for x86-64 Linux only.
    if sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64"):
        modules.append("build.py:trap_ffibuilder")
    return modules


def _ext_modules():
    # pyamx run's preload library (a plain shared object, never imported): with the trap.
    if len(_cffi_modules()) > 1:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from build import preload_extension

        return [preload_extension()]
    return []


setup(cffi_modules=_cffi_modules(), ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
