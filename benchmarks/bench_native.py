"""The native AMX matmul against this core's own peak and against PyTorch (oneDNN), in one process.

Prints (indicative figures, read off one run; never a test):

* the **peak probe**: a chain of TDPBF16PS, and one of TDPBSSD, into one tile (csrc/matmul_amx.c,
  ``pyamx_matmul_peak_probe``), each instruction waiting for the last: the rate one core sustains,
  in TFLOP/s (TOP/s for int8), best of several bursts;
* for bf16, square products 64..4096 and the LLM shapes M in {1, 8, 32, 128} x 4096 x 4096 and
  4096 x 4096 x 11008 (the weight packed once with ``pyamx.pack``), and int8 squares: pyamx's time
  and GFLOP/s, % of the probe's peak (times the threads), and, where torch is installed (an
  optional extra: ``pip install torch``), ``torch.matmul`` on bf16 tensors / ``torch._int_mm`` on
  the same bits, timed in alternating rounds in this process, and the ratio pyamx / torch;
* for 1 and 2 threads (``--threads``): ``torch.set_num_threads`` and pyamx's ``threads=``.

Without AMX silicon (the trap mode included: it measures the trap) it says so and exits 0.

    python benchmarks/bench_native.py [--threads 1 2] [--quick] [--no-torch] [--seconds S]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

SQUARE = (64, 128, 256, 512, 1024, 2048, 4096)
LLM = ((1, 4096, 4096), (8, 4096, 4096), (32, 4096, 4096), (128, 4096, 4096), (4096, 4096, 11008))
INT8_SQUARE = (256, 512, 1024, 2048, 4096)
QUICK_SQUARE, QUICK_LLM, QUICK_INT8 = (64, 256), ((1, 1024, 1024), (32, 1024, 1024)), (256,)
#: (op id attribute, operations per instruction: 16 x 16 outputs x K values x 2)
PROBES = {"TDPBF16PS": ("PYAMX_OP_TDPBF16PS", 16 * 16 * 32 * 2), "TDPBSSD": ("PYAMX_OP_TDPBSSD", 16 * 16 * 64 * 2)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    parser.add_argument("--quick", action="store_true", help="a few small shapes only")
    parser.add_argument("--no-torch", action="store_true", help="pyamx only, even where torch is installed")
    parser.add_argument("--seconds", type=float, default=0.5, help="timing budget per shape and side (default 0.5)")
    args = parser.parse_args(argv)
    if any(t < 1 for t in args.threads):
        parser.error("--threads: every count must be >= 1")
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    return args


def silicon_refusal():
    """None where AMX silicon runs pyamx's kernels, else the line that says why nothing is measured."""
    from pyamx.cpu import native

    report = native.report()
    if report.mode == "silicon":
        return None
    why = "the trap mode emulates the tile instructions" if report.mode == "trap" else report.reason
    return f"bench_native: no AMX silicon here ({why}); there is nothing to measure on this machine"


def probe(name: str, seconds: float = 0.2) -> float:
    """Sustained operations per second of one chained instruction, best of five bursts."""
    from pyamx.cpu import native

    ffi, lib = native._lib("int8" if name == "TDPBSSD" else "bf16")
    native._before_entry()
    op, ops_each = getattr(lib, PROBES[name][0]), PROBES[name][1]
    elapsed, count = ffi.new("int64_t *"), 1 << 12
    while True:
        native._check(lib.pyamx_matmul_peak_probe(op, count, elapsed), "peak probe")
        if elapsed[0] > seconds * 1e9 / 4 or count > 1 << 40:
            break
        count *= 2
    best = elapsed[0]
    for _ in range(4):
        native._check(lib.pyamx_matmul_peak_probe(op, count, elapsed), "peak probe")
        best = min(best, elapsed[0])
    return count * ops_each / (best * 1e-9)


def best_alternating(sides: dict, seconds: float) -> dict:
    """Each side's best time of one call, the sides run in alternating rounds (same machine state)."""
    for fn in sides.values():
        fn()  # warm-up: first-touch pages, the pool's threads, oneDNN's primitive cache
    best = {name: float("inf") for name in sides}
    deadline = time.perf_counter() + seconds * len(sides)
    rounds = 0
    while rounds < 3 or (time.perf_counter() < deadline and rounds < 1000):
        for name, fn in sides.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
        rounds += 1
    return best


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def cases(args):
    """(label, group, m, k, n, packed) for every product the run measures."""
    square = QUICK_SQUARE if args.quick else SQUARE
    llm = QUICK_LLM if args.quick else LLM
    int8 = QUICK_INT8 if args.quick else INT8_SQUARE
    out = [(f"{s}^3", "bf16", s, s, s, False) for s in square]
    out += [(f"{m}x{k}x{n} packed", "bf16", m, k, n, True) for m, k, n in llm]
    out += [(f"{s}^3", "int8", s, s, s, False) for s in int8]
    return out


def measure(case, threads: int, torch, seconds: float, rng) -> dict:
    import pyamx

    label, group, m, k, n, packed = case
    if group == "bf16":
        a = rng.integers(0x3F00, 0x4000, (m, k), dtype=np.uint16)  # ordinary bf16 values in [0.5, 2)
        b = rng.integers(0x3F00, 0x4000, (k, n), dtype=np.uint16)
    else:
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    right = pyamx.pack(b) if packed else b
    sides = {"pyamx": lambda: pyamx.matmul(a, right, backend="native", threads=threads)}
    if torch is not None:
        torch.set_num_threads(threads)
        if group == "bf16":
            ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            tb = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
            sides["torch"] = lambda: torch.matmul(ta, tb)
        else:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            sides["torch"] = lambda: torch._int_mm(ta, tb)
    return best_alternating(sides, seconds)


def main(argv=None) -> int:
    args = parse_args(argv)
    refusal = silicon_refusal()
    if refusal is not None:
        print(refusal)
        return 0
    torch = None if args.no_torch else _torch()
    peaks = {name: probe(name) for name in PROBES}
    for name, rate in peaks.items():
        print(f"peak probe {name}: {rate / 1e12:.2f} T{'FLOP' if name == 'TDPBF16PS' else 'OP'}/s sustained, one core "
              "(a dependent chain into one tile)")
    if torch is None:
        print("torch: not compared (" + ("--no-torch" if args.no_torch else "not installed: pip install torch") + ")")
    else:
        print(f"torch {torch.__version__}: torch.matmul on bf16 tensors, torch._int_mm on int8; same bits, same process")
    print(f"{'shape':<24}{'kind':<6}{'thr':>4}{'pyamx ms':>11}{'GFLOP/s':>10}{'% peak':>8}"
          + (f"{'torch ms':>11}{'GFLOP/s':>10}{'ratio':>8}" if torch is not None else ""))
    rng = np.random.default_rng(0)
    for case in cases(args):
        label, group, m, k, n, _ = case
        for threads in args.threads:
            best = measure(case, threads, torch, args.seconds, rng)
            flops = 2.0 * m * k * n
            peak = peaks["TDPBF16PS" if group == "bf16" else "TDPBSSD"] * threads
            line = (f"{label:<24}{group:<6}{threads:>4}{best['pyamx'] * 1e3:>11.3f}{flops / best['pyamx'] / 1e9:>10.0f}"
                    f"{100 * flops / best['pyamx'] / peak:>7.0f}%")
            if "torch" in best:
                line += (f"{best['torch'] * 1e3:>11.3f}{flops / best['torch'] / 1e9:>10.0f}"
                         f"{best['pyamx'] / best['torch']:>7.2f}x")
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
