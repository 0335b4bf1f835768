"""The ``python -m pyamx`` command line.

Each subcommand is one function registered in ``COMMANDS`` with the
:func:`subcommand` decorator, which also names a function that adds the
subcommand's own arguments; ``main`` builds the parser from the table, so a
new subcommand (probe, record, replay, ...) is one decorated function.
"""

from __future__ import annotations

import os
import sys

from ._argtypes import bounded_int

# argparse, json and typing are imported where used: `pyamx run` starts without them (docs/run.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Callable, Dict, Optional, TextIO, Union

    #: a subcommand's body: parsed arguments -> exit status
    Run = Callable[[argparse.Namespace], int]


class Command:
    """One subcommand: ``run(args) -> exit status``, its help line (or a function that words it when the
    parser is built, for a line read from the instruction table), the function adding its arguments;
    ``computes``: it runs tile arithmetic, so every setting of the backends and engines must be valid;
    ``details``: a function wording what ``pyamx COMMAND --help`` adds to the help line (a path of this
    machine, such as where the docs are, belongs there and not in ``pyamx --help``'s list)."""

    __slots__ = ("run", "help", "add_arguments", "computes", "details")

    def __init__(self, run: Callable[[argparse.Namespace], int], help: Union[str, Callable[[], str]],
                 add_arguments: Optional[Callable[[argparse.ArgumentParser], None]], computes: bool = False,
                 details: Optional[Callable[[], str]] = None) -> None:
        self.run, self.help, self.add_arguments, self.computes = run, help, add_arguments, computes
        self.details = details


COMMANDS: Dict[str, Command] = {}


def subcommand(name: str, help: Union[str, Callable[[], str]],
               add_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None, computes: bool = False,
               details: Optional[Callable[[], str]] = None) -> Callable[[Run], Run]:
    """Register ``fn(args) -> exit status`` as ``python -m pyamx NAME``."""

    def register(fn: Run) -> Run:
        if name in COMMANDS:
            raise ValueError(f"subcommand {name!r} is registered twice")
        COMMANDS[name] = Command(fn, help, add_arguments, computes, details)
        return fn

    return register


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser with every registered subcommand.

    ``command``: when known, only that subcommand's arguments are built. Some
    (``--numerics`` choices, ``--backend``) import the emulator and so numpy;
    ``pyamx run`` must start without paying for that.
    """
    import argparse

    from .._version import __version__

    parser = argparse.ArgumentParser(prog="pyamx", description="Intel AMX tile instructions from Python.")
    parser.add_argument("--version", action="version", version=f"pyamx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, spec in COMMANDS.items():
        text = spec.help() if callable(spec.help) else spec.help
        details = spec.details() if spec.details and command == name else None
        p = sub.add_parser(name, help=text, description=f"{text} ({details})" if details else text)
        if spec.add_arguments and command in (None, name):
            spec.add_arguments(p)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns its exit status.

    A failure pyamx can explain (a backend that cannot run, a bad
    environment variable, an unreadable file) is one line on stderr and
    exit status 2, never a traceback; a closed stdout (``| head``) ends the
    command quietly; Ctrl-C ends it with status 130 (128 + SIGINT, as shells
    report it) and one line, no traceback.
    """
    from .._env import EnvVarError
    from ..errors import AMXError

    words = sys.argv[1:] if argv is None else list(argv)
    args = None
    if words[:1] == ["run"]:  # read without argparse: `pyamx run` start-up (docs/run.md)
        from .run import parse_arguments

        args = parse_arguments(words[1:])
    if args is None:
        first = next((word for word in words if not word.startswith("-")), None)
        args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    if args.command != "run":  # its start-up imports nothing it does not need (docs/run.md)
        _one_line_warnings()
    try:
        if COMMANDS[args.command].computes:
            check_environment()
        status = COMMANDS[args.command].run(args)
        sys.stdout.flush()  # a closed pipe shows here, while it can still be handled
    except BrokenPipeError:
        _quiet_stdout()
        return 1
    except KeyboardInterrupt:  # Ctrl-C: what a command had to say is said (bench: its partial table)
        print(f"pyamx {args.command}: interrupted", file=sys.stderr)
        return 130
    except (AMXError, EnvVarError, OSError) as exc:
        print(f"pyamx {args.command}: {error_message(exc, args.command)}", file=sys.stderr)
        return 2
    return status


def check_environment() -> None:
    """Every PYAMX_* setting of the backends and engines, validated before a command computes.

    A command reads only the settings its path happens to reach (the one-instruction
    emulator never reads PYAMX_ENGINE_THREADS): without this, a typo failed `matmul` and
    was silently ignored by `demo`, `record` and the rest.
    """
    from .. import _backend
    from ..emulator import engine

    _backend.requested()
    engine.requested()
    engine.default_threads()


def _one_line_warnings() -> None:
    """pyamx's own warnings as one ``pyamx: warning: ...`` line: the default format shows a source
    line of this module, which means nothing to someone who typed a command."""
    import warnings

    from ..errors import ExtensionWarning

    shown = warnings.showwarning
    if getattr(shown, "pyamx_one_line", False):  # main() ran before in this process
        return

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Optional[TextIO] = None, line: Optional[str] = None) -> None:
        if issubclass(category, ExtensionWarning):
            print(f"pyamx: warning: {message}", file=sys.stderr if file is None else file)
        else:
            shown(message, category, filename, lineno, file, line)

    setattr(show, "pyamx_one_line", True)  # read back above
    warnings.showwarning = show


def _quiet_stdout() -> None:
    """What the Python docs advise on SIGPIPE: point stdout at devnull, so the exit-time flush is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def error_message(exc: BaseException, command: str) -> str:
    """The one line a command prints for ``exc``, with command-line (not Python) advice."""
    from ..errors import NativeUnavailableError

    if isinstance(exc, NativeUnavailableError) and exc.reason is not None:
        return (
            f"the native backend cannot run here: {exc.reason}. Run `pyamx info` for every detection stage, "
            f"or `pyamx {command} --backend emulator` for the bit-exact emulator"
        )
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


# numpy's generators take no negative seed; 2**63 - 1 keeps it a JSON integer every reader can hold.
_seed = bounded_int(0, 2**63 - 1, "a seed")
#: random shapes per input class: each adds a dozen cases; far more would only make the file huge
MAX_PER_CLASS = 1000
#: mismatches replay prints in full, each a few lines
MAX_SHOW = 10_000


# -- info ----------------------------------------------------------------------


def backend_decision() -> tuple[Optional[str], str]:
    """``(backend or None, why)`` as the process default would decide it; never raises."""
    try:
        from .. import _backend

        return _backend.default_backend(), _backend.default_reason()
    except Exception as exc:  # PYAMX_BACKEND=native where native is unusable, or a bad value
        return None, f"{type(exc).__name__}: {exc}"


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


@subcommand("info", "report every AMX detection stage, the build's kernels and the backend choice", _info_arguments)
def info(args: argparse.Namespace) -> int:
    from ..cpu import _native_start, _runtime, detect
    from .._result import backend_label
    from .._version import __version__

    rep = _native_start.report()  # info says what native does here: after the native start
    backend, why = backend_decision()
    if args.json:
        import json

        out: Dict[str, object] = {"version": __version__, "backend": backend, "backend_reason": why,
               "backend_label": backend_label(backend, rep.mode if backend == "native" else None)}
        out.update(rep.as_dict())
        from ..emulator import engine

        out["engine"] = engine.describe()
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n".join(_runtime.runtime_lines()))
        print(detect.format_report(rep))
    return 0


# -- probe, record, replay -------------------------------------------------------


def _backend_argument(parser: argparse.ArgumentParser) -> None:
    from .._backend import CHOICES

    parser.add_argument("--backend", choices=CHOICES, default=None,
                        help="backend to run (default: the process default, PYAMX_BACKEND)")


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    _backend_argument(parser)
    from ..table.numerics import PRESETS

    parser.add_argument("--numerics", choices=sorted(PRESETS), default=None,
                        help="emulator model to probe (emulator backend only)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


@subcommand("probe", "tell which numerics option reproduces a backend, point by point", _probe_arguments, computes=True)
def probe_command(args: argparse.Namespace) -> int:
    from . import probe

    from .. import _backend

    try:
        report = probe.probe(args.backend, args.numerics)
    except ValueError as exc:  # --numerics with the native backend
        print(f"pyamx probe: {exc}", file=sys.stderr)
        return 2
    # the row instructions on the backend the dot products ran on
    rows = probe.rows_report(_backend.resolve(args.backend, numerics=args.numerics), args.numerics)
    if args.json:
        import json

        json.dump({**report, "rows": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(probe.format_report(report))
        print(probe.format_rows(rows))
    return 0


def _record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="vector file to write (JSON); - writes to stdout. An existing file is replaced "
                                        "whole and keeps its mode; a symbolic link is written through to its target")
    _backend_argument(parser)
    parser.add_argument("--seed", type=_seed, default=2026, help="non-negative integer (default 2026)")
    parser.add_argument("--per-class", type=bounded_int(1, MAX_PER_CLASS, "the count"), default=4,
                        help=f"random shapes per input class, 1..{MAX_PER_CLASS} (default 4)")


@subcommand("record", "run seeded golden-vector cases on a backend and write them with provenance",
            _record_arguments, computes=True)
def record_command(args: argparse.Namespace) -> int:
    from . import vectors

    to_stdout = args.file == "-"
    prov = vectors.record(sys.stdout if to_stdout else args.file, args.backend, seed=args.seed,
                          per_class=args.per_class)
    if to_stdout:
        sys.stdout.flush()  # a closed pipe is reported (quietly, by main) before claiming success
    # With the vectors on stdout, the summary goes to stderr so the JSON stays parseable.
    out = sys.stderr if to_stdout else sys.stdout
    print(f"wrote {'stdout' if to_stdout else args.file}: {vectors.describe_provenance(prov)}", file=out)
    skipped = vectors.describe_skipped(prov.get("skipped", {}))
    if skipped:
        print(f"  {skipped}", file=out)
    return 0


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="vector file to check (JSON)")
    _backend_argument(parser)
    parser.add_argument("--show", type=bounded_int(0, MAX_SHOW, "the count"), default=5,
                        help=f"mismatches to print in full, 0..{MAX_SHOW} (default 5)")


@subcommand("replay", "check a backend against a golden-vector file, bit for bit", _replay_arguments, computes=True)
def replay_command(args: argparse.Namespace) -> int:
    from .. import _backend
    from . import vectors

    from .._result import backend_label

    result = vectors.replay(args.file, args.backend)
    chosen = _backend.resolve(args.backend)
    label = backend_label(chosen, _backend.native_mode() if chosen == "native" else None)
    print(vectors.format_replay(args.file, result, label, show=args.show))
    if result.total == sum(result.skipped.values()):  # nothing compared is not a pass
        print(f"pyamx replay: {args.file}: no case could run on {label}; nothing was checked", file=sys.stderr)
        return 2
    return 1 if result.mismatches else 0


# -- bench (owner: matmul) ---------------------------------------------------------


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from . import bench

    bench.add_arguments(parser)


@subcommand("bench", "time pyamx.matmul per kernel group against numpy float32 matmul", _bench_arguments, computes=True)
def bench_command(args: argparse.Namespace) -> int:
    from . import bench

    return bench.main(args)


# -- demo ------------------------------------------------------------------------


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=_seed, default=0, help="non-negative integer (default 0)")
    _backend_argument(parser)


def _demo_help() -> str:
    from ..table import isa  # here, not at the top: `pyamx run` starts without pyamx.table.isa (docs/run.md)

    return f"the main job: one bf16 product through {isa.MATMUL_ROUTES[('bf16', 'bf16')].mnemonic}, checked against float64"


@subcommand("demo", _demo_help,
            _demo_arguments, computes=True)
def demo_command(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args.seed, args.backend)


# -- run -------------------------------------------------------------------------


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    # pyamx.tools.run.parse_arguments reads the plain forms of these without argparse; keep both in step.
    import argparse

    parser.add_argument("--verbose", action="store_true", help="print each emulated instruction (stderr)")
    parser.add_argument("--stats", action="store_true",
                        help="print emulated instructions by mnemonic and the time spent, at exit (stderr)")
    parser.add_argument("--stats-file", metavar="FILE",
                        help="write the --stats report to FILE instead (an existing FILE keeps its mode; "
                             "a symbolic link is written through to its target)")
    parser.add_argument("--no-guard", action="store_true",
                        help="no seccomp guard for the SIGILL handler (no cost on the program's system calls; "
                             "a raw rt_sigaction(SIGILL) of the program then displaces the emulation)")
    parser.add_argument("--env", action="store_true",
                        help="print the shell line that enables emulation for every later command, and exit")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")


def _run_details() -> str:
    from .._docs import doc

    return f"the full story: {doc('run.md')}"


def _write_stats_file(path: str, text: str) -> None:
    """The --stats report into ``path``; a failure is said on stderr, never instead of the program's status."""
    from ._files import atomic_writer

    try:
        with atomic_writer(path) as out:
            out.write(text)
    except OSError as exc:
        print(f"pyamx run: the --stats report could not be written to {path}: {exc.strerror or exc}; "
              f"the program's exit status stands. The report:\n{text}", file=sys.stderr, end="")


@subcommand("run", "run a program with its AMX instructions emulated", _run_arguments, details=_run_details)
def run_command(args: argparse.Namespace) -> int:
    from . import run as runner

    try:
        if args.env:
            print(runner.shell_exports())
            return 0
        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        if args.stats_file:
            import io

            report = io.StringIO()
            rc = runner.run(program, verbose=args.verbose, stats=True, stats_out=report, guard=not args.no_guard)
            _write_stats_file(args.stats_file, report.getvalue())
        else:
            rc = runner.run(program, verbose=args.verbose, stats=args.stats, guard=not args.no_guard)
    except runner.RunError as exc:
        print(exc, file=sys.stderr)
        return exc.status
    return runner.exit_like(rc)
