"""The ``python -m pyamx`` command line.

Each subcommand is one function registered in ``COMMANDS`` with the
:func:`subcommand` decorator, which also names a function that adds the
subcommand's own arguments; ``main`` builds the parser from the table, so a
new subcommand (probe, record, replay, ...) is one decorated function.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Dict, NamedTuple, Optional


class Command(NamedTuple):
    run: Callable[[argparse.Namespace], int]
    help: str
    add_arguments: Optional[Callable[[argparse.ArgumentParser], None]]


COMMANDS: Dict[str, Command] = {}


def subcommand(name: str, help: str, add_arguments=None):
    """Register ``fn(args) -> exit status`` as ``python -m pyamx NAME``."""

    def register(fn):
        if name in COMMANDS:
            raise ValueError(f"subcommand {name!r} is registered twice")
        COMMANDS[name] = Command(fn, help, add_arguments)
        return fn

    return register


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="pyamx", description="Intel AMX tile instructions from Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if command.add_arguments:
            command.add_arguments(p)
    return parser


def main(argv=None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns its exit status."""
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command].run(args)


# -- info ----------------------------------------------------------------------


def backend_decision():
    """``(backend or None, why)`` as the process default would decide it; never raises."""
    try:
        from . import _backend

        return _backend.default_backend(), _backend.default_reason()
    except Exception as exc:  # PYAMX_BACKEND=native where native is unusable, or a bad value
        return None, f"{type(exc).__name__}: {exc}"


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


@subcommand("info", "report every AMX detection stage, the build's kernels and the backend choice", _info_arguments)
def info(args: argparse.Namespace) -> int:
    from . import detect
    from ._version import __version__

    rep = detect.report()
    backend, why = backend_decision()
    if args.json:
        out = {"version": __version__, "backend": backend, "backend_reason": why}
        out.update(rep.as_dict())
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"pyamx {__version__}")
        print(f"backend: {backend or 'none'} ({why})")
        print(detect.format_report(rep))
    return 0


# -- probe, record, replay -------------------------------------------------------


def _backend_argument(parser: argparse.ArgumentParser) -> None:
    from ._backend import CHOICES

    parser.add_argument("--backend", choices=CHOICES, default=None,
                        help="backend to run (default: the process default, PYAMX_BACKEND)")


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    _backend_argument(parser)
    from .emulator.numerics import PRESETS

    parser.add_argument("--numerics", choices=sorted(PRESETS), default=None,
                        help="emulator model to probe (emulator backend only)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


@subcommand("probe", "tell which numerics option reproduces a backend, point by point", _probe_arguments)
def probe_command(args: argparse.Namespace) -> int:
    from . import probe
    from .errors import AMXError

    try:
        report = probe.probe(args.backend, args.numerics)
    except (AMXError, ValueError) as exc:
        print(f"pyamx probe: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(probe.format_report(report))
    return 0


def _record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="vector file to write (JSON)")
    _backend_argument(parser)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--per-class", type=int, default=4, help="random shapes per input class")


@subcommand("record", "run seeded golden-vector cases on a backend and write them with provenance", _record_arguments)
def record_command(args: argparse.Namespace) -> int:
    from . import vectors
    from .errors import AMXError

    try:
        prov = vectors.record(args.file, args.backend, seed=args.seed, per_class=args.per_class)
    except (AMXError, OSError) as exc:
        print(f"pyamx record: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.file}: {vectors.describe_provenance(prov)}")
    return 0


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="vector file to check (JSON)")
    _backend_argument(parser)
    parser.add_argument("--show", type=int, default=5, help="mismatches to print in full")


@subcommand("replay", "check a backend against a golden-vector file, bit for bit", _replay_arguments)
def replay_command(args: argparse.Namespace) -> int:
    from . import _backend, vectors
    from .errors import AMXError

    try:
        result = vectors.replay(args.file, args.backend)
        chosen = _backend.resolve(args.backend)
    except AMXError as exc:
        print(f"pyamx replay: {exc}", file=sys.stderr)
        return 2
    print(vectors.format_replay(args.file, result, chosen, show=args.show))
    return 1 if result.mismatches else 0


# -- bench (owner: matmul) ---------------------------------------------------------


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from . import bench

    bench.add_arguments(parser)


@subcommand("bench", "time pyamx.matmul per dtype family against numpy float32 matmul", _bench_arguments)
def bench_command(args: argparse.Namespace) -> int:
    from . import bench

    return bench.main(args)


# -- demo ------------------------------------------------------------------------


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0)


@subcommand("demo", "the main job: one bf16 product through TDPBF16PS, checked against float64", _demo_arguments)
def demo_command(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args.seed)


# -- run -------------------------------------------------------------------------


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true", help="print each emulated instruction (stderr)")
    parser.add_argument("--stats", action="store_true",
                        help="print emulated instructions by mnemonic and the time spent, at exit (stderr)")
    parser.add_argument("--stats-file", metavar="FILE", help="write the --stats report to FILE instead")
    parser.add_argument("--env", action="store_true",
                        help="print the shell line that enables emulation for every later command, and exit")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")


@subcommand("run", "run a program with its AMX instructions emulated (docs/run.md)", _run_arguments)
def run_command(args: argparse.Namespace) -> int:
    from . import run as runner

    try:
        if args.env:
            print(runner.shell_exports())
            return 0
        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        if args.stats_file:
            with open(args.stats_file, "w", encoding="utf-8") as out:
                rc = runner.run(program, verbose=args.verbose, stats=True, stats_out=out)
        else:
            rc = runner.run(program, verbose=args.verbose, stats=args.stats)
    except runner.RunError as exc:
        print(exc, file=sys.stderr)
        return 2
    return runner.exit_like(rc)
