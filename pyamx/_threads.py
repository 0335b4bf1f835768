"""``threads=``: checked and defaulted here, for every pyamx function that takes it.

The compiled engines, the native matmul kernels, the tile-layout packing and the array
conversions run on worker threads. What a caller may pass (:func:`check`) and what ``None``
means (:func:`default`) are decided in this one module; the public entries (``pyamx.matmul``,
``pyamx.pack``, :class:`pyamx.engine.Engine`'s ``dot`` and ``matmul``) call :func:`check` once,
and what they pass down is used as it is. The C entries keep their own range checks: a caller
can reach them through the extension's ``lib`` directly.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from . import _env as env_parser
from .errors import EnvironmentVariableError

ENV_VAR = env_parser.ENGINE_THREADS
#: more threads than this never help (the C side also caps by work); it keeps any int within C's
#: int, and it is the worker pool's size (csrc/pool.c, PYAMX_MATMUL_MAX_THREADS)
MAX_THREADS = 256


def _usable_cpus() -> int:
    """The CPUs this process may run on (affinity and cpusets count, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


CPU_COUNT = _usable_cpus()  # read once: it costs microseconds per call
# PYAMX_ENGINE_THREADS is read on first use and then kept (as PYAMX_BACKEND is): a lookup per
# call would cost a tenth of a one-instruction call. pyamx.engine.reset_environment() forgets it.
_kept: list[int] = []


def check(threads: object, fn: str = "threads") -> Optional[int]:
    """``threads=`` as every pyamx function takes it: None, or an integer from 1 to :data:`MAX_THREADS`
    (returned as an int); ValueError naming ``fn`` otherwise. More is refused rather than capped:
    a caller who asked for 1000 threads would otherwise be told nothing of running 256."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"{fn}: threads must be None or an integer from 1 to {MAX_THREADS}, not {threads!r}")
    if threads > MAX_THREADS:
        raise ValueError(f"{fn}: threads={int(threads)} is more than pyamx runs: at most {MAX_THREADS} "
                         f"(more never helps); pass a count from 1 to {MAX_THREADS}, or None for the default")
    return int(threads)


def read_default() -> int:
    """``PYAMX_ENGINE_THREADS`` (a positive integer) when set and not empty, else the usable CPUs.

    A machine with more CPUs than :data:`MAX_THREADS` gets that many; a variable asking for more
    is refused, as ``threads=`` is (:func:`check`).
    """
    value = env_parser.integer(ENV_VAR, CPU_COUNT, minimum=1, error=EnvironmentVariableError)
    if env_parser.raw(ENV_VAR) is not None and value > MAX_THREADS:
        raise EnvironmentVariableError(ENV_VAR, str(value),
                                       f"a decimal integer from 1 to {MAX_THREADS} (more never helps), "
                                       f"or empty/unset for the usable CPUs")
    return min(value, MAX_THREADS)


def default() -> int:
    """What ``threads=None`` means (:func:`read_default`), read once and kept until :func:`forget`:
    the one default of the engines, the native matmul and the packing."""
    if not _kept:
        _kept.append(read_default())
    return _kept[0]


def forget() -> None:
    """Read ``PYAMX_ENGINE_THREADS`` again on the next :func:`default`."""
    _kept.clear()
