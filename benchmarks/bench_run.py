"""Cost of ``pyamx run``: per emulated instruction, and start-up.

Prints figures, not pass/fail (this project's machines are shared and noisy:
read them as indicative).

* Per instruction: benchmarks/programs/run_loop.c runs one kind of tile
  instruction N times under the preload library with pyamx run's counters
  file (timed inside the program),
  against the bare SIGILL round trip -- ``ud2`` caught by the program's own
  handler that only skips it, without the preload -- the floor no
  trap-and-emulate scheme can beat.
* Per signal: ``raise(SIGUSR1)`` to a handler installed through libc's
  ``sigaction``, run bare and under pyamx run, where the handler runs
  through the preload's trampoline (its own tile state per signal frame).
* Per raw ``rt_sigaction``: a query through the system call, bare and under
  pyamx run (where the guard runs, each is a round trip to its supervisor
  thread), and with the guard's mechanism alone, set up by the program for
  itself (a seccomp filter notifying a listener that a thread of the process
  answers with CONTINUE): the figure for AMX silicon, where the guard does
  not run.
* Start-up, on a program that executes no tile instruction (``/bin/true``):
  bare, with the preload in LD_PRELOAD (what ``eval "$(pyamx run --env)"``
  gives every later command), and the whole ``pyamx run -- /bin/true``,
  as ``python -m pyamx run`` and through the installed console script
  (which add the Python interpreter and pyamx's import), next to the
  interpreter's own start.

    python benchmarks/bench_run.py [--n 20000] [--repeat 5] [--starts 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

KINDS = ["sttilecfg", "tilezero", "tileloadd", "tilestored", "tdpbf16ps", "tdpfp16ps", "tdpbssd"]


def build(tmp: str) -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("bench_run: needs a C compiler")
    exe = os.path.join(tmp, "run_loop")
    subprocess.run([cc, "-O2", "-o", exe, os.path.join(ROOT, "benchmarks", "programs", "run_loop.c")], check=True)
    return exe


def per_instruction(exe: str, kind: str, n: int, env) -> float:
    # the counters travel by an inherited descriptor (pyamx.tools.run.new_counters): keep it open in the child
    fds = (int(env["PYAMX_RUN_STATS"].split(":")[0]),) if "PYAMX_RUN_STATS" in env else ()
    out = subprocess.run([exe, kind, str(n)], env=env, capture_output=True, text=True, check=True,
                         pass_fds=fds).stdout
    return float(out.split()[2]) / n


def best_of(exe: str, runs: dict, n: int, repeat: int) -> dict:
    """The least time per loop step of each run (name -> (kind, env)), taken round robin, so that a
    load change on a shared machine hits every run alike."""
    best: dict = {}
    for _ in range(repeat):
        for name, (kind, env) in runs.items():
            t = per_instruction(exe, kind, n, env)
            best[name] = min(best.get(name, t), t)
    return best


def start_time(argv, env, starts: int) -> float:
    times = []
    for _ in range(starts):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="instructions per timed loop")
    parser.add_argument("--repeat", type=int, default=5, help="loops per kind (the minimum is reported)")
    parser.add_argument("--starts", type=int, default=20, help="program starts per start-up figure (median)")
    args = parser.parse_args()

    from pyamx.tools import run

    preload = run.preload_path()
    bare = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", run.STATS_ENV, run.VERBOSE_ENV)}
    pre = run.environment(preload, base=bare)
    # The loops run as under `pyamx run`: with its counters file, so the handler also counts and
    # times each instruction for --stats (the wrapper process itself does not affect in-program times).
    counters = run.new_counters()
    under_run = run.environment(preload, counters, base=bare)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        from pyamx.cpu import native

        # On AMX silicon pyamx run leaves the tile instructions to the CPU (the complement mode):
        # there is nothing to time per instruction, only the trampoline below.
        kinds = [] if native.report().amx_usable else KINDS
        if not kinds:
            print("this CPU has usable AMX: pyamx run leaves tile instructions to the silicon; the figures per "
                  "emulated instruction need a CPU without AMX (.ci/nonamx-vm, docs/testing.md)")
        best = best_of(exe, {"ud2": ("ud2", bare), **{k: (k, under_run) for k in kinds}}, args.n, args.repeat)
        floor = best["ud2"]
        print(f"bare SIGILL round trip (ud2, own handler, no preload): {floor * 1e6:8.2f} us")
        for kind in kinds:
            cost = best[kind]
            print(f"{kind.upper():<10} under pyamx run:                      {cost * 1e6:8.2f} us"
                  f"   ({cost / floor:.2f}x the round trip)")
        signal_cost = best_of(exe, {"bare": ("signal", bare), "under pyamx run": ("signal", under_run)}, args.n,
                              args.repeat)
        print(f"raise(SIGUSR1) to a libc-installed handler, bare:        {signal_cost['bare'] * 1e6:8.2f} us")
        print(f"  the same under pyamx run (through the trampoline):    {signal_cost['under pyamx run'] * 1e6:8.2f} us"
              f"   (+{(signal_cost['under pyamx run'] - signal_cost['bare']) * 1e9:.0f} ns)")
        # The guard's price on a raw rt_sigaction (docs/run.md, "The guard"): under pyamx run with
        # the guard each one is a round trip to its supervisor thread. The guard cannot run on AMX
        # silicon, so the program also sets the same mechanism up for itself ("notify", run bare).
        rawsig = best_of(exe, {"bare": ("rawsig", bare), "under pyamx run": ("rawsig", under_run),
                               "notify": ("notify", bare)}, args.n, args.repeat)
        print(f"raw rt_sigaction(SIGUSR1) query, bare:                  {rawsig['bare'] * 1e6:8.2f} us")
        print(f"  the same under pyamx run:                             {rawsig['under pyamx run'] * 1e6:8.2f} us"
              f"   ({rawsig['under pyamx run'] / rawsig['bare']:.1f}x; the guard only where the trap mode runs)")
        print(f"  notified to a listener a thread answers (CONTINUE):   {rawsig['notify'] * 1e6:8.2f} us"
              f"   ({rawsig['notify'] / rawsig['bare']:.1f}x: the guard's mechanism on this CPU)")
        counted = run.read_stats(counters)
        os.close(counters)
        assert counted.total > 0 or not kinds, "the loops ran without the preload"
    # An installed wheel has its bytecode compiled; a checkout run with PYTHONDONTWRITEBYTECODE=1
    # would otherwise compile pyamx's modules on every start and count that too.
    import compileall

    compileall.compile_dir(os.path.dirname(os.path.dirname(run.__file__)), quiet=1, maxlevels=1)  # pyamx/ and its subpackages
    true = shutil.which("true") or "/bin/true"
    script = os.path.join(os.path.dirname(sys.executable), "pyamx")
    commands = [("bare", [true], bare), ("with the preload", [true], pre),
                ("python -m pyamx run", [sys.executable, "-m", "pyamx", "run", "--", true], bare)]
    if os.access(script, os.X_OK):
        commands.append(("pyamx run (console script)", [script, "run", "--", true], bare))
    commands.append(("the interpreter alone (python -c pass)", [sys.executable, "-c", "pass"], bare))
    times = {name: [] for name, _, _ in commands}
    for _ in range(args.starts):  # interleaved, as above
        for name, argv, env in commands:
            times[name].append(start_time(argv, env, 1))
    t_bare = statistics.median(times["bare"])
    print(f"start-up of {true} (median of {args.starts}):")
    for name, _, _ in commands:
        t = statistics.median(times[name])
        extra = "" if name == "bare" else f"  (+{(t - t_bare) * 1e3:.1f} ms)"
        print(f"  {name:<40} {t * 1e3:7.1f} ms{extra}")


if __name__ == "__main__":
    main()
