"""The native tile machine stays memory-safe and equal to the emulator when calls are interrupted.

An exception can leave a NativeMachine call at any Python/C boundary: a
KeyboardInterrupt or an exception from a signal handler, a profile or trace
hook. These tests raise one at every such boundary (a profile hook) and at
random moments (SIGALRM every ~200 us), use machines from inside other
machines' calls (re-entrancy), and hand over ints whose ``__int__`` changes
its answer. After every operation the guard bytes around each buffer must be
intact and the native state must be the emulator's before or after the
operation (tests/lockstep.py). Run in trap mode where there is no AMX:
PYAMX_TRAP_EMULATION=1 PYAMX_BACKEND=native.
"""

from __future__ import annotations

import signal
import sys
import time

import numpy as np
import pytest

from lockstep import (
    INTERRUPTED,
    OK,
    REFUSED,
    Buf,
    Interrupt,
    LockStep,
    Op,
    ProfileInterrupter,
    random_config,
    random_op,
)
from pyamx.table.tilecfg import TileConfig

# A sequence that, without the C-side guards, ends in an out-of-bounds store:
# a small config, a large one (interrupted after the C call ran), then loads
# and stores of a 4-byte buffer that fit only the small one.
SMALL = TileConfig.make({0: (1, 4), 1: (1, 4), 2: (1, 4)})
LARGE = TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)})
DOT = TileConfig.make({0: (2, 8), 1: (2, 8), 2: (2, 8), 3: (2, 8)})
SCRIPT = [
    Op("ldtilecfg", (SMALL,)),
    Op("tileloadd", (0, Buf(0), 4)),
    Op("ldtilecfg", (LARGE,)),
    Op("tilestored", (0, Buf(0), 4)),
    Op("tileloadd", (1, Buf(0), 4)),
    Op("tileloadd", (1, Buf(4), 64)),
    Op("tilestored", (1, Buf(3), 64), {"offset": -64}),
    Op("tdpbf16ps", (0, 1, 2)),
    Op("tilerelease", ()),
    Op("tilestored", (0, Buf(0), 4)),
    Op("ldtilecfg", (DOT.to_bytes(),)),
    Op("tileloaddt1", (1, Buf(2), 8), {"offset": 3}),
    Op("tileloadd", (2, Buf(1), 8)),
    Op("tdpbssd", (0, 1, 2)),
    Op("tilezero", (1,)),
    Op("tdpbuud", (0, 1, 1)),
    Op("tilestored", (0, Buf(1), 8), {"offset": 48}),
    Op("ldtilecfg", (TileConfig.make({0: (3, 4)}, start_row=1),)),
    Op("tileloadd", (0, Buf(0), 0)),
    Op("ldtilecfg", (bytes([2]) + bytes(63),)),
    Op("tilerelease", ()),
]


def sweep(lock: LockStep, op: Op, limit=3000) -> int:
    """Run ``op`` once with an exception raised at each profile event in turn, then uninterrupted."""
    for target in range(limit):
        hook = ProfileInterrupter(target)
        lock.step(op, hook.arm, hook.disarm)
        if hook.fired is None:
            return target
    raise AssertionError(f"{op.describe()} still interrupted after {limit} profile events")


def test_an_exception_at_every_call_boundary_leaves_no_stale_config_and_no_stray_access(native):
    lock = LockStep(native.NativeMachine(), np.random.default_rng(1))
    boundaries = 0
    for op in SCRIPT:
        boundaries += sweep(lock, op)
        lock.verify()
    rng = np.random.default_rng(2)
    for _ in range(25):
        boundaries += sweep(lock, random_op(rng, lock.emu.config))
    lock.verify()
    # Every boundary of the sweep fired once; most interrupted the call (the
    # last of each operation falls after it, in the hook's own removal).
    assert boundaries > 1000 and lock.counts[INTERRUPTED] >= boundaries - 2 * (len(SCRIPT) + 25)


def test_machine_switches_interrupted_at_every_boundary_lose_no_state(native):
    # Two machines on one thread take turns in the registers; every step of a
    # switch (save one, restore the other) is interrupted in turn.
    rng = np.random.default_rng(3)
    a = LockStep(native.NativeMachine(), rng, name="A")
    b = LockStep(native.NativeMachine(), rng, name="B")
    for lock, op in [(a, Op("ldtilecfg", (DOT,))), (b, Op("ldtilecfg", (LARGE,)))]:
        lock.step(op)
    for i in range(16):
        for lock in (a, b):
            op = random_op(rng, lock.emu.config, start_row_chance=0) if i % 2 else Op("tileloadd", (1, Buf(4), 64))
            sweep(lock, op)
    a.verify()
    b.verify()


class _Alarm:
    """SIGALRM every ``interval`` seconds; its handler calls ``action`` (which may raise)."""

    def __init__(self, action, interval=200e-6, once_per_arming=False):
        self.action = action
        self.interval = interval
        self.once_per_arming = once_per_arming
        self.armed = False
        self.fired = 0

    def _handler(self, signum, frame):
        if self.armed:
            if self.once_per_arming:
                # Python 3.10 also runs handlers inside a `finally`: a second raise could skip the
                # step's own `armed = False` and land in the test's code after it.
                self.armed = False
            self.fired += 1
            self.action()

    def __enter__(self):
        self.previous = signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


def _interrupt():
    raise Interrupt("SIGALRM")


needs_sigalrm = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)")


@needs_sigalrm
def test_sigalrm_raising_every_200us_leaves_no_stale_config_and_no_stray_access(native):
    rng = np.random.default_rng(4)
    lock = LockStep(native.NativeMachine(), rng)
    script = SCRIPT * 3 + [random_op(rng, random_config(rng)) for _ in range(200)]
    start = time.monotonic()
    with _Alarm(_interrupt, once_per_arming=True) as alarm:
        i = 0
        while (time.monotonic() - start < 20 and
               (i < len(script) or time.monotonic() - start < 1.5 or lock.counts.get(INTERRUPTED, 0) < 100)):
            op = script[i] if i < len(script) else random_op(rng, lock.emu.config)
            lock.step(op, switch=alarm)
            i += 1
    lock.verify()
    print(f"SIGALRM: {alarm.fired} signals during {i} operations: {lock.counts}")
    assert lock.counts.get(INTERRUPTED, 0) >= 100, lock.counts


class Shifty(int):
    """An int whose ``__int__``/``__index__`` answer ``later`` from their second call on."""

    def __new__(cls, value, later):
        obj = super().__new__(cls, value)
        obj.later = later
        obj.calls = 0
        return obj

    def __int__(self):
        self.calls += 1
        return int.__int__(self) if self.calls == 1 else self.later

    __index__ = __int__


def test_an_int_whose_value_changes_is_converted_once(native):
    # Checked with one value and used with another, these would store past
    # the 64-byte buffer and run the dot product on tmm3 instead of tmm0.
    lock = LockStep(native.NativeMachine(), np.random.default_rng(5))
    lock.step(Op("ldtilecfg", (TileConfig.make({0: (4, 16)}),)))
    lock.step(Op("tileloadd", (0, Buf(3), 64)))
    offset, stride = Shifty(0, later=60), Shifty(16, later=1000)
    lock.native.tilestored(0, lock.bufs[1].view, stride, offset=offset)
    lock.emu.tilestored(0, lock.mems[1], 16, offset=0)
    lock.verify()
    lock.step(Op("ldtilecfg", (DOT,)))
    for t in range(4):
        lock.step(Op("tileloadd", (t, Buf(4), 8), {"offset": 16 * t}))
    tiles = Shifty(0, later=3), Shifty(1, later=1), Shifty(2, later=2)
    lock.native.tdpbssd(*tiles)
    lock.emu.tdpbssd(0, 1, 2)
    lock.verify()
    assert all(x.calls <= 1 for x in (offset, stride, *tiles))


def test_a_machine_used_from_a_profile_hook_inside_another_call_is_refused(native):
    rng = np.random.default_rng(6)
    a = LockStep(native.NativeMachine(), rng, name="A")
    b = LockStep(native.NativeMachine(), rng, name="B")
    b.step(Op("ldtilecfg", (SMALL,)))
    inner = []

    def hook(frame, event, arg):
        # Inside every C call of A's instructions, B tries to run one of its own.
        if event == "c_call" and getattr(arg, "__name__", "").startswith("pyamx_"):
            op = Op("ldtilecfg", (LARGE,)) if len(inner) % 2 else Op("tilestored", (0, Buf(0), 4))
            inner.append(b.step(op, verify=False))

    def arm():
        sys.setprofile(hook)

    def disarm():
        sys.setprofile(None)

    for op in SCRIPT:
        a.step(op, arm, disarm)
    a.verify()
    b.verify()
    # Ops the Python checks refuse make no C call, and on silicon no trap-mode entry call
    # either, so not every op of the script gives B a chance; most do.
    assert len(inner) >= len(SCRIPT) // 2 and set(inner) == {REFUSED}, inner


@needs_sigalrm
def test_a_machine_used_from_a_signal_handler_is_refused_inside_calls_and_works_between_them(native):
    rng = np.random.default_rng(7)
    a = LockStep(native.NativeMachine(), rng, name="A")
    b = LockStep(native.NativeMachine(), rng, name="B")
    b.step(Op("ldtilecfg", (DOT,)))
    b_ops = [
        Op("tileloadd", (1, Buf(4), 8)),
        Op("tilestored", (1, Buf(3), 8), {"offset": 100}),
        Op("ldtilecfg", (DOT,)),
        Op("tilezero", (2,)),
        Op("tileloadd", (0, Buf(0), 4)),  # faults: 2 rows of 8 bytes from a 4-byte buffer
    ]
    outcomes = []
    busy = []
    # B can take the registers over between A's calls only while no start_row is pending.
    script = [op for op in SCRIPT if not (op.name == "ldtilecfg" and getattr(op.args[0], "start_row", 0))]

    def use_b():
        if busy:
            return
        busy.append(1)
        try:
            outcomes.append(b.step(b_ops[len(outcomes) % len(b_ops)], verify=False))
        finally:
            busy.pop()

    deadline = time.monotonic() + 20
    with _Alarm(use_b) as alarm:
        alarm.armed = True
        i = 0
        while time.monotonic() < deadline and (
            i < 150 or outcomes.count(REFUSED) < 5 or outcomes.count(OK) < 5
        ):
            a.step(script[i % len(script)] if i < 2 * len(script) else random_op(rng, a.emu.config, start_row_chance=0))
            i += 1
        alarm.armed = False
    a.verify()
    b.verify()
    assert outcomes.count(REFUSED) >= 5 and outcomes.count(OK) >= 5, outcomes


def test_a_busy_token_left_by_an_interrupted_release_does_not_lock_the_machine_out(native):
    """Python 3.10 runs signal handlers inside `finally`: one that raised there left the token of a
    finished call behind, and every later call on the thread was refused as re-entrant."""
    machine = native.NativeMachine()
    machine.ldtilecfg(TileConfig.make({0: (1, 4)}))

    def finished_call():
        return sys._getframe()  # the frame of a call that has returned, as a leftover token holds

    native._thread.busy = ("TILELOADD", finished_call())
    try:
        assert machine.config.rows[0] == 1  # runs: nothing encloses this call
        assert native._thread.busy is None
    finally:
        native._thread.busy = None
