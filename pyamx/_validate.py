"""Checks of the array operands of the one-shot dot-product functions.

Every backend calls these first, so wrong input gets the same clear
TypeError/ValueError everywhere and the native code only ever sees
C-contiguous arrays of the right dtype and shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Tuple

import numpy as np

from . import _dlpack
from . import _convert
from .table import isa

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

#: a dtype family's check: accepted dtype names -> the bits dtype each is read as, the hint for the
#: message, and the native dtypes the fast check accepts (learned as the full check accepts them)
Kind: TypeAlias = Tuple["dict[str, np.dtype[Any]]", str, "set[np.dtype[Any]]"]

MAX_M = 16
MAX_K = 16  # tmul_maxk
MAX_N = 16  # tmul_maxn / 4


_FRAMEWORK_HINT = (
    "; a CPU torch or JAX tensor is read in place through DLPack (a torch.bfloat16 one as bf16), "
    "or pass its bit patterns: t.view(torch.int16)"
)


def require_array(x: object, name: str, fn: str) -> np.ndarray:
    """``x`` as an ndarray without copying where numpy can: a DLPack producer (a torch or JAX
    tensor), __array__, the buffer protocol.

    The one operand rule: every public entry point (the one-instruction
    functions, ``pyamx.matmul``, ``pyamx.table.bf16.*``) takes its arrays through
    here, so they accept the same objects and refuse the rest with the same
    message (a failing ``__array__`` never escapes as the framework's own error).
    A tensor of a format numpy has no dtype for (``torch.bfloat16``, torch's float8)
    comes as that ``ml_dtypes`` dtype, so every reader knows what its bits are;
    without ml_dtypes it is refused with the recipe (``pyamx.matmul`` takes it anyway:
    :func:`require_operand`).
    """
    array, carried = require_operand(x, name, fn)
    if carried is None:
        return array
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"{fn}: {name} ({type(x).__name__}) holds {carried} values, which numpy has no dtype for "
                        "without ml_dtypes: install ml_dtypes, or pass its bit patterns (t.view(torch.int16))") from None
    return array.view(getattr(ml_dtypes, carried))


def require_operand(x: object, name: str, fn: str) -> "tuple[np.ndarray, str | None]":
    """As :func:`require_array`, with the dtype name a DLPack tensor's bits are of where numpy has
    no dtype for them (``"bfloat16"``...: the array then holds them as unsigned integers), else None."""
    if isinstance(x, np.ndarray):
        return x, None
    if isinstance(x, (str, bytes, dict, set)) or x is None:
        raise TypeError(f"{fn}: {name} must be an array, not {type(x).__name__}")
    if _dlpack.exports(x):
        try:
            return _dlpack.import_array(x, name, fn)
        except TypeError:
            if not hasattr(x, "__array__"):
                raise
            try:  # what numpy converts another way is taken as before; else DLPack's reason is the clearer one
                return np.asarray(x), None
            except Exception:
                pass
            raise
    try:
        return np.asarray(x), None
    except Exception as exc:  # whatever the object's own conversion raises, said once, clearly
        raise TypeError(
            f"{fn}: {name} ({type(x).__name__}) cannot be converted to a numpy array: {exc}{_FRAMEWORK_HINT}"
        ) from None


_DTYPE_NAMES: dict[np.dtype[Any], str] = {}  # dtype -> dtype.name, which numpy computes slowly (microseconds per call)


def dtype_name(dtype: np.dtype[Any]) -> str:
    """``dtype.name``, looked up once per dtype."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def _bits_view(x: object, name: str, fn: str, allowed: dict[str, np.dtype[Any]], hint: str,
               fast: set[np.dtype[Any]] | None = None) -> np.ndarray:
    """A view of ``x`` as the unsigned bit type for its dtype, or raise naming the allowed dtypes.

    No copy is made here (strides and byte order stay as they are): the
    one-instruction functions check shapes first, and only then
    :func:`check_dot_shapes` makes the operands contiguous and native-endian,
    so a huge zero-stride view is refused before anything is allocated.
    """
    array = require_array(x, name, fn)
    dtype = array.dtype
    bits_dtype = allowed.get(dtype_name(dtype))
    if bits_dtype is None:
        raise TypeError(
            f"{fn}: {name} has dtype {array.dtype}; expected {' or '.join(allowed)}{hint}"
        )
    bits_dtype = np.dtype(bits_dtype)
    if fast is not None and dtype.isnative:
        fast.add(dtype)  # accepted once by name (ml_dtypes.bfloat16 too): the fast check takes it from now on
    if not array.dtype.isnative:  # big-endian values: a big-endian view of the bits; swapped when copied
        bits_dtype = bits_dtype.newbyteorder()
    return array.view(bits_dtype)  # same item size, so any strides are fine


def contiguous_bits(x: np.ndarray) -> np.ndarray:
    """A C-contiguous, aligned, native-endian copy (or the array itself when it already is one).

    Aligned too: the C code reads whole elements (a buffer at an odd offset,
    np.frombuffer(..., offset=1), would be a misaligned load there). The usual
    case is a flags test: np.require costs microseconds even when it copies nothing.
    """
    flags = x.flags
    if flags.c_contiguous and flags.aligned and x.dtype.isnative:
        return x
    return np.require(x, dtype=x.dtype.newbyteorder("="), requirements=("C", "A", "E"))


def _bits(x: object, name: str, fn: str, allowed: dict[str, np.dtype[Any]], hint: str,
          fast: set[np.dtype[Any]] | None = None) -> np.ndarray:
    """As :func:`_bits_view`, materialized: C-contiguous and native-endian."""
    return contiguous_bits(_bits_view(x, name, fn, allowed, hint, fast))


def _kind(allowed: dict[str, np.dtype[Any]], hint: str) -> Kind:
    """(allowed dtype names -> bits dtype, hint for the message, native dtypes the fast check accepts).

    The fast set starts with numpy's own dtypes of those names and learns
    the others (ml_dtypes.bfloat16) the first time the full check accepts one.
    """
    fast = {np.dtype(n).newbyteorder("=") for n in allowed if n in np.sctypeDict}
    return allowed, hint, fast


def _format_kind(fmt: isa.Format) -> Kind:
    """The kind of a pyamx.table.isa format row: its dtypes, each read as its bits; 16-bit floats add
    how to hand over a framework's tensor, which numpy cannot hold as such."""
    hint = f" ({fmt.note})" if fmt.note else ""
    if fmt.is_float and fmt.width // fmt.components == 16:
        hint += _FRAMEWORK_HINT
    if fmt.components > 1:
        # a complex pair is taken as its components' bits, as the tile holds them; the other
        # dtypes of the format (one word or one numpy complex per element) are converted first
        # (complex_pairs)
        half = np.dtype(f"u{fmt.width // fmt.components // 8}")
        return _kind({name: half for name in fmt.dtypes if np.dtype(name).itemsize == half.itemsize}, hint)
    bits = np.dtype(fmt.bits).newbyteorder("=")  # values in the caller's arrays: native order, as np.uint16 is
    return _kind({name: bits for name in fmt.dtypes}, hint)


#: format name -> its kind
FORMAT_KINDS = {fmt.name: _format_kind(fmt) for fmt in isa.FORMAT_ROWS}
_BF16, _FP16, _FP32, _INT32, _BYTES = (FORMAT_KINDS[n] for n in ("bf16", "fp16", "fp32", "int32", "int8"))


def bf16_bits(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    """uint16 bf16 bit patterns (C-contiguous) from uint16, int16 (bit patterns) or ml_dtypes.bfloat16."""
    return _bits(x, name, fn, *_BF16)


def fp16_bits(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, *_FP16)


def fp32_bits(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, *_FP32)


def int32_words(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, *_INT32)


def byte_lanes(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, *_BYTES)


# The same checks without the copy, for operands whose shapes are checked next (check_dot_shapes).


def bf16_view(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits_view(x, name, fn, *_BF16)


def fp16_view(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits_view(x, name, fn, *_FP16)


def fp32_view(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits_view(x, name, fn, *_FP32)


def int32_view(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits_view(x, name, fn, *_INT32)


def byte_lanes_view(x: object, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits_view(x, name, fn, *_BYTES)


@dataclass(frozen=True)
class DotOperands:
    """Validated operands: raw bits, C-contiguous, with the instruction's M x K x N."""

    c: np.ndarray
    a: np.ndarray
    b: np.ndarray
    m: int
    k: int
    n: int


def check_dot_shapes(fn: str, c: np.ndarray, a: np.ndarray, b: np.ndarray, lanes: int, element: str) -> DotOperands:
    """c (M, N), a (M, lanes*K), b (K, lanes*N) with 1 <= M, K, N <= 16."""
    for name, x in (("c", c), ("a", a), ("b", b)):
        if x.ndim != 2:
            raise ValueError(f"{fn}: {name} must be 2-D, got ndim={x.ndim} shape={x.shape}")
    m, n = c.shape
    if a.shape[1] % lanes:
        raise ValueError(
            f"{fn}: a has {a.shape[1]} columns; each row holds K dwords of {lanes} {element} values, "
            f"so the count must be a multiple of {lanes}"
        )
    if b.shape[1] % lanes:
        raise ValueError(
            f"{fn}: b has {b.shape[1]} columns; the interleaved layout holds {lanes} {element} values "
            f"per column n, so the count must be a multiple of {lanes}"
        )
    k = a.shape[1] // lanes
    if a.shape[0] != m:
        raise ValueError(f"{fn}: a has {a.shape[0]} rows but c has M={m}")
    if b.shape[0] != k:
        raise ValueError(f"{fn}: b has {b.shape[0]} rows but a has K={k} ({a.shape[1]} {element} values / {lanes})")
    if b.shape[1] // lanes != n:
        raise ValueError(f"{fn}: b has N={b.shape[1] // lanes} ({b.shape[1]} columns / {lanes}) but c has N={n}")
    for name, value, limit in (("M", m, MAX_M), ("K", k, MAX_K), ("N", n, MAX_N)):
        if not 1 <= value <= limit:
            raise ValueError(f"{fn}: {name}={value}; one instruction takes 1 <= {name} <= {limit}")
    return DotOperands(contiguous_bits(c), contiguous_bits(a), contiguous_bits(b), m, k, n)


# -- the fast check ------------------------------------------------------------------------------
#
# What nearly every call passes: plain C-contiguous native-endian arrays of an
# accepted dtype and valid shapes. Recognising that costs a few attribute
# compares; anything else (another type, a view, big-endian, a bad shape) goes
# to the full checks above, which accept it (with a copy) or raise the clear
# error. So this check only ever says "valid as is" or "look closer".

# (np.ndarray, AMXResult): subclasses whose buffer is their data (not a masked array)
_PLAIN: tuple[type, ...] | None = None


def _plain_types() -> tuple[type, ...]:
    global _PLAIN
    from ._result import AMXResult

    _PLAIN = (np.ndarray, AMXResult)
    return _PLAIN


#: dot product name -> (c kind, a kind, b kind, values per dword), from its pyamx.table.isa row
def _dot_kinds(insn: isa.Instruction) -> tuple[Kind, Kind, Kind, int]:
    acc, (a, b), lanes = insn.acc, insn.src_formats, insn.dword_lanes
    return FORMAT_KINDS[acc.name], FORMAT_KINDS[a.name], FORMAT_KINDS[b.name], lanes


DOT_KINDS = {insn.name: _dot_kinds(insn) for insn in isa.DOTS}


def fast_dot_shape(name: str, c: object, a: object, b: object) -> tuple[int, int, int] | None:
    """``(M, K, N)`` when c, a, b are valid one-instruction operands as they are, else None.

    Valid as they are: ndarray (or AMXResult), C-contiguous, aligned, native-endian,
    an accepted dtype, c (M, N), a (M, lanes*K), b (K, lanes*N), 1 <= M, K, N
    <= 16. None says nothing about validity: the caller runs the full checks.
    """
    plain = _PLAIN or _plain_types()
    if type(c) not in plain or type(a) not in plain or type(b) not in plain:
        return None
    if TYPE_CHECKING:  # what the test above proved, said without a run-time cost on this path
        assert isinstance(c, np.ndarray) and isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    c_kind, a_kind, b_kind, lanes = DOT_KINDS[name]
    if c.dtype not in c_kind[2] or a.dtype not in a_kind[2] or b.dtype not in b_kind[2]:
        return None
    cs, as_, bs = c.shape, a.shape, b.shape
    if len(cs) != 2 or len(as_) != 2 or len(bs) != 2:
        return None
    m, n = cs
    k = bs[0]
    if as_[0] != m or as_[1] != k * lanes or bs[1] != n * lanes:
        return None
    if not (0 < m <= MAX_M and 0 < k <= MAX_K and 0 < n <= MAX_N):
        return None
    cf, af, bf = c.flags, a.flags, b.flags
    if not (cf.c_contiguous and af.c_contiguous and bf.c_contiguous and cf.aligned and af.aligned and bf.aligned):
        return None
    return m, k, n


def complex_pairs(x: object, name: str, fn: str, fmt: isa.Format) -> np.ndarray:
    """An operand of a complex-pair format (cfp16) as its (rows, 2 * columns) component bits.

    float16/uint16/int16 arrays already are that (real, imaginary interleaved;
    integers as bit patterns) and come back as a view. uint32 words are
    (imaginary << 16 | real) pairs, split in place of each word. numpy
    complex arrays are values: each part is rounded to fp16 by numpy's
    float16 conversion (round to nearest even, overflow to infinity, NaN kept
    as a NaN) -- the caller's rounding, not the instruction's.
    """
    x = require_array(x, name, fn)
    if x.dtype.kind == "c" and dtype_name(x.dtype) in fmt.dtypes:
        if x.ndim != 2:
            raise ValueError(f"{fn}: {name} must be 2-D, got ndim={x.ndim} shape={x.shape}")
        # A row of complex numbers is its (real, imaginary) parts interleaved: the pairs' layout already.
        parts = x if x.strides[-1] == x.itemsize and x.dtype.isnative else np.ascontiguousarray(x, x.dtype.newbyteorder("="))
        rounded = _convert.to_bits(parts.view(parts.real.dtype), "fp16")  # C; None without the extension
        if rounded is not None:
            return rounded
        pairs = np.empty((x.shape[0], 2 * x.shape[1]), dtype=np.float16)
        with np.errstate(over="ignore", invalid="ignore"):  # beyond fp16's range: infinity, as rounding says
            pairs[:, 0::2] = x.real.astype(np.float16)
            pairs[:, 1::2] = x.imag.astype(np.float16)
        return pairs.view(np.uint16)
    if x.dtype.kind == "u" and x.dtype.itemsize == 4 and "uint32" in fmt.dtypes:
        if x.ndim != 2:
            raise ValueError(f"{fn}: {name} must be 2-D, got ndim={x.ndim} shape={x.shape}")
        words = np.ascontiguousarray(x, dtype="<u4")  # little-endian: the real (low) half first
        return words.view("<u2").astype(np.uint16).reshape(x.shape[0], 2 * x.shape[1])
    return _bits_view(x, name, fn, *FORMAT_KINDS[fmt.name])


def format_view(x: object, name: str, fn: str, fmt: isa.Format) -> np.ndarray:
    """An array of format ``fmt`` (a pyamx.table.isa row) as a view of its bits, no copy (shapes are checked next)."""
    return _bits_view(x, name, fn, *FORMAT_KINDS[fmt.name])


def dot_operands(check: Callable[[str, object, object, object], DotOperands], name: str, c: object, a: object,
                 b: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int, int]]:
    """``(c, a, b, (M, K, N))`` for one instruction: the operands as they are when the fast check
    takes them, else what ``check(name, c, a, b)`` (the full checks) gives or raises."""
    shape = fast_dot_shape(name, c, a, b)
    if shape is None:
        ops = check(name, c, a, b)
        return ops.c, ops.a, ops.b, (ops.m, ops.k, ops.n)
    if TYPE_CHECKING:  # fast_dot_shape takes arrays only
        assert isinstance(c, np.ndarray) and isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    return c, a, b, shape
