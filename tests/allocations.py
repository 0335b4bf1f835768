"""What a call allocates through Python's allocators (numpy's arrays included), for the tests that
say a refused call copies nothing.

tracemalloc counts every thread's allocations, and a pytest-xdist worker has threads of its own
(execnet's I/O) that now and then allocate a few MiB while a test runs: a single measurement can
blame the call for them. The smallest peak of a few attempts cannot: a copy the call makes shows
in every attempt, background noise does not recur at the same moment.
"""

from __future__ import annotations

import tracemalloc
from typing import Callable


def smallest_peak(call: Callable[[], object], attempts: int = 3) -> int:
    """The smallest tracemalloc peak, in bytes, over ``attempts`` runs of ``call`` (which may raise:
    the tests call it for its refusal, and check the exception themselves)."""
    peaks = []
    for _ in range(attempts):
        tracemalloc.start()
        try:
            call()
        except Exception:  # noqa: BLE001 - the caller checks what was raised
            pass
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    return min(peaks)
