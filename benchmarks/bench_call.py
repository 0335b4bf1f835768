"""Per-call cost of pyamx's small calls, each next to a numpy (and torch) yardstick in this process.

Prints, best of many timeit repeats (indicative figures, not a test; tests/tools/test_benchmarks.py runs
it with --quick so that it cannot silently break):

* ``pyamx.matmul`` of 64 x 64 x 64 bf16 on each backend and engine, against numpy's float32 matmul
  and (where torch is installed) ``torch.matmul`` in bf16 of the same shape (issue 29's target:
  native <= 1.5x torch);
* a numpy float32 matmul of one instruction's shape (16x32 @ 32x16 + C), the yardstick;
* each dot-product function (every row of the instruction table, operands built from the row's
  formats) with ``backend="emulator"`` on the default (compiled, where built) engine and on the
  numpy engine, and with ``backend="native"`` where it runs (AMX silicon, or the trap mode under
  ``PYAMX_TRAP_EMULATION=1``), plus ``TileMachine`` methods (target: native <= 3x numpy);
* where the time of ``pyamx.tdpbf16ps`` goes: operand validation, backend and engine
  resolution, the engine itself, wrapping the result;
* the conversions' ratios against ml_dtypes and torch (benchmarks/bench_convert.py; target:
  ``bf16.from_float32`` of 16M values <= 1.5x torch's ``.to(torch.bfloat16)``).
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import bench_convert  # the conversion ratios (this script's own directory is on sys.path)
import pyamx
from pyamx import _backend, _result, _validate, emulator
from pyamx.table import bf16
from pyamx.emulator import engine as _engine
from pyamx.errors import AMXError

try:
    import torch
except ImportError:  # never a dependency
    torch = None


def best_us(fn, repeat: int, seconds: float) -> float:
    """Best time of one call in microseconds; each repeat runs about ``seconds``."""
    number, elapsed = 1, 0.0
    while elapsed < seconds / 4:
        number *= 2
        elapsed = timeit.timeit(fn, number=number)
    number = max(1, int(number * seconds / max(elapsed, 1e-9)))
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number * 1e6


def _values(rng, fmt, shape) -> np.ndarray:
    """Ordinary finite values of one operand format, as the dtype the one-instruction functions take."""
    if fmt.name == "bf16":
        return bf16.from_float32(rng.standard_normal(shape).astype(np.float32))
    if fmt.name in ("fp16", "cfp16"):  # fp16, and the complex rows' (real, imaginary) fp16 pairs
        return rng.standard_normal(shape).astype(np.float16)
    if fmt.is_float:  # fp8 codes with exponents near the bias: no NaN, no infinity
        exponent = rng.integers(fmt.bias - 3, fmt.bias + 3, shape).astype(np.uint8) << fmt.mantissa
        sign_and_fraction = rng.integers(0, 256, shape).astype(np.uint8) & np.uint8(0x80 | ((1 << fmt.mantissa) - 1))
        return sign_and_fraction | exponent
    return rng.integers(-128, 128, shape).astype(np.int8) if fmt.signed else rng.integers(0, 256, shape).astype(np.uint8)


def operands(rng):
    """(a32, b32, c: one instruction's float32 operands for numpy, {mnemonic: (c, a, b)} for every dot row)."""
    a32 = rng.standard_normal((16, 32)).astype(np.float32)
    b32 = rng.standard_normal((32, 16)).astype(np.float32)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    ops = {}
    for row in pyamx.isa.DOTS:
        # 16 rows of 64 bytes: A (16, 64 / item size), B (16 dwords, 16 columns of `lanes` values)
        lanes = row.lanes
        a = _values(rng, row.a_format, (16, 16 * lanes))
        b = _values(rng, row.b_format, (16, 16 * lanes))
        acc = c if row.acc_format.is_float else rng.integers(-1000, 1000, (16, 16)).astype(np.int32)
        ops[row.name] = (acc, a, b)
    return a32, b32, c, ops
def machine(engine):
    m = pyamx.emulator.TileMachine(engine=engine)
    m.ldtilecfg(pyamx.TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}))
    rng = np.random.default_rng(1)
    for tmm in (1, 2):  # ordinary bf16 values in the sources
        m.tileloadd(tmm, bf16.from_float32(rng.standard_normal((16, 32)).astype(np.float32)), 64)
    return m


def _native_call(fn):
    """``fn`` when one call runs on the native backend here, else the reason it does not (a str)."""
    try:
        fn()
    except AMXError as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"
    return fn


def _row(label: str, cells) -> None:
    print(f"{label:34s}" + "".join(f"{x:12.2f}" if isinstance(x, float) else f"  {x:>12s}" for x in cells))


def matmul_costs(t, engines, rng) -> None:
    """pyamx.matmul 64^3 bf16 per backend and engine, numpy float32 and torch bf16 of the same shape."""
    a32, b32 = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    a, b = bf16.from_float32(a32), bf16.from_float32(b32)
    print("pyamx.matmul 64x64x64 bf16 bits -> float32, one call (us):")
    numpy_us = t(lambda: a32 @ b32)
    _row("  numpy float32 a @ b", [numpy_us])
    torch_us = None
    if torch is not None:
        ta, tb = (torch.from_numpy(x).to(torch.bfloat16) for x in (a32, b32))
        torch_us = t(lambda: torch.matmul(ta, tb))
        _row("  torch.matmul bf16", [torch_us])
    else:
        print("  torch.matmul bf16: torch is not installed")
    for e in engines:
        us = t(lambda: pyamx.matmul(a, b, backend="emulator", engine=e))
        _row(f"  emulator ({e})", [us, f"{us / numpy_us:.1f}x numpy"])
    native = _native_call(lambda: pyamx.matmul(a, b, backend="native"))
    if isinstance(native, str):
        print(f"  native: does not run here ({native})")
        return
    for threads in (None, 1):
        us = t(lambda: pyamx.matmul(a, b, backend="native", threads=threads))
        cells = [us, f"{us / numpy_us:.1f}x numpy"] + ([f"{us / torch_us:.1f}x torch"] if torch_us else [])
        _row(f"  native ({_backend.native_mode()}), threads={threads}", cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.1, help="length of one timing repeat")
    parser.add_argument("--convert-size", type=int, default=1 << 24, help="values per conversion (default 16M)")
    parser.add_argument("--quick", action="store_true", help="a short run that only checks it works (tests)")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.seconds, args.convert_size = 1, 0.002, 100_000
    t = lambda fn: best_us(fn, args.repeat, args.seconds)  # noqa: E731

    rng = np.random.default_rng(0)
    default = _engine.resolve(None)
    engines = [default.name] + (["numpy"] if default.name != "numpy" else [])
    matmul_costs(t, engines, rng)

    a32, b32, c, ops = operands(rng)
    yardstick = t(lambda: c + a32 @ b32)
    print(f"\nnumpy float32 matmul 16x32 @ 32x16 + C: {yardstick:8.2f} us (the yardstick)")
    print(f"default engine: {default.name}; targets: compiled <= 10 us, numpy engine <= 60 us per instruction, "
          "native <= 3x the yardstick\n")

    print(f"{'per call (us)':34s}" + "".join(f"{name:>12s}" for name in engines) + f"{'native':>12s}")
    why_not_native = {}
    for name, (cc, a, b) in ops.items():
        fn = getattr(pyamx, name)
        row = [t(lambda: fn(cc, a, b, backend="emulator", engine=e)) for e in engines]
        native = _native_call(lambda: fn(cc, a, b, backend="native"))
        if isinstance(native, str):
            why_not_native.setdefault(native, []).append(name)
            row.append("n/a")
        else:
            row.append(t(native))
        _row(f"pyamx.{name}", row)
    for reason, names in why_not_native.items():
        print(f"  native n/a for {', '.join(names)}: {reason}")
    cc, a, b = ops["tdpbf16ps"]
    _row("emulator.tdpbf16ps", [t(lambda: emulator.tdpbf16ps(cc, a, b, engine=e)) for e in engines])
    for name in ("tdpbf16ps", "tdpbssd"):
        row = []
        for e in engines:
            method = getattr(machine(e), name)
            row.append(t(lambda: method(0, 1, 2)))
        _row("TileMachine." + name, row)

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

    print("\nconversions (benchmarks/bench_convert.py):")
    bench_convert.run(args.convert_size, rounds=1 if args.quick else 3, repeat=1 if args.quick else 3)


if __name__ == "__main__":
    main()
