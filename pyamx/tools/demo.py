"""The main job: one bf16 matrix product through TDPBF16PS, checked against float64.

``pyamx demo`` runs a 16 x 32 by 32 x 16 product (K = 16 bf16
pairs) on the process default backend, prints which backend ran and why,
and checks the result against the float64 product of the same bf16 values:
every element must lie within the rounding bound of the instruction (34
fp32 roundings). Where native runs, it also compares with the emulator bit
for bit. Exit status 0 means every check passed.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import pyamx
from pyamx import _backend
from pyamx.table import bf16, isa

#: the instruction pyamx.matmul runs for bf16 operands: the demo's one product
INSTRUCTION = isa.MATMUL_ROUTES[("bf16", "bf16")]


def run(seed: int = 0, backend: str | None = None) -> int:
    rng = np.random.default_rng(seed)
    a = bf16.from_float32(rng.standard_normal((16, 32)).astype(np.float32))
    b_plain = bf16.from_float32(rng.standard_normal((32, 16)).astype(np.float32))
    c = rng.standard_normal((16, 16)).astype(np.float32)

    dot = getattr(pyamx, INSTRUCTION.name)
    result = dot(c, a, bf16.pack_pairs(b_plain), backend=backend)
    print(f"pyamx {pyamx.__version__}: {INSTRUCTION.mnemonic} 16x16 += 16x32 . 32x16 (bf16) on backend: {result.label}")
    why = _backend.default_reason() if backend is None else f"--backend {backend}"
    print(f"  why this backend: {why}")

    a64 = bf16.to_float32(a).astype(np.float64)
    b64 = bf16.to_float32(b_plain).astype(np.float64)
    exact = c.astype(np.float64) + a64 @ b64
    magnitude = np.abs(c).astype(np.float64) + np.abs(a64) @ np.abs(b64)
    bound = 34 * 2.0**-24 * magnitude  # 2K fma roundings, 2 adds: each at most half an ulp of the running magnitude
    error = np.abs(result.astype(np.float64) - exact)
    worst = float(np.max(error / np.maximum(bound, np.finfo(np.float64).tiny)))
    ok = bool(np.all(error <= bound))
    print(f"  vs float64: max |error| = {error.max():.3e}, worst error / bound = {worst:.3f} -> {'OK' if ok else 'FAIL'}")

    if result.backend == "native":
        emulated = dot(c, a, bf16.pack_pairs(b_plain), backend="emulator")
        same = np.array_equal(result.view(np.uint32), emulated.view(np.uint32))
        print(f"  vs emulator: {'bit-identical' if same else 'BITS DIFFER'}")
        ok = ok and same
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pyamx demo", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("auto", "native", "emulator"), default=None)
    args = parser.parse_args(argv)
    return run(args.seed, args.backend)


if __name__ == "__main__":
    sys.exit(main())
