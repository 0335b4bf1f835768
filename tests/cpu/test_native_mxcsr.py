"""Native calls leave the caller's MXCSR exactly as it was, flags included, and do not depend on it.

The emulator saves and restores MXCSR around its arithmetic (tests/emulator/test_fpenv.py); the native path
has no arithmetic of its own on the caller's thread, so any Python float operation on its per-call
path (CPython parses ``int("2")`` with float arithmetic, for one) would set the precision flag in the
caller's register. Every public native entry runs here under the default MXCSR and under
round-toward-zero with FTZ and DAZ, each from a clear flag state: the register must come back
unchanged and the results must be the same bits. A process's first call imports modules, which sets
the inexact flag once (as on the emulator, docs/engine.md); every check here follows a warm-up call.
"""

from __future__ import annotations


import numpy as np

import pyamx
from pyamx.table import isa
from pyamx.table.tilecfg import TileConfig

from mxcsr import DAZ, DEFAULT, FTZ, RZ, caller_mxcsr, library

_LIB = library()
RZ_FTZ_DAZ = RZ | FTZ | DAZ


def _bits(x) -> bytes:
    return np.ascontiguousarray(x).view(np.uint8).tobytes()


def _under(value, call):
    """``call()``'s result bits and the MXCSR it left, run from ``value`` with no flag set."""
    with caller_mxcsr(value):
        result = call()
        after = _LIB.pyamx_get_mxcsr()
    return _bits(result), after


def _check(name, call):
    call()  # the warm-up: first-use imports and detection
    problems = []
    results = {}
    for value in (DEFAULT, RZ_FTZ_DAZ):
        results[value], after = _under(value, call)
        if after != value:
            problems.append(f"{name}: MXCSR {value:#06x} came back as {after:#06x}")
    if results[DEFAULT] != results[RZ_FTZ_DAZ]:
        problems.append(f"{name}: the results differ under RZ|FTZ|DAZ")
    return problems


def _native_dots():
    from pyamx.cpu import native

    rep = native.report()
    return [insn for insn in isa.DOTS if insn.group in rep.kernels]


def _oneshot_operands(insn, rng):
    """c, a, b for one instruction of ``insn`` with denormal and rounding-sensitive values in them."""
    m, k, n = 16, 16, 16
    lanes = insn.lanes
    a = rng.integers(0, 256, (m, k * 4), dtype=np.uint8).view(insn.ab_dtype).reshape(m, k * lanes)
    b = rng.integers(0, 256, (k, n * 4), dtype=np.uint8).view(insn.ab_dtype).reshape(k, n * lanes)
    if insn.is_float:
        c = rng.standard_normal((m, n)).astype(np.float32) * np.float32(1e-37)  # denormal sums
    else:
        c = rng.integers(-1000, 1000, (m, n), dtype=np.int32)
    return c, np.ascontiguousarray(a), np.ascontiguousarray(b)


def test_one_instruction_functions_keep_the_callers_mxcsr(native):
    rng = np.random.default_rng(27)
    problems = []
    for insn in _native_dots():
        c, a, b = _oneshot_operands(insn, rng)
        fn = getattr(pyamx, insn.name)
        problems += _check(insn.name, lambda fn=fn, c=c, a=a, b=b: fn(c, a, b, backend="native"))
    assert not problems, problems


def test_matmul_keeps_the_callers_mxcsr(native):
    rng = np.random.default_rng(5)
    groups = {insn.group for insn in _native_dots()}
    cases = {
        "bf16": (rng.standard_normal((40, 70)).astype(np.float32), rng.standard_normal((70, 33)).astype(np.float32)),
        "fp16": (rng.standard_normal((40, 70)).astype(np.float16), rng.standard_normal((70, 33)).astype(np.float16)),
        "int8": (rng.integers(-128, 128, (40, 70), dtype=np.int8), rng.integers(-128, 128, (70, 33), dtype=np.int8)),
        "complex": ((rng.standard_normal((20, 9)) + 1j * rng.standard_normal((20, 9))).astype(np.complex64),
                    (rng.standard_normal((9, 7)) - 1j * rng.standard_normal((9, 7))).astype(np.complex64)),
        "fp8": (rng.integers(0, 256, (20, 70), dtype=np.uint8), rng.integers(0, 256, (70, 7), dtype=np.uint8)),
    }
    problems = []
    for kind, (a, b) in cases.items():
        if kind not in groups:
            continue
        problems += _check(f"matmul {kind}", lambda a=a, b=b, kind=kind: pyamx.matmul(a, b, kind=kind, backend="native"))
    assert problems == [] and cases.keys() & groups, (problems, groups)


def test_the_tile_machine_keeps_the_callers_mxcsr(native):
    cfg = TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)})
    rng = np.random.default_rng(9)
    source = rng.integers(0, 256, 16 * 64, dtype=np.uint8)
    row_names = [insn.name for insn in isa.TABLE if insn.is_row and _runs_natively(insn)]

    def program():
        machine = pyamx.tile_machine(backend="native")
        out = np.zeros(16 * 64, dtype=np.uint8)
        machine.ldtilecfg(cfg)
        machine.tileloadd(1, source, 64)
        machine.tileloadd(2, source, 64)
        machine.tilezero(0)
        machine.tdpbf16ps(0, 1, 2)
        machine.tilestored(0, out, 64)
        image = machine.sttilecfg()
        rows = [getattr(machine, name)(0, 3) for name in row_names]
        machine.tilerelease()
        return np.concatenate([out, np.frombuffer(image, np.uint8), *(np.ravel(r).view(np.uint8) for r in rows)])

    assert _check("tile machine", program) == []


def _runs_natively(insn) -> bool:
    from pyamx.cpu.native import feature_missing, report

    return feature_missing(report(), insn) is None


def test_the_check_sees_a_flag_left_behind():
    """The comparison above can fail: a float operation on the caller's thread sets the precision flag."""
    problems = _check("int('2')", lambda: np.array([int("2")]))
    assert any("came back as" in p for p in problems), problems
