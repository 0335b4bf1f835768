"""NativeMachine ownership holds for threads that threading did not start (_thread, C code)."""

from __future__ import annotations

import _thread
import queue
import threading
import time

import pytest

import pyamx
from pyamx.errors import WrongThreadError


def _in_raw_thread(fn):
    """Run ``fn`` on a thread started by _thread (threading never sees it start); return or raise its outcome."""
    box = queue.Queue()

    def body():
        try:
            box.put((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box.put((False, exc))

    _thread.start_new_thread(body, ())
    ok, value = box.get(timeout=60)
    if not ok:
        raise value
    return value


def _configured_machine():
    m = pyamx.tile_machine(backend="native")
    m.ldtilecfg(pyamx.TileConfig.make({0: (1, 4)}))
    return m


def test_a_raw_thread_owns_its_machine_and_others_are_refused(native):
    def own():
        m = _configured_machine()
        m.tilezero(0)
        return m, threading.get_ident()

    machine, _ = _in_raw_thread(own)
    with pytest.raises(WrongThreadError):
        machine.tilezero(0)
    with pytest.raises(WrongThreadError):
        _in_raw_thread(lambda: machine.tilezero(0))


def test_a_later_raw_thread_with_the_same_ident_is_not_the_owner(native):
    machine, owner_ident = _in_raw_thread(lambda: (_configured_machine(), threading.get_ident()))
    time.sleep(0.05)  # let the owner finish, so its ident is free for reuse
    outcomes = set()
    for _ in range(40):
        def attempt():
            if threading.get_ident() != owner_ident:
                return "different ident"
            try:
                machine.tilezero(0)
            except WrongThreadError:
                return "refused"
            return "ran on a thread that does not own the tile state"

        outcome = _in_raw_thread(attempt)
        outcomes.add(outcome)
        if outcome != "different ident":
            break
        time.sleep(0.01)
    if outcomes == {"different ident"}:
        pytest.skip("the OS never reused the owner's thread ident")
    assert "refused" in outcomes, outcomes


def test_the_same_raw_thread_keeps_its_identity_across_calls(native):
    def many():
        m = _configured_machine()
        for _ in range(5):
            m.tilezero(0)
        second = _configured_machine()  # two machines take turns in one thread
        second.tilezero(0)
        m.tilezero(0)
        return "ok"

    assert _in_raw_thread(many) == "ok"


def _in_c_thread(fn):
    """Run ``fn`` on a thread created by pthread_create from C (ctypes), as a C library's worker would."""
    import ctypes
    import ctypes.util

    box = []

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def start(_):
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box.append((False, exc))
        return None

    libc = ctypes.CDLL(ctypes.util.find_library("pthread") or ctypes.util.find_library("c"))
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, start, None) == 0
    assert libc.pthread_join(tid, None) == 0
    ok, value = box[0]
    if not ok:
        raise value
    return value


def test_c_created_threads_own_their_machines(native):
    def own():
        m = _configured_machine()
        m.tilezero(0)
        return m

    machine = _in_c_thread(own)
    with pytest.raises(WrongThreadError):
        _in_c_thread(lambda: machine.tilezero(0))
    with pytest.raises(WrongThreadError):
        machine.tilezero(0)
