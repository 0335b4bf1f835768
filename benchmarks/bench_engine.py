"""Time the emulator's engines against numpy float32 matmul of the same shape.

Two figures per engine (avx512, avx2, portable, numpy, where available):
- one 16x16x(K=16) ``pyamx.tdpbf16ps(..., backend="emulator")`` call, the
  whole public path included (validation, engine choice, result label);
- whole products (default 1024^3) of bf16, fp16 and int8 through
  ``Engine.dot`` (the schedule of ``pyamx.matmul``; B already in the
  instructions' interleaved layout), with 1 thread and with all cores.
Each is printed with the time of a numpy float32 matmul of the same shape,
measured in the same process with the same thread count, and the ratio.
Figures, not tests: run it on a quiet machine. For the BLAS to choose its
own kernel, run it with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset, e.g.
``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_engine.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import numpy as np

import pyamx
from pyamx.table import bf16
from pyamx.emulator import engine


CLOCK = time.perf_counter


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return min(times)


def blas_limits(threads: int):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(threads)


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (install threadpoolctl to see it)"
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return "; ".join(f"{p['internal_api']} {p.get('version')} kernel {p.get('architecture')} "
                     f"({p.get('num_threads')} threads)" for p in pools) or "none found"


def engines() -> list:
    return [name for name, ok, _ in engine.available_engines() if ok]


def one_instruction(repeat: int) -> None:
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((16, 32)).astype(np.float32)
    b32 = rng.standard_normal((32, 16)).astype(np.float32)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    a, b = bf16.from_float32(a32), bf16.pack_pairs(bf16.from_float32(b32))
    number = 200
    ref = best(lambda: [c + a32 @ b32 for _ in range(number)], repeat) / number
    print(f"\none 16x16x(K=16) pyamx.tdpbf16ps(backend='emulator'); numpy c + a @ b: {ref * 1e6:.2f} us")
    for name in engines():
        n = number if name != "numpy" else 10
        t = best(lambda: [pyamx.tdpbf16ps(c, a, b, backend="emulator", engine=name) for _ in range(n)], repeat) / n
        print(f"  {name:9s} {t * 1e6:9.2f} us  {t / ref:8.1f}x numpy")


def operands(rng, group: str, size: int):
    m = n = k = size
    if group == "int8":
        a = rng.integers(-128, 128, (m, k), dtype=np.int8).view(np.uint8)
        b = rng.integers(-128, 128, (k // 4, 4 * n), dtype=np.int8).view(np.uint8)
        return "tdpbssd", np.zeros((m, n), np.int32), a, b, k // 4
    a32 = rng.standard_normal((m, k)).astype(np.float32)
    b32 = rng.standard_normal((k // 2, 2 * n)).astype(np.float32)
    if group == "bf16":
        return "tdpbf16ps", np.zeros((m, n), np.uint32), bf16.from_float32(a32), bf16.from_float32(b32), k // 2
    return "tdpfp16ps", np.zeros((m, n), np.uint32), a32.astype(np.float16).view(np.uint16), \
        b32.astype(np.float16).view(np.uint16), k // 2


def matmul_operands(rng, group: str, size: int):
    """Row-major (M, K) and (K, N) operands as a user passes them to pyamx.matmul."""
    if group == "int8":
        return (rng.integers(-128, 128, (size, size), dtype=np.int8),) * 2
    a32 = rng.standard_normal((size, size)).astype(np.float32)
    b32 = rng.standard_normal((size, size)).astype(np.float32)
    if group == "bf16":
        return bf16.from_float32(a32), bf16.from_float32(b32)
    return a32.astype(np.float16), b32.astype(np.float16)


def products(sizes, thread_counts, repeat: int, with_numpy_engine: bool) -> None:
    rng = np.random.default_rng(1)
    names = [n for n in engines() if n != "numpy" or with_numpy_engine]
    for size in sizes:
        x = rng.standard_normal((size, size)).astype(np.float32)
        y = rng.standard_normal((size, size)).astype(np.float32)
        for threads in thread_counts:
            with blas_limits(threads):
                x @ y
                ref = best(lambda: x @ y, repeat)
            gflops = 2 * size**3 / ref / 1e9
            print(f"\n{size}^3, {threads} thread(s): numpy float32 matmul {ref * 1e3:.2f} ms ({gflops:.1f} GFLOP/s)")
            for group in ("bf16", "fp16", "int8"):
                op, c, a, b, kd = operands(rng, group, size)
                a_mm, b_mm = matmul_operands(rng, group, size)
                for name in names:
                    eng = engine.resolve(name)
                    reps = repeat if name != "numpy" else 1
                    with blas_limits(threads):
                        t = best(lambda: eng.dot(op, c, a, b, kd, threads), reps)
                        ref = min(ref, best(lambda: x @ y, reps))  # numpy again, next to it: shared machines drift
                    print(f"  {group:5s} {name:9s} Engine.dot   {t * 1e3:10.2f} ms  {t / ref:7.2f}x numpy float32")
                    if eng.compiled:
                        with blas_limits(threads):
                            t = best(lambda: pyamx.matmul(a_mm, b_mm, backend="emulator", engine=name, threads=threads),
                                     reps)
                            ref = min(ref, best(lambda: x @ y, reps))
                        print(f"  {group:5s} {name:9s} pyamx.matmul {t * 1e3:10.2f} ms  {t / ref:7.2f}x numpy float32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024", help="comma-separated M=N=K sizes (default 1024)")
    parser.add_argument("--threads", default=None, help="comma-separated thread counts (default: 1 and all cores)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--numpy-engine", action="store_true", help="also time the numpy engine on whole products (slow)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="measure the calling thread's CPU time instead of wall time (1 thread only): "
                             "steadier on a shared machine")
    args = parser.parse_args()
    if args.cpu_time:
        global CLOCK
        CLOCK = time.thread_time
        args.threads = "1"
    cores = os.cpu_count() or 1
    threads = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, cores})
    print(f"pyamx {pyamx.__version__}; engines here: {', '.join(engines())}; auto = {engine.resolve('auto').name}")
    print(f"numpy {np.__version__}, BLAS: {blas_info()}; clock: {'thread CPU time' if args.cpu_time else 'wall'}")
    one_instruction(args.repeat)
    products([int(s) for s in args.sizes.split(",")], threads, args.repeat, args.numpy_engine)


if __name__ == "__main__":
    main()
