"""Seeded operand generators for differential testing: random and adversarial bit patterns.

Used by pyamx's own tests, by ``python -m pyamx record`` and by anyone who
wants to hold their own emulator against pyamx or silicon. Each class aims at one rule of docs/semantics.md section 2: DAZ on inputs and on
the destination, FTZ near 2**-126 (flushed, and rounding up to 2**-126),
overflow, infinities, NaN payloads and priority, zero signs, exact
cancellation, ties. Everything is built from bit fields, not from pyamx.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import numpy.typing as npt

U16 = npt.NDArray[np.uint16]
U32 = npt.NDArray[np.uint32]
#: what _sprinkle picks from: an array of bit patterns, or a list of them
_Patterns = Union[npt.NDArray[np.unsignedinteger], Sequence[int]]

CLASSES = (
    "normal", "denormal", "zeros", "specials", "nans", "tiny", "overflow", "cancel", "ties", "mixed",
)


def _bf16(rng: np.random.Generator, shape: tuple[int, ...], exp_lo: int, exp_hi: int) -> U16:
    """bf16 bits with random sign/mantissa and biased exponent in [exp_lo, exp_hi]."""
    sign = rng.integers(0, 2, shape, dtype=np.uint16) << 15
    exponent = rng.integers(exp_lo, exp_hi + 1, shape).astype(np.uint16) << 7
    mantissa = rng.integers(0, 128, shape, dtype=np.uint16)
    bits: U16 = (sign | exponent | mantissa).astype(np.uint16)
    return bits


def _fp32(rng: np.random.Generator, shape: tuple[int, ...], exp_lo: int, exp_hi: int) -> U32:
    sign = rng.integers(0, 2, shape, dtype=np.uint32) << 31
    exponent = rng.integers(exp_lo, exp_hi + 1, shape).astype(np.uint32) << 23
    mantissa = rng.integers(0, 1 << 23, shape, dtype=np.uint32)
    bits: U32 = (sign | exponent | mantissa).astype(np.uint32)
    return bits


def _sprinkle(rng: np.random.Generator, bits: npt.NDArray[np.unsignedinteger], values: _Patterns,
              fraction: float) -> np.ndarray:
    mask = rng.random(bits.shape) < fraction
    picks = rng.choice(np.asarray(values, dtype=bits.dtype), size=bits.shape)
    sprinkled: np.ndarray = np.where(mask, picks, bits).astype(bits.dtype)
    return sprinkled


def _nan16(rng: np.random.Generator, shape: tuple[int, ...]) -> U16:
    sign = rng.integers(0, 2, shape, dtype=np.uint16) << 15
    quiet = rng.integers(0, 2, shape, dtype=np.uint16) << 6
    payload = rng.integers(1, 64, shape, dtype=np.uint16)  # non-zero keeps signalling NaNs NaN
    nans: U16 = (sign | 0x7F80 | quiet | payload).astype(np.uint16)
    return nans


def _nan32(rng: np.random.Generator, shape: tuple[int, ...]) -> U32:
    sign = rng.integers(0, 2, shape, dtype=np.uint32) << 31
    quiet = rng.integers(0, 2, shape, dtype=np.uint32) << 22
    payload = rng.integers(1, 1 << 22, shape, dtype=np.uint32)
    nans: U32 = (sign | 0x7F800000 | quiet | payload).astype(np.uint32)
    return nans


def operands(rng: np.random.Generator, m: int, k: int, n: int, cls: str) -> tuple[U32, U16, U16]:
    """(c uint32 (M, N), a uint16 (M, 2K), b uint16 (K, 2N)) for one class."""
    a = _bf16(rng, (m, 2 * k), 120, 134)
    b = _bf16(rng, (k, 2 * n), 120, 134)
    c = _fp32(rng, (m, n), 120, 134)
    if cls == "normal":
        pass
    elif cls == "denormal":
        a = _sprinkle(rng, a, _bf16(rng, (64,), 0, 0), 0.3)
        b = _sprinkle(rng, b, _bf16(rng, (64,), 0, 0), 0.3)
        c = _sprinkle(rng, c, _fp32(rng, (64,), 0, 0), 0.5)
    elif cls == "zeros":
        a = _sprinkle(rng, a, [0x0000, 0x8000], 0.6)
        b = _sprinkle(rng, b, [0x0000, 0x8000], 0.6)
        c = _sprinkle(rng, c, [0x00000000, 0x80000000], 0.7)
    elif cls == "specials":
        a = _sprinkle(rng, a, [0x7F80, 0xFF80, 0x0000, 0x8000], 0.2)
        b = _sprinkle(rng, b, [0x7F80, 0xFF80, 0x0000, 0x8000], 0.2)
        c = _sprinkle(rng, c, [0x7F800000, 0xFF800000, 0x80000000], 0.2)
    elif cls == "nans":
        a = _sprinkle(rng, a, _nan16(rng, (64,)), 0.1)
        b = _sprinkle(rng, b, _nan16(rng, (64,)), 0.1)
        c = _sprinkle(rng, c, _nan32(rng, (64,)), 0.2)
        a = _sprinkle(rng, a, [0x7F80, 0xFF80, 0x0000], 0.1)  # invalid operations too
        b = _sprinkle(rng, b, [0x7F80, 0xFF80, 0x8000], 0.1)
    elif cls == "tiny":
        # products near 2**-126: exponents around -63 each, and small C
        a = _bf16(rng, (m, 2 * k), 62, 66)
        b = _bf16(rng, (k, 2 * n), 62, 66)
        c = _fp32(rng, (m, n), 0, 2)
        c = _sprinkle(rng, c, [0x00800000, 0x80800000, 0x007FFFFF, 0x807FFFFF], 0.3)
    elif cls == "overflow":
        a = _bf16(rng, (m, 2 * k), 185, 192)
        b = _bf16(rng, (k, 2 * n), 185, 192)
        c = _fp32(rng, (m, n), 250, 254)
    elif cls == "cancel":
        # k+1 repeats k with b negated: equal and opposite products in each lane
        b[1::2] = b[0 : b.shape[0] - b.shape[0] % 2 : 2] ^ np.uint16(0x8000)
        a[:, 2::4] = a[:, 0 : a.shape[1] - 2 : 4][:, : a[:, 2::4].shape[1]]
        a[:, 3::4] = a[:, 1 : a.shape[1] - 2 : 4][:, : a[:, 3::4].shape[1]]
        c = _sprinkle(rng, c, [0x00000000, 0x80000000], 0.5)
    elif cls == "ties":
        # C = 1.x, products of exactly half an ulp of C or of the lanes
        c = (np.uint32(0x3F800000) | rng.integers(0, 1 << 23, (m, n), dtype=np.uint32)).astype(np.uint32)
        a = _sprinkle(rng, a, [0x3980, 0x3F80, 0xB980, 0x3400], 0.7)  # 2**-12, 1, -2**-12, 2**-23
        b = _sprinkle(rng, b, [0x3980, 0x3F80, 0x3400, 0x3A00], 0.7)
    elif cls == "mixed":
        everything = [operands(rng, m, k, n, other) for other in CLASSES[:-1]]
        pick_c = rng.integers(0, len(everything), (m, n))
        pick_a = rng.integers(0, len(everything), (m, 2 * k))
        pick_b = rng.integers(0, len(everything), (k, 2 * n))
        c = np.choose(pick_c, [e[0] for e in everything]).astype(np.uint32)
        a = np.choose(pick_a, [e[1] for e in everything]).astype(np.uint16)
        b = np.choose(pick_b, [e[2] for e in everything]).astype(np.uint16)
    else:
        raise ValueError(cls)
    return np.ascontiguousarray(c), np.ascontiguousarray(a), np.ascontiguousarray(b)


def shapes(rng: np.random.Generator, count: int) -> list[tuple[int, int, int]]:
    """Every edge (1 and 16 in each of M, K, N) first, then random shapes."""
    edges = [(m, k, n) for m in (1, 16) for k in (1, 16) for n in (1, 16)]
    randoms = []
    for _ in range(max(0, count - len(edges))):
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        randoms.append((m, k, n))
    return edges + randoms


def hexdump(name: str, values: npt.ArrayLike) -> str:
    array = np.asarray(values)
    width = array.dtype.itemsize * 2
    rows = [" ".join(f"{int(x):0{width}x}" for x in row) for row in np.atleast_2d(array)]
    return f"{name} ({array.shape}):\n  " + "\n  ".join(rows)
