"""A long compiled-engine call can be interrupted (issue 19).

A SIGINT sent 0.2 s into a call that would run for seconds must raise
KeyboardInterrupt well before the call could have ended by itself, after the
engine's threads have stopped (the process then burns no more CPU), with the
caller's ``c`` untouched. The portable engine runs the shared driver
(csrc/engine.c) at its slowest, so a few seconds of work fit in little memory;
NaN operands take the exact per-element path, which polls on its own.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import pyamx
from pyamx.emulator import engine as eng

if not hasattr(signal, "pthread_kill"):
    pytest.skip("needs POSIX signals", allow_module_level=True)

SIGNAL_AFTER_S = 0.2
BOUND_S = 1.0  # generous: the engine polls every few ms, the caller every 20 ms


@pytest.fixture
def portable():
    available = {name: (ok, why) for name, ok, why in eng.available_engines()}
    if not available["portable"][0]:
        pytest.skip(f"the portable engine cannot run here: {available['portable'][1]}")
    return eng.resolve("portable")


def _fp16(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


def _interrupt_after(seconds, *, process_wide):
    """SIGINT to this process (the OS picks a thread) or to the main thread, ``seconds`` from now."""
    main = threading.main_thread().ident
    sent = {}

    def fire():
        sent["at"] = time.perf_counter()
        if process_wide:
            os.kill(os.getpid(), signal.SIGINT)
        else:
            signal.pthread_kill(main, signal.SIGINT)

    timer = threading.Timer(seconds, fire)
    timer.start()
    return timer, sent


def _busy_cpu_s(window_s=0.3):
    """CPU seconds this process spends in ``window_s`` of sleep: about 0 once every engine thread stopped."""
    start = time.process_time()
    time.sleep(window_s)
    return time.process_time() - start


def _assert_interrupted(call, c):
    c_before = c.copy()
    timer, sent = _interrupt_after(SIGNAL_AFTER_S, process_wide=True)
    start = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
        arrived = time.perf_counter()
    finally:
        timer.cancel()
    assert "at" in sent, f"the call ended after {arrived - start:.2f} s, before the signal: make it longer"
    late = arrived - sent["at"]
    assert late < BOUND_S, f"KeyboardInterrupt arrived {late:.2f} s after SIGINT"
    assert np.array_equal(c.view(np.uint32), c_before.view(np.uint32)), "the caller's c was written"
    busy = _busy_cpu_s()
    assert busy < 0.1, f"{busy:.2f} CPU s spent after the interrupt: an engine thread is still running"


@pytest.mark.parametrize("threads", (1, 2))
def test_a_long_matmul_stops_soon_after_sigint_and_leaves_c_alone(portable, threads):
    rng = np.random.default_rng(1)
    # 2048 x 2048 outputs over K = 4096: seconds on the portable engine, about 100 MB in all
    a, b = _fp16(rng, (2048, 4096)), _fp16(rng, (4096, 2048))
    c = rng.standard_normal((2048, 2048)).astype(np.float32)
    _assert_interrupted(lambda: pyamx.matmul(a, b, c, backend="emulator", engine="portable", threads=threads), c)


def test_the_exact_path_of_nan_operands_stops_too(portable):
    rng = np.random.default_rng(2)
    # A NaN in every row of A: every output element takes the exact scalar path (seconds here)
    a, b = _fp16(rng, (512, 4096)), _fp16(rng, (4096, 512))
    a[:, 7] = np.nan
    c = rng.standard_normal((512, 512)).astype(np.float32)
    _assert_interrupted(lambda: pyamx.matmul(a, b, c, backend="emulator", engine="portable", threads=1), c)


def test_engine_dot_is_interruptible_too(portable):
    rng = np.random.default_rng(3)
    m = n = kd = 2048
    bits = lambda shape: (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    a, b = bits((m, 2 * kd)), bits((kd, 2 * n))
    c = rng.standard_normal((m, n)).astype(np.float32).view(np.uint32)
    _assert_interrupted(lambda: portable.dot("tdpbf16ps", c, a, b, kd, 1), c)


def test_sigint_to_the_main_thread_alone_is_seen_at_once(portable):
    rng = np.random.default_rng(4)
    a, b = _fp16(rng, (2048, 4096)), _fp16(rng, (4096, 2048))
    timer, sent = _interrupt_after(SIGNAL_AFTER_S, process_wide=False)
    try:
        with pytest.raises(KeyboardInterrupt):
            pyamx.matmul(a, b, backend="emulator", engine="portable", threads=1)
        arrived = time.perf_counter()
    finally:
        timer.cancel()
    assert arrived - sent["at"] < BOUND_S


def test_a_matmul_inside_a_signal_handler_and_its_exception(portable):
    """A handler that runs a long matmul of its own during one, then raises: both calls end cleanly."""
    rng = np.random.default_rng(5)
    a, b = _fp16(rng, (2048, 4096)), _fp16(rng, (4096, 2048))
    small_a, small_b = a[:512, :512], b[:512, :512]
    want = pyamx.matmul(small_a, small_b, backend="emulator", engine="portable", threads=1)
    inner = {}

    class Stop(Exception):
        pass

    def handler(signum, frame):
        inner["entered"] = time.perf_counter()
        # above the portable engine's threshold: this call takes the helper-thread path itself
        inner["result"] = pyamx.matmul(small_a, small_b, backend="emulator", engine="portable", threads=1)
        inner["at"] = time.perf_counter()
        raise Stop

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, SIGNAL_AFTER_S)
        start = time.perf_counter()
        with pytest.raises(Stop):
            pyamx.matmul(a, b, backend="emulator", engine="portable", threads=1)
        arrived = time.perf_counter()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert inner["entered"] - start < SIGNAL_AFTER_S + BOUND_S, "the handler ran only after the call"
    assert arrived - inner["at"] < BOUND_S
    np.testing.assert_array_equal(inner["result"].view(np.uint32), want.view(np.uint32))


def test_the_helper_thread_path_gives_the_direct_calls_bits(portable, monkeypatch):
    """The same call from the main thread (helper thread, cancellable) and from another thread (direct)."""
    taken = []
    real = eng._run_interruptibly
    monkeypatch.setattr(eng, "_run_interruptibly", lambda *args: taken.append(1) or real(*args))
    rng = np.random.default_rng(6)
    a, b = _fp16(rng, (512, 512)), _fp16(rng, (512, 512))  # above the portable engine's threshold for 2 threads
    a[5, 9], b[3, 300], a[7, 7], b[8, 8] = np.nan, -np.inf, 6e-8, -0.0  # both paths, and the edge classes
    c = rng.standard_normal((512, 512)).astype(np.float32)
    for threads in (1, 2):
        main = pyamx.matmul(a, b, c, backend="emulator", engine="portable", threads=threads)
        other = {}
        worker = threading.Thread(target=lambda: other.setdefault("r", pyamx.matmul(
            a, b, c, backend="emulator", engine="portable", threads=threads)))
        worker.start()
        worker.join()
        np.testing.assert_array_equal(main.view(np.uint32), other["r"].view(np.uint32))
    assert len(taken) == 2, "the main thread's calls did not take the cancellable path"


@pytest.mark.parametrize("when", ["before the thread exists", "after it started"])
def test_an_interrupt_inside_thread_start_neither_hangs_nor_leaves_work_running(portable, monkeypatch, when):
    rng = np.random.default_rng(7)
    a, b = _fp16(rng, (2048, 4096)), _fp16(rng, (4096, 2048))
    real_start = threading.Thread.start

    def start(self):
        if when == "after it started":
            real_start(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    began = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        pyamx.matmul(a, b, backend="emulator", engine="portable", threads=1)
    monkeypatch.undo()
    assert time.perf_counter() - began < BOUND_S
    busy = _busy_cpu_s()
    assert busy < 0.1, f"{busy:.2f} CPU s spent after the interrupt: an engine thread is still running"


def test_without_a_thread_to_start_the_call_runs_on_the_callers(portable, monkeypatch):
    rng = np.random.default_rng(8)
    a, b = _fp16(rng, (384, 512)), _fp16(rng, (512, 384))
    want = pyamx.matmul(a, b, backend="emulator", engine="portable", threads=1)

    def start(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", start)
    got = pyamx.matmul(a, b, backend="emulator", engine="portable", threads=1)
    monkeypatch.undo()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_short_call_made_long_by_nans_is_interruptible_too(portable, monkeypatch):
    """Every call counts as short here; the NaN in every row of A makes this one take seconds."""
    monkeypatch.setattr(portable, "_quick_macs", 1 << 62)
    rng = np.random.default_rng(9)
    a, b = _fp16(rng, (512, 4096)), _fp16(rng, (4096, 512))
    a[:, 3] = np.nan
    c = rng.standard_normal((512, 512)).astype(np.float32)
    _assert_interrupted(lambda: pyamx.matmul(a, b, c, backend="emulator", engine="portable", threads=1), c)


def test_a_short_call_refused_for_its_nans_runs_again_with_the_same_bits(portable, monkeypatch):
    taken = []
    real = eng._run_interruptibly
    monkeypatch.setattr(eng, "_run_interruptibly", lambda *args: taken.append(1) or real(*args))
    rng = np.random.default_rng(10)
    a = rng.integers(0, 2**16, (256, 256), dtype=np.uint16)  # bf16 bits of every class: NaNs in most rows
    b = rng.integers(0, 2**16, (256, 256), dtype=np.uint16)
    c = rng.integers(0, 2**32, (256, 256), dtype=np.uint64).astype(np.uint32)
    assert 256**3 < portable._quick_macs  # short by its size ...
    main = pyamx.matmul(a, b, c, kind="bf16", backend="emulator", engine="portable", threads=1)
    assert taken == [1]  # ... but too long for the calling thread by its NaNs
    other = {}
    worker = threading.Thread(target=lambda: other.setdefault("r", pyamx.matmul(
        a, b, c, kind="bf16", backend="emulator", engine="portable", threads=1)))
    worker.start()
    worker.join()
    np.testing.assert_array_equal(main.view(np.uint32), other["r"].view(np.uint32))
