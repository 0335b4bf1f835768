"""The AMX instructions pyamx runs: one row each, read by every layer.

The public one-instruction functions, both tile machines' methods, the
vector files, the probe, the CLI and the tests take the instruction set
from here; docs/isa.md links each row to its emulator function, compiled
kernel, trap case and tests. Adding an instruction is one row here plus its
arithmetic in the emulator, the kernels and the trap.

The C op id of a row is not written here: it is ``lib.PYAMX_OP_<MNEMONIC>``
of the compiled module (``enum pyamx_op`` in csrc/pyamx_ops.h, which both
modules' headers include), looked up on first use, and None on an install
without the extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

#: VEX.pp values (the implied legacy prefix)
PP_NP, PP_66, PP_F3, PP_F2 = 0, 1, 2, 3


@dataclass(frozen=True)
class Encoding:
    """VEX.128 encoding: ``map`` (0F38 for every tile instruction), ``pp``, opcode byte, ModRM form.

    ``form`` is ``"reg"`` (ModRM.mod = 3: tile registers in reg/rm/vvvv),
    ``"mem"`` (a plain memory operand) or ``"sibmem"`` (memory operand with a
    mandatory SIB byte: base + index * scale is the row stride).
    """

    map: str
    pp: int
    opcode: int
    form: str
    w: int = 0

    def vex3(self, r: int = 1, x: int = 1, b: int = 1, vvvv: int = 0b1111) -> bytes:
        """The three VEX bytes (C4 form); ``r``/``x``/``b`` are the inverted bits as encoded, vvvv too."""
        mmmmm = {"0F": 1, "0F38": 2, "0F3A": 3}[self.map]
        return bytes((0xC4, (r << 7) | (x << 6) | (b << 5) | mmmmm, (self.w << 7) | (vvvv << 3) | self.pp))


@dataclass(frozen=True)
class Instruction:
    """One AMX instruction.

    ``kind``: ``"config"`` (LDTILECFG, STTILECFG, TILERELEASE: the whole
    state), ``"memory"`` (tile data: loads, stores and TILEZERO, which need
    configured tiles) or ``"dot"``. The dot-product fields are
    None for the others: ``family`` (kernel family: bf16, fp16, int8),
    ``lanes`` (values per dword), ``c_dtype``/``ab_dtype`` (numpy dtypes of
    the accumulator and operand bits as the tiles hold them),
    ``call_dtype`` (the operand dtype the public function is called with in
    the vector files), ``operand``/``accumulator`` (formats), ``signed``
    ((src1, src2) sign extension, int8 only).
    """

    mnemonic: str
    kind: str
    encoding: Encoding
    cpuid: str
    family: Optional[str] = None
    lanes: Optional[int] = None
    accumulator: Optional[str] = None
    operand: Optional[str] = None
    c_dtype: Optional[str] = None
    ab_dtype: Optional[str] = None
    call_dtype: Optional[str] = None
    signed: Optional[Tuple[bool, bool]] = None

    @property
    def name(self) -> str:
        """The lower-case name of the Python functions and methods (``"tdpbf16ps"``)."""
        return self.mnemonic.lower()

    @property
    def c_op(self) -> str:
        """The name of this instruction's id in the compiled module's ``lib``."""
        return "PYAMX_OP_" + self.mnemonic

    @property
    def op_id(self) -> Optional[int]:
        """``lib.PYAMX_OP_<MNEMONIC>``, or None where the extension is not built."""
        lib = _lib()
        return None if lib is None else getattr(lib, self.c_op)

    @property
    def is_float(self) -> bool:
        return self.accumulator == "fp32"

    @property
    def summary(self) -> str:
        """What a dot product does to its tiles, in one line (for docstrings and listings)."""
        if self.kind != "dot":
            return self.kind
        if self.is_float:
            return f"dst += src1 . src2 over {self.operand} pairs, fp32 accumulation"
        s1, s2 = ("signed" if x else "unsigned" for x in self.signed)
        return f"dst += {s1} (src1) x {s2} (src2) bytes, int32 wrap-around accumulation"


_FP32, _INT32 = "fp32", "int32"


def _dot(mnemonic, pp, opcode, cpuid, family, operand, signed=None) -> Instruction:
    floating = family != "int8"
    return Instruction(
        mnemonic, "dot", Encoding("0F38", pp, opcode, "reg"), cpuid, family,
        lanes=2 if floating else 4,
        accumulator=_FP32 if floating else _INT32,
        operand=operand,
        c_dtype="<u4" if floating else "<i4",
        ab_dtype="<u2" if floating else "u1",
        call_dtype={"bf16": "<u2", "fp16": "<f2", "int8": "u1"}[family],
        signed=signed,
    )


TABLE: Tuple[Instruction, ...] = (
    Instruction("LDTILECFG", "config", Encoding("0F38", PP_NP, 0x49, "mem"), "AMX-TILE"),
    Instruction("STTILECFG", "config", Encoding("0F38", PP_66, 0x49, "mem"), "AMX-TILE"),
    Instruction("TILERELEASE", "config", Encoding("0F38", PP_NP, 0x49, "reg"), "AMX-TILE"),
    Instruction("TILEZERO", "memory", Encoding("0F38", PP_F2, 0x49, "reg"), "AMX-TILE"),
    Instruction("TILELOADD", "memory", Encoding("0F38", PP_F2, 0x4B, "sibmem"), "AMX-TILE"),
    Instruction("TILELOADDT1", "memory", Encoding("0F38", PP_66, 0x4B, "sibmem"), "AMX-TILE"),
    Instruction("TILESTORED", "memory", Encoding("0F38", PP_F3, 0x4B, "sibmem"), "AMX-TILE"),
    _dot("TDPBF16PS", PP_F3, 0x5C, "AMX-BF16", "bf16", "bf16"),
    _dot("TDPFP16PS", PP_F2, 0x5C, "AMX-FP16", "fp16", "fp16"),
    _dot("TDPBSSD", PP_F2, 0x5E, "AMX-INT8", "int8", "int8 x int8", (True, True)),
    _dot("TDPBSUD", PP_F3, 0x5E, "AMX-INT8", "int8", "int8 x uint8", (True, False)),
    _dot("TDPBUSD", PP_66, 0x5E, "AMX-INT8", "int8", "uint8 x int8", (False, True)),
    _dot("TDPBUUD", PP_NP, 0x5E, "AMX-INT8", "int8", "uint8 x uint8", (False, False)),
)

#: lower-case name -> row
BY_NAME = {insn.name: insn for insn in TABLE}
#: the dot products, in table order
DOTS: Tuple[Instruction, ...] = tuple(insn for insn in TABLE if insn.kind == "dot")
#: lower-case names of the dot products (what the one-instruction functions are called)
DOT_NAMES: Tuple[str, ...] = tuple(insn.name for insn in DOTS)
#: kernel families, in table order
FAMILIES: Tuple[str, ...] = tuple(dict.fromkeys(insn.family for insn in DOTS))
#: family -> CPUID feature it needs
FAMILY_FEATURE = {insn.family: insn.cpuid for insn in DOTS}


def get(name: str) -> Instruction:
    """The row of ``name`` (either case); KeyError naming the known instructions otherwise."""
    try:
        return BY_NAME[name.lower()]
    except (KeyError, AttributeError):
        raise KeyError(f"unknown AMX instruction {name!r}; pyamx knows {', '.join(BY_NAME)}") from None


def family_of(name: str) -> str:
    """The kernel family of a dot product (``"bf16"``, ``"fp16"``, ``"int8"``)."""
    return get(name).family


def by_op_id(op_id: int) -> Optional[Instruction]:
    """The row whose ``lib.PYAMX_OP_*`` is ``op_id`` (None for an unknown id or without the extension)."""
    for insn in TABLE:
        if insn.op_id == op_id:
            return insn
    return None


_LIB = []  # [lib or None], filled on first use


def _lib():
    if not _LIB:
        try:
            from . import _nativelib

            _LIB.append(_nativelib.load()[1])
        except ImportError:  # no compiler at install time, or a stale build: no C ids here
            _LIB.append(None)
    return _LIB[0]


def c_constant(name: str):
    """A constant of the compiled module (``lib.<name>``, e.g. ``"PYAMX_E_ARG"``), None without it.

    Status codes and bit masks of csrc/pyamx.h are read here rather than
    restated in Python, so the two cannot drift apart. Without the
    extension no C code runs, so no such value can arise and None compares
    unequal to every status.
    """
    lib = _lib()
    return None if lib is None else getattr(lib, name)


# -- generating the per-instruction API from the table -------------------------------------------


def export_functions(namespace: dict, make, doc) -> None:
    """Put one function per dot product into a module's ``namespace``: ``make(insn)`` builds it,
    ``doc(insn)`` gives its docstring; name and module are set as if it were written out."""
    for insn in DOTS:
        fn = make(insn)
        fn.__name__ = fn.__qualname__ = insn.name
        fn.__module__ = namespace["__name__"]
        fn.__doc__ = doc(insn)
        namespace[insn.name] = fn


def add_dot_methods(machine: type, doc) -> None:
    """One method per dot product on a tile machine class, each ``self._dot(name, dst, src1, src2)``;
    ``doc(insn)`` gives its docstring."""
    for insn in DOTS:
        method = _dot_method(insn.name)
        method.__name__ = insn.name
        method.__qualname__ = f"{machine.__name__}.{insn.name}"
        method.__module__ = machine.__module__
        method.__doc__ = doc(insn)
        setattr(machine, insn.name, method)


def _dot_method(name: str):
    def method(self, dst: int, src1: int, src2: int) -> None:
        self._dot(name, dst, src1, src2)

    return method
