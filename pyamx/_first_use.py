"""The one lock that pyamx's one-time work holds, and that ``os.fork()`` waits for.

The first call in a process imports modules, runs detection and the native start (which may start
the trap mode's supervisor thread), loads the C extension and decides the backend: tens of milliseconds during
which Python's per-module import locks, and the C side's once-only mutexes, are held. A fork
from another thread in that window copies those locks, held, into a child where the thread that
would release them does not exist, and the child's first pyamx call waits forever.

So every such piece of work runs holding :data:`LOCK`, and an at-fork hook takes :data:`LOCK`
before the fork and releases it on both sides after: a fork waits for a first use in progress
to finish, and the child starts with nothing held. An ``RLock``, because that work nests (a lazy
import inside detection) and may itself fork (a forked probe runs under it). Standard library
only, and only what ``import pyamx`` loads anyway (``_thread``, not ``threading``): ``pyamx run``
starts in milliseconds.
"""

from __future__ import annotations

import _thread
import importlib
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (`pyamx run` loads this module)
if TYPE_CHECKING:
    from types import ModuleType

LOCK = _thread.RLock()


def _release() -> None:
    LOCK.release()


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork to wait for
    # In the child the forking thread is the only thread and still owns LOCK (same ident), so
    # the same release that the parent does leaves it free there too.
    os.register_at_fork(before=LOCK.acquire, after_in_parent=_release, after_in_child=_release)

_imported: set[str] = set()


def module(name: str, package: str | None = None) -> ModuleType:
    """``importlib.import_module(name, package)`` for a call's path: under :data:`LOCK` until it
    has been imported through here once, a set and a dictionary lookup after that."""
    full = name
    if name.startswith("."):  # one level up is not needed here
        if package is None:  # as importlib.import_module refuses it
            raise TypeError(f"the 'package' argument is required to perform a relative import for {name!r}")
        full = package + name
    loaded = sys.modules.get(full) if full in _imported else None
    if loaded is not None:
        return loaded
    with LOCK:
        loaded = importlib.import_module(full)
        _imported.add(full)
    return loaded
