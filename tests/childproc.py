"""Where child Pythons of the tests find pyamx.

Children must import the very pyamx under test: the installed one in CI
(whose extension was built by pip), the source tree in a development run
with an in-place build. Running them with that directory first on
PYTHONPATH and as their working directory keeps ``-c``/``-m`` from picking up
an unbuilt ``pyamx/`` from the repository root instead.
"""

from __future__ import annotations

import os

import pyamx

PYAMX_HOME = os.path.dirname(os.path.dirname(os.path.abspath(pyamx.__file__)))


def child_env(base=None, drop=(), **extra) -> dict:
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    env["PYTHONPATH"] = PYAMX_HOME + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env
