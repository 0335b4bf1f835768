"""Types of pyamx's per-instruction functions and tile machine methods.

Generated from pyamx/table/isa.py by build.py: do not edit; python build.py regenerates it.
Imported under TYPE_CHECKING only: at run time the table makes these names.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._result import AMXResult
from ._types import ArrayInput

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


def tdpbf16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpbssd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpbsud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpbusd(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpbuud(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tcmmimfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tcmmrlfp16ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpbf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdpbhf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdphbf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


def tdphf8ps(c: ArrayInput, a: ArrayInput, b: ArrayInput, *, backend: str | None = None, engine: str | None = None) -> AMXResult: ...


class TileMachine:
    """The methods isa.add_dot_methods and add_row_methods put on both tile machines (named as the
    machines are, so a type checker's message names the machine)."""

    def tdpbf16ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpfp16ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpbssd(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpbsud(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpbusd(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpbuud(self, dst: int, src1: int, src2: int) -> None: ...

    def tcmmimfp16ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tcmmrlfp16ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpbf8ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tdpbhf8ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tdphbf8ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tdphf8ps(self, dst: int, src1: int, src2: int) -> None: ...

    def tcvtrowd2ps(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...

    def tcvtrowps2bf16h(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...

    def tcvtrowps2bf16l(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...

    def tcvtrowps2phh(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...

    def tcvtrowps2phl(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...

    def tilemovrow(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...
