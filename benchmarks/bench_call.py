"""Per-call cost of one 16x16x(K=16 dwords) dot-product instruction on the emulator backend.

Prints, best of many timeit repeats (indicative figures, not a test):

* a numpy float32 matmul of the same shape (16x32 @ 32x16 + C) in this process, the yardstick;
* each of the six one-instruction functions with ``backend="emulator"`` on the default
  (compiled, where built) engine and on the numpy engine, plus ``TileMachine`` methods;
* where the time of ``pyamx.tdpbf16ps`` goes: operand validation, backend and engine
  resolution, the engine itself, wrapping the result.

Targets of issue 10: compiled engine <= 10 us per call, numpy engine <= 60 us per instruction.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import pyamx
from pyamx import _backend, _result, _validate, bf16, emulator
from pyamx import engine as _engine


def best_us(fn, repeat: int, seconds: float) -> float:
    """Best time of one call in microseconds; each repeat runs about ``seconds``."""
    number, elapsed = 1, 0.0
    while elapsed < seconds / 4:
        number *= 2
        elapsed = timeit.timeit(fn, number=number)
    number = max(1, int(number * seconds / max(elapsed, 1e-9)))
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number * 1e6


def operands(rng):
    a32 = rng.standard_normal((16, 32)).astype(np.float32)
    b32 = rng.standard_normal((32, 16)).astype(np.float32)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    floats = dict(
        tdpbf16ps=(c, bf16.from_float32(a32), bf16.pack_pairs(bf16.from_float32(b32))),
        tdpfp16ps=(c, a32.astype(np.float16), bf16.pack_pairs(b32.astype(np.float16))),
    )
    ci = rng.integers(-1000, 1000, (16, 16)).astype(np.int32)
    ai = rng.integers(-128, 128, (16, 64)).astype(np.int8)
    bi = rng.integers(-128, 128, (16, 64)).astype(np.int8)
    ints = {name: (ci, ai, bi) for name in pyamx.isa.DOT_NAMES if name not in floats}
    return a32, b32, c, {**floats, **ints}


def machine(engine):
    m = pyamx.emulator.TileMachine(engine=engine)
    m.ldtilecfg(pyamx.TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}))
    rng = np.random.default_rng(1)
    for tmm in (1, 2):  # ordinary bf16 values in the sources
        m.tileloadd(tmm, bf16.from_float32(rng.standard_normal((16, 32)).astype(np.float32)), 64)
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.1, help="length of one timing repeat")
    args = parser.parse_args()
    t = lambda fn: best_us(fn, args.repeat, args.seconds)  # noqa: E731

    a32, b32, c, ops = operands(np.random.default_rng(0))
    yardstick = t(lambda: c + a32 @ b32)
    default = _engine.resolve(None)
    print(f"numpy float32 matmul 16x32 @ 32x16 + C: {yardstick:8.2f} us (the yardstick)")
    print(f"default engine: {default.name}; targets: compiled <= 10 us, numpy engine <= 60 us per instruction\n")

    engines = [default.name] + (["numpy"] if default.name != "numpy" else [])
    print(f"{'per call (us)':34s}" + "".join(f"{name:>12s}" for name in engines))
    for name, (cc, a, b) in ops.items():
        fn = getattr(pyamx, name)
        row = [t(lambda: fn(cc, a, b, backend="emulator", engine=e)) for e in engines]
        print(f"pyamx.{name:28s}" + "".join(f"{x:12.2f}" for x in row))
    cc, a, b = ops["tdpbf16ps"]
    row = [t(lambda: emulator.tdpbf16ps(cc, a, b, engine=e)) for e in engines]
    print(f"{'emulator.tdpbf16ps':34s}" + "".join(f"{x:12.2f}" for x in row))
    for name in ("tdpbf16ps", "tdpbssd"):
        row = []
        for e in engines:
            method = getattr(machine(e), name)
            row.append(t(lambda: method(0, 1, 2)))
        print(f"{'TileMachine.' + name:34s}" + "".join(f"{x:12.2f}" for x in row))

    print("\nwhere pyamx.tdpbf16ps(c, a, b, backend='emulator') spends its time (us):")
    total = t(lambda: pyamx.tdpbf16ps(cc, a, b, backend="emulator"))
    validate = t(lambda: _validate.fast_dot_shape("tdpbf16ps", cc, a, b))
    full = t(lambda: emulator.operands("tdpbf16ps", cc, a, b))
    resolve = t(lambda: (_backend.resolve("emulator", "bf16", engine=None), _engine.resolve(None)))
    parts = [("validation (fast check)", validate)]
    if default.compiled:
        run = default.tile_call("tdpbf16ps")
        out = np.empty((16, 16), np.float32)
        engine_t = t(lambda: run(a, 64, b, 64, cc, 16, out, 16, 16, 16, 16))
        wrap = t(lambda: _result.tag(_result.new_result((16, 16), np.float32), "emulator", engine=default.name))
    else:
        engine_t = t(lambda: default.dot("tdpbf16ps", cc.view(np.uint32), a, b, 16))
        bits = default.dot("tdpbf16ps", cc.view(np.uint32), a, b, 16)
        wrap = t(lambda: _result.label(bits.view(np.float32), "emulator", engine=default.name))
    parts += [("backend + engine resolution", resolve), (f"engine {default.name}" + (" (incl. cffi call)" if default.compiled else ""), engine_t),
              ("result wrapping", wrap)]
    for label, value in parts:
        print(f"  {label:32s}{value:8.2f}")
    print(f"  {'sum of the parts':32s}{sum(v for _, v in parts):8.2f}   (whole call: {total:.2f})")
    print(f"  {'(full checks, for comparison)':32s}{full:8.2f}")

    numpy_engine = _engine.resolve("numpy")
    print("\nwhere the numpy engine's instruction spends its time (us):")
    engine_t = t(lambda: numpy_engine.dot("tdpbf16ps", cc.view(np.uint32), a, b, 16))
    print(f"  {'Engine.dot (numpy, bf16)':32s}{engine_t:8.2f}")
    whole = t(lambda: pyamx.tdpbf16ps(cc, a, b, backend="emulator", engine="numpy"))
    print(f"  {'whole call':32s}{whole:8.2f}")


if __name__ == "__main__":
    main()
