"""Checks of the array operands of the one-shot dot-product functions.

Every backend calls these first, so wrong input gets the same clear
TypeError/ValueError everywhere and the native code only ever sees
C-contiguous arrays of the right dtype and shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_M = 16
MAX_K = 16  # tmul_maxk
MAX_N = 16  # tmul_maxn / 4


def _require_array(x, name: str, fn: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{fn}: {name} must be a numpy array, not {type(x).__name__}")
    return x


_DTYPE_NAMES: dict = {}  # dtype -> dtype.name, which numpy computes slowly (microseconds per call)


def _bits(x, name: str, fn: str, allowed: dict, hint: str) -> np.ndarray:
    """View ``x`` as the unsigned bit type for its dtype, or raise naming the allowed dtypes."""
    x = _require_array(x, name, fn)
    dtype = x.dtype
    dtype_name = _DTYPE_NAMES.get(dtype)
    if dtype_name is None:
        dtype_name = _DTYPE_NAMES[dtype] = dtype.name
    bits_dtype = allowed.get(dtype_name)
    if bits_dtype is None:
        raise TypeError(
            f"{fn}: {name} has dtype {x.dtype}; expected {' or '.join(allowed)}{hint}"
        )
    if not x.dtype.isnative:  # a big-endian array: swap the bytes, keep the values (and NaN payloads)
        x = x.byteswap().view(x.dtype.newbyteorder("="))
    return np.ascontiguousarray(x).view(bits_dtype)


def bf16_bits(x, name: str, fn: str = "pyamx") -> np.ndarray:
    """uint16 bf16 bit patterns from a uint16 or ml_dtypes.bfloat16 array."""
    return _bits(x, name, fn, {"uint16": np.uint16, "bfloat16": np.uint16},
                 " (convert float32 with pyamx.bf16.from_float32)")


def fp16_bits(x, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, {"float16": np.uint16, "uint16": np.uint16}, "")


def fp32_bits(x, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, {"float32": np.uint32, "uint32": np.uint32}, " (raw bits)")


def int32_words(x, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, {"int32": np.int32, "uint32": np.int32}, " (uint32 is taken as raw bits)")


def byte_lanes(x, name: str, fn: str = "pyamx") -> np.ndarray:
    return _bits(x, name, fn, {"int8": np.uint8, "uint8": np.uint8}, "")


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
    return DotOperands(c, a, b, m, k, n)
