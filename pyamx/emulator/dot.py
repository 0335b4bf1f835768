"""The arithmetic of the tile dot products, on whole operand matrices.

Inputs are already widened to fp32 bit patterns and split into lanes:
``a`` is (M, K, L) and ``b`` is (K, N, L), where L is the number of values a
dword holds (2 for bf16/fp16, 4 for int8). The loop over k is the
instruction's own sequential order; every step is vectorized over M x N.
"""

from __future__ import annotations

import numpy as np

from . import fp32
from .numerics import Numerics


def float_dot(c: np.ndarray, a: np.ndarray, b: np.ndarray, numerics: Numerics, input_daz: bool) -> np.ndarray:
    """C (M, N) fp32 bits plus the dot products of a (M, K, 2) and b (K, N, 2), per ``numerics``."""
    rounding = dict(tininess=numerics.tininess, nan=numerics.nan)
    a_mk = a[:, None, :, :]  # (M, 1, K, 2): broadcast against b over n
    b_kn = np.transpose(b, (1, 0, 2))[None]  # (1, N, K, 2): broadcast against a over m
    k_count = a.shape[1]
    structure = numerics.structure
    if structure in ("sdm", "straight") and not (fp32.is_nan(a).any() or fp32.is_nan(b).any() or fp32.is_nan(c).any()):
        return _float_dot_without_nan_inputs(c, a, b, numerics, input_daz)
    if structure == "sdm":
        lanes = np.zeros(c.shape + (2,), dtype=np.uint32)  # even, odd accumulators start at +0
        for k in range(k_count):
            lanes = fp32.fma32(a_mk[:, :, k, :], b_kn[:, :, k, :], lanes, daz_ab=input_daz, **rounding)
        pair_sum = fp32.add32(lanes[..., 0], lanes[..., 1], **rounding)
        return fp32.add32(c, pair_sum, daz_x=numerics.dest_daz, **rounding)
    if structure == "straight":
        acc = c
        for k in range(k_count):
            for lane in (0, 1):
                acc = fp32.fma32(
                    a_mk[:, :, k, lane], b_kn[:, :, k, lane], acc, daz_ab=input_daz, daz_c=numerics.dest_daz, **rounding
                )
        return acc
    if structure == "fused_pair":
        acc = c
        for k in range(k_count):
            operands = (a_mk[:, :, k, 0], b_kn[:, :, k, 0], a_mk[:, :, k, 1], b_kn[:, :, k, 1])
            terms = _products(operands, input_daz) + [fp32.to_float64(acc, numerics.dest_daz)]
            acc = fp32.exact_sum(terms, nan_operands=operands + (acc,), **rounding)
        return acc
    if structure == "wide":
        operands = []
        for k in range(k_count):
            operands += [a_mk[:, :, k, 0], b_kn[:, :, k, 0], a_mk[:, :, k, 1], b_kn[:, :, k, 1]]
        terms = _products(tuple(operands), input_daz) + [fp32.to_float64(c, numerics.dest_daz)]
        return fp32.exact_sum(terms, nan_operands=tuple(operands) + (c,), **rounding)
    raise AssertionError(structure)  # Numerics validates the name


def _float_dot_without_nan_inputs(c, a, b, numerics: Numerics, input_daz: bool) -> np.ndarray:
    """The sdm and straight structures on float64 values: the same roundings, fewer conversions.

    Without NaN operands the only NaN a step can make is an invalid
    operation's default NaN, and from then on every step propagates that
    NaN, so NaN bits need no tracking until the end.
    """
    tininess = numerics.tininess
    with np.errstate(invalid="ignore", over="ignore"):
        products = fp32.to_float64(a, input_daz)[:, None] * np.transpose(fp32.to_float64(b, input_daz), (1, 0, 2))[None]
        c_value = fp32.to_float64(c, numerics.dest_daz)
        if numerics.structure == "sdm":
            lanes = np.zeros(c.shape + (2,))
            for k in range(a.shape[1]):
                lanes = fp32.add_values(products[:, :, k, :], lanes, tininess)
            result = fp32.add_values(c_value, fp32.add_values(lanes[..., 0], lanes[..., 1], tininess), tininess)
        else:
            result = c_value
            for k in range(a.shape[1]):
                for lane in (0, 1):
                    result = fp32.add_values(products[:, :, k, lane], result, tininess)
    bits = result.astype(np.float32).view(np.uint32)
    return fp32.select_nan(bits, (), numerics.nan)


def _products(operands, input_daz: bool) -> list:
    """Exact float64 products of consecutive (a, b) operand pairs."""
    with np.errstate(invalid="ignore"):  # inf * 0 is resolved by select_nan
        return [
            fp32.to_float64(operands[i], input_daz) * fp32.to_float64(operands[i + 1], input_daz)
            for i in range(0, len(operands), 2)
        ]


def integer_dot(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C (M, N) int32 plus byte dot products of a (M, K, 4) and b (K, N, 4), wrapping mod 2**32.

    ``a`` and ``b`` hold already sign- or zero-extended values; the sum is
    exact in int64 (at most 64 products of 2**16), and wrap-around makes the
    order irrelevant.
    """
    products = np.einsum("mkq,knq->mn", a.astype(np.int64), b.astype(np.int64))
    total = (c.astype(np.int64) + products) & 0xFFFFFFFF
    return total.astype(np.uint32).view(np.int32)
