"""Time pyamx's float32 <-> bf16/fp16 conversions against ml_dtypes and, where installed, torch.

On 16M standard normal float32 values by default, all in this process, in alternating rounds (a
neighbour's load on a shared machine then hits every side alike), best time of each side:

* ``pyamx.table.bf16.from_float32`` (C, csrc/convert.c, on 1 thread and on the default count) vs
  ``np.asarray(x, ml_dtypes.bfloat16)`` and torch's ``.to(torch.bfloat16)``;
* ``pyamx.table.bf16.to_float32`` vs ml_dtypes' and torch's widening back to float32;
* the fp16 rounding ``pyamx.matmul(..., kind="fp16")`` applies vs numpy's ``astype(np.float16)``
  and torch's ``.to(torch.float16)``; float64 -> bf16 (rounded directly) vs ml_dtypes;
* the numpy implementation pyamx falls back to without its C extension;
* ``pyamx.pack(b, kind="bf16")`` of a float32 B (rounded while it is packed, one pass) vs rounding
  it first and packing the bits (the two passes it replaced) and vs ml_dtypes' ``astype`` then
  ``pyamx.pack`` of the bits, on 4096x4096 and 1024x1024 by default (``--pack-shapes``).

Every pyamx result is first checked bit for bit against its numpy implementation (and bf16
against ml_dtypes and torch, which round the same way). Ratios are pyamx / the other side:
below 1 is faster. Figures, not tests (tests/tools/test_benchmarks.py runs it in --quick mode).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import pyamx
from pyamx import _convert
from pyamx.cpu import _tile_layout
from pyamx.table import bf16
from pyamx.table import bf16 as bf16_module

try:
    import ml_dtypes
except ImportError:  # an optional extra of pyamx
    ml_dtypes = None
try:
    import torch
except ImportError:  # never a dependency
    torch = None


def best_interleaved(sides: dict, rounds: int, repeat: int) -> dict:
    """{name: best seconds of one call}, each round timing every side ``repeat`` times in turn."""
    best = dict.fromkeys(sides, float("inf"))
    for _ in range(rounds):
        for name, fn in sides.items():
            for _ in range(repeat):
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def _bits(x) -> np.ndarray:
    if torch is not None and isinstance(x, torch.Tensor):
        return x.view(torch.int16).numpy().view(np.uint16) if x.element_size() == 2 else x.numpy().view(np.uint32)
    return np.asarray(x).view(np.uint16 if np.asarray(x).dtype.itemsize == 2 else np.uint32)


def groups(size: int, seed: int = 0) -> list:
    """[(title, {side: function}, the pyamx side, numpy fallback, others that must give the same bits)]."""
    rng = np.random.default_rng(seed)
    x32 = rng.standard_normal(size, dtype=np.float32)
    x64 = x32.astype(np.float64) * (1 + 2.0**-20)  # not float32 values: the direct rounding matters
    h = bf16.from_float32(x32)
    t32 = torch.from_numpy(x32) if torch is not None else None
    th = torch.from_numpy(h.view(np.int16)).view(torch.bfloat16) if torch is not None else None
    loaded = _convert.library()
    threads = _convert._threads(size, loaded[1].pyamx_convert_parallel_min()) if loaded else 1
    ours = f"pyamx (default: {threads} thread{'s' if threads > 1 else ''})"
    out = []

    sides = {"pyamx (1 thread)": lambda: _convert.to_bits(x32, "bf16", threads=1),
             ours: lambda: bf16.from_float32(x32)}
    same = {}
    if ml_dtypes is not None:
        sides["ml_dtypes"] = same["ml_dtypes"] = lambda: np.asarray(x32, ml_dtypes.bfloat16)
    if torch is not None:
        sides["torch"] = same["torch"] = lambda: t32.to(torch.bfloat16)
    fallback = lambda: _convert.numpy_bf16_bits(x32)  # noqa: E731
    sides["numpy fallback"] = fallback
    out.append(("float32 -> bf16 (bf16.from_float32)", sides, ours, fallback, same))

    sides = {"pyamx (1 thread)": lambda: _convert.widen(h, "bf16", threads=1),
             ours: lambda: bf16.widen_bits(h)}
    same = {}
    if ml_dtypes is not None:
        hb = h.view(ml_dtypes.bfloat16)
        sides["ml_dtypes"] = same["ml_dtypes"] = lambda: hb.astype(np.float32)
    if torch is not None:
        sides["torch"] = same["torch"] = lambda: th.to(torch.float32)
    fallback = lambda: bf16_module._widen_numpy(h)  # noqa: E731
    sides["numpy fallback"] = fallback
    out.append(("bf16 -> float32 (bf16.to_float32)", sides, ours, fallback, same))

    sides = {"pyamx (1 thread)": lambda: _convert.to_bits(x32, "fp16", threads=1),
             ours: lambda: _convert.round_floats(x32, "fp16")}
    same = {}
    if torch is not None:
        sides["torch"] = same["torch"] = lambda: t32.to(torch.float16)
    fallback = lambda: _convert.numpy_fp16_bits(x32)  # noqa: E731
    sides["numpy astype (fallback)"] = fallback
    out.append(("float32 -> fp16 (matmul kind='fp16')", sides, ours, fallback, same))

    sides = {"pyamx (1 thread)": lambda: _convert.to_bits(x64, "bf16", threads=1),
             ours: lambda: bf16.from_float32(x64)}
    same = {}
    if ml_dtypes is not None:
        sides["ml_dtypes"] = same["ml_dtypes"] = lambda: np.asarray(x64, ml_dtypes.bfloat16)
    fallback = lambda: _convert.numpy_bf16_bits(x64)  # noqa: E731
    sides["numpy fallback"] = fallback
    out.append(("float64 -> bf16 (rounded directly)", sides, ours, fallback, same))
    return out


def pack_groups(shapes: list, seed: int = 0) -> list:
    """[(title, {side: function}, the fused side)] for pyamx.pack of float32 B, each side's tiles equal."""
    rng = np.random.default_rng(seed)
    out = []
    for k, n in shapes:
        b = rng.standard_normal((k, n), dtype=np.float32)
        ours = "pack, rounded while packing"
        sides = {ours: lambda b=b: pyamx.pack(b, kind="bf16").tiles,
                 "round, then pack the bits": lambda b=b: _tile_layout.pack(_convert.round_floats(b, "bf16"))}
        if ml_dtypes is not None:
            sides["ml_dtypes astype, then pack"] = lambda b=b: pyamx.pack(b.astype(ml_dtypes.bfloat16)).tiles
        out.append((f"float32 {k}x{n} -> packed bf16 B (pyamx.pack(b, kind='bf16'))", sides, ours))
    return out


def run_pack(shapes: list, rounds: int, repeat: int, say=print) -> list:
    """Check and time pack_groups; returns [(title, {side: seconds}, the fused side)]."""
    results = []
    for title, sides, ours in pack_groups(shapes):
        mine = sides[ours]().tobytes()
        for name, fn in sides.items():
            if fn().tobytes() != mine:
                raise SystemExit(f"{title}: {name} gives other tiles than the fused pack")
        times = best_interleaved(sides, rounds, repeat)
        say(f"\n{title}, the same tiles on every side")
        for name, seconds in times.items():
            ratio = "".join(f"  {times[ours] / times[other]:6.2f}x {other}" for other in times
                            if other != ours and name == ours)
            say(f"  {name:30s}{seconds * 1e3:9.2f} ms{ratio}")
        results.append((title, times, ours))
    return results


def run(size: int, rounds: int, repeat: int, say=print) -> list:
    """Check and time every group; returns [(title, {side: seconds}, the pyamx side)]."""
    if _convert.library() is None:
        say("pyamx._native is not built: pyamx runs its numpy fallback (python build.py builds it)")
    say(f"{size:,} values; torch {torch.__version__ + ' (' + str(torch.get_num_threads()) + ' threads)' if torch else 'not installed'}; "
        f"ml_dtypes {ml_dtypes.__version__ if ml_dtypes else 'not installed'}")
    results = []
    for title, sides, ours, fallback, same in groups(size):
        mine = _bits(sides[ours]())
        if not np.array_equal(mine, _bits(fallback())):
            raise SystemExit(f"{title}: pyamx's C conversion differs from its numpy implementation")
        for name, fn in same.items():
            if not np.array_equal(mine, _bits(fn())):
                raise SystemExit(f"{title}: pyamx and {name} differ on finite values")
        times = best_interleaved(sides, rounds, repeat)
        say(f"\n{title}" + (f", same bits as {', '.join(same)}" if same else ""))
        for name, seconds in times.items():
            ratio = "".join(f"  {times[ours] / times[other]:6.2f}x {other}" for other in times
                            if other != ours and name == ours and other not in ("pyamx (1 thread)",))
            say(f"  {name:26s}{seconds * 1e3:9.2f} ms{ratio}")
        results.append((title, times, ours))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 24, help="values per array (default 16M)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="calls per side and round")
    parser.add_argument("--pack-shapes", default="4096x4096,1024x1024",
                        help="K x N shapes of the float32 B packed (comma-separated; empty: none)")
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works (tests)")
    args = parser.parse_args()
    if args.quick:
        args.size, args.rounds, args.repeat, args.pack_shapes = 100_000, 1, 1, "65x97"
    shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.pack_shapes.split(",") if shape]
    run(args.size, args.rounds, args.repeat)
    run_pack(shapes, args.rounds, args.repeat)


if __name__ == "__main__":
    main()
