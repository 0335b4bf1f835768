"""Time one 16x16x(K=16) TDPBF16PS in the emulator (and natively where it runs).

Prints absolute times and the ratio to a numpy float32 matmul of the same
shape (16x32 @ 32x16 plus C) measured in the same process, so the figure
means something on any machine. A figure, not a test. benchmarks/bench_call.py
has every dot product and where the time of one call goes.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import pyamx
from pyamx.table import bf16
from pyamx import _backend
from pyamx.emulator import engine as _engine


def best_time(fn, repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=50)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((16, 32)).astype(np.float32)
    b32 = rng.standard_normal((32, 16)).astype(np.float32)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    a, b = bf16.from_float32(a32), bf16.pack_pairs(bf16.from_float32(b32))

    reference = best_time(lambda: c + a32 @ b32, args.repeat, args.number * 100)
    print(f"numpy float32 matmul 16x32 @ 32x16 + C: {reference * 1e6:10.2f} us (reference)")
    rows = [(f"emulator sdm ({_engine.resolve(None).name} engine)", lambda: pyamx.emulator.tdpbf16ps(c, a, b))]
    rows.append(("emulator sdm (numpy engine)", lambda: pyamx.emulator.tdpbf16ps(c, a, b, engine="numpy")))
    rows.append(("emulator straight", lambda: pyamx.emulator.tdpbf16ps(c, a, b, numerics="straight")))
    rows.append(("emulator wide (exact sum)", lambda: pyamx.emulator.tdpbf16ps(c, a, b, numerics="wide")))
    machine = pyamx.TileMachine()
    machine.ldtilecfg(pyamx.TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}))
    rows.append(("emulator TileMachine.tdpbf16ps", lambda: machine.tdpbf16ps(0, 1, 2)))
    if _backend.native_status()[0]:
        rows.append((f"native ({_backend.native_mode()})", lambda: pyamx.tdpbf16ps(c, a, b, backend="native")))
    else:
        print(f"native: not run ({_backend.native_status()[1]})")
    for name, fn in rows:
        number = max(1, args.number // (20 if "wide" in name else 1))
        t = best_time(fn, args.repeat, number)
        print(f"{name:32s}: {t * 1e6:10.2f} us per instruction, {t / reference:8.1f}x the numpy matmul")


if __name__ == "__main__":
    main()
