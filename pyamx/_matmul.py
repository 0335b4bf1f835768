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

import sys
from dataclasses import dataclass

import numpy as np

from . import _backend, _validate, isa
from . import engine as _engine
from ._result import AMXResult, label
from ._validate import dtype_name
from .emulator import numerics as _numerics

#: the value a padded dword holds in A, per family (B is padded with 0): -0 for the float formats
_PAD_A = {"bf16": 0x8000, "fp16": 0x8000, "int8": 0}
KINDS = isa.FAMILIES
#: (a signed, b signed) -> the int8 instruction, from the instruction table
_INT8_MNEMONIC = {insn.signed: insn.name for insn in isa.DOTS if insn.family == "int8"}
_FLOAT_MNEMONIC = {insn.family: insn.name for insn in isa.DOTS if insn.family != "int8"}


@dataclass(frozen=True)
class Plan:
    """What one matmul call runs: the instruction, the dword count and the padded, packed operands."""

    mnemonic: str
    family: str
    m: int
    n: int
    k: int
    k_dwords: int
    a: np.ndarray  # (M, Kd * lanes) raw bits, padded
    b_vnni: np.ndarray  # (Kd, N * lanes) raw bits, interleaved
    c: np.ndarray  # (M, N) uint32 bits (float) or int32


# -- operands ---------------------------------------------------------------------------


def _family_of(x: np.ndarray, name: str, kind):
    """(family, signed) of one operand, strictly from its dtype and ``kind``."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"matmul: {name} must be a numpy array, not {type(x).__name__}")
    dtype = dtype_name(x.dtype)
    if kind is None:
        if dtype in ("uint16", "bfloat16"):
            return "bf16", None
        if dtype == "float16":
            return "fp16", None
        if dtype in ("int8", "uint8"):
            return "int8", dtype == "int8"
        raise TypeError(
            f"matmul: {name} has dtype {dtype}; expected bf16 (uint16 bits or ml_dtypes.bfloat16), "
            "float16, int8 or uint8 (convert float32 with pyamx.bf16.from_float32)"
        )
    allowed = {"bf16": ("uint16", "bfloat16"), "fp16": ("float16", "uint16"), "int8": ("int8", "uint8")}[kind]
    if dtype not in allowed:
        raise TypeError(f"matmul: kind={kind!r} takes {' or '.join(allowed)} operands, but {name} has dtype {dtype}")
    return kind, (dtype == "int8") if kind == "int8" else None


def _check_kind(kind):
    if kind is not None and kind not in KINDS:
        raise ValueError(f"matmul: kind must be None or one of {', '.join(KINDS)}, not {kind!r}")


@dataclass(frozen=True)
class Operands:
    """Validated operands as raw bits, before any padding or interleaving."""

    mnemonic: str
    family: str
    a: np.ndarray  # (M, K) raw bits
    b: np.ndarray  # (K, N) raw bits, row-major
    c: "np.ndarray | None"  # (M, N) uint32 bits / int32, or None for zeros


def operands(a, b, c=None, *, kind=None) -> Operands:
    """Validate the operands (dtypes, shapes, accumulator) and return their raw bits."""
    _check_kind(kind)
    family_a, signed_a = _family_of(a, "a", kind)
    family_b, signed_b = _family_of(b, "b", kind)
    if family_a != family_b:
        raise TypeError(
            f"matmul: a is {family_a} ({a.dtype}) but b is {family_b} ({b.dtype}); both operands must be one "
            "kind (uint16 is read as bf16 bits: pass kind='fp16' to read uint16 as fp16 bits)"
        )
    family = family_a
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2:
            raise ValueError(f"matmul: {name} must be 2-D, got shape {x.shape}")
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise ValueError(f"matmul: a is {m}x{k} and b is {k_b}x{n}; a's columns must equal b's rows")
    if min(m, k, n) < 1:
        raise ValueError(f"matmul: M={m}, K={k}, N={n}; every dimension must be at least 1")
    if family == "int8":
        a_bits = _validate.byte_lanes(a, "a", "matmul")
        b_bits = _validate.byte_lanes(b, "b", "matmul")
        mnemonic = _INT8_MNEMONIC[(signed_a, signed_b)]
    else:
        to_bits = _validate.bf16_bits if family == "bf16" else _validate.fp16_bits
        a_bits = to_bits(a, "a", "matmul")
        b_bits = to_bits(b, "b", "matmul")
        mnemonic = _FLOAT_MNEMONIC[family]
    c_bits = None if c is None else _accumulator(c, m, n, family)
    return Operands(mnemonic, family, a_bits, b_bits, c_bits)


def plan(a, b, c=None, *, kind=None) -> Plan:
    """Validate the operands and pad and pack them as the schedule's instructions take them."""
    return _pack(operands(a, b, c, kind=kind))


def _pack(ops: Operands) -> Plan:
    """The padded A, the interleaved B and C's bits: the instructions' operands (numpy engine, native)."""
    family, a_bits, b_bits = ops.family, ops.a, ops.b
    (m, k), n = a_bits.shape, b_bits.shape[1]
    c_bits = _accumulator(None, m, n, family) if ops.c is None else ops.c
    lanes = isa.get(ops.mnemonic).lanes
    k_dwords = -(-k // lanes)
    width = k_dwords * lanes
    if width == k:
        a_pad = a_bits
    else:
        a_pad = np.full((m, width), _PAD_A[family], dtype=a_bits.dtype)
        a_pad[:, :k] = a_bits
    if width == k:
        b_pad = b_bits  # the interleaving below copies anyway
    else:
        b_pad = np.zeros((width, n), dtype=b_bits.dtype)
        b_pad[:k] = b_bits
    b_vnni = _interleave(b_pad, k_dwords, lanes)
    return Plan(ops.mnemonic, family, m, n, k, k_dwords, a_pad, b_vnni, c_bits)


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


def _accumulator(c, m: int, n: int, family: str) -> np.ndarray:
    if c is None:
        return np.zeros((m, n), dtype=np.int32 if family == "int8" else np.uint32)
    if family == "int8":
        bits = _validate.int32_words(c, "c", "matmul")
    else:
        bits = _validate.fp32_bits(c, "c", "matmul")
    if bits.shape != (m, n):
        raise ValueError(f"matmul: c has shape {bits.shape}; the product is {m}x{n}")
    return bits


# -- the native path ----------------------------------------------------------------------


def _run_native(p: Plan, threads):
    """The native AMX kernels (csrc/matmul_amx.c through pyamx._native_matmul) on the packed operands.

    The kernel takes exactly the engine contract's operands: A padded to whole
    dwords, B interleaved, C bits; it raises NativeUnavailableError where its
    kernel family cannot run.
    """
    from ._native_matmul import matmul_native

    return matmul_native(p.mnemonic, p.a, p.b_vnni, p.c, p.k_dwords, threads)


# -- the public function ----------------------------------------------------------------


def _check_threads(threads):
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"matmul: threads must be None or an integer >= 1, not {threads!r}")
    # More than the engines' cap never helps; the native kernel has the same cap.
    return min(int(threads), _engine.MAX_THREADS)


def matmul(a, b, c=None, *, kind=None, backend=None, engine=None, threads=None, numerics="sdm") -> AMXResult:
    """``c + a @ b`` through AMX tile instructions, for any M, N, K >= 1: a new (M, N) array.

    ``a`` (M, K) and ``b`` (K, N) are ordinary row-major matrices (no packing):

    - bf16 (uint16 bit patterns or ``ml_dtypes.bfloat16``) -> float32 via TDPBF16PS;
    - float16 -> float32 via TDPFP16PS (pass ``kind="fp16"`` to give fp16 as uint16 bits);
    - int8/uint8 -> int32 via TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD, chosen by the signedness
      of a's and b's dtypes.

    ``kind``: None (infer from the dtypes, uint16 meaning bf16) or "bf16", "fp16", "int8"
    to state it; both operands must match it. ``c``: optional (M, N) float32 (int32 for
    int8) accumulator, uint32 taken as raw bits; zeros by default. Inputs are never
    modified.

    The result is bit for bit what the schedule of docs/matmul.md produces: per output
    element, blocks of 16 dwords of K in increasing order, one dot-product instruction
    each, C chained through them. ``backend``: None (process default), "auto", "native",
    "emulator"; ``engine``: the emulator's arithmetic engine (None: ``PYAMX_ENGINE``, else
    auto); ``threads``: worker threads (None: :func:`pyamx.engine.default_threads`, for
    both backends; at most 256); ``numerics``: the
    emulator's model (emulator only). The result's ``.backend``, ``.engine`` and
    ``.native_mode`` say what ran.
    """
    threads = _check_threads(threads)
    numerics = _numerics.resolve(numerics)
    ops = operands(a, b, c, kind=kind)
    view = np.int32 if ops.family == "int8" else np.float32
    chosen = _backend.resolve(backend, ops.family, numerics=numerics, engine=engine)
    if chosen == "native":
        bits = _run_native(_pack(ops), threads)
        return label(bits.view(view), "native", _backend.native_mode())
    eng = _engine.resolve(engine, numerics)
    if eng.compiled:
        # row-major B straight to C: padded, widened and packed there once (no interleaved copy here)
        out = eng.matmul(ops.mnemonic, ops.a, ops.b, ops.c, threads)
    else:
        p = _pack(ops)
        out = eng.dot(p.mnemonic, p.c, p.a, p.b_vnni, p.k_dwords, threads)
    return label(np.asarray(out).view(view), "emulator", engine=eng.name)
