"""The AMX instructions pyamx runs: one row each, read by every layer.

Three kinds of rows: :class:`Format` (a number format: its bits, the dtypes
that carry it, its layout and special values), :class:`Feature` (a CPUID
feature bit) and :class:`Instruction` (formats of its operands, the feature
it needs, its arithmetic kind, the kernel group the compiled code files it
under, its full encoding). Everything else that maps a name, a dtype or a
format to something (matmul routing, operand checks, kernel groups, the
vector files, the C op table that build.py generates) is a view derived
from these rows by a function of the table (:func:`views`); a view that
would need two rows under one key raises :class:`TableError` at import, so
a new row can never take over an existing one silently.

The public one-instruction functions, both tile machines' methods, the
vector files, the probe, the CLI and the tests take the instruction set
from here; docs/isa.md links each row to its emulator function, compiled
kernel, trap case and tests and says how to add an instruction.

The C op id of a row is ``lib.PYAMX_OP_<MNEMONIC>`` of the compiled module
(``enum pyamx_op`` in csrc/pyamx_ops.h, which build.py generates from this
table), looked up on first use, and None on an install without the
extension. This module imports no numpy: build.py reads it to generate C.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Optional, Tuple, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")
#: a function or method the table generates (its signature is declared in the _dot_types modules)
_Generated = Callable[..., Any]

#: VEX.pp values (the implied legacy prefix)
PP_NP, PP_66, PP_F3, PP_F2 = 0, 1, 2, 3
#: opcode maps by number (VEX.mmmmm / EVEX.mmm): 0F, 0F38, 0F3A; AMX-FP8 and friends use map 5
MAP_NAMES = MappingProxyType({1: "0F", 2: "0F38", 3: "0F3A", 5: "MAP5", 6: "MAP6"})


class TableError(ValueError):
    """The table is inconsistent: two rows claim one key of a view, or a row names something unknown."""


# -- formats ---------------------------------------------------------------------------------


_ITEMSIZE_BYTES = {"1": 1, "2": 2, "4": 4, "8": 8}  # the digit ending a dtype string like "<u2"


@dataclass(frozen=True)
class Format:
    """One number format as a tile holds it.

    ``bits``: numpy dtype string of one element's bit pattern as tile memory holds it, little-endian
    (``"<u2"``; an array of values in the caller's hands has it in native order).
    ``dtypes``: the numpy dtype names an array of this format may have (each
    read as ``bits``; ``bfloat16`` is ml_dtypes'). ``infers``: the dtype names
    that mean this format when a matmul call names no kind (one format per
    dtype: :func:`views` refuses two). ``call_dtype``: the dtype the vector
    files call the public function with. ``note``: what an error message
    adds about these dtypes.

    Layout: ``signed`` for an integer format; for a float format ``exponent``,
    ``mantissa`` and ``bias`` (one sign bit), ``denormals`` (``"kept"``, or
    ``"flushed"`` where the instruction flushes them) and ``specials``
    (``"inf-nan"`` as IEEE, ``"nan-only"`` for E4M3-like formats, ``""``).
    ``components``: values per element (2 for a complex pair of fp16).
    ``pad``: the bits a matmul pads an A dword with (B pads with 0; -0 keeps
    every float sum's bits). ``special_values``: bit patterns tests draw from.
    """

    name: str
    bits: str
    dtypes: Tuple[str, ...]
    infers: Tuple[str, ...] = ()
    call_dtype: str = ""
    note: str = ""
    signed: Optional[bool] = None
    exponent: int = 0
    mantissa: int = 0
    bias: int = 0
    denormals: str = ""
    specials: str = ""
    components: int = 1
    pad: int = 0
    special_values: Tuple[int, ...] = ()

    @property
    def width(self) -> int:
        """Bits of one element (all components)."""
        # A lookup, not int(self.bits[-1]): CPython parses a decimal string with float arithmetic,
        # which sets the caller's MXCSR precision flag, and this runs on every call (issue 27).
        return _ITEMSIZE_BYTES[self.bits[-1]] * 8

    @property
    def is_float(self) -> bool:
        return self.exponent > 0


_BITS_NOTE = "int16/uint16 are taken as bit patterns"

FORMAT_ROWS: Tuple[Format, ...] = (
    Format("bf16", "<u2", ("uint16", "int16", "bfloat16"), infers=("uint16", "int16", "bfloat16"),
           call_dtype="<u2", note=_BITS_NOTE + "; convert float32 with pyamx.table.bf16.from_float32",
           exponent=8, mantissa=7, bias=127, denormals="flushed", specials="inf-nan", pad=0x8000,
           special_values=(0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F, 0xFF7F)),
    Format("fp16", "<u2", ("float16", "uint16", "int16"), infers=("float16",), call_dtype="<f2", note=_BITS_NOTE,
           exponent=5, mantissa=10, bias=15, denormals="kept", specials="inf-nan", pad=0x8000,
           special_values=(0x0001, 0x03FF, 0x8001, 0x7C00, 0xFC00, 0x7C01, 0x7E05, 0xFD00, 0x0000, 0x8000, 0x7BFF)),
    Format("int8", "u1", ("int8", "uint8"), infers=("int8",), call_dtype="u1", signed=True,
           special_values=(0x00, 0x7F, 0x80, 0xFF)),
    Format("uint8", "u1", ("int8", "uint8"), infers=("uint8",), call_dtype="u1", signed=False,
           special_values=(0x00, 0x7F, 0x80, 0xFF)),
    Format("fp32", "<u4", ("float32", "uint32"), call_dtype="<u4", note="raw bits",
           exponent=8, mantissa=23, bias=127, denormals="flushed", specials="inf-nan",
           special_values=(0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001)),
    Format("int32", "<i4", ("int32", "uint32"), call_dtype="<i4", note="uint32 is taken as raw bits", signed=True,
           special_values=(0x00000000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)),
    # AMX-FP8's two formats, as Intel names them: BF8 = E5M2 (IEEE-like, with infinities), HF8 = E4M3
    # (OCP's E4M3FN: no infinity, S.1111.111 the only NaN). uint8 arrays are read as bit patterns.
    Format("bf8", "u1", ("uint8", "float8_e5m2"), infers=("float8_e5m2",), call_dtype="u1",
           note="uint8 is taken as bit patterns", exponent=5, mantissa=2, bias=15, denormals="kept",
           specials="inf-nan", pad=0x80,
           special_values=(0x00, 0x80, 0x01, 0x81, 0x03, 0x04, 0x7B, 0xFB, 0x7C, 0xFC, 0x7D, 0x7E, 0x7F, 0xFF)),
    Format("hf8", "u1", ("uint8", "float8_e4m3fn"), infers=("float8_e4m3fn",), call_dtype="u1",
           note="uint8 is taken as bit patterns", exponent=4, mantissa=3, bias=7, denormals="kept",
           specials="nan-only", pad=0x80,
           special_values=(0x00, 0x80, 0x01, 0x81, 0x07, 0x08, 0x7E, 0xFE, 0x7F, 0xFF)),
    # AMX-COMPLEX: one complex number per dword, fp16 real part in the low half, imaginary in the high
    Format("cfp16", "<u4", ("float16", "uint16", "int16", "uint32", "complex64", "complex128"), call_dtype="<f2",
           note="float16/uint16/int16 as (real, imaginary) fp16 pairs, 2 per complex number (integers as bits); "
                "uint32 as (imaginary << 16 | real) bit pairs; complex64/complex128 values, each part rounded to "
                "fp16 by numpy (to nearest even)", exponent=5, mantissa=10, bias=15,
           denormals="kept", specials="inf-nan", components=2, pad=0,
           special_values=(0x00000000, 0x80008000, 0x7C000000, 0x00007C00, 0x7E000001, 0x00010001, 0x7BFF7BFF)),
)


# -- CPUID features ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Feature:
    """A CPUID feature bit: ``name`` as the SDM spells it, ``key`` as detection reports it
    (``pyamx.cpu.detect.decode_features``), and where it is: CPUID.(leaf, subleaf):register bit.
    ``since``: the first CPUs that have it, where that is later than AMX itself (for messages)."""

    name: str
    key: str
    leaf: int
    subleaf: int
    register: str
    bit: int
    since: str = ""


FEATURE_ROWS: Tuple[Feature, ...] = (
    Feature("AMX-TILE", "amx_tile", 7, 0, "edx", 24),
    Feature("AMX-BF16", "amx_bf16", 7, 0, "edx", 22),
    Feature("AMX-INT8", "amx_int8", 7, 0, "edx", 25),
    Feature("AMX-FP16", "amx_fp16", 7, 1, "eax", 21, since="Granite Rapids and later"),
    Feature("AMX-COMPLEX", "amx_complex", 7, 1, "edx", 8, since="Granite Rapids-D and later"),
    Feature("AMX-FP8", "amx_fp8", 0x1E, 1, "eax", 4, since="Diamond Rapids and later"),
    Feature("AMX-AVX512", "amx_avx512", 0x1E, 1, "eax", 7, since="Diamond Rapids and later"),
    Feature("AMX-MOVRS", "amx_movrs", 0x1E, 1, "eax", 8, since="Diamond Rapids and later"),
)


# -- instructions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Encoding:
    """The full encoding: ``prefix`` (``"VEX"`` or ``"EVEX"``), ``map`` (number: 2 is 0F38, every
    tile instruction so far), ``pp``, ``w``, ``l`` (vector length: 0 for all of AMX), ``opcode``,
    ModRM ``form`` and the operand ``roles``.

    ``form`` is ``"reg"`` (ModRM.mod = 3: tile registers in reg/rm/vvvv),
    ``"mem"`` (a plain memory operand) or ``"sibmem"`` (memory operand with a
    mandatory SIB byte: base + index * scale is the row stride). ``roles``:
    ``(operand, field)`` pairs, the field one of ``reg``, ``rm``, ``vvvv``, ``mem``, ``sibmem``.
    """

    map: int
    pp: int
    opcode: int
    form: str
    roles: Tuple[Tuple[str, str], ...] = ()
    w: int = 0
    l: int = 0  # noqa: E741  (the SDM's name of the field)
    prefix: str = "VEX"

    @property
    def map_name(self) -> str:
        """The map as the SDM writes it (``"0F38"``)."""
        return MAP_NAMES[self.map]

    def vex3(self, r: int = 1, x: int = 1, b: int = 1, vvvv: int = 0b1111) -> bytes:
        """The three VEX bytes (C4 form); ``r``/``x``/``b`` are the inverted bits as encoded, vvvv too."""
        if self.prefix != "VEX":
            raise ValueError(f"vex3: this is an {self.prefix} encoding, not VEX")
        return bytes((0xC4, (r << 7) | (x << 6) | (b << 5) | self.map,
                      (self.w << 7) | (vvvv << 3) | (self.l << 2) | self.pp))


#: arithmetic kinds of a row: what it does, not which formats it reads
KINDS_OF_ARITHMETIC = ("config", "memory", "dot-pairs", "dot-quads", "dot-complex", "row")
#: what a config or memory row does (``Instruction.action``): each backend has one kernel per action,
#: and the tile machines' methods of these rows are bound to them (:func:`add_state_methods`). The
#: loads differ only in their cache hints (``t1``: temporal hint; ``rs``: read-shared, AMX-MOVRS).
ACTIONS = ("load-config", "store-config", "release", "zero", "load", "load-t1", "load-rs", "load-rs-t1", "store")
#: the actions that load a tile from memory, in the order of the native kernel's hint argument
LOAD_ACTIONS = ("load", "load-t1", "load-rs", "load-rs-t1")


@dataclass(frozen=True)
class Instruction:
    """One AMX instruction.

    ``kind``: ``"config"`` (LDTILECFG, STTILECFG, TILERELEASE: the whole
    state), ``"memory"`` (tile data: loads, stores and TILEZERO, which need
    configured tiles), ``"dot-pairs"`` (a dot product over 2 values per
    dword), ``"dot-quads"`` (4 values per dword), ``"dot-complex"`` (one
    complex fp16 pair per dword) or ``"row"`` (one tile row into a zmm
    register, AMX-AVX512). ``feature``: the CPUID
    feature it needs. The dot-product fields are None for the others:
    ``a_format``/``b_format`` (src1/src2, whose signedness an integer format
    carries), ``acc_format`` (dst), ``group`` (the kernel group the compiled
    code and ``pyamx.cpu.native.available`` file it under, also matmul's
    ``kind=``), ``matmul`` (True: the instruction ``pyamx.matmul`` runs for
    its pair of operand formats; one row per pair at most), ``part``
    (``"real"`` or ``"imaginary"``: the part of the complex product a
    ``dot-complex`` row accumulates; its two rows share every format, so
    this is what tells them apart).
    """

    mnemonic: str
    kind: str
    encoding: Encoding
    feature: Feature
    a_format: Optional[Format] = None
    b_format: Optional[Format] = None
    acc_format: Optional[Format] = None
    group: Optional[str] = None
    matmul: bool = False
    part: Optional[str] = None
    #: the immediate form's encoding where the row selector can also be an imm8 (AMX-AVX512's row ops)
    imm_encoding: Optional[Encoding] = None
    #: what a config or memory row does to the state (one of :data:`ACTIONS`): the key its kernel
    #: in each backend is filed under; None for the dot products and the row instructions
    action: Optional[str] = None

    @property
    def name(self) -> str:
        """The lower-case name of the Python functions and methods (``"tdpbf16ps"``)."""
        return self.mnemonic.lower()

    @property
    def is_dot(self) -> bool:
        return self.kind.startswith("dot-")

    @property
    def cpuid(self) -> str:
        """The CPUID feature's name (``"AMX-BF16"``)."""
        return self.feature.name

    @property
    def lanes(self) -> Optional[int]:
        """Operand values per dword (a complex pair counts its two fp16 halves: the tile layout is fp16's)."""
        return None if self.a_format is None else 32 * self.a_format.components // self.a_format.width

    # The fields a dot product (and, for the first two, a row instruction) always has, typed without
    # Optional: the one check is here, not at every caller. Another kind of row raises: a caller's bug.

    def _required(self, value: Optional[_V], field: str) -> _V:
        if value is None:
            raise TypeError(f"{self.mnemonic} is a {self.kind} row: it has no {field}")
        return value

    @property
    def source_format(self) -> "Format":
        """src1's format (a row instruction's source tile)."""
        return self._required(self.a_format, "source format")

    @property
    def acc(self) -> "Format":
        """The accumulator's (a row instruction's result's) format."""
        return self._required(self.acc_format, "accumulator format")

    @property
    def src_formats(self) -> Tuple["Format", "Format"]:
        """(src1, src2) formats of a dot product."""
        return self.source_format, self._required(self.b_format, "src2 format")

    @property
    def kernel_group(self) -> str:
        """The kernel group a dot product is filed under (``"bf16"``, ``"int8"``, ...)."""
        return self._required(self.group, "kernel group")

    @property
    def dword_lanes(self) -> int:
        """Operand values per dword of a dot product (:attr:`lanes`, never None)."""
        return self._required(self.lanes, "operand lanes")

    @property
    def signed(self) -> Optional[Tuple[bool, bool]]:
        """(src1, src2) sign extension, integer dot products only."""
        if self.a_format is None or self.a_format.signed is None:
            return None
        assert self.b_format is not None and self.b_format.signed is not None  # integer rows have both
        return self.a_format.signed, self.b_format.signed

    @property
    def accumulator(self) -> Optional[str]:
        return None if self.acc_format is None else self.acc_format.name

    @property
    def operand(self) -> Optional[str]:
        """The operand formats in words: ``"bf16"``, or ``"int8 x uint8"`` where src1 and src2 differ
        in signedness (every integer row says both)."""
        if self.a_format is None:
            return None
        if self.a_format.signed is None and self.a_format == self.b_format:
            return self.a_format.name
        assert self.b_format is not None  # a dot product's row: both operands
        return f"{self.a_format.name} x {self.b_format.name}"

    @property
    def c_dtype(self) -> Optional[str]:
        """numpy dtype of the accumulator's bits as the tiles hold them."""
        return None if self.acc_format is None else self.acc_format.bits

    @property
    def ab_dtype(self) -> Optional[str]:
        """numpy dtype of the operands' bits as the tiles hold them (one component's: a complex pair is two fp16)."""
        if self.a_format is None:
            return None
        fmt = self.a_format
        return fmt.bits if fmt.components == 1 else f"<u{fmt.width // fmt.components // 8}"

    @property
    def call_dtype(self) -> Optional[str]:
        """The operand dtype the public function is called with in the vector files."""
        return None if self.a_format is None else self.a_format.call_dtype

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
        return self.acc_format is not None and self.acc_format.is_float

    @property
    def is_row(self) -> bool:
        """An AMX-AVX512 row instruction: one tile row into a zmm register."""
        return self.kind == "row"

    @property
    def moves_raw(self) -> bool:
        """A row instruction that converts nothing: the tile row's bytes as they are (TILEMOVROW)."""
        return self.is_row and self.a_format == self.acc_format

    @property
    def summary(self) -> str:
        """What the instruction does, in one line (for docstrings and listings)."""
        if self.is_row:
            if self.moves_raw:
                return "64 bytes of a tile row, unconverted, into a zmm register"
            assert self.a_format is not None and self.acc_format is not None  # a row instruction's row
            half = {"H": " in the high half of each dword", "L": " in the low half of each dword"}
            where = half.get(self.mnemonic[-1], "") if self.acc_format.width == 16 else ""
            return f"a tile row of {self.a_format.name} into a zmm register as {self.acc_format.name} (RNE){where}"
        if not self.is_dot:
            return self.kind
        if self.kind == "dot-complex":
            return f"dst += the {self.part} part of src1 . src2 over complex fp16 pairs, fp32 accumulation"
        if self.is_float and self.lanes == 4:
            return f"dst += src1 . src2 over {self.operand} quads, exact sum rounded once to fp32"
        if self.is_float:
            return f"dst += src1 . src2 over {self.operand} pairs, fp32 accumulation"
        signed = self.signed
        assert signed is not None  # the integer dot products
        s1, s2 = ("signed" if x else "unsigned" for x in signed)
        return f"dst += {s1} (src1) x {s2} (src2) bytes, int32 wrap-around accumulation"


def _unique(pairs: Iterable[tuple[_K, _V]], what: str, repeats: bool = False) -> Mapping[_K, _V]:
    """A read-only dict of ``(key, value)`` pairs; a second value under one key raises TableError
    (the same value again too, unless ``repeats``: many rows may name one group's feature)."""
    out: dict[_K, _V] = {}
    for key, value in pairs:
        if key in out and (out[key] != value or not repeats):
            raise TableError(f"pyamx.table.isa: two rows claim {what} {key!r}: {_label(out[key])} and {_label(value)}")
        out[key] = value
    return MappingProxyType(out)


def _label(value: object) -> str:
    return str(getattr(value, "mnemonic", None) or getattr(value, "name", None) or repr(value))


FORMATS = _unique(((f.name, f) for f in FORMAT_ROWS), "format name")
FEATURES = _unique(((f.name, f) for f in FEATURE_ROWS), "feature name")
_F = FORMATS
_TILE = FEATURES["AMX-TILE"]
_DOT_ROLES = (("dst", "reg"), ("src1", "rm"), ("src2", "vvvv"))


def _op(mnemonic: str, kind: str, action: str, pp: int, opcode: int, form: str,
        roles: Tuple[Tuple[str, str], ...] = (), feature: Optional[str] = None) -> Instruction:
    return Instruction(mnemonic, kind, Encoding(2, pp, opcode, form, roles), FEATURES[feature] if feature else _TILE,
                       action=action)


_ROW_ROLES = (("dst", "reg"), ("src", "rm"), ("row", "vvvv"))
_ROW_IMM_ROLES = (("dst", "reg"), ("src", "rm"), ("row", "imm8"))


def _row(mnemonic: str, pp: int, opcode: int, imm_pp: int, imm_opcode: int, a: str, acc: str) -> Instruction:
    """An AMX-AVX512 row instruction: EVEX.512.W0, a tile row (``a`` format) into a zmm register
    (``acc`` format); the row selector is a GPR (map 0F38) or, in the second encoding, an imm8 (0F3A)."""
    return Instruction(mnemonic, "row", Encoding(2, pp, opcode, "reg", _ROW_ROLES, l=2, prefix="EVEX"),
                       FEATURES["AMX-AVX512"], _F[a], None, _F[acc],
                       imm_encoding=Encoding(3, imm_pp, imm_opcode, "reg", _ROW_IMM_ROLES, l=2, prefix="EVEX"))


#: the dot-product kind of an operand width (a complex pair fills a dword)
_DOT_KIND = {16: "dot-pairs", 8: "dot-quads", 32: "dot-complex"}


def _dot(mnemonic: str, pp: int, opcode: int, feature: str, group: str, a: str, b: str, acc: str, matmul: bool=False,
         kind: Optional[str] = None, map: int=2, part: Optional[str] = None) -> Instruction:
    a_format, b_format = _F[a], _F[b]
    kind = kind or _DOT_KIND[a_format.width]
    return Instruction(mnemonic, kind, Encoding(map, pp, opcode, "reg", _DOT_ROLES), FEATURES[feature],
                       a_format, b_format, _F[acc], group, matmul, part)


TABLE: Tuple[Instruction, ...] = (
    _op("LDTILECFG", "config", "load-config", PP_NP, 0x49, "mem", (("src", "mem"),)),
    _op("STTILECFG", "config", "store-config", PP_66, 0x49, "mem", (("dst", "mem"),)),
    _op("TILERELEASE", "config", "release", PP_NP, 0x49, "reg"),
    _op("TILEZERO", "memory", "zero", PP_F2, 0x49, "reg", (("dst", "reg"),)),
    _op("TILELOADD", "memory", "load", PP_F2, 0x4B, "sibmem", (("dst", "reg"), ("src", "sibmem"))),
    _op("TILELOADDT1", "memory", "load-t1", PP_66, 0x4B, "sibmem", (("dst", "reg"), ("src", "sibmem"))),
    _op("TILESTORED", "memory", "store", PP_F3, 0x4B, "sibmem", (("dst", "sibmem"), ("src", "reg"))),
    _dot("TDPBF16PS", PP_F3, 0x5C, "AMX-BF16", "bf16", "bf16", "bf16", "fp32", matmul=True),
    _dot("TDPFP16PS", PP_F2, 0x5C, "AMX-FP16", "fp16", "fp16", "fp16", "fp32", matmul=True),
    _dot("TDPBSSD", PP_F2, 0x5E, "AMX-INT8", "int8", "int8", "int8", "int32", matmul=True),
    _dot("TDPBSUD", PP_F3, 0x5E, "AMX-INT8", "int8", "int8", "uint8", "int32", matmul=True),
    _dot("TDPBUSD", PP_66, 0x5E, "AMX-INT8", "int8", "uint8", "int8", "int32", matmul=True),
    _dot("TDPBUUD", PP_NP, 0x5E, "AMX-INT8", "int8", "uint8", "uint8", "int32", matmul=True),
    # AMX-COMPLEX: one complex fp16 number (real low, imaginary high) per dword
    _dot("TCMMIMFP16PS", PP_66, 0x6C, "AMX-COMPLEX", "complex", "cfp16", "cfp16", "fp32", part="imaginary"),
    _dot("TCMMRLFP16PS", PP_NP, 0x6C, "AMX-COMPLEX", "complex", "cfp16", "cfp16", "fp32", part="real"),
    # AMX-FP8: VEX map 5, four fp8 values per dword
    _dot("TDPBF8PS", PP_NP, 0xFD, "AMX-FP8", "fp8", "bf8", "bf8", "fp32", matmul=True, map=5),
    _dot("TDPBHF8PS", PP_F2, 0xFD, "AMX-FP8", "fp8", "bf8", "hf8", "fp32", matmul=True, map=5),
    _dot("TDPHBF8PS", PP_F3, 0xFD, "AMX-FP8", "fp8", "hf8", "bf8", "fp32", matmul=True, map=5),
    _dot("TDPHF8PS", PP_66, 0xFD, "AMX-FP8", "fp8", "hf8", "hf8", "fp32", matmul=True, map=5),
    # AMX-AVX512: one tile row into a zmm register (EVEX.512); the selector a GPR or an imm8
    _row("TCVTROWD2PS", PP_F3, 0x4A, PP_F3, 0x07, "int32", "fp32"),
    _row("TCVTROWPS2BF16H", PP_F2, 0x6D, PP_F2, 0x07, "fp32", "bf16"),
    _row("TCVTROWPS2BF16L", PP_F3, 0x6D, PP_F3, 0x77, "fp32", "bf16"),
    _row("TCVTROWPS2PHH", PP_NP, 0x6D, PP_NP, 0x07, "fp32", "fp16"),
    _row("TCVTROWPS2PHL", PP_66, 0x6D, PP_F2, 0x77, "fp32", "fp16"),
    _row("TILEMOVROW", PP_66, 0x4A, PP_66, 0x07, "uint8", "uint8"),
    # AMX-MOVRS: TILELOADD with a read-shared hint
    _op("TILELOADDRS", "memory", "load-rs", PP_F2, 0x4A, "sibmem", (("dst", "reg"), ("src", "sibmem")), "AMX-MOVRS"),
    _op("TILELOADDRST1", "memory", "load-rs-t1", PP_66, 0x4A, "sibmem", (("dst", "reg"), ("src", "sibmem")), "AMX-MOVRS"),
)


# -- views: every mapping of the table, derived from its rows --------------------------------


def views(table: Tuple[Instruction, ...]) -> SimpleNamespace:
    """Every derived mapping of ``table``, checked: TableError where two rows would share a key.

    ``by_name`` (lower-case name -> row), ``dots`` (the dot products in table
    order), ``rows`` (the AMX-AVX512 row instructions, in table order), ``state_ops`` (the config
    and memory rows, in table order), ``by_action`` (action -> its one row), ``groups`` (kernel groups in table order), ``group_feature``
    (group -> CPUID feature name; one per group), ``group_formats`` (group ->
    the operand formats of its rows, in order), ``matmul_routes`` ((a format,
    b format) -> the row ``pyamx.matmul`` runs), ``inferred`` (dtype name ->
    the operand format it means in a matmul without ``kind=``).
    """
    dots = tuple(i for i in table if i.is_dot)
    rows = tuple(i for i in table if i.is_row)
    unknown = [i.mnemonic for i in table if i.action is not None and i.action not in ACTIONS]
    if unknown:
        raise TableError(f"pyamx.table.isa: rows with an action outside ACTIONS: {', '.join(unknown)}")
    groups = tuple(dict.fromkeys(i.group for i in dots))
    group_formats = {g: tuple(dict.fromkeys(f for i in dots if i.group == g for f in i.src_formats))
                     for g in groups}
    routed = [i for i in dots if i.matmul]
    routed_formats = tuple(dict.fromkeys(f for i in routed for f in i.src_formats))
    return SimpleNamespace(
        by_name=_unique(((i.name, i) for i in table), "the name"),
        dots=dots,
        rows=rows,
        state_ops=tuple(i for i in table if i.action is not None),
        by_action=_unique(((i.action, i) for i in table if i.action is not None), "the action"),
        groups=groups,
        group_feature=_unique(((i.group, i.feature.name) for i in dots), "a feature for kernel group", repeats=True),
        group_formats=MappingProxyType(group_formats),
        matmul_routes=_unique((((a.name, b.name), i) for i in routed for a, b in [i.src_formats]),
                              "the matmul route of operand formats"),
        inferred=_unique(((d, f) for f in routed_formats for d in f.infers), "the matmul operand format of dtype",
                         repeats=True),
    )


VIEWS = views(TABLE)
#: lower-case name -> row
BY_NAME: Mapping[str, Instruction] = VIEWS.by_name
#: the dot products, in table order
DOTS: Tuple[Instruction, ...] = VIEWS.dots
#: lower-case names of the dot products (what the one-instruction functions are called)
DOT_NAMES: Tuple[str, ...] = tuple(insn.name for insn in DOTS)
#: the row instructions (kind "row", AMX-AVX512), in table order
ROWS: Tuple[Instruction, ...] = VIEWS.rows
#: lower-case names of the row instructions (the tile machines' methods)
ROW_NAMES: Tuple[str, ...] = tuple(insn.name for insn in ROWS)
#: the config and memory rows (those with an ``action``), in table order
STATE_OPS: Tuple[Instruction, ...] = VIEWS.state_ops
#: action -> the one row that does it
BY_ACTION: Mapping[str, Instruction] = VIEWS.by_action
#: kernel groups, in table order
GROUPS: Tuple[str, ...] = VIEWS.groups
#: kernel group -> CPUID feature it needs
GROUP_FEATURE: Mapping[str, str] = VIEWS.group_feature
#: (a format, b format) -> the row pyamx.matmul runs for them
MATMUL_ROUTES: Mapping[Tuple[str, str], Instruction] = VIEWS.matmul_routes
#: dtype name -> the operand format a matmul reads it as when the call names no kind
INFERRED_FORMAT: Mapping[str, Format] = VIEWS.inferred


def get(name: str) -> Instruction:
    """The row of ``name`` (either case); KeyError naming the known instructions otherwise."""
    try:
        return BY_NAME[name.lower()]
    except (KeyError, AttributeError):
        raise KeyError(f"unknown AMX instruction {name!r}; pyamx knows {', '.join(BY_NAME)}") from None


def of_action(action: str) -> Instruction:
    """The row that does ``action`` (one of :data:`ACTIONS`): how code that must name such an
    instruction (a message, a kernel's exported name) finds it."""
    return BY_ACTION[action]


def by_op_id(op_id: int) -> Optional[Instruction]:
    """The row whose ``lib.PYAMX_OP_*`` is ``op_id`` (None for an unknown id or without the extension)."""
    for insn in TABLE:
        if insn.op_id == op_id:
            return insn
    return None


_LIB: list[Any] = []  # [lib or None], filled on first use (cffi's lib: no types)


def _lib() -> Any:
    if not _LIB:
        try:
            from ..cpu import _nativelib

            _LIB.append(_nativelib.load()[1])
        except ImportError:  # no compiler at install time, or a stale build: no C ids here
            _LIB.append(None)
    return _LIB[0]


def c_constant(name: str) -> Any:  # int, or a function of the C module
    """A constant of the compiled module (``lib.<name>``, e.g. ``"PYAMX_E_ARG"``), None without it.

    Status codes and bit masks of csrc/pyamx.h are read here rather than
    restated in Python, so the two cannot drift apart. Without the
    extension no C code runs, so no such value can arise and None compares
    unequal to every status.
    """
    lib = _lib()
    return None if lib is None else getattr(lib, name)


# -- generating the per-instruction API from the table -------------------------------------------


def export_functions(namespace: dict[str, Any], make: Callable[[Instruction], _Generated], layer: str) -> None:
    """Put one function per dot product into a module's ``namespace``: ``make(insn)`` builds it,
    :func:`docstring` of ``layer`` documents it; name and module are set as if it were written out."""
    for insn in DOTS:
        fn = make(insn)
        fn.__name__ = fn.__qualname__ = insn.name
        fn.__module__ = namespace["__name__"]
        fn.__doc__ = docstring(insn, layer)
        namespace[insn.name] = fn


def _bind_methods(machine: type, rows: Tuple[Instruction, ...], make: Callable[[Instruction], _Generated],
                  doc: Callable[[Instruction, str], str], layer: str) -> None:
    """``make(insn)`` as the method ``insn.name`` of ``machine`` for each of ``rows``, named as if
    written there and documented by ``doc(insn, layer)``."""
    for insn in rows:
        method = make(insn)
        method.__name__ = insn.name
        method.__qualname__ = f"{machine.__name__}.{insn.name}"
        method.__module__ = machine.__module__
        method.__doc__ = doc(insn, layer)
        setattr(machine, insn.name, method)


def add_dot_methods(machine: type, layer: str) -> None:
    """One method per dot product on a tile machine class, each ``self._dot(name, dst, src1, src2)``,
    documented by :func:`docstring` of ``layer`` (``"method"`` or ``"native-method"``)."""
    _bind_methods(machine, DOTS, lambda insn: _dot_method(insn.name), docstring, layer)


def add_row_methods(machine: type, layer: str) -> None:
    """One method per row instruction on a tile machine class, each ``self._row(name, tmm, row, imm)``,
    documented by :func:`row_docstring` of ``layer`` (``"method"`` or ``"native-method"``)."""
    _bind_methods(machine, ROWS, lambda insn: _row_method(insn.name), row_docstring, layer)


#: action -> the name of the tile machines' implementation a row of that action is bound to, and the
#: method's parameters after self (the implementation takes the row's name first)
STATE_IMPLEMENTATIONS = MappingProxyType({
    "load-config": ("_load_config", ("cfg",)),
    "store-config": ("_store_config", ()),
    "release": ("_release", ()),
    "zero": ("_zero_tile", ("tmm",)),
    **{a: ("_load_tile", ("tmm", "buf", "stride", "offset")) for a in LOAD_ACTIONS},
    "store": ("_store_tile", ("tmm", "buf", "stride", "offset")),
})


def add_state_methods(machine: type, layer: str) -> None:
    """One method per config or memory row on a tile machine class, bound to the machine's
    implementation of its action (:data:`STATE_IMPLEMENTATIONS`), documented by :func:`state_docstring`
    of ``layer`` (``"method"`` or ``"native-method"``)."""
    def make(insn: Instruction) -> _Generated:
        assert insn.action is not None  # STATE_OPS: the rows with an action
        implementation, _ = STATE_IMPLEMENTATIONS[insn.action]
        return _STATE_METHODS[implementation](insn.mnemonic, implementation)

    _bind_methods(machine, STATE_OPS, make, state_docstring, layer)


def _image_method(mnemonic: str, implementation: str) -> _Generated:
    def method(self: object) -> bytes:
        image: bytes = getattr(self, implementation)(mnemonic)
        return image

    return method


def _no_operand_method(mnemonic: str, implementation: str) -> _Generated:
    def method(self: object) -> None:
        getattr(self, implementation)(mnemonic)

    return method


def _config_method(mnemonic: str, implementation: str) -> _Generated:
    def method(self: object, cfg: object) -> None:
        getattr(self, implementation)(mnemonic, cfg)

    return method


def _zero_method(mnemonic: str, implementation: str) -> _Generated:
    def method(self: object, tmm: int) -> None:
        getattr(self, implementation)(mnemonic, tmm)

    return method


def _memory_method(mnemonic: str, implementation: str) -> _Generated:
    def method(self: object, tmm: int, buf: object, stride: int, offset: int = 0) -> None:
        getattr(self, implementation)(mnemonic, tmm, buf, stride, offset)

    return method


_STATE_METHODS = {"_load_config": _config_method, "_store_config": _image_method,
                  "_release": _no_operand_method, "_zero_tile": _zero_method, "_load_tile": _memory_method,
                  "_store_tile": _memory_method}

_STATE_DOCS = {
    "load-config": "{m}: load a 64-byte config (or TileConfig); #GP on an illegal one; zeroes every tile.",
    "store-config": "{m}: the 64-byte config image; 64 zero bytes in the init state.",
    "release": "{m}: back to the init state (config cleared, tiles zeroed).",
    "zero": "{m}: all 16 x 64 bytes of a configured tile become zero.",
    "load": """{m}: rows start_row..rows-1 of ``colsb`` bytes from ``offset + r * stride``.

        Bytes past colsb and rows past ``rows`` become zero; start_row resets to 0.
        """,
    "load-t1": "{m}: {load} with a cache hint; the same architectural effect.",
    "load-rs": "{m} ({f}): {load} with a read-shared hint; the same architectural effect.",
    "load-rs-t1": "{m} ({f}): {load_t1} with a read-shared hint; the same architectural effect.",
    "store": "{m}: store rows start_row..rows-1 (``colsb`` bytes each); start_row resets to 0.",
}


def state_docstring(insn: Instruction, layer: str) -> str:
    """The docstring of a config or memory row's machine method (``layer``: ``"method"`` or
    ``"native-method"``); a hinted load is described by the load it hints."""
    assert insn.action is not None  # a config or memory row
    text = _STATE_DOCS[insn.action]
    if layer == "native-method" and insn.action == "store-config":
        text = "{m}: the 64-byte config image, read from the registers."
    return text.format(m=insn.mnemonic, f=insn.feature.name, load=BY_ACTION["load"].mnemonic,
                       load_t1=BY_ACTION["load-t1"].mnemonic)


def row_docstring(insn: Instruction, layer: str) -> str:
    """The docstring of a row instruction's machine method (``layer``: ``"method"`` or ``"native-method"``)."""
    where = ", on silicon" if layer == "native-method" else ""
    return f"""{insn.mnemonic}: {insn.summary}{where} ({insn.feature.name}).

    ``tmm``: the source tile. ``row``: the selector, a 32-bit GPR value
    (row index in bits 15:0, 64-byte chunk in bits 31:16), or with
    ``imm=True`` an imm8 (index in bits 5:0, chunk in bits 7:6). Returns the
    zmm result as a (16,) uint32 array of dword bit patterns (``.view(numpy.float32)``
    for fp32 lanes, ``.view(numpy.uint8)`` for its 64 bytes); lanes past the
    tile's colsb are 0. start_row becomes 0 (docs/semantics.md section 9).
    """


def _row_method(name: str) -> _Generated:
    def method(self: Any, tmm: int, row: int, *, imm: bool = False) -> Any:  # a tile machine; its _row's result
        return self._row(name, tmm, row, imm)

    return method


#: the per-instruction entry points a docstring is written for (:func:`docstring`)
DOC_LAYERS = ("function", "emulator", "native", "method", "native-method")

_FLOAT_DOCS = {
    "function": """Run one {m}: a new (M, N) float32 array ``c + a . b``; inputs are never modified.

    ``c``: (M, N) float32, or uint32 taken as raw bits. ``a``: (M, 2K) {f};
    ``b``: (K, 2N) {f} in the pair-interleaved layout (row k holds
    ``(b[2k][n], b[2k+1][n])`` for each n; build it with
    :func:`pyamx.table.layout.pack_pairs`). {f} arrays are {dtypes} (integers as bit patterns). 1 <= M, K, N <= 16.

    ``backend``: None for the process default (``PYAMX_BACKEND``), or
    ``"auto"``, ``"native"``, ``"emulator"``. The result's ``.backend`` says
    which ran. The emulator uses the SDM numerics; for other models call
    :func:`pyamx.emulator.{n}` with ``numerics=``.

    ``engine``: the emulator's arithmetic engine (:mod:`pyamx.emulator.engine`):
    None for ``PYAMX_ENGINE`` (default ``"auto"``), or ``"auto"``,
    ``"avx512"``, ``"avx2"``, ``"portable"``, ``"numpy"``; all give the same
    bits, the result's ``.engine`` says which ran. Naming a concrete engine
    means the emulator: ``auto`` picks it, a named ``native`` raises ValueError.
    """,
    "emulator": """One {m} on arrays: returns a new (M, N) float32 array ``c + a . b``.

    ``c`` is (M, N) float32 (or uint32 raw bits), ``a`` (M, 2K) and ``b``
    (K, 2N) {f} bits ({dtypes}), ``b`` pair-interleaved
    (see :func:`pyamx.table.layout.pack_pairs`); 1 <= M, K, N <= 16. ``numerics`` is
    a preset name or a :class:`Numerics`. Inputs are never modified.
    """,
    "native": """One {m} on silicon: (M,N) uint32 fp32 bits + (M,2K) {f} bits . (K,2N) {f} pairs.

    Operands must already be validated and C-contiguous; returns a new (M,N)
    array of the dtype of ``c_bits``. The thread's own tile state (a
    :class:`NativeMachine` in use) is saved and restored around the call;
    the GIL is released while the instructions run.
    """,
}
_FP8_DOCS = {
    "function": """Run one {m}: a new (M, N) float32 array ``c + a . b`` over fp8 values; inputs are never modified.

    ``c``: (M, N) float32, or uint32 taken as raw bits. ``a``: (M, 4K)
    {fa} values ({da}); ``b``: (K, 4N) {fb} values ({db}) in the
    quad-interleaved layout (row k holds ``b[4k .. 4k+3][n]`` for each n;
    :func:`pyamx.table.layout.pack_quads`). uint8 arrays are fp8 bit patterns.
    1 <= M, K, N <= 16. Per output element the products of the instruction
    are summed exactly, rounded once to fp32 (nearest even) and added to C
    once (docs/semantics.md, "AMX-FP8").

    ``backend``: None for the process default (``PYAMX_BACKEND``), or
    ``"auto"``, ``"native"`` (needs AMX-FP8), ``"emulator"``; the result's
    ``.backend`` says which ran. ``engine``: the emulator's engine (None:
    ``PYAMX_ENGINE``, else ``"auto"``, the best compiled engine); every
    engine computes AMX-FP8 with the same bits. Other numerics (the ``fp8_*``
    options of :class:`pyamx.Numerics`, numpy engine only):
    :func:`pyamx.emulator.{n}`.
    """,
    "emulator": """One {m} on arrays: returns a new (M, N) float32 array ``c + a . b`` over fp8 values.

    ``c`` is (M, N) float32 (or uint32 raw bits), ``a`` (M, 4K) {fa}
    ({da}) and ``b`` (K, 4N) {fb} ({db}), quad-interleaved (see
    :func:`pyamx.table.layout.pack_quads`); 1 <= M, K, N <= 16. ``numerics`` is a
    preset name or a :class:`Numerics` (its ``fp8_*`` fields apply). Inputs are never modified.
    """,
    "native": """One {m} on silicon (AMX-FP8): (M,N) uint32 fp32 bits + (M,4K) {fa} codes . (K,4N) {fb} quads.

    Operands must already be validated and C-contiguous; returns a new (M,N)
    array of the dtype of ``c_bits``.
    """,
}
_INTEGER_DOCS = {
    "function": """Run one {m}: ``c`` (M, N) int32 + {s1} (M, 4K) ``a`` . {s2} (K, 4N) ``b``, wrapping.

    ``a``/``b`` are int8 or uint8 arrays whose bytes the mnemonic reads as
    signed or unsigned; ``b`` is quad-interleaved (:func:`pyamx.table.layout.pack_quads`).
    """,
    "emulator": """One {m}: ``c`` (M, N) int32 plus {s1} (M, 4K) ``a`` times {s2} (K, 4N) quad-interleaved ``b``.

    ``a`` and ``b`` are int8 or uint8 arrays (their bytes are reinterpreted
    per the mnemonic); the int32 sum wraps around. See :func:`pyamx.table.layout.pack_quads`.
    """,
    "native": "One {m}: (M,N) int32 + {s1} (M,4K) bytes . {s2} (K,4N) quad-interleaved bytes.",
}
_COMPLEX_DOCS = {
    "function": """Run one {m}: a new (M, N) float32 array, ``c`` plus the {part} part of ``a . b`` (complex).

    ``c``: (M, N) float32, or uint32 taken as raw bits. ``a``: M x K and ``b``:
    K x N complex numbers, as fp16 (real, imaginary) pairs -- ``a`` (M, 2K) and
    ``b`` (K, 2N) float16, or uint16/int16 bits (row k of ``b`` holds B[k][n]'s
    real and imaginary part for each n) -- or as uint32 words (imaginary << 16
    | real), or as numpy complex64/complex128 (M, K) and (K, N) arrays, whose
    parts are rounded to fp16 by numpy's float16 conversion (to nearest even,
    overflow to infinity): the caller's rounding, not the instruction's.
    1 <= M, K, N <= 16. {rule}

    ``backend``, ``engine``: as :func:`tdpbf16ps` (the result says which ran).
    The emulator uses the SDM numerics; for other models call
    :func:`pyamx.emulator.{n}` with ``numerics=``.
    """,
    "emulator": """One {m} on arrays: a new (M, N) float32 array, ``c`` plus the {part} part of ``a . b``.

    Operands as :func:`pyamx.{n}` takes them (fp16 pairs, uint32 words or numpy
    complex arrays); ``numerics`` is a preset name or a :class:`Numerics`
    (docs/semantics.md section 8 says what each option means for the complex
    rows). {rule} Inputs are never modified.
    """,
    "native": """One {m} on silicon: (M,N) uint32 fp32 bits + the {part} part of (M,2K) . (K,2N) fp16 pairs.

    Operands must already be validated and C-contiguous; the layout is the
    tile's (real half low). As :func:`tdpbf16ps` for the tile state and the GIL.
    """,
}
_COMPLEX_RULES = {
    "imaginary": "Per element: sum over k of a_im * b_re and a_re * b_im, in two fp32 accumulators.",
    "real": "Per element: sum over k of a_re * b_re and (-a_im) * b_im, in two fp32 accumulators "
                    "(a_im negated as fp16, before conversion).",
}
_LEADS = {"function": "Run one {m}", "emulator": "One {m}", "native": "One {m} on silicon"}


def docstring(insn: Instruction, layer: str, table: Tuple[Instruction, ...] = TABLE) -> str:
    """The docstring of ``insn``'s entry point in ``layer`` (one of :data:`DOC_LAYERS`).

    The first row of each arithmetic (float, integer) carries the full text;
    a later one says how it differs from that first row, so no text repeats.
    """
    m, n = insn.mnemonic, insn.name
    if layer == "method":
        return f"{m}: {insn.summary} ({insn.feature.name})."
    if layer == "native-method":
        return f"{m}: {insn.summary}, on silicon ({insn.feature.name})."
    if insn.kind == "dot-complex":
        assert insn.part is not None  # a complex row names its part
        return _COMPLEX_DOCS[layer].format(m=m, n=n, part=insn.part, rule=_COMPLEX_RULES[insn.part])
    first = next(i for i in table if i.is_dot and i.kind != "dot-complex" and i.is_float == insn.is_float
                 and i.lanes == insn.lanes)
    if insn.is_float and insn.lanes == 4:
        fa, fb = insn.src_formats
        if insn is first:
            return _FP8_DOCS[layer].format(m=m, n=n, fa=fa.name.upper(), fb=fb.name.upper(), da=_dtype_words(fa),
                                           db=_dtype_words(fb))
        return (f"{_LEADS[layer].format(m=m)} ({insn.feature.name}): as :func:`{first.name}` with "
                f"{fa.name.upper()} ``a`` ({_dtype_words(fa)}) and {fb.name.upper()} ``b`` ({_dtype_words(fb)}).")
    if insn.is_float:
        f = insn.source_format
        if insn is first:
            return _FLOAT_DOCS[layer].format(m=m, n=n, f=f.name, dtypes=_dtype_words(f))
        return (f"{_LEADS[layer].format(m=m)} ({insn.feature.name}): as :func:`{first.name}` with {f.name} "
                f"``a``, ``b`` ({_dtype_words(f)} arrays).")
    signed = insn.signed
    assert signed is not None  # the integer dot products
    s1, s2 = ("signed" if x else "unsigned" for x in signed)
    if insn is first:
        return _INTEGER_DOCS[layer].format(m=m, s1=s1, s2=s2)
    return f"{_LEADS[layer].format(m=m)}: {s1} ``a`` bytes, {s2} ``b`` bytes (see :func:`{first.name}`)."


def _dtype_words(fmt: Format) -> str:
    names = [("ml_dtypes." + d) if d in ("bfloat16", "float8_e5m2", "float8_e4m3fn") else d for d in fmt.dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _dot_method(name: str) -> _Generated:
    def method(self: Any, dst: int, src1: int, src2: int) -> None:  # a tile machine (emulated or native)
        self._dot(name, dst, src1, src2)

    return method
