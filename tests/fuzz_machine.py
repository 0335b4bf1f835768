"""Seeded stateful fuzzing: the native tile machine against the emulator, in lock step.

    PYAMX_TRAP_EMULATION=1 PYAMX_BACKEND=native \\
        python tests/fuzz_machine.py --seed 1 --iterations 20000 --time-limit 180

Random legal and illegal operations (LDTILECFG of random and illegal
images, loads and stores with in- and out-of-bounds offsets and strides
into guarded buffers, TILEZERO, TILERELEASE, all six dot products, bad
registers) run on a NativeMachine and on the emulator's TileMachine; some
are interrupted by a profile hook raising at a random call boundary. After
every step the guard bytes must be intact and the native state -- registers,
``config``, tiles, buffers -- must equal the emulator's byte for byte
(tests/lockstep.py). Sessions alternate between one machine (pending
start_row included) and two machines taking turns in the thread's registers.
Every step also checks the C guards' pure forms against the emulator's rules
on extreme 64-bit operands.

Prints the failing operations and exits 1 on the first finding; exits 2 when
the native backend cannot run here (unless ``--allow-skip``); 0 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from lockstep import LockStep, Mismatch, ProfileInterrupter, random_config, random_op  # noqa: E402

SESSION = 300
EXTREMES = [-(2**63), -(2**62), -(2**32), -1, 0, 1, 64, 2**32, 2**62, 2**63 - 1]


def check_pure_guards(rng, lib, memory_rule, dot_rule) -> None:
    cfg = random_config(rng, start_row_chance=0.2)
    image = bytearray(cfg.to_bytes())
    image[1] = cfg.start_row
    tmm = int(rng.integers(-1, 9))
    size = int(rng.choice([0, 4, 64, 1024, 2**40]))
    offset = int(rng.choice(EXTREMES)) if rng.random() < 0.5 else int(rng.integers(-100, 1100))
    stride = int(rng.choice(EXTREMES)) if rng.random() < 0.5 else int(rng.integers(-100, 100))
    ok = memory_rule(cfg, tmm, size, offset, stride)
    got = lib.pyamx_check_memory_operand(bytes(image), tmm, size, offset, stride) == lib.PYAMX_OK
    if ok != got:
        raise Mismatch(f"C memory guard says {'ok' if got else 'refused'}, the emulator's rule the opposite: "
                       f"cfg={bytes(image).hex()} tmm={tmm} len={size} offset={offset} stride={stride}")
    tiles = [int(t) for t in rng.integers(-1, 9, 3)]
    ok = dot_rule(cfg, tiles)
    got = lib.pyamx_check_dot_product(bytes(image), *tiles) == lib.PYAMX_OK
    if ok != got:
        raise Mismatch(f"C dot-product guard says {'ok' if got else 'refused'}, check_dot_product the opposite: "
                       f"cfg={bytes(image).hex()} tiles={tiles}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=10000, help="operations in all (default 10000)")
    parser.add_argument("--time-limit", type=float, default=0, help="stop after this many seconds (0: none)")
    parser.add_argument("--interrupt-rate", type=float, default=0.3,
                        help="fraction of operations interrupted at a random call boundary (default 0.3)")
    parser.add_argument("--skip-pure-guards", action="store_true",
                        help="do not check the C guards' pure forms (pyamx_check_*) each step")
    parser.add_argument("--allow-skip", action="store_true", help="exit 0 where the native backend cannot run")
    args = parser.parse_args(argv)
    if args.seed < 0 or args.iterations < 0 or args.time_limit < 0 or not 0 <= args.interrupt_rate <= 1:
        parser.error("--seed, --iterations and --time-limit must be >= 0, --interrupt-rate in [0, 1]")

    from pyamx.table import _memory
    from pyamx.cpu import _nativelib
    from pyamx.cpu import native
    from pyamx.errors import InvalidOpcodeFault, MemoryAccessFault
    from pyamx.table.tilecfg import check_dot_product, check_memory_tile

    usable, reason = native.available()
    if not usable:
        print(f"fuzz_machine: the native backend cannot run here: {reason}", file=sys.stderr)
        return 0 if args.allow_skip else 2
    _, lib = _nativelib.load()

    def memory_rule(cfg, tmm, size, offset, stride):
        try:
            check_memory_tile("TILELOADD", "tile", cfg, tmm)
            _memory.row_offsets("TILELOADD", size, offset, stride, cfg.start_row, cfg.rows[tmm], cfg.colsb[tmm])
        except (InvalidOpcodeFault, MemoryAccessFault):
            return False
        return True

    def dot_rule(cfg, tiles):
        try:
            check_dot_product("TDPBF16PS", cfg, *tiles)
        except InvalidOpcodeFault:
            return False
        return True

    rng = np.random.default_rng(args.seed)
    start = time.monotonic()
    done = 0
    totals: dict = {}
    locks: list = []
    lock = None
    print(f"fuzz_machine: seed {args.seed}, up to {args.iterations} operations"
          + (f" or {args.time_limit:g} s" if args.time_limit else "") + f", backend mode {native.report().mode}")
    try:
        while done < args.iterations and not (args.time_limit and time.monotonic() - start > args.time_limit):
            if done % SESSION == 0:
                for lock in locks or ():
                    for k, v in lock.counts.items():
                        totals[k] = totals.get(k, 0) + v
                # The last session's machines go first: one of them may hold a pending
                # start_row, which no switch to another machine can save.
                locks = lock = None
                gc.collect()  # tracebacks of caught faults keep machines alive in reference cycles
                n = int(rng.integers(1, 3))
                locks = [LockStep(native.NativeMachine(), rng, name=f"machine{i}") for i in range(n)]
            lock = locks[int(rng.integers(0, len(locks)))]
            op = random_op(rng, lock.emu.config, start_row_chance=0.1 if len(locks) == 1 else 0)
            if rng.random() < args.interrupt_rate:
                hook = ProfileInterrupter(int(rng.integers(0, 160)))
                lock.step(op, hook.arm, hook.disarm)
            else:
                lock.step(op)
            if not args.skip_pure_guards:
                check_pure_guards(rng, lib, memory_rule, dot_rule)
            done += 1
    except Mismatch as exc:
        print(f"FINDING after {done} operations (seed {args.seed}):\n{exc}", file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 -- anything else escaping is a finding too
        print(f"FINDING after {done} operations (seed {args.seed}): unexpected exception", file=sys.stderr)
        traceback.print_exc()
        for lock in locks:
            for op, outcome in lock.log[-12:]:
                print(f"  {lock.name}: {op.describe()} -> {outcome}", file=sys.stderr)
        return 1
    for lock in locks:
        for k, v in lock.counts.items():
            totals[k] = totals.get(k, 0) + v
    print(f"fuzz_machine: {done} operations in {time.monotonic() - start:.1f} s, no finding; outcomes {totals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
