"""Time ``pyamx.matmul`` on fp8 operands (BF8 x HF8 of standard normal data, as ``pyamx bench``) against
numpy float32 matmul of the same shape, both on one thread, in alternating rounds.

Each round times a few calls of each side and keeps the best, in wall time and in thread CPU time
(``time.thread_time``): on a shared VM a neighbour's burst lengthens the wall time of whichever
side it hits, and CPU time is the steadier of the two (it still moves with cache and core sharing).
Prints every round, the range of the per-round ratios and the BLAS kernel numpy used. Figures, not
tests. For the BLAS to choose its own kernel, run it with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset:
``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_fp8.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import pyamx
from bench_engine import blas_info, blas_limits  # the same BLAS report and thread limit


def best(fn, repeat: int) -> tuple[float, float]:
    """The best wall time and the best thread CPU time of ``repeat`` calls, in seconds."""
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return min(wall), min(cpu)


def main() -> None:
    """Parse the options, run the rounds and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="M = N = K (default 1024)")
    parser.add_argument("--engine", default="avx512", help="emulator engine (default avx512)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5, help="calls per side and round")
    args = parser.parse_args()
    import ml_dtypes

    rng = np.random.default_rng(0)
    n = args.size
    a32 = rng.standard_normal((n, n)).astype(np.float32)
    b32 = rng.standard_normal((n, n)).astype(np.float32)
    a, b = a32.astype(ml_dtypes.float8_e5m2), b32.astype(ml_dtypes.float8_e4m3fn)
    print(f"pyamx {pyamx.__version__}, numpy {np.__version__}; BLAS: {blas_info()}")
    print(f"fp8 (BF8 x HF8) {n}^3 on emulator/{args.engine}, one thread, against numpy float32 matmul")
    ratios_wall, ratios_cpu = [], []
    with blas_limits(1):
        engine = pyamx.matmul(a, b, backend="emulator", engine=args.engine, threads=1).engine
        for r in range(args.rounds):
            fw, fc = best(lambda: pyamx.matmul(a, b, backend="emulator", engine=args.engine, threads=1),
                          args.repeat)
            nw, nc = best(lambda: a32 @ b32, args.repeat)
            ratios_wall.append(fw / nw)
            ratios_cpu.append(fc / nc)
            print(f"round {r}: fp8 {fw * 1e3:.2f} ms (CPU {fc * 1e3:.2f}), numpy {nw * 1e3:.2f} ms "
                  f"(CPU {nc * 1e3:.2f}); ratio {fw / nw:.2f}x (CPU {fc / nc:.2f}x)")
    print(f"engine {engine}: ratio {min(ratios_wall):.2f}-{max(ratios_wall):.2f}x wall, "
          f"{min(ratios_cpu):.2f}-{max(ratios_cpu):.2f}x CPU time")


if __name__ == "__main__":
    main()
