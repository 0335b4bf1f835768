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

Start-up is part of the contract (docs/run.md: under 50 ms on top of the
program): ``pyamx run`` imports only os, sys, signal and the cffi module of
the trap at run time -- no argparse (:func:`parse_arguments` reads the
command line), no subprocess (``os.posix_spawnp``: the kernel's vfork path,
no pipe), no pathlib or tempfile, no typing.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace
    from collections.abc import Mapping
    from pathlib import Path
    from typing import IO, Optional, Sequence

    from ..cpu._nativelib import FFI, Lib

PRELOAD_PREFIX, PRELOAD_SUFFIX = "_amxpreload", ".so"
PRELOAD_GLOB = PRELOAD_PREFIX + "*" + PRELOAD_SUFFIX
STATS_ENV = "PYAMX_RUN_STATS"
VERBOSE_ENV = "PYAMX_RUN_VERBOSE"
GUARD_ENV = "PYAMX_TRAP_GUARD"  # 0: no seccomp guard (pyamx.cpu.trap.GUARD_ENV; read by the preload too)


class RunError(RuntimeError):
    """``pyamx run`` cannot start the program (no preload library, not x86-64 Linux).

    ``status``: the exit status ``pyamx run`` ends with: 127 for a program that is not there and
    126 for one that cannot be executed, as shells say; 2 for the rest.
    """

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


#: the exit statuses shells give a command they cannot find or cannot execute (POSIX, "Command Search
#: and Execution")
NOT_FOUND_STATUS, NOT_EXECUTABLE_STATUS = 127, 126


def preload_file() -> str:
    """The path of the preload library shipped in the package (a str); RunError saying how to get it."""
    machine = os.uname().machine if hasattr(os, "uname") else ""
    if not sys.platform.startswith("linux") or machine.lower() not in ("x86_64", "amd64"):
        raise RunError(f"pyamx run needs x86-64 Linux; this is {sys.platform}/{machine}")
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the package root, where build.py puts it
    found = sorted(name for name in os.listdir(here)
                   if name.startswith(PRELOAD_PREFIX) and name.endswith(PRELOAD_SUFFIX))
    if not found:
        raise RunError("the preload library pyamx/_amxpreload*.so is not built; reinstall pyamx with a C "
                       "compiler (pip install --force-reinstall pyamx) or run `python build.py` in a checkout")
    return os.path.join(here, found[0])


def preload_path() -> Path:
    """The preload library shipped in the package, as a ``pathlib.Path``; RunError saying how to get it."""
    from pathlib import Path

    return Path(preload_file())


def environment(preload: str | os.PathLike[str], stats_fd: Optional[int] = None, verbose: bool = False,
                base: Optional[Mapping[str, str]] = None, guard: bool = True) -> dict[str, str]:
    """The environment a program runs under: the preload in LD_PRELOAD (kept for children), and
    the counters descriptor ``stats_fd`` (:func:`new_counters`), if any.

    Appended after what is there: a sanitizer's runtime (libasan) must stay first, and any
    position in LD_PRELOAD comes before libc, which is all the interposed functions need.
    """
    env = dict(os.environ if base is None else base)
    rest = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = (rest + ":" if rest else "") + str(preload)
    if stats_fd is not None:
        env[STATS_ENV] = counters_variable(stats_fd)
    else:
        env.pop(STATS_ENV, None)
    if verbose:
        env[VERBOSE_ENV] = "1"
    else:
        env.pop(VERBOSE_ENV, None)
    if not guard:
        env[GUARD_ENV] = "0"
    return env


class RunStats(tuple[object, ...]):
    """What the preload counted over the whole process tree of one run.

    A named tuple (written out: ``typing`` and ``collections`` cost start-up time) of
    processes (that loaded the preload, exec'd programs included), installed (of those,
    with the trap installed), requests (ARCH_REQ_XCOMP_PERM calls answered), granted,
    counts (mnemonic -> emulated instructions), seconds (mnemonic -> time in the handler),
    why (the last reason a process could not install the trap) and complemented (processes
    on AMX silicon with the complement mode installed: it emulates the AMX extensions the
    CPU lacks, docs/run.md), listeners_refused (the program's requests for a seccomp
    listener of its own, which got EBUSY because the guard holds the one the kernel allows) and
    sigill_named (faulting instructions the handler named on stderr before SIGILL's default action).
    """

    __slots__ = ()
    _fields = ("processes", "installed", "requests", "granted", "counts", "seconds", "why", "complemented",
               "listeners_refused", "sigill_named")

    def __new__(cls, processes: int, installed: int, requests: int, granted: int, counts: dict[str, int],
                seconds: dict[str, float], why: str, complemented: int = 0, listeners_refused: int = 0,
                sigill_named: int = 0) -> RunStats:
        return tuple.__new__(cls, (processes, installed, requests, granted, counts, seconds, why, complemented,
                                   listeners_refused, sigill_named))

    def __repr__(self) -> str:
        return "RunStats(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self)) + ")"

    processes = property(lambda self: self[0])
    installed = property(lambda self: self[1])
    requests = property(lambda self: self[2])
    granted = property(lambda self: self[3])
    counts = property(lambda self: self[4])
    seconds = property(lambda self: self[5])
    why = property(lambda self: self[6])
    complemented = property(lambda self: self[7])
    listeners_refused = property(lambda self: self[8])
    sigill_named = property(lambda self: self[9])

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _trap_module() -> tuple[FFI, Lib]:
    """``(ffi, lib)`` of pyamx._trap, for the counters' layout: the cffi module alone (the
    loader, which imports more, only to word the error when it is missing or stale)."""
    from .._version import __version__

    try:
        from .. import _trap  # type: ignore[attr-defined]  # compiled by build.py (cffi): no stub

        if _trap.ffi.string(_trap.lib.pyamx_trap_build_version()).decode() == __version__:
            return _trap.ffi, _trap.lib
    except ImportError:
        pass
    from ..cpu._nativelib import load_trap

    return load_trap()  # raises ImportError saying what is wrong


def new_counters() -> int:
    """A descriptor of a zeroed counters file of the struct's size, which no name leads to: created
    0600 and unlinked at once, inheritable so that the program and every descendant it execs map
    the same file (by ``PYAMX_RUN_STATS``, see :func:`environment`). The caller closes it."""
    ffi, _ = _trap_module()
    fd, path = _private_file()
    try:
        os.unlink(path)
        os.ftruncate(fd, ffi.sizeof("struct pyamx_run_stats"))
        os.set_inheritable(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def counters_variable(fd: int) -> str:
    """``PYAMX_RUN_STATS``'s value for counters descriptor ``fd``: ``FD:DEV:INO``, so that a
    descendant whose ``fd`` is by then another file (a program reuses the number) leaves it alone."""
    st = os.fstat(fd)
    return f"{fd}:{st.st_dev}:{st.st_ino}"


def _private_file() -> tuple[int, str]:
    """``(fd, path)`` of a new 0600 file in $TMPDIR or /tmp: tempfile.mkstemp's job, done with os
    alone, because importing tempfile costs start-up time; tempfile only where that folder fails."""
    folder = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        path = os.path.join(folder, f"pyamx-run-{os.getpid()}-{os.urandom(6).hex()}.stats")
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue
        except OSError:
            break
    import tempfile

    return tempfile.mkstemp(prefix="pyamx-run-", suffix=".stats")


def read_stats(fd: int) -> RunStats:
    """Decode the counters file of descriptor ``fd`` (all zero if no process ever attached)."""
    ffi, lib = _trap_module()
    data = os.pread(fd, ffi.sizeof("struct pyamx_run_stats"), 0)
    buf = ffi.new("struct pyamx_run_stats *")
    ffi.memmove(buf, data, min(len(data), ffi.sizeof(buf[0])))
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    if buf.magic == lib.PYAMX_RUN_STATS_MAGIC:
        for op in range(1, len(buf.count)):
            if buf.count[op]:
                name = ffi.string(lib.pyamx_trap_op_name(op)).decode()
                counts[name] = int(buf.count[op])
                seconds[name] = buf.ns[op] / 1e9
    return RunStats(int(buf.processes), int(buf.installed), int(buf.requests), int(buf.granted), counts,
                    seconds, ffi.string(buf.why).decode(errors="replace"), int(buf.complemented),
                    int(buf.listeners_refused), int(buf.sigill_named))


def format_stats(stats: RunStats) -> str:
    requests = "" if stats.complemented and not stats.installed else f" ({stats.requests} permission request(s))"
    lines = [f"pyamx run: {stats.total} AMX instructions emulated in {stats.processes} process(es){requests}"]
    if stats.complemented:
        lines.append(f"  on AMX silicon: {stats.complemented} process(es) ran AMX on the CPU and had only the "
                     "extensions it lacks emulated (the complement mode)")
    elif stats.why == "silicon" and not stats.installed:
        lines.append("  on AMX silicon: the program ran AMX on the CPU; this CPU has every extension pyamx emulates")
    for name in sorted(stats.counts, key=lambda n: -stats.counts[n]):
        n, s = stats.counts[name], stats.seconds[name]
        lines.append(f"  {name:<12} {n:>12}  {s * 1e3:10.3f} ms in the handler  ({s / n * 1e6:.2f} us each)")
    if stats.listeners_refused:
        lines.append(f"  {stats.listeners_refused} request(s) of the program for a seccomp listener got EBUSY: the "
                     "guard holds the one the kernel allows (pyamx run --no-guard leaves it to the program)")
    return "\n".join(lines)


def nothing_emulated_message(stats: RunStats) -> Optional[str]:
    """What to tell a user whose program ran no tile instruction under emulation (None if it did)."""
    if stats.total:
        return None
    if stats.processes == 0:
        return ("pyamx run: the preload library never loaded: the program is statically linked, setuid, "
                "or cleared LD_PRELOAD; nothing was emulated")
    if stats.installed == 0 and stats.why == "silicon":
        # The program ran as it would have without pyamx run: nothing the user must act on
        # (--stats says it ran on silicon).
        return None
    if stats.installed == 0:
        return f"pyamx run: emulation could not be installed ({stats.why or 'see above'}); nothing was emulated"
    if stats.requests:
        return ("pyamx run: the program asked for AMX permission (granted) but executed no tile instruction; "
                "if it also checks CPUID (leaf 7, EDX bit 24) or XGETBV (XCR0 bits 17-18), it saw no AMX: "
                f"those cannot be intercepted -- see {_run_doc()}")
    return ("pyamx run: the program executed no AMX instruction and never asked for AMX permission; it most "
            "likely checked CPUID/XGETBV itself (which cannot be intercepted) and took a non-AMX path -- see "
            f"{_run_doc()}")


def sigill_message(stats: RunStats) -> str:
    """What to tell a user whose program died of SIGILL, from what the counters saw."""
    if not (stats.installed or stats.complemented):
        return ("pyamx run: the program died of SIGILL, and no emulation was installed in it "
                f"({stats.why or 'the preload never loaded'}): the CPU itself refused the instruction")
    if not stats.sigill_named:
        return ("pyamx run: the program died of SIGILL, but pyamx's handler saw no instruction fault: the "
                "signal was sent (raise(), kill(), another process) and no handler of the program took it, as "
                "on silicon, or something replaced pyamx's SIGILL handler (a raw rt_sigaction under --no-guard)")
    causes = ["an instruction this CPU lacks that pyamx does not emulate, or a genuine illegal instruction",
              "an AMX encoding or configuration silicon rejects (#UD)"]
    if stats.installed and not stats.requests:
        causes.append("a tile instruction before arch_prctl(ARCH_REQ_XCOMP_PERM), refused as the kernel refuses it")
    return ("pyamx run: the program died of SIGILL; pyamx's handler named the instruction, its address and "
            "bytes on the line above. The causes it can have: " + "; ".join(causes))


def _run_doc() -> str:
    from .._docs import doc

    return doc("run.md")


# The program's terminal signals go to it; it decides how to end.
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
# Ignored by the interpreter at start-up; a program starts with them at their default, as
# subprocess does (restore_signals).
_DEFAULTED = ("SIGPIPE", "SIGXFSZ")


def _spawn_and_wait(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Start ``argv`` (PATH searched) with ``env``; its exit status (-N for signal N).

    posix_spawnp rather than subprocess: no import cost, and the program inherits this
    process's file descriptors, as if started directly (a jobserver pipe, ``3>file``);
    the interpreter's own are close-on-exec (PEP 446).

    The program stays in this process's group, so a terminal's Ctrl-C, Ctrl-\\ or hang-up
    reaches it directly: such a signal (sent by the kernel, ``si_code`` SI_KERNEL) is not
    forwarded, or the program would get it twice. One another process sent to ``pyamx run``
    (``kill``) is forwarded. The signals are taken synchronously (sigwaitinfo), which is
    what tells the two apart.
    """
    import signal

    defaults = [getattr(signal, name) for name in _DEFAULTED if hasattr(signal, name)]
    forwarded = {getattr(signal, n) for n in _FORWARDED}
    waited = forwarded | {signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        try:
            pid = os.posix_spawnp(argv[0], list(argv), env, setsigdef=defaults, setsigmask=old_mask)
        except OSError as exc:
            status = NOT_FOUND_STATUS if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE_STATUS
            raise RunError(f"pyamx run: {argv[0]}: {exc.strerror or exc}", status) from exc
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            info = signal.sigwaitinfo(waited)
            if info.si_signo in forwarded and info.si_code != _SI_KERNEL:
                try:
                    os.kill(pid, info.si_signo)
                except ProcessLookupError:
                    pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


#: siginfo's si_code of a signal the kernel itself sent (a terminal's, to its foreground group)
_SI_KERNEL = 0x80


def run(argv: Sequence[str], *, verbose: bool = False, stats: bool = False, stats_out: Optional[IO[str]] = None,
        quiet: bool = False, guard: bool = True) -> int:
    """Run ``argv`` under emulation; returns its exit status (-N when signal N killed it).

    ``guard=False`` (``--no-guard``, or ``PYAMX_TRAP_GUARD=0`` in the environment) leaves out
    the seccomp guard of the SIGILL handler: no filter on the program's system calls, but a raw
    ``rt_sigaction(SIGILL)`` system call of the program then displaces the emulation.
    """
    if not argv:
        raise RunError("pyamx run: no program given (pyamx run [--verbose] [--stats] [--no-guard] -- PROGRAM "
                       "[ARGS...])")
    from .. import _env

    guard = guard and _env.flag(GUARD_ENV, True, error=_guard_variable_error)
    preload = preload_file()
    counters = new_counters()
    try:
        rc = _spawn_and_wait(argv, environment(preload, counters, verbose, guard=guard))
        result = read_stats(counters)
    finally:
        os.close(counters)
    out = stats_out or sys.stderr
    if stats:
        print(format_stats(result), file=out)
    if not quiet:
        import signal

        note = nothing_emulated_message(result)
        if rc == -signal.SIGILL:
            note = sigill_message(result)
        if note:
            print(note, file=sys.stderr)
        if rc == -signal.SIGSYS:
            print("pyamx run: the program died of SIGSYS: a process exec'd without the preload (LD_PRELOAD "
                  "removed, or a static program) asked arch_prctl for AMX permission where no guard could "
                  f"let the kernel answer it -- see {_run_doc()}", file=sys.stderr)
    return rc


def _guard_variable_error(name: str, value: str, allowed: str) -> RunError:
    return RunError(f"pyamx run: {name}={value!r} is not valid; use {allowed}")


def exit_like(rc: int) -> int:
    """Make this process end the way the program did: same exit code or same fatal signal."""
    if rc >= 0:
        return rc
    import signal

    sig = -rc
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the program dumped its own core, if any
    except (ImportError, ValueError, OSError):
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # neither can be caught, so neither set nor blocked
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    return 128 + sig  # a signal whose default is to be ignored


def shell_exports(preload: Optional[str | os.PathLike[str]] = None) -> str:
    """``export LD_PRELOAD=...`` for running many programs without pyamx run's start-up each time."""
    import shlex

    env = environment(preload or preload_file(), base={"LD_PRELOAD": os.environ.get("LD_PRELOAD", "")})
    return f"export LD_PRELOAD={shlex.quote(env['LD_PRELOAD'])}"


_FLAGS = {"--verbose": "verbose", "--stats": "stats", "--env": "env", "--no-guard": "no_guard"}


if TYPE_CHECKING:
    _ArgumentsBase = Namespace
else:
    _ArgumentsBase = object  # argparse is not imported: `pyamx run` start-up


class _Arguments(_ArgumentsBase):
    """What argparse would give the ``run`` subcommand (see cli._run_arguments): a Namespace to type checkers."""

    command = "run"

    def __init__(self) -> None:
        self.verbose = self.stats = self.env = self.no_guard = False
        self.stats_file: Optional[str] = None
        self.program: list[str] = []


def parse_arguments(words: Sequence[str]) -> Optional[Namespace]:
    """``pyamx run``'s own options, read without building argparse's parser (start-up time).

    ``words`` follow ``run``. Returns the parsed arguments, or None for anything but the plain
    forms (help, an abbreviation, an unknown option, a missing value): argparse then parses the
    command line and words the error, so both readers accept the same language.
    """
    args = _Arguments()
    words = list(words)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            args.program = words[i + 1:]
            return args
        if not word.startswith("-") or word == "-":
            args.program = words[i:]
            return args
        if word in _FLAGS:
            setattr(args, _FLAGS[word], True)
        elif word == "--stats-file" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            i += 1
            args.stats_file = words[i]
        elif word.startswith("--stats-file=") and len(word) > len("--stats-file="):
            args.stats_file = word[len("--stats-file="):]
        else:
            return None
        i += 1
    return args
