"""Types of pyamx.emulator's array-level per-instruction functions.

Generated from pyamx/table/isa.py: do not edit; python pyamx/table/generate.py regenerates it.
Imported under TYPE_CHECKING only: at run time the table makes these names.
"""

from __future__ import annotations

from .._result import AMXResult
from .._types import ArrayInput
from ..table.numerics import Numerics

__all__ = [
    "tdpbf16ps",
    "tdpfp16ps",
    "tdpbssd",
    "tdpbsud",
    "tdpbusd",
    "tdpbuud",
    "tcmmimfp16ps",
    "tcmmrlfp16ps",
    "tdpbf8ps",
    "tdpbhf8ps",
    "tdphbf8ps",
    "tdphf8ps",
]


def tdpbf16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tdpfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tdpbssd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...


def tdpbsud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...


def tdpbusd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...


def tdpbuud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, engine: str | None = None) -> AMXResult: ...


def tcmmimfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tcmmrlfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tdpbf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tdpbhf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tdphbf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...


def tdphf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, numerics: str | Numerics = "sdm", engine: str | None = None) -> AMXResult: ...
