"""setuptools entry point: the C extension modules and their build commands come from build.py.

The extension is optional. Without a working C compiler the package installs
as pure Python (a py3-none-any wheel), records why in pyamx/_buildinfo.py
(``pyamx info`` shows it) and prints a warning, unless
PYAMX_REQUIRE_EXTENSION=1, which turns that into a build failure (CI, wheels).
"""

import importlib.util
import os

from setuptools import setup


def _load_build_script():
    # Loaded by path under its own name: a `build` package on sys.path must not shadow it, nor it the package.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build.py")
    spec = importlib.util.spec_from_file_location("pyamx_build_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup(**_load_build_script().setuptools_options())
