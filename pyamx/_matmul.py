"""``pyamx.matmul``: a product of any size, defined as a schedule of tile instructions.

The schedule (docs/matmul.md): for every output element, K is consumed in
blocks of 16 dwords (32 bf16/fp16 values, 64 int8 values) in increasing
order, each block one dot-product instruction whose C is the previous
block's result. Where K is not a multiple of the values per dword, the last
dword is padded: A with -0 and B with +0 for bf16/fp16 (a -0 * +0 = -0
product added to any lane leaves its bits unchanged, in every numerics
option), zeros for int8. How the output is cut into tiles cannot change a
bit (every element has its own chain), so the arithmetic runs on the whole
M x N output per K step.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from . import _backend, _convert, _matmul_complex, _matmul_memory, _matmul_out, _threads, _validate
from .cpu import _tile_layout
from .table import isa
from .emulator import engine as _engine
from ._first_use import module
from ._result import AMXResult
from ._validate import dtype_name
from ._numerics_rule import choose_numerics

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Callable

    from numpy.typing import DTypeLike

    from ._backend import Backend
    from ._packed import PackedB
    from ._types import ArrayInput
    from .emulator.engine import Engine
    from .table.numerics import Numerics

#: the values of ``kind=``: the kernel groups of pyamx.table.isa. Which instruction runs is the row
#: that isa.MATMUL_ROUTES names for the operands' formats (the padding A's last dword gets is
#: that row's a_format.pad: -0 for the float formats; B is padded with 0).
KINDS = isa.GROUPS
#: the names users write for a kind: numpy's and ml_dtypes' names of the one float format a kind
#: reads (``kind=np.float16``, ``kind=ml_dtypes.bfloat16`` name these dtypes too)
KIND_ALIASES = {"bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Plan:
    """What one matmul call runs: the instruction, the dword count and the padded, packed operands."""

    mnemonic: str
    group: str
    m: int
    n: int
    k: int
    k_dwords: int
    a: np.ndarray  # (M, Kd * lanes) raw bits, padded
    b_vnni: np.ndarray  # (Kd, N * lanes) raw bits, interleaved
    c: np.ndarray  # (M, N) uint32 bits (float) or int32


# -- operands ---------------------------------------------------------------------------

#: kinds whose operands may be given as floats, each then rounded once (nearest even) to the kind
#: (16-bit formats only: an fp8 operand comes as fp8 codes, uint8 bits or ml_dtypes' float8 arrays)
ROUNDED_KINDS = tuple(g for g in KINDS if all(f.is_float and f.width == 16 for f in isa.VIEWS.group_formats[g]))
#: the float dtypes rounded for the caller: float64 too (Python floats, lists), rounded directly, not via float32
ROUNDED_DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class _Operand:
    """One a/b operand as checked: a view (no copy) of its bits, or of its float values to round."""

    array: np.ndarray
    format: isa.Format  # the pyamx.table.isa format its bits are read as (int8 or uint8 for bytes)
    rounds: bool  # float32/float64 values, rounded to the format once before the run


@dataclass(frozen=True)
class Imported:
    """An operand as :func:`pyamx._validate.require_operand` gives it: its array (no copy), and the
    dtype name its bits are of where numpy has none (a torch.bfloat16 tensor: "bfloat16", held as uint16)."""

    array: np.ndarray
    carried: "str | None"


def intake(x: object, name: str) -> Imported:
    """An operand taken once (a DLPack tensor is exported once), for every later check."""
    if isinstance(x, Imported):
        return x
    return Imported(*_validate.require_operand(x, name, "matmul"))


def _operand(x: object, name: str, kind: str | None) -> _Operand:
    """One operand read strictly from its dtype and ``kind``: nothing is copied or converted here."""
    imported = intake(x, name)
    x = imported.array
    dtype = imported.carried or dtype_name(x.dtype)
    if kind is None:
        fmt = isa.INFERRED_FORMAT.get(dtype)
        if fmt is None:
            raise TypeError(
                f"matmul: {name} has dtype {dtype}; expected bf16 (uint16/int16 bits or ml_dtypes.bfloat16), "
                "float16, int8, uint8, ml_dtypes.float8_e5m2 (bf8) or ml_dtypes.float8_e4m3fn (hf8)" + (f", or {dtype} with kind='bf16' or kind='fp16' to round it once"
                                            if dtype in ROUNDED_DTYPES else "")
            )
    else:
        formats = isa.VIEWS.group_formats[kind]
        if dtype in ROUNDED_DTYPES and kind in ROUNDED_KINDS:
            return _Operand(x, formats[0], True)
        fmt = _format_in(formats, dtype)
        if fmt is None:
            allowed = tuple(dict.fromkeys(d for f in formats for d in f.dtypes))
            allowed += ROUNDED_DTYPES if kind in ROUNDED_KINDS else ()
            raise TypeError(f"matmul: kind={kind!r} takes {' or '.join(allowed)} operands, but {name} has dtype {dtype}")
    return _Operand(_validate.format_view(x, name, "matmul", fmt), fmt, False)


def _format_in(formats: tuple[isa.Format, ...], dtype: str) -> isa.Format | None:
    """The one of a kind's ``formats`` that ``dtype`` is read as: the format the dtype means by
    itself where the kind has it (uint8 bytes: uint8), else the first that takes it (uint16 as fp16)."""
    inferred = isa.INFERRED_FORMAT.get(dtype)
    if inferred in formats:
        return inferred
    return next((f for f in formats if dtype in f.dtypes), None)


def _check_kind(kind: str | DTypeLike | None) -> str | None:
    """``kind`` as one of :data:`KINDS` (or None): a kind, a name of :data:`KIND_ALIASES`, or such a dtype."""
    if kind is None or (isinstance(kind, str) and kind in KINDS):
        return kind
    if isinstance(kind, str):
        alias = KIND_ALIASES.get(kind)
    else:
        try:
            alias = KIND_ALIASES.get(dtype_name(np.dtype(kind)))
        except TypeError:
            alias = None
    if alias is None:
        names = ", ".join(repr(k) for k in KINDS + tuple(KIND_ALIASES))
        raise ValueError(f"matmul: kind must be None, one of {names} or the numpy/ml_dtypes dtype "
                         f"float16 or bfloat16; not {kind!r}")
    return alias


@dataclass(frozen=True)
class Call:
    """A checked call: operand views (nothing copied yet), the instruction and the shapes."""

    mnemonic: str  # the row isa.MATMUL_ROUTES names for the operand formats
    group: str  # its kernel group
    a: _Operand  # (..., M, K)
    b: _Operand  # (..., K, N)
    c: "np.ndarray | None"  # view of (..., M, N) accumulator bits, or None for zeros
    batch: tuple[int, ...]  # the broadcast leading dimensions, () for a 2-D product
    m: int
    k: int
    n: int
    packed: "PackedB | None" = None  # b as pyamx.pack made it (then ``b`` stands for its shape and format)

    @property
    def rounded_to(self) -> "str | None":
        """The format float operands were rounded to, None when every operand came as bits."""
        if self.a.rounds or self.b.rounds:
            return self.a.format.name
        return None if self.packed is None else self.packed.rounded_to

    @property
    def b_array(self) -> np.ndarray:
        """The memory b occupies (the tiles of a packed b), for the overlap checks of ``out``."""
        return self.b.array if self.packed is None else self.packed.tiles


def _packed_b(b: object) -> "PackedB | None":
    """``b`` where it is a :class:`pyamx.PackedB` (pyamx/_packed.py builds on this module, so it is
    known by what it offers, not imported); ndarrays, the usual b, are answered first."""
    if type(b) is np.ndarray or type(b) is Imported:
        return None
    # known by its method, as said above: no isinstance to narrow it by
    return cast("PackedB", b) if callable(getattr(type(b), "packed_operand", None)) else None


def check(a: object, b: object, c: object = None, *, kind: str | DTypeLike | None = None) -> Call:
    """Every operand rule (dtypes, kind, shapes, broadcasting, accumulator), before any copy;
    ``b`` may be a :class:`pyamx.PackedB` (then ``kind`` must be the one it was packed as)."""
    kind = _check_kind(kind)
    packed = _packed_b(b)
    if packed is not None and kind is not None and kind != packed.kind:
        raise ValueError(f"matmul: kind={kind!r}, but b was packed as {packed.kind} ({packed.format})")
    op_a = _operand(a, "a", kind)
    op_b = _operand(b, "b", kind) if packed is None else packed.packed_operand()
    row = isa.MATMUL_ROUTES.get((op_a.format.name, op_b.format.name))
    if row is None:
        b_is = (f"b is {op_b.format.name} ({dtype_name(op_b.array.dtype)})" if packed is None
                else f"b was packed as {packed.format}")
        raise TypeError(
            f"matmul: a is {op_a.format.name} ({dtype_name(op_a.array.dtype)}) but {b_is}; both operands must be "
            "one kind (uint16 is read as bf16 bits: pass kind='fp16' to read uint16 as fp16 bits)"
        )
    for name, x in (("a", op_a.array), ("b", op_b.array)):
        if x.ndim < 2:
            raise ValueError(f"matmul: {name} must be 2-D, or batched with leading dimensions; got shape {x.shape}")
    (m, k), (k_b, n) = op_a.array.shape[-2:], op_b.array.shape[-2:]
    if k != k_b:
        b_shape = f"b is {k_b}x{n}" if packed is None else f"b was packed as {k_b}x{n}"
        raise ValueError(f"matmul: a is {m}x{k} and {b_shape}; a's columns must equal b's rows")
    if min(m, k, n) < 1:
        raise ValueError(f"matmul: M={m}, K={k}, N={n}; every dimension must be at least 1")
    batch = _batch_shape(op_a.array.shape[:-2], op_b.array.shape[:-2])
    c_bits = None if c is None else _accumulator_view(c, batch + (m, n), row.acc)
    return Call(row.name, row.kernel_group, op_a, op_b, c_bits, batch, m, k, n, packed)


def _acc_dtype(row: isa.Instruction) -> np.dtype[Any]:
    """The dtype of a dot product's accumulator bits, in native byte order (the result's)."""
    dtype: np.dtype[Any] = np.dtype(row.acc.bits).newbyteorder("=")
    return dtype


def _batch_shape(a_batch: tuple[int, ...], b_batch: tuple[int, ...]) -> tuple[int, ...]:
    """The leading dimensions broadcast as np.matmul broadcasts them."""
    if not a_batch and not b_batch:  # a 2-D product, the usual call: no numpy broadcasting machinery
        return ()
    try:
        return tuple(np.broadcast_shapes(a_batch, b_batch))
    except ValueError:
        raise ValueError(
            f"matmul: a's leading dimensions {a_batch} and b's {b_batch} do not broadcast together"
        ) from None


def _accumulator_view(c: object, out_shape: tuple[int, ...], fmt: isa.Format) -> np.ndarray:
    """``c`` as bits: its last two dimensions (M, N), its leading ones broadcasting to the batch."""
    bits = _validate.format_view(c, "c", "matmul", fmt)
    try:
        fits = bits.ndim >= 2 and bits.shape[-2:] == out_shape[-2:] and \
            np.broadcast_shapes(bits.shape, out_shape) == out_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"matmul: c has shape {bits.shape}; the product is {out_shape}")
    return bits


def _bits_of(op: _Operand) -> np.ndarray:
    """An operand's bits, rounded first where it came as floats: a view, or its own size (never the batch's)."""
    return _convert.round_floats(op.array, op.format.name) if op.rounds else op.array


@dataclass(frozen=True)
class Operands:
    """Validated operands as raw bits, before any padding or interleaving."""

    mnemonic: str
    group: str
    a: np.ndarray  # (M, K) raw bits
    b: np.ndarray  # (K, N) raw bits, row-major
    c: "np.ndarray | None"  # (M, N) uint32 bits / int32, or None for zeros


def _materialize(call: Call, a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray | None) -> Operands:
    """One 2-D product's operands, C-contiguous, native-endian and aligned (copied only where needed)."""
    contiguous = _validate.contiguous_bits
    return Operands(call.mnemonic, call.group, contiguous(a_bits), contiguous(b_bits),
                    None if c_bits is None else contiguous(c_bits))


def operands(a: object, b: object, c: object = None, *, kind: str | DTypeLike | None = None) -> Operands:
    """Validate 2-D operands (dtypes, shapes, accumulator) and return their raw bits."""
    call = check(a, b, c, kind=kind)
    if call.batch:
        raise ValueError(f"matmul: operands(): a 2-D product only, got leading dimensions {call.batch}")
    return _materialize(call, _bits_of(call.a), _bits_of(call.b), call.c)


def plan(a: object, b: object, c: object = None, *, kind: str | DTypeLike | None = None) -> Plan:
    """Validate the operands and pad and pack them as the schedule's instructions take them."""
    return _pack(operands(a, b, c, kind=kind))


def _pack(ops: Operands) -> Plan:
    """The padded A, the interleaved B and C's bits: the instructions' operands (numpy engine, native)."""
    row, a_bits, b_bits = isa.get(ops.mnemonic), ops.a, ops.b
    (m, k), n = a_bits.shape, b_bits.shape[1]
    c_bits = _zero_accumulator(m, n, row) if ops.c is None else ops.c
    lanes = _LANES[row.name]
    k_dwords = -(-k // lanes)
    width = k_dwords * lanes
    if width == k:
        a_pad = a_bits
    else:
        a_pad = np.full((m, width), row.source_format.pad, dtype=a_bits.dtype)
        a_pad[:, :k] = a_bits
    if width == k:
        b_pad = b_bits  # the interleaving below copies anyway
    else:
        b_pad = np.zeros((width, n), dtype=b_bits.dtype)
        b_pad[:k] = b_bits
    b_vnni = _interleave(b_pad, k_dwords, lanes)
    return Plan(ops.mnemonic, ops.group, m, n, k, k_dwords, a_pad, b_vnni, c_bits)


def _interleave(b_pad: np.ndarray, k_dwords: int, lanes: int) -> np.ndarray:
    """The instructions' layout: row d holds (b[lanes*d + j][col] for j) for every column.

    On a little-endian host the values of one dword are its low to high bytes, so each dword is
    assembled with shifts: about 15x faster than numpy's strided transpose, which dominated
    matmul's packing at 1024^3.
    """
    n = b_pad.shape[1]
    if sys.byteorder != "little":
        return np.ascontiguousarray(b_pad.reshape(k_dwords, lanes, n).transpose(0, 2, 1)).reshape(k_dwords, n * lanes)
    width = 32 // lanes
    words = b_pad[0::lanes].astype(np.uint32)
    for j in range(1, lanes):
        words |= b_pad[j::lanes].astype(np.uint32) << np.uint32(width * j)
    return words.view(b_pad.dtype).reshape(k_dwords, n * lanes)


def _stacked_rows(x: np.ndarray) -> "np.ndarray | None":
    """``x`` (..., R, C) as one (prod(...) * R, C) matrix: a view where its leading dimensions step
    through memory as one run of rows, else a copy of its own size; None for a stack broadcast by
    zero strides, whose copy would be the whole stack rather than the matrix it repeats."""
    *lead, columns = x.shape
    rows = math.prod(lead)
    runs = [(size, stride) for size, stride in zip(lead, x.strides[:-1]) if size != 1]
    if any(stride == 0 for _, stride in runs):
        return None
    if any(outer != inner * size for (_, outer), (size, inner) in zip(runs, runs[1:])):
        return np.ascontiguousarray(x).reshape(rows, columns)
    row_stride = runs[-1][1] if runs else x.strides[-2]
    return np.lib.stride_tricks.as_strided(x, (rows, columns), (row_stride, x.strides[-1]), writeable=False)


def _shared_b_operands(call: Call, a_bits: np.ndarray, b_bits: np.ndarray) -> "Operands | None":
    """A batch whose products all take the same b as one 2-D product: a's (batch * M, K) rows times b.

    Every output element has its own chain of instructions (docs/matmul.md), which a's other rows
    do not enter, so each element's bits are those of its own 2-D call. None where b differs
    along the batch, a is broadcast along it (:func:`_stacked_rows`) or the batch is empty.
    ``c`` broadcast along the batch is tiled to the output's size (once).
    """
    b_all = np.broadcast_to(b_bits, call.batch + (call.k, call.n))
    if math.prod(call.batch) == 0 or not _repeats_one_matrix(b_all):
        return None
    a_rows = _stacked_rows(np.broadcast_to(a_bits, call.batch + (call.m, call.k)))
    if a_rows is None:
        return None
    c_rows = None
    if call.c is not None:
        c_all = np.broadcast_to(call.c, call.batch + (call.m, call.n))
        c_rows = _stacked_rows(c_all)
        if c_rows is None:
            c_rows = np.ascontiguousarray(c_all).reshape(-1, call.n)
    return _materialize(call, a_rows, b_all[(0,) * len(call.batch)], c_rows)


def _repeats_one_matrix(x: np.ndarray) -> bool:
    """``x`` (..., R, C) is one matrix along its leading dimensions (each of size 1 or stride 0)."""
    return all(stride == 0 or size == 1 for size, stride in zip(x.shape[:-2], x.strides[:-2]))


def _float_b_shared(call: Call) -> "_Operand | None":
    """A float b that every product of the call takes (2-D, or a stack that repeats one matrix), as
    that (K, N) operand: rounded while it is packed, once for the whole batch. None otherwise, and
    for an empty batch (nothing to pack)."""
    b = call.b.array
    if not call.b.rounds or math.prod(call.batch) == 0 or not _repeats_one_matrix(b):
        return None
    return _Operand(b[(0,) * (b.ndim - 2)], call.b.format, True)


def _zero_accumulator(m: int, n: int, row: isa.Instruction) -> np.ndarray:
    return np.zeros((m, n), dtype=_acc_dtype(row))


# -- the native path ----------------------------------------------------------------------


def native_packed(row: isa.Instruction, a_bits: np.ndarray, tiles: np.ndarray, c_bits: np.ndarray,
                  threads: int | None, backend: Backend | None = None) -> np.ndarray:
    """One 2-D product on the native kernels with B in their tile layout (pyamx/cpu/_tile_layout.py):
    A padded to whole dwords here (docs/matmul.md, step 1), B read from ``tiles``."""
    native_matmul: ModuleType = module(".cpu._native_matmul", __package__)  # pyamx._first_use
    matmul_native_packed: Callable[..., np.ndarray] = native_matmul.matmul_native_packed
    lanes = _LANES[row.name]
    k_dwords = -(-a_bits.shape[1] // lanes)
    width = k_dwords * lanes
    if width != a_bits.shape[1]:
        padded = np.full((a_bits.shape[0], width), row.source_format.pad, dtype=a_bits.dtype)
        padded[:, :a_bits.shape[1]] = a_bits
        a_bits = padded
    return matmul_native_packed(row.name, a_bits, tiles, k_dwords, c_bits, threads, backend=backend)


# -- the public function ----------------------------------------------------------------


def _check_threads(threads: object) -> int | None:
    # The one check of threads= (pyamx._threads): here, once per product; what it returns is passed
    # down to the engines and the native kernels as it is.
    return _threads.check(threads, "matmul")


def matmul(a: ArrayInput, b: ArrayInput | PackedB, c: ArrayInput | None = None, *,
           kind: str | DTypeLike | None = None, backend: str | None = None, engine: str | None = None,
           threads: int | None = None, numerics: str | Numerics = "sdm", out: ArrayInput | None = None,
           out_dtype: str | DTypeLike | None = None) -> AMXResult:
    """``c + a @ b`` through AMX tile instructions, for any M, N, K >= 1: a new (..., M, N) array.

    ``a`` (M, K) and ``b`` (K, N) are ordinary row-major matrices (no packing), or stacks of them:
    leading dimensions broadcast as in ``np.matmul``, each product computed as the 2-D call would
    (a stack times one shared ``b`` runs as one call on the stacked rows, same bits).

    - bf16 (uint16 or int16 bit patterns, ``ml_dtypes.bfloat16``, a ``torch.bfloat16`` tensor)
      -> float32 via TDPBF16PS;
    - float16 -> float32 via TDPFP16PS (pass ``kind="fp16"`` to give fp16 as uint16/int16 bits);
    - int8/uint8 -> int32 via TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD, chosen by the signedness
      of a's and b's dtypes;
    - complex64/complex128 (or uint32 fp16 pairs with ``kind="complex"``) -> complex64: the
      real part through TCMMRLFP16PS, the imaginary part through TCMMIMFP16PS (2-D only;
      ``c`` complex64; complex values are rounded to fp16 by numpy, to nearest even);
    - fp8 (``ml_dtypes.float8_e5m2`` as BF8, ``ml_dtypes.float8_e4m3fn`` as HF8, either on
      either side) -> float32 via TDPBF8PS/TDPBHF8PS/TDPHBF8PS/TDPHF8PS on any emulator engine
      (``kind="fp8"`` reads uint8 operands as BF8 bits);
    - float32 or float64 (Python floats) with ``kind="bf16"`` or ``kind="fp16"``: each such
      operand is rounded once, directly, to that format (nearest even, as
      :func:`pyamx.table.bf16.from_float32`) and the product runs as above; the result's
      ``.rounded_to`` names the format.

    Operands are anything numpy converts (lists, ``__array__`` objects, buffers); a DLPack
    tensor (torch, JAX) is read in place, no copy.
    ``kind``: None (infer from the dtypes, uint16/int16 meaning bf16) or "bf16" (also
    "bfloat16"), "fp16" (also "float16"), "int8", "fp8", "complex" to state it; both operands
    must match it. ``c``: optional (..., M, N) float32 (int32 for int8) accumulator, uint32
    taken as raw bits, broadcasting over the batch; zeros by default.
    ``out_dtype``: None or "float32" (int32, complex64 for those kinds); "bf16"/"bfloat16": the
    float32 result rounded once (nearest even, :func:`pyamx.table.bf16.from_float32`) to bf16 bits,
    uint16; ``ml_dtypes.bfloat16``: the same bits as that dtype. ``out``: an array of the
    result's shape and dtype (float32, int32, complex64; uint16/int16/bfloat16 for a bf16
    result; any strides) written in place; the result is then an AMXResult view of ``out``.
    ``out`` may not share memory with ``a``, ``b`` or ``c``, unless it is ``c`` itself.
    Inputs are never modified. Every argument is checked before anything is copied.

    The result is bit for bit what the schedule of docs/matmul.md produces: per output
    element, blocks of 16 dwords of K in increasing order, one dot-product instruction
    each, C chained through them. ``backend``: None (process default), "auto", "native",
    "emulator"; ``engine``: the emulator's arithmetic engine (None: ``PYAMX_ENGINE``, else
    auto); ``threads``: worker threads (None: :func:`pyamx.emulator.engine.default_threads` on the
    emulator, by the work's size on native; at most 256); ``numerics``: the
    emulator's model (emulator only). The result's ``.backend``, ``.engine`` and
    ``.native_mode`` say what ran.
    """
    # Each setting decided once here and passed down as the object it became (pyamx._backend):
    threads = _check_threads(threads)
    numerics = choose_numerics(numerics)
    kind = _check_kind(kind)
    spec = _matmul_out.parse(out_dtype)
    a_in = intake(a, "a")
    packed_b = _packed_b(b)
    b_in = packed_b if packed_b is not None else intake(b, "b")  # pyamx.pack's operand: the same flow, same bits
    if (isinstance(b_in, Imported) and not isinstance(b, Imported)  # taken just now: not pyamx.pack's
            and _matmul_complex.wants_complex(a_in.array, b_in.array, kind)):
        return _complex(a_in.array, b_in.array, c, spec, out, backend=backend, engine=engine, threads=threads,
                        numerics=numerics)
    call = check(a_in, b_in, c, kind=kind)
    view = np.dtype(np.float32 if isa.get(call.mnemonic).is_float else np.int32)
    target = None
    if out is not None:
        dtype = _matmul_out.result_dtype(spec, view, call.group)
        target = _matmul_out.check_out(out, call.batch + (call.m, call.n), dtype,
                                       {"a": call.a.array, "b": call.b_array, "c": call.c})
    elif spec.name is not None:
        _matmul_out.result_dtype(spec, view, call.group)
    chosen = _backend.choose_backend(backend, call.group, numerics, engine)
    eng = None if chosen.is_native else _engine.choose_engine(engine, numerics, op=call.mnemonic)
    _matmul_memory.check(_needed_bytes(call, eng), f"a {'x'.join(map(str, call.batch + (call.m, call.n)))} "
                         f"product over K={call.k}")
    # Every check is done: only now are float operands rounded and anything copied.
    a_bits = _bits_of(call.a)
    labels = {} if call.rounded_to is None else {"rounded_to": call.rounded_to}
    if call.packed is not None:
        bits = call.packed.product_bits(call, a_bits, eng, threads, chosen)
    elif eng is None and (shared_b := _float_b_shared(call)) is not None:  # rounded while packed, as pyamx.pack does
        packed = module("._packed", __package__).packed_from(shared_b, call.group, threads)
        a_all = np.broadcast_to(a_bits, call.batch + (call.m, call.k)) if call.batch else a_bits
        bits = packed.product_bits(call, a_all, eng, threads, chosen)
    elif not call.batch:
        bits = _product(_materialize(call, a_bits, _bits_of(call.b), call.c), eng, threads, chosen)
    else:
        bits = _batched(call, a_bits, _bits_of(call.b), eng, threads, chosen)
    result = _matmul_out.finish(bits.view(view), spec, target)
    if eng is None:
        return _matmul_out.labelled(result, target is not None, "native", chosen.mode_for(isa.get(call.mnemonic)),
                                    **labels)
    return _matmul_out.labelled(result, target is not None, "emulator", engine=eng.name, **labels)


def _complex(a: np.ndarray, b: np.ndarray, c: ArrayInput | None, spec: _matmul_out.OutDtype, out: object,
             **run: Any) -> AMXResult:
    """A complex product (pyamx._matmul_complex), with ``out`` checked before it runs."""
    dtype = _matmul_out.result_dtype(spec, np.dtype(np.complex64), _matmul_complex.KIND)
    if out is None or a.ndim != 2 or b.ndim != 2:  # other shapes: complex_matmul refuses them before any work
        return _matmul_complex.complex_matmul(a, b, c, **run)
    c_array = None if c is None else _validate.require_array(c, "c", "matmul")
    target = _matmul_out.check_out(out, (a.shape[0], b.shape[1]), dtype, {"a": a, "b": b, "c": c_array})
    product = _matmul_complex.complex_matmul(a, b, c, **run)
    result = _matmul_out.finish(np.asarray(product), spec, target)
    return _matmul_out.labelled(result, True, str(product.backend), product.native_mode, product.engine)


def _path(mnemonic: str, eng: Engine | None) -> str:
    """Which transient copies a product makes (pyamx._matmul_memory.row_bytes)."""
    if eng is None:
        return "native"
    if not eng.compiled:
        return "numpy"
    return "fp8" if mnemonic in _engine.FP8_OPS else "compiled"


#: values per dword of each dot product, looked up once (isa's property computes it on every read)
_LANES = {name: lanes for name, (lanes, _) in _engine.OPS.items()}


def _row_bytes(mnemonic: str, k: int, n: int, eng: Engine | None) -> int:
    lanes = _LANES[mnemonic]
    width = -(-k // lanes) * lanes
    return _matmul_memory.row_bytes(n, width, 4 // lanes, _path(mnemonic, eng))


def _needed_bytes(call: Call, eng: Engine | None) -> int:
    """The call's peak estimate: the result, the operands' rounded or contiguous copies, B's packed
    forms and one block's transients (pyamx._matmul_memory)."""
    lanes = _LANES[call.mnemonic]
    item = 4 // lanes
    if call.packed is not None:  # B is packed already: the engines unpack it (twice its tiles), native reads it
        rows = (int(np.prod(call.batch, dtype=np.int64)) if call.batch else 1) * call.m
        return (rows * call.n * 4 * (1 if call.c is None else 2) + rows * call.k * call.packed.item_bytes
                + (0 if eng is None else 2 * call.packed.tiles.nbytes))
    width = -(-call.k // lanes) * lanes
    products = int(np.prod(call.batch, dtype=np.int64)) if call.batch else 1
    result = products * call.m * call.n * 4
    copies = 0
    for op in (call.a, call.b):
        if op.rounds or not op.array.flags.c_contiguous:
            copies += op.array.size * item
    if call.c is not None:
        copies += call.m * call.n * 4  # made contiguous, per product
    b_packed = width * call.n * (2 * item + 8)  # padded, interleaved, and as an engine packs it
    per_row = _row_bytes(call.mnemonic, call.k, call.n, eng)
    return result + copies + b_packed + _matmul_memory.block_rows(call.m, per_row) * per_row


def _product(ops: Operands, eng: Engine | None, threads: int | None, backend: Backend | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
    """One 2-D product's result bits, on the native kernels (``eng`` None; ``backend`` the call's
    resolved native backend) or the engine ``eng``; into ``out`` where given.

    In blocks of rows where the whole product's transient copies would pass
    pyamx._matmul_memory.BLOCK_BYTES: rows are independent, so the bits are the same.
    """
    (m, k), n = ops.a.shape, ops.b.shape[1]
    rows = _matmul_memory.block_rows(m, _row_bytes(ops.mnemonic, k, n, eng))
    if rows >= m and out is None:
        return _whole_product(ops, eng, threads, backend)
    tiles = _tile_layout.pack(ops.b, threads) if eng is None else None  # once for all blocks
    if out is None:
        out = np.empty((m, n), _acc_dtype(isa.get(ops.mnemonic)))
    for start in range(0, m, rows):
        stop = min(start + rows, m)
        block = Operands(ops.mnemonic, ops.group, ops.a[start:stop], ops.b,
                         None if ops.c is None else ops.c[start:stop])
        out[start:stop] = _whole_product(block, eng, threads, backend, tiles).view(out.dtype)  # bits: no conversion
    return out


def _whole_product(ops: Operands, eng: Engine | None, threads: int | None, backend: Backend | None = None,
                   tiles: np.ndarray | None = None) -> np.ndarray:
    if eng is None:
        # B straight from row-major into the kernel's tile layout, in C by the pool's threads
        row = isa.get(ops.mnemonic)
        c_bits = _zero_accumulator(ops.a.shape[0], ops.b.shape[1], row) if ops.c is None else ops.c
        if tiles is None:
            tiles = _tile_layout.pack(ops.b, threads)
        return native_packed(row, ops.a, tiles, c_bits, threads, backend)
    if eng.compiled:
        # row-major B straight to C: padded, widened and packed there once (no interleaved copy here)
        return np.asarray(eng.run_matmul(ops.mnemonic, ops.a, ops.b, ops.c, threads))
    p = _pack(ops)
    return np.asarray(eng.run_dot(p.mnemonic, p.c, p.a, p.b_vnni, p.k_dwords, threads))


def _batched(call: Call, a_bits: np.ndarray, b_bits: np.ndarray, eng: Engine | None, threads: int | None,
             backend: Backend | None = None) -> np.ndarray:
    """Each product of the broadcast batch as its own 2-D call, into one (*batch, M, N) array.

    Where every product shares one b and a's stack is one matrix in memory, the whole batch is
    one 2-D call on a's rows (:func:`_shared_b_operands`). Otherwise the operands are broadcast
    as views, so a product repeated over the batch is copied one matrix at a time, never as a
    whole stack.
    """
    shared = _shared_b_operands(call, a_bits, b_bits)
    if shared is not None:
        bits = _product(shared, eng, threads, backend)
        return bits.view(_acc_dtype(isa.get(call.mnemonic))).reshape(
            call.batch + (call.m, call.n))
    a_all = np.broadcast_to(a_bits, call.batch + (call.m, call.k))
    b_all = np.broadcast_to(b_bits, call.batch + (call.k, call.n))
    c_all = None if call.c is None else np.broadcast_to(call.c, call.batch + (call.m, call.n))
    out = np.empty(call.batch + (call.m, call.n), _acc_dtype(isa.get(call.mnemonic)))
    for index in np.ndindex(*call.batch):
        ops = _materialize(call, a_all[index], b_all[index], None if c_all is None else c_all[index])
        _product(ops, eng, threads, backend, out=out[index])
    return out
