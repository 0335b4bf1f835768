"""``pyamx bench``: time pyamx.matmul per kernel group against numpy's float32 matmul.

Every backend and engine that can run here is timed at each size, next to
numpy float32 matmul of the same shape, in the same process, with the same
thread count (through threadpoolctl when it is installed; otherwise numpy's
BLAS keeps its own thread count, and the report says so). Figures, not
tests: on a shared machine they are indicative.

``--budget`` bounds the whole run: no measurement starts once it is spent, or
when its estimate (from the previous size, or from a 256^3 calibration call
where there is no previous size of at least 256) exceeds what is left; each one left out is
listed as skipped. Ctrl-C ends the run between or inside measurements and the
table holds what was timed before (exit status 130).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Callable, Optional, Sequence, TypedDict

import numpy as np

from ..table import isa
from ..emulator.engine import COMPILED_GROUPS

if TYPE_CHECKING:
    from typing import Protocol

    from .._result import AMXResult

    class _Limiter(Protocol):
        """What threadpoolctl.threadpool_limits returns, as used here."""

        def restore_original_limits(self) -> None: ...


class Environment(TypedDict):
    """Where the figures were taken (``report["environment"]``)."""

    pyamx: str
    numpy: str
    blas: dict[str, object]
    threads: Optional[int]
    cpus: Optional[int]
    native: str
    native_usable: bool
    native_mode: Optional[str]
    budget_s: float


class Result(TypedDict):
    """One timed row: a kernel group on one backend/engine at one size, next to numpy's float32 matmul."""

    group: str
    size: int
    backend: Optional[str]
    engine: Optional[str]
    native_mode: Optional[str]
    seconds: float
    gflops: float
    numpy_seconds: float
    numpy_gflops: float
    ratio: float
    amx_peak_fraction: Optional[float]


class Skipped(TypedDict, total=False):
    """A measurement left out, and why (``backend`` None: everything at ``size``)."""

    backend: Optional[str]
    engine: Optional[str]
    group: str
    size: int
    reason: str
    asked: bool


class Report(TypedDict):
    """What :func:`run` returns (``pyamx bench --json`` prints it)."""

    environment: Environment
    results: list[Result]
    skipped: list[Skipped]
    interrupted: bool


#: the groups pyamx.matmul routes real operands to (AMX-COMPLEX's complex product is not benchmarked here:
#: its numpy reference would be a complex64 product, not the float32 one every row is compared with)
GROUPS = tuple(g for g in isa.GROUPS if any(i.matmul for i in isa.DOTS if i.group == g))
DEFAULT_SIZES = (256, 512, 1024)
DEFAULT_BUDGET_S = 60.0
#: the size that calibrates a backend's rate before a larger first size: a call takes milliseconds
#: on the compiled engines and about 0.1 s on the numpy engine
CALIBRATION_SIZE = 256
#: the largest size: three float32 operands of 8192^2 already take 768 MiB, the operands of each group more
MAX_SIZE = 8192
MAX_BUDGET_S = 7 * 24 * 3600.0
#: AMX TMUL throughput per core per cycle (one 16x16x32 bf16/fp16 or 16x16x64 int8 product per 16 cycles)
#: (fp8: 16x16x64 per 16 cycles assumed, as int8; no AMX-FP8 silicon has been measured)
AMX_OPS_PER_CYCLE = {"bf16": 1024, "fp16": 1024, "int8": 2048, "fp8": 2048}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ._argtypes import bounded_float, bounded_int
    from ..emulator.engine import MAX_THREADS

    parser.add_argument("--sizes", type=bounded_int(1, MAX_SIZE, "a size"), nargs="+", default=list(DEFAULT_SIZES),
                        metavar="N", help=f"square sizes M = N = K to time, 1..{MAX_SIZE} (default: %(default)s)")
    parser.add_argument("--threads", type=bounded_int(1, MAX_THREADS, "the thread count"), default=None,
                        help="threads for pyamx and numpy alike (default: the engine's default; numpy's BLAS likewise)")
    parser.add_argument("--engines", default=None,
                        help="comma-separated emulator engines to time (default: every engine that runs here)")
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated: {', '.join(GROUPS)}")
    parser.add_argument("--budget", type=bounded_float(0.0, MAX_BUDGET_S, "the budget in seconds"),
                        default=DEFAULT_BUDGET_S,
                        help="seconds the whole run may take: no measurement starts once they are spent or when "
                             "its estimate exceeds what is left, and each one left out is listed "
                             "(default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


# -- the environment ------------------------------------------------------------------------


def _threadpoolctl() -> Optional[ModuleType]:
    try:
        import threadpoolctl
    except ImportError:
        return None
    module: ModuleType = threadpoolctl
    return module


def blas_info() -> dict[str, object]:
    """The BLAS numpy uses (name, version, threads, the kernel it picked for this CPU where threadpoolctl
    says) and how the thread count is controlled."""
    tpc = _threadpoolctl()
    if tpc is not None:
        pools = [p for p in tpc.threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            p = pools[0]
            return {"name": p.get("internal_api"), "version": p.get("version"), "threads": p.get("num_threads"),
                    "kernel": p.get("architecture"), "thread_control": "threadpoolctl"}
    info: dict[str, object] = {"name": None, "version": None, "threads": None, "kernel": None,
            "thread_control": None if tpc is None else "threadpoolctl (found no BLAS pool)"}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info.update(name=blas.get("name"), version=blas.get("version"))
    except Exception:  # older numpy: show_config has no dicts mode
        pass
    if tpc is None:
        info["thread_control"] = "none: threadpoolctl is not installed, numpy's BLAS uses its own thread count"
    return info


class _BlasThreads:
    """numpy's BLAS limited to ``threads`` for the block (a no-op without threadpoolctl or threads=None)."""

    def __init__(self, threads: Optional[int]) -> None:
        self.threads = threads
        self.limiter: Optional[_Limiter] = None

    def __enter__(self) -> _BlasThreads:
        tpc = _threadpoolctl()
        if tpc is not None and self.threads is not None:
            self.limiter = tpc.threadpool_limits(limits=self.threads, user_api="blas")
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if self.limiter is not None:
            self.limiter.restore_original_limits()


def _cpu_mhz() -> Optional[float]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return None


def amx_peak_gflops(group: str, threads: int) -> Optional[float]:
    """Nominal AMX peak of ``threads`` cores at the current clock (None where the clock is unknown)."""
    mhz = _cpu_mhz()
    return None if mhz is None else AMX_OPS_PER_CYCLE[group] * mhz * 1e-3 * threads


# -- what to run ----------------------------------------------------------------------------


def _operands(group: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    from ..table import bf16

    if group == "int8":
        return rng.integers(-128, 128, (n, n)).astype(np.int8), rng.integers(-128, 128, (n, n)).astype(np.int8)
    a32 = rng.standard_normal((n, n)).astype(np.float32)
    b32 = rng.standard_normal((n, n)).astype(np.float32)
    if group == "fp8":
        import ml_dtypes

        return a32.astype(ml_dtypes.float8_e5m2), b32.astype(ml_dtypes.float8_e4m3fn)
    if group == "bf16":
        return bf16.from_float32(a32), bf16.from_float32(b32)
    return a32.astype(np.float16), b32.astype(np.float16)


def _targets(engines: Optional[Sequence[str]]) -> list[tuple[str, Optional[str], Optional[str]]]:
    """[(backend, engine or None, why-not or None)] for every backend/engine pair asked for."""
    from .. import _backend
    from ..errors import AMXError
    from ..emulator.engine import NAMES, resolve

    out: list[tuple[str, Optional[str], Optional[str]]] = []
    for name in [e for e in NAMES if e != "auto"] if engines is None else engines:
        try:
            out.append(("emulator", resolve(name, "sdm").name, None))
        except AMXError as exc:
            out.append(("emulator", name, str(exc)))
    usable, reason = _backend.native_status("bf16")
    out.append(("native", None, None if usable else reason))
    return out


def _best_time(fn: Callable[[], object], budget: float, first: Optional[float] = None) -> float:
    """Best of a few runs, fewer when one run is long; ``first``: the time of a run already made."""
    if first is None:
        start = time.perf_counter()
        fn()
        first = time.perf_counter() - start
    best, spent, runs = first, first, 1
    while runs < 5 and spent + first < min(budget, 2.0):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


# Each side is timed in its own steady state, after warm-up calls that last WARM_S. Timed right
# after a multi-threaded numpy call, a two-thread engine run found one core taken by OpenBLAS's idle
# workers, which busy-wait about 0.1 s before they sleep (18-22 ms where it takes 12 at 1024^3 on
# 2 cores); timed after a pause instead, either side (numpy too: 11 or 20 ms) found the second vCPU
# handed to another guest by this VM's host. Calls back to back avoid both, for both sides alike.
WARM_S = 0.15


def _steady_best(fn: Callable[[], object], runs: int) -> float:
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < WARM_S:
        fn()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _best_interleaved(fn: Callable[[], object], reference: Callable[[], object], budget: float, rounds: int = 2,
                      runs: int = 3) -> tuple[float, float]:
    """(best time of fn, best time of reference), in alternating rounds: on a shared machine a
    neighbour's load then hits both alike instead of whichever happened to run during it."""
    best_fn = best_ref = float("inf")
    start = time.perf_counter()
    for _ in range(rounds):
        best_ref = min(best_ref, _steady_best(reference, runs))
        best_fn = min(best_fn, _steady_best(fn, runs))
        if time.perf_counter() - start > min(budget, 4.0):
            break
    return best_fn, best_ref


class _Budget:
    """The seconds the whole run may take, from its start."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.deadline = seconds, time.perf_counter() + seconds

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def refusal(self, estimate: float) -> Optional[str]:
        """Why a measurement estimated at ``estimate`` seconds must not start (None: it may)."""
        left = self.left()
        if left <= 0:
            return f"the budget of {self.seconds:g} s was spent"
        if estimate > left:
            return f"estimated {estimate:.1f} s exceeds the {left:.1f} s left of the budget of {self.seconds:g} s"
        return None


def run(sizes: Sequence[int] = DEFAULT_SIZES, *, threads: Optional[int] = None,
        engines: Optional[Sequence[str]] = None, groups: Sequence[str] = GROUPS, budget: float = DEFAULT_BUDGET_S,
        progress: Optional[Callable[[str], None]] = None) -> Report:
    """Time everything; returns {"environment": ..., "results": [...], "skipped": [...], "interrupted": bool}.

    ``budget``: seconds for the whole run (module docstring). ``engines``: the emulator engines asked
    for (None: every one); a target nobody named that cannot run here is skipped with a short reason.
    Ctrl-C (KeyboardInterrupt) returns what was timed with ``interrupted`` true.
    """
    import pyamx
    from .. import _backend

    say: Callable[[str], None] = progress or (lambda message: None)
    allowance = _Budget(budget)
    native_usable, native_reason = _backend.native_status("bf16")
    env: Environment = {"pyamx": pyamx.__version__, "numpy": np.__version__, "blas": blas_info(), "threads": threads,
           "cpus": os.cpu_count(), "native": native_reason, "native_usable": bool(native_usable),
           "native_mode": _backend.native_mode(), "budget_s": budget}
    report: Report = {"environment": env, "results": [], "skipped": [], "interrupted": False}
    targets = _targets(engines)
    for backend, engine, why_not in targets:
        if why_not is not None:
            asked = backend == "emulator" and engines is not None
            report["skipped"].append({"backend": backend, "engine": engine, "reason": why_not, "asked": asked})
    runnable = [(b, e) for b, e, why in targets if why is None]
    try:
        _time_every_size(report, sizes, groups, runnable, threads, allowance, say)
    except KeyboardInterrupt:
        report["interrupted"] = True
    return report


def _time_every_size(report: Report, sizes: Sequence[int], groups: Sequence[str],
                     runnable: Sequence[tuple[str, Optional[str]]], threads: Optional[int], allowance: _Budget,
                     say: Callable[[str], None]) -> None:
    import pyamx
    from ..errors import AMXError

    results, skipped = report["results"], report["skipped"]
    rng = np.random.default_rng(0)
    total = len(sizes) * (1 + len(groups) * len(runnable))
    step = 0
    # (backend, engine, group) -> (seconds per multiply-add, the size it was measured at): from the
    # last size that ran, or a calibration call where that size was too small to scale from (a call's
    # fixed cost dominates there and, scaled by n^3, would skip what takes a second)
    rate: dict[tuple[str, Optional[str], str], tuple[float, int]] = {}
    for n in sizes:
        why_not = allowance.refusal(0.0)
        if why_not is not None:  # nothing at this size can start, not even numpy's reference
            step += 1 + len(groups) * len(runnable)
            say(f"[{step}/{total}] everything at {n}^3: skipped ({why_not})")
            skipped.append({"backend": None, "engine": None, "size": n, "reason": why_not})
            continue
        a32, b32 = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
        step += 1
        say(f"[{step}/{total}] numpy float32 matmul {n}^3")
        with _BlasThreads(threads):  # a share of what is left: the timed rounds below time it again
            reference = _best_time(lambda: a32 @ b32, allowance.left() / 10)
        flops = 2.0 * n ** 3
        for group in groups:
            a, b = _operands(group, n, rng)
            for backend, engine in runnable:
                step += 1
                key = (backend, engine, group)
                label = f"{backend}/{engine}" if engine else backend
                if backend == "emulator" and engine != "numpy" and group not in COMPILED_GROUPS:
                    skipped.append({"backend": backend, "engine": engine, "group": group, "size": n,
                                    "reason": f"the {engine} engine does not implement {group}: numpy only"})
                    continue

                def call(a: np.ndarray = a, b: np.ndarray = b, backend: str = backend,
                         engine: Optional[str] = engine) -> AMXResult:
                    return pyamx.matmul(a, b, backend=backend, engine=engine, threads=threads)

                try:
                    with _BlasThreads(threads):  # an engine that calls BLAS (numpy: int8) gets the same count
                        measured_at = rate.get(key, (0.0, 0))[1]
                        if measured_at < CALIBRATION_SIZE < n and allowance.refusal(0.0) is None:
                            rate[key] = (_calibrate(group, backend, engine, threads), CALIBRATION_SIZE)
                        estimate = rate.get(key, (0.0, 0))[0] * n ** 3
                        why_not = allowance.refusal(estimate)
                        if why_not is not None:
                            say(f"[{step}/{total}] {group} {label} {n}^3: skipped ({why_not})")
                            skipped.append({"backend": backend, "engine": engine, "group": group, "size": n,
                                            "reason": why_not})
                            continue
                        say(f"[{step}/{total}] {group} {label} {n}^3" + (f" (about {estimate:.1f} s)" if estimate else ""))
                        started = time.perf_counter()
                        result = call()
                        first = time.perf_counter() - started
                        left = allowance.left()
                        if first * 10 > left:  # no room for the interleaved rounds: a few runs at most
                            seconds = _best_time(call, left - first, first)
                        else:
                            seconds, again = _best_interleaved(call, lambda: a32 @ b32, left)
                            reference = min(reference, again)
                except AMXError as exc:
                    skipped.append({"backend": backend, "engine": engine, "group": group, "size": n, "reason": str(exc)})
                    continue
                rate[key] = (seconds / n ** 3, n)
                record: Result = {"group": group, "size": n, "backend": result.backend, "engine": result.engine,
                          "native_mode": result.native_mode, "seconds": seconds, "gflops": flops / seconds / 1e9,
                          "numpy_seconds": reference, "numpy_gflops": flops / reference / 1e9,
                          "ratio": seconds / reference, "amx_peak_fraction": None}
                if result.backend == "native" and result.native_mode == "silicon":
                    peak = amx_peak_gflops(group, threads or os.cpu_count() or 1)
                    record["amx_peak_fraction"] = None if peak is None else record["gflops"] / peak
                results.append(record)
        for record in results:  # every ratio at this size against the best numpy time seen at it
            if record["size"] == n:
                record["numpy_seconds"] = reference
                record["numpy_gflops"] = flops / reference / 1e9
                record["ratio"] = record["seconds"] / reference


def _calibrate(group: str, backend: str, engine: Optional[str], threads: Optional[int]) -> float:
    """Seconds per multiply-add of one CALIBRATION_SIZE^3 call: the estimate of a larger first size."""
    import pyamx

    n = CALIBRATION_SIZE
    a, b = _operands(group, n, np.random.default_rng(1))
    pyamx.matmul(a, b, backend=backend, engine=engine, threads=threads)  # the first call pays one-time set-up
    best = float("inf")
    for _ in range(2):  # the better of two: a neighbour's load on a shared machine inflates one
        started = time.perf_counter()
        pyamx.matmul(a, b, backend=backend, engine=engine, threads=threads)
        best = min(best, time.perf_counter() - started)
    return best / n ** 3


def format_report(report: Report) -> str:
    env = report["environment"]
    blas = env["blas"]
    lines = [
        f"pyamx {env['pyamx']}, numpy {env['numpy']}, BLAS {blas['name']} {blas['version'] or ''}".rstrip()
        + (f" (kernel {blas['kernel']})" if blas.get("kernel") else ""),
        f"threads: {env['threads'] or 'default'} (numpy BLAS thread control: {blas['thread_control']}); cpus: {env['cpus']}",
    ]
    if env.get("native_usable", True):  # where it is not, its skipped line says so
        lines.append(f"native: {env['native']}")
    lines += [
        "",
        f"{'group':6s} {'backend/engine':18s} {'size':>6s} {'time':>11s} {'GFLOP/s':>9s} {'numpy f32':>11s} {'ratio':>9s} {'AMX peak':>8s}",
    ]
    for r in report["results"]:
        label = f"{r['backend']}" + (f"/{r['engine']}" if r["engine"] else f"/{r['native_mode']}" if r["native_mode"] else "")
        peak = "" if r["amx_peak_fraction"] is None else f"{100 * r['amx_peak_fraction']:.0f}%"
        lines.append(f"{r['group']:6s} {label:18s} {r['size']:6d} {r['seconds'] * 1e3:9.2f}ms {r['gflops']:9.2f} "
                     f"{r['numpy_seconds'] * 1e3:9.2f}ms {r['ratio']:8.2f}x {peak:>8s}")
    for s in report["skipped"]:
        where = " ".join(str(s[k]) for k in ("group", "size") if k in s)
        if s["backend"] is None:  # the budget ran out before this size
            lines.append(f"skipped: everything at size {s['size']}: {s['reason']}")
            continue
        label = s["backend"] + (f"/{s['engine']}" if s.get("engine") else "")
        # A backend or engine nobody named that cannot run here is one short line: its full reason
        # (several sentences for native) is `pyamx info`'s job and in --json.
        reason = _NOT_HERE if s.get("asked") is False else s["reason"]
        lines.append(f"skipped: {' '.join(x for x in (label, where) if x)}: {reason}")
    if report.get("interrupted"):
        lines.append("interrupted (Ctrl-C): the rows above are what was timed before")
    return "\n".join(lines)


_NOT_HERE = "does not run here (`pyamx info` says why)"


def main(args: argparse.Namespace) -> int:
    def split(value: Optional[str]) -> Optional[list[str]]:
        return None if value is None else [v.strip() for v in value.split(",") if v.strip()]

    groups = split(args.groups) or []  # --groups has a default: never None
    bad = [f for f in groups if f not in GROUPS]
    if bad or not groups:
        print(f"pyamx bench: --groups takes {', '.join(GROUPS)}, not {args.groups!r}", file=sys.stderr)
        return 2
    engines = split(args.engines)
    from ..emulator.engine import NAMES

    if engines is not None and [e for e in engines if e not in NAMES]:
        print(f"pyamx bench: --engines takes {', '.join(NAMES)}, not {args.engines!r}", file=sys.stderr)
        return 2
    report = run(args.sizes, threads=args.threads, engines=engines, groups=groups, budget=args.budget,
                 progress=lambda message: print(message, file=sys.stderr, flush=True))
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 130 if report["interrupted"] else 0  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
