"""The bounded number types of the command line's arguments (argparse ``type=``).

Apart from cli.py so that a command defined elsewhere (pyamx.tools.bench) takes
them without importing the CLI, which imports it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `pyamx run` loads the CLI
if TYPE_CHECKING:
    from typing import Callable


def bounded_int(minimum: int, maximum: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer in ``minimum..maximum`` (a usage error, exit 2, otherwise).

    Every number a command takes has an upper bound too: a huge one would otherwise run for
    ever or die of MemoryError deep inside, with a traceback.
    """

    def parse(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{value} is out of range; {what} is an integer >= {minimum} and <= {maximum}")
        return value

    return parse


def bounded_float(minimum: float, maximum: float, what: str) -> Callable[[str], float]:
    """An argparse type: a finite number with ``minimum < value <= maximum``."""

    def parse(text: str) -> float:
        import argparse
        import math

        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and minimum < value <= maximum):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range; {what} is a number > {minimum:g} and <= {maximum:g}")
        return value

    return parse
