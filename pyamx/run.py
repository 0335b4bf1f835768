"""``pyamx run``: an unmodified AMX program on a CPU without AMX.

The program runs with ``pyamx/_amxpreload*.so`` in ``LD_PRELOAD``: before
its own code, that library installs the trap mode (csrc/trap/) and emulates
the kernel's AMX permission interface (``arch_prctl`` with
``ARCH_GET_XCOMP_SUPP`` / ``ARCH_GET_XCOMP_PERM`` / ``ARCH_REQ_XCOMP_PERM``),
in every thread, forked child and exec'd program that keeps the
environment. This module starts the program, waits for it, and reads the
counters file the preload updates (``struct pyamx_run_stats`` in
csrc/trap/trap.h) to report what was emulated. docs/run.md has the details
and the limits.

It imports nothing heavy at module level: ``pyamx run`` should cost little
more than the interpreter's own start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

PRELOAD_GLOB = "_amxpreload*.so"
STATS_ENV = "PYAMX_RUN_STATS"
VERBOSE_ENV = "PYAMX_RUN_VERBOSE"


class RunError(RuntimeError):
    """``pyamx run`` cannot start the program (no preload library, not x86-64 Linux)."""


def preload_path() -> Path:
    """The preload library shipped in the package; RunError saying how to get it."""
    import platform

    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        raise RunError(f"pyamx run needs x86-64 Linux; this is {sys.platform}/{platform.machine()}")
    found = sorted(Path(__file__).resolve().parent.glob(PRELOAD_GLOB))
    if not found:
        raise RunError("the preload library pyamx/_amxpreload*.so is not built; reinstall pyamx with a C "
                       "compiler (pip install --force-reinstall pyamx) or run `python build.py` in a checkout")
    return found[0]


def environment(preload: Path, stats_path: Optional[str] = None, verbose: bool = False, base=None) -> dict:
    """The environment a program runs under: the preload in LD_PRELOAD (kept for children).

    Appended after what is there: a sanitizer's runtime (libasan) must stay first, and any
    position in LD_PRELOAD comes before libc, which is all the interposed functions need.
    """
    env = dict(os.environ if base is None else base)
    rest = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = (rest + ":" if rest else "") + str(preload)
    if stats_path:
        env[STATS_ENV] = stats_path
    else:
        env.pop(STATS_ENV, None)
    if verbose:
        env[VERBOSE_ENV] = "1"
    else:
        env.pop(VERBOSE_ENV, None)
    return env


class RunStats(NamedTuple):
    """What the preload counted over the whole process tree of one run."""

    processes: int  # processes that loaded the preload (exec'd programs included)
    installed: int  # of those, with the trap installed
    requests: int  # ARCH_REQ_XCOMP_PERM calls answered
    granted: int
    counts: dict  # mnemonic -> emulated instructions
    seconds: dict  # mnemonic -> time in the handler
    why: str  # the last reason a process could not install the trap

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _new_stats_file() -> str:
    from .trap import _load

    ffi, _ = _load()
    fd, path = tempfile.mkstemp(prefix="pyamx-run-", suffix=".stats")
    os.ftruncate(fd, ffi.sizeof("struct pyamx_run_stats"))
    os.close(fd)
    return path


def read_stats(path: str) -> RunStats:
    """Decode a counters file (all zero if no process ever attached)."""
    from .trap import _load

    ffi, lib = _load()
    data = Path(path).read_bytes()
    buf = ffi.new("struct pyamx_run_stats *")
    ffi.memmove(buf, data, min(len(data), ffi.sizeof(buf[0])))
    counts, seconds = {}, {}
    if buf.magic == lib.PYAMX_RUN_STATS_MAGIC:
        for op in range(1, len(buf.count)):
            if buf.count[op]:
                name = ffi.string(lib.pyamx_trap_op_name(op)).decode()
                counts[name] = int(buf.count[op])
                seconds[name] = buf.ns[op] / 1e9
    return RunStats(int(buf.processes), int(buf.installed), int(buf.requests), int(buf.granted), counts,
                    seconds, ffi.string(buf.why).decode(errors="replace"))


def format_stats(stats: RunStats) -> str:
    lines = [f"pyamx run: {stats.total} AMX instructions emulated in {stats.processes} process(es)"
             f" ({stats.requests} permission request(s))"]
    for name in sorted(stats.counts, key=lambda n: -stats.counts[n]):
        n, s = stats.counts[name], stats.seconds[name]
        lines.append(f"  {name:<12} {n:>12}  {s * 1e3:10.3f} ms in the handler  ({s / n * 1e6:.2f} us each)")
    return "\n".join(lines)


def nothing_emulated_message(stats: RunStats) -> Optional[str]:
    """What to tell a user whose program ran no tile instruction under emulation (None if it did)."""
    if stats.total:
        return None
    if stats.processes == 0:
        return ("pyamx run: the preload library never loaded: the program is statically linked, setuid, "
                "or cleared LD_PRELOAD; nothing was emulated")
    if stats.installed == 0 and stats.why == "silicon":
        return "pyamx run: this CPU has usable AMX: the program ran on silicon and nothing was emulated"
    if stats.installed == 0:
        return f"pyamx run: emulation could not be installed ({stats.why or 'see above'}); nothing was emulated"
    if stats.requests:
        return ("pyamx run: the program asked for AMX permission (granted) but executed no tile instruction; "
                "if it also checks CPUID (leaf 7, EDX bit 24) or XGETBV (XCR0 bits 17-18), it saw no AMX: "
                "those cannot be intercepted -- see docs/run.md")
    return ("pyamx run: the program executed no AMX instruction and never asked for AMX permission; it most "
            "likely checked CPUID/XGETBV itself (which cannot be intercepted) and took a non-AMX path -- see "
            "docs/run.md")


_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def run(argv: Sequence[str], *, verbose: bool = False, stats: bool = False, stats_out=None,
        quiet: bool = False) -> int:
    """Run ``argv`` under emulation; returns its exit status (-N when signal N killed it)."""
    if not argv:
        raise RunError("pyamx run: no program given (pyamx run [--verbose] [--stats] -- PROGRAM [ARGS...])")
    preload = preload_path()
    path = _new_stats_file()
    try:
        env = environment(preload, path, verbose)
        try:
            child = subprocess.Popen(list(argv), env=env)
        except OSError as exc:
            raise RunError(f"pyamx run: cannot start {argv[0]!r}: {exc}") from exc
        # The program's terminal signals go to it; it decides how to end.
        previous = {s: signal.signal(s, lambda sig, _f: child.send_signal(sig)) for s in _FORWARDED}
        try:
            rc = child.wait()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
        result = read_stats(path)
    finally:
        os.unlink(path)
    out = stats_out or sys.stderr
    if stats:
        print(format_stats(result), file=out)
    if not quiet:
        note = nothing_emulated_message(result)
        if rc == -signal.SIGILL:
            note = ("pyamx run: the program died of SIGILL: a tile instruction before "
                    "arch_prctl(ARCH_REQ_XCOMP_PERM) (refused as the kernel refuses it; the line above names "
                    "it), an encoding or configuration silicon rejects, or a genuine illegal instruction")
        if note:
            print(note, file=sys.stderr)
        if rc == -signal.SIGSYS:
            print("pyamx run: the program died of SIGSYS: a process exec'd without the preload (LD_PRELOAD "
                  "removed) asked arch_prctl for AMX permission -- see docs/run.md", file=sys.stderr)
    return rc


def exit_like(rc: int) -> int:
    """Make this process end the way the program did: same exit code or same fatal signal."""
    if rc >= 0:
        return rc
    sig = -rc
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the program dumped its own core, if any
    except (ImportError, ValueError, OSError):
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    return 128 + sig  # a signal whose default is to be ignored


def shell_exports(preload: Optional[Path] = None) -> str:
    """``export LD_PRELOAD=...`` for running many programs without pyamx run's start-up each time."""
    import shlex

    env = environment(preload or preload_path(), base={"LD_PRELOAD": os.environ.get("LD_PRELOAD", "")})
    return f"export LD_PRELOAD={shlex.quote(env['LD_PRELOAD'])}"
