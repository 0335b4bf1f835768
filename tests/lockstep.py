"""A native tile machine and the emulator in lock step, under interrupts, with guarded buffers.

Shared by tests/cpu/test_native_interrupts.py and tests/fuzz_machine.py.

Every memory operand is the middle of a bytearray whose guard regions on
both sides hold a known random pattern; the native machine gets a
memoryview of the middle, the emulator a numpy copy of it. After each
operation the guards must be intact (no out-of-bounds write), and the
native machine's whole state -- the STTILECFG image read from the
registers, its ``config`` property, all eight tiles, every buffer -- must
equal the emulator's byte for byte (an out-of-bounds read shows up there as
foreign bytes in a tile).

An operation may be interrupted: an exception raised by a profile hook or a
signal handler at any point of the native call. Then the native machine
must hold exactly the state before the operation or exactly the state after
it (the one the emulator computed), never anything else; the lock step
continues from whichever it holds.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field

import numpy as np

from pyamx.table import isa
from pyamx.emulator import TileMachine
from pyamx.errors import AMXError, AMXFault, ReentrantUseError
from pyamx.table.tilecfg import TileConfig

# Wider than the farthest byte any operation generated here can address
# (|offset| + 15 * |stride| + 64 with the bounds below), so that even a
# machine that skipped every check would only ever write into a guard.
GUARD = 8192
MAX_OFFSET = 2048
MAX_STRIDE = 300
BUFFER_SIZES = (4, 64, 200, 1024, 2048)

#: every dot product of the table, the AMX-FP8 and AMX-COMPLEX rows included
DOT_NAMES = isa.DOT_NAMES


def native_dot_names() -> tuple:
    """The dot products the native side runs here: on silicon only those whose extension the CPU has
    (a Sapphire Rapids has no AMX-FP16, AMX-COMPLEX nor AMX-FP8), everywhere else (trap mode, or no
    native) all of them."""
    from pyamx.cpu import native

    rep = native.report()
    if not rep.native_usable:
        return DOT_NAMES
    return tuple(name for name in DOT_NAMES if isa.BY_NAME[name].group in rep.kernels)


class Interrupt(BaseException):
    """What the interrupting hook raises (a BaseException, like KeyboardInterrupt)."""


class Mismatch(AssertionError):
    """The native machine left a state the emulator cannot explain."""


class GuardedBuffer:
    """``size`` bytes in the middle of a bytearray between two guard regions of known bytes."""

    def __init__(self, size: int, rng: np.random.Generator):
        self.size = size
        self.raw = bytearray(rng.integers(0, 256, size + 2 * GUARD, dtype=np.uint8).tobytes())
        self._front = bytes(self.raw[:GUARD])
        self._back = bytes(self.raw[GUARD + size :])
        self.view = memoryview(self.raw)[GUARD : GUARD + size]

    def inner(self) -> np.ndarray:
        return np.frombuffer(bytes(self.view), dtype=np.uint8)

    def damage(self):
        """``None``, or where the first changed guard byte is, relative to the buffer's start."""
        front = np.frombuffer(bytes(self.raw[:GUARD]), np.uint8) != np.frombuffer(self._front, np.uint8)
        back = np.frombuffer(bytes(self.raw[GUARD + self.size :]), np.uint8) != np.frombuffer(self._back, np.uint8)
        if front.any():
            at = np.flatnonzero(front)
            return f"{at.size} guard bytes before the buffer changed, the farthest at {int(at[0]) - GUARD}"
        if back.any():
            at = np.flatnonzero(back)
            return f"{at.size} guard bytes after the buffer changed, the farthest at {self.size + int(at[-1])}"
        return None


@dataclass(frozen=True)
class Buf:
    """A memory operand placeholder: buffer number ``index`` of the lock step."""

    index: int


@dataclass
class Op:
    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def describe(self) -> str:
        def show(v):
            if isinstance(v, (bytes, bytearray)):
                return "bytes.fromhex(%r)" % bytes(v).hex()
            if isinstance(v, Buf):
                return f"buf{v.index}"
            return repr(v)

        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


OK, INTERRUPTED, REFUSED = "ok", "interrupted", "refused (re-entrant)"


def _clone(machine: TileMachine) -> TileMachine:
    """An independent copy of an emulator machine (its engine is shared: it holds no state)."""
    twin = copy.copy(machine)
    twin._tiles = machine._tiles.copy()  # _config is an immutable TileConfig
    return twin


def _same_exception(native: BaseException, emulated: BaseException) -> bool:
    if type(native) is not type(emulated):
        return False
    if isinstance(native, AMXFault):
        return native.mnemonic == emulated.mnemonic and native.rule == emulated.rule
    return True


class LockStep:
    """One NativeMachine against one emulator TileMachine, with their own guarded buffers."""

    def __init__(self, native, rng: np.random.Generator, sizes=BUFFER_SIZES, name="machine"):
        self.native = native
        self.name = name
        self.emu = TileMachine()
        self.bufs = [GuardedBuffer(n, rng) for n in sizes]
        self.mems = [b.inner().copy() for b in self.bufs]
        self.log: list = []
        self.counts: dict = {}

    # -- running ----------------------------------------------------------------

    def _args(self, op: Op, mems):
        conv = lambda v: mems[v.index] if isinstance(v, Buf) else v  # noqa: E731
        return tuple(conv(a) for a in op.args), {k: conv(v) for k, v in op.kwargs.items()}

    def emulate(self, op: Op):
        """``(machine, memories, exception)`` after ``op`` on copies of the emulator side."""
        emu, mems = _clone(self.emu), [m.copy() for m in self.mems]
        args, kwargs = self._args(op, mems)
        try:
            getattr(emu, op.name)(*args, **kwargs)
        except (AMXError, TypeError, ValueError, IndexError) as exc:
            return self.emu, self.mems, exc
        return emu, mems, None

    def run_native(self, op: Op, arm=None, disarm=None, switch=None):
        """Outcome of ``op`` on the native machine: OK, INTERRUPTED, REFUSED or the exception raised.

        ``arm``/``disarm`` are called around the operation (a profile hook
        raises at most once and is removed by CPython when it does);
        ``switch.armed`` is set and cleared with plain stores instead, for a
        signal handler that may raise at any bytecode boundary, including at
        the entry of a ``disarm`` function before it could clear anything.
        """
        method = getattr(self.native, op.name)
        args, kwargs = self._args(op, [b.view for b in self.bufs])
        outcome = None
        try:
            try:
                if arm is not None:
                    arm()
                if switch is not None:
                    switch.armed = True
                method(*args, **kwargs)
                outcome = OK
            finally:
                if switch is not None:
                    switch.armed = False
                if disarm is not None:
                    disarm()
        except Interrupt:
            if outcome is None:
                outcome = INTERRUPTED
        except ReentrantUseError:
            outcome = REFUSED
        except (AMXError, TypeError, ValueError, IndexError) as exc:
            outcome = exc
        return outcome

    def step(self, op: Op, arm=None, disarm=None, verify=True, switch=None):
        """Run ``op`` on both sides and advance the mirror to what the native machine did.

        With ``verify=False`` (inside a signal handler, where the native
        state cannot be read) only outcomes that leave no doubt are accepted.
        """
        after_emu, after_mems, emu_exc = self.emulate(op)
        outcome = self.run_native(op, arm, disarm, switch)
        self.log.append((op, outcome if isinstance(outcome, str) else repr(outcome)))
        key = outcome if isinstance(outcome, str) else "fault"
        self.counts[key] = self.counts.get(key, 0) + 1
        before = (self.emu, self.mems)
        after = (after_emu, after_mems)
        if outcome == OK:
            if emu_exc is not None:
                self.fail(f"native ran it, the emulator raised {emu_exc!r}")
            candidates = [after]
        elif outcome == REFUSED:
            candidates = [before]
        elif outcome == INTERRUPTED:
            candidates = [before] if emu_exc is not None else [before, after]
        else:
            if emu_exc is None:
                self.fail(f"native raised {outcome!r}, the emulator ran it")
            if not _same_exception(outcome, emu_exc):
                self.fail(f"native raised {outcome!r}, the emulator {emu_exc!r}")
            candidates = [before]
        if not verify:
            if len(candidates) != 1:
                self.fail("an interrupted operation cannot be checked without reading the native state")
            self.emu, self.mems = candidates[0]
            return outcome
        self.emu, self.mems = self.match(candidates)
        return outcome

    # -- checking -----------------------------------------------------------------

    def native_state(self):
        image = self.native.sttilecfg()
        config = self.native.config.to_bytes()
        tiles = None if image[1] else self.native.snapshot()[1]
        return image, config, tiles, [b.inner() for b in self.bufs]

    def differences(self, state, candidate) -> list:
        image, config, tiles, mems = state
        emu, emu_mems = candidate
        want = emu.sttilecfg()
        out = []
        if image != want:
            out.append(f"STTILECFG {image.hex()} != emulator {want.hex()}")
        if config != want:
            out.append(f"NativeMachine.config {config.hex()} != emulator {want.hex()}")
        emu_tiles = emu.snapshot()[1]
        if tiles is None:
            # A pending start_row: only LDTILECFG sets it and it zeroes the tiles,
            # and every instruction that changes a tile consumes it.
            if emu_tiles.any():
                out.append("start_row is pending but the emulator's tiles are not zero")
        elif not np.array_equal(tiles, emu_tiles):
            t, r, c = (int(x[0]) for x in np.nonzero(tiles != emu_tiles))
            out.append(f"tmm{t} row {r} byte {c}: native 0x{tiles[t, r, c]:02x}, emulator 0x{emu_tiles[t, r, c]:02x}")
        for i, (got, exp) in enumerate(zip(mems, emu_mems)):
            if not np.array_equal(got, exp):
                at = int(np.flatnonzero(got != exp)[0])
                out.append(f"buf{i} byte {at}: native 0x{got[at]:02x}, emulator 0x{exp[at]:02x}")
        return out

    def guards(self) -> None:
        for i, b in enumerate(self.bufs):
            damage = b.damage()
            if damage:
                self.fail(f"OUT OF BOUNDS WRITE around buf{i} ({b.size} bytes): {damage}")

    def match(self, candidates):
        self.guards()
        state = self.native_state()
        reports = []
        for candidate in candidates:
            diff = self.differences(state, candidate)
            if not diff:
                return candidate
            reports.append(diff)
        which = ["before the operation", "after the operation"]
        self.fail("; ".join(f"{which[i] if len(candidates) > 1 else 'expected'}: {' | '.join(r)}"
                            for i, r in enumerate(reports)))

    def verify(self) -> None:
        """The native state equals the mirror now (outside any interrupt)."""
        self.match([(self.emu, self.mems)])

    def fail(self, what: str):
        lines = [f"{self.name}: {what}", "last operations (native outcome):"]
        for op, outcome in self.log[-12:]:
            lines.append(f"  {op.describe()} -> {outcome}")
        raise Mismatch("\n".join(lines))


# -- random operations ----------------------------------------------------------------


def random_config(rng: np.random.Generator, start_row_chance=0.1) -> TileConfig:
    """A legal palette-1 config; often with a dot-product-compatible triple on random tiles."""
    rows, colsb = [0] * 8, [0] * 8
    for t in range(8):
        if rng.random() < 0.7:
            rows[t] = int(rng.integers(1, 17))
            colsb[t] = int(rng.choice([int(rng.integers(1, 65)), 4 * int(rng.integers(1, 17)), 64]))
    if rng.random() < 0.7:
        d, s1, s2 = (int(x) for x in rng.permutation(8)[:3])
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        rows[d], colsb[d] = m, 4 * n
        rows[s1], colsb[s1] = m, 4 * k
        rows[s2], colsb[s2] = k, 4 * n
    start_row = int(rng.integers(0, 17)) if rng.random() < start_row_chance else 0
    return TileConfig(1, start_row, tuple(colsb), tuple(rows))


def illegal_config(rng: np.random.Generator) -> bytes:
    # start_row 0: machines taking turns in one thread's registers cannot save a pending one.
    image = bytearray(random_config(rng, start_row_chance=0).to_bytes())
    kind = int(rng.integers(0, 4))
    if kind == 0:
        image[0] = int(rng.integers(2, 256))
    elif kind == 1:
        image[int(rng.choice([2, 15, 32, 47, 56, 63]))] = int(rng.integers(1, 256))
    elif kind == 2:
        t = int(rng.integers(0, 8))
        image[16 + 2 * t : 18 + 2 * t] = int(rng.integers(65, 65536)).to_bytes(2, "little")  # always > 64
        image[48 + t] = image[48 + t] or 1
    else:
        t = int(rng.integers(0, 8))
        image[48 + t] = int(rng.integers(17, 256))
        image[16 + 2 * t] = image[16 + 2 * t] or 4
    return bytes(image)


def _tile(rng, cfg: TileConfig) -> int:
    if rng.random() < 0.04:
        return int(rng.choice([8, 15, -1]))
    configured = [t for t in range(8) if cfg.rows[t]]
    if configured and rng.random() < 0.9:
        return int(rng.choice(configured))
    return int(rng.integers(0, 8))


def memory_operand(rng, cfg: TileConfig, tmm: int, sizes):
    """``(buffer index, stride, offset)``, in bounds about half of the time."""
    index = int(rng.integers(0, len(sizes)))
    size = sizes[index]
    rows = cfg.rows[tmm] if 0 <= tmm < 8 else 0
    colsb = cfg.colsb[tmm] if 0 <= tmm < 8 else 0
    if rng.random() < 0.5:
        stride = int(rng.choice([colsb, 64, colsb + int(rng.integers(0, 9))]))
        span = max(rows - 1, 0) * stride + colsb
        offset = int(rng.integers(0, max(size - span, 0) + 1))
    else:
        stride = int(rng.choice([int(rng.integers(-MAX_STRIDE, MAX_STRIDE + 1)), 0, colsb, 64, -64]))
        offset = int(rng.integers(-MAX_STRIDE, min(size, MAX_OFFSET) + 1))
    return index, stride, offset


def random_op(rng: np.random.Generator, cfg: TileConfig, sizes=BUFFER_SIZES, start_row_chance=0.1) -> Op:
    """One random legal or illegal operation, given the configuration the machines hold.

    Machines that take turns in one thread's registers need
    ``start_row_chance=0``: a pending start_row cannot be saved for a switch.
    """
    kind = rng.choice(
        ["ldtilecfg", "illegal", "load", "store", "tilezero", "tilerelease", "dot", "sttilecfg"],
        p=[0.14, 0.03, 0.27, 0.22, 0.07, 0.03, 0.2, 0.04],
    )
    if kind == "ldtilecfg":
        new = random_config(rng, start_row_chance)
        return Op("ldtilecfg", (new if rng.random() < 0.5 else new.to_bytes(),))
    if kind == "illegal":
        return Op("ldtilecfg", (illegal_config(rng),))
    if kind in ("load", "store"):
        tmm = _tile(rng, cfg)
        index, stride, offset = memory_operand(rng, cfg, tmm, sizes)
        name = "tilestored" if kind == "store" else str(rng.choice(["tileloadd", "tileloaddt1"]))
        return Op(name, (tmm, Buf(index), stride), {"offset": offset})
    if kind == "tilezero":
        return Op("tilezero", (_tile(rng, cfg),))
    if kind == "tilerelease":
        return Op("tilerelease", ())
    if kind == "sttilecfg":
        return Op("sttilecfg", ())
    return Op(str(rng.choice(native_dot_names())), tuple(_tile(rng, cfg) for _ in range(3)))


class ProfileInterrupter:
    """A profile hook that raises Interrupt at the ``target``-th event after it is armed.

    Events are Python calls and returns and calls into and returns from C
    functions: every boundary between the Python layer and a C call, where
    CPython also runs signal handlers.
    """

    EVENTS = frozenset({"call", "return", "c_call", "c_return"})

    def __init__(self, target: int):
        self.target = target
        self.seen = 0
        self.fired = None

    def __call__(self, frame, event, arg):
        if event not in self.EVENTS:
            return
        if self.seen == self.target and self.fired is None:
            self.fired = (event, getattr(arg, "__name__", None) if event.startswith("c_") else frame.f_code.co_name)
            self.seen += 1
            raise Interrupt(f"profile event {self.target}: {event} {self.fired[1]}")
        self.seen += 1

    def arm(self):
        sys.setprofile(self)

    def disarm(self):
        sys.setprofile(None)
