"""Cost of one trapped-and-emulated AMX instruction (PYAMX trap mode).

Prints a figure, not a pass/fail: microseconds per trapped instruction for
a few instruction kinds, each measured as a C loop of real AMX instructions
run under the trap handler, and the ratios against an untrapped cffi call
(a C function that returns at once) and against the bare SIGILL round trip
(ud2 caught by a handler that does nothing but skip it), all in the same
process. The bare round trip is the floor no trap handler can beat.

    python benchmarks/bench_trap.py [--seconds 0.5] [--no-guard]

Needs a CPU without usable AMX (the mode refuses to run on one with AMX),
and a compiler with AMX support: the loops are the tests' self-test kernels
(tests/csrc/trap_selftest.c), built into a temporary directory first.
``--no-guard`` installs the handler without its seccomp guard, to compare.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

KINDS = [
    (0, "STTILECFG", "a trap with almost no work: the signal round trip"),
    (1, "TILEZERO", "1 KiB memset"),
    (2, "TILELOADD", "16 rows x 64 bytes"),
    (3, "TDPBF16PS", "16x16x16 bf16 pairs: 8192 fp32 FMAs"),
]


def per_call(fn, seconds: float) -> float:
    """Seconds per call of fn(n) (which runs n items), scaled until it runs `seconds`."""
    n = 16
    while True:
        t0 = time.perf_counter()
        fn(n)
        dt = time.perf_counter() - t0
        if dt >= seconds or n >= 1 << 26:
            return dt / n
        n = max(n * 2, int(n * seconds / max(dt, 1e-9) * 1.1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    ap.add_argument("--no-guard", action="store_true", help="install the handler without the seccomp guard")
    args = ap.parse_args()

    from trap_selftest_build import build

    workdir = tempfile.mkdtemp(prefix="pyamx-bench-trap-")
    try:
        ok, where = build(workdir)
        if not ok:
            print(where)
            return 1
        sys.path.insert(0, where)
        return measure(args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def measure(args) -> int:
    from _pyamx_trap_selftest import lib as st

    from pyamx.cpu import trap

    lib = trap._lib()
    nop = st.pyamx_trap_selftest_nop

    def ref(n):
        for _ in range(n):
            nop()

    ref_s = per_call(ref, args.seconds)
    print(f"reference: untrapped cffi call (C function returning at once): {ref_s * 1e9:8.1f} ns")
    raw_ns = []

    def raw(n):
        raw_ns.append(st.pyamx_trap_selftest_raw_sigill_ns(n) / n)

    # Before the trap is installed: the swap of the SIGILL disposition it does is real only then.
    per_call(raw, args.seconds)
    raw_s = raw_ns[-1] * 1e-9
    print(f"floor: bare SIGILL round trip (ud2 + a handler that only skips it): {raw_s * 1e6:8.2f} us "
          f"({raw_s / ref_s:.1f} x an untrapped cffi call)")

    try:
        if args.no_guard:
            if lib.pyamx_trap_install() != 0:
                raise RuntimeError("pyamx_trap_install failed")
        else:
            trap.enable()
    except Exception as exc:  # BackendError: AMX present, no extension, ...
        print(f"trap mode unavailable: {exc}")
        return 1
    lib.pyamx_trap_grant_permission()
    lib.pyamx_trap_set_verbose(0)
    print(f"guard: {trap.guard().reason}")
    for kind, name, what in KINDS:
        # One C call runs n trapped instructions plus a LDTILECFG and a TILERELEASE.
        def run(n, kind=kind):
            before = lib.pyamx_trap_count()
            if st.pyamx_trap_selftest_loop(kind, n) != 0:
                raise RuntimeError("selftest loop failed")
            got = lib.pyamx_trap_count() - before
            if got != n + 2:
                raise RuntimeError(f"expected {n + 2} trapped instructions, counted {got}")

        s = per_call(run, args.seconds)
        print(f"{name:<10} {s * 1e6:8.2f} us per trapped instruction "
              f"({s / ref_s:7.1f} x an untrapped cffi call, {s / raw_s:4.2f} x the bare trap)  [{what}]")
    trap_count = lib.pyamx_trap_count()
    print(f"instructions trapped in this run: {trap_count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
