"""The emulator gives the same bits whatever the caller's MXCSR, and leaves the caller's MXCSR as it was.

MXCSR is set through the extension's pyamx_set_mxcsr (csrc/fpenv.c), the
way a -ffast-math library or a user's fesetround would leave it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import numpy as np
import pytest

import pyamx
from childproc import PYAMX_HOME, child_env
from pyamx import _fpenv, emulator
from pyamx.emulator import instructions
from pyamx.tools.testing import CLASSES, operands, shapes

from mxcsr import DAZ, FTZ, ROUND_DOWN, RZ, library
from mxcsr import DEFAULT as RNE
from mxcsr import caller_mxcsr as mxcsr

_LIB = library()
MODES = {"RZ": RZ, "round-down": ROUND_DOWN, "FTZ": FTZ, "DAZ": DAZ, "FTZ|DAZ": FTZ | DAZ,
         "FTZ|DAZ|RZ": FTZ | DAZ | RZ}


def _cases(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for i, (m, k, n) in enumerate(shapes(rng, count)):
        out.append(operands(rng, m, k, n, CLASSES[i % len(CLASSES)]))
    return out


NUMERICS = {
    "sdm": emulator.PRESETS["sdm"],
    "straight": emulator.PRESETS["straight"],
    "fused_pair": emulator.PRESETS["fused_pair"],
    "honour denormals": emulator.Numerics(dest_daz=False, input_daz=False),
    "tininess before": emulator.Numerics(tininess="before", dest_daz=False),
}


def _bf16_bits(case, numerics):
    c, a, b = case
    return instructions.tdpbf16ps(c, a, b, numerics).view(np.uint32)


def _fp16_bits(case, numerics):
    c, a, b = case
    return instructions.tdpfp16ps(c, a, b, numerics).view(np.uint32)


def _check_same_bits(compute, cases, numerics, value):
    with mxcsr(RNE):
        expected = [compute(case, numerics) for case in cases]
    differ = 0
    with mxcsr(value):
        for case, want in zip(cases, expected):
            got = compute(case, numerics)
            differ += not np.array_equal(got, want)
            assert _LIB.pyamx_get_mxcsr() & ~0x3F == value & ~0x3F  # the caller's control bits are back
    return differ


@pytest.mark.parametrize("mode", list(MODES))
def test_sdm_bf16_results_do_not_depend_on_mxcsr(mode):
    assert _check_same_bits(_bf16_bits, _cases(300, 1), NUMERICS["sdm"], MODES[mode]) == 0


@pytest.mark.parametrize("numerics", [n for n in NUMERICS if n != "sdm"])
@pytest.mark.parametrize("mode", ["RZ", "FTZ|DAZ"])
def test_every_numerics_option_is_independent_of_mxcsr(numerics, mode):
    cases = _cases(40, 2) if numerics != "fused_pair" else _cases(12, 2)
    assert _check_same_bits(_bf16_bits, cases, NUMERICS[numerics], MODES[mode]) == 0


@pytest.mark.parametrize("mode", ["RZ", "FTZ", "DAZ", "FTZ|DAZ"])
def test_fp16_results_do_not_depend_on_mxcsr(mode):
    rng = np.random.default_rng(3)
    cases = []
    for m, k, n in shapes(rng, 60):
        a = rng.integers(0, 2**16, (m, 2 * k), dtype=np.uint16)  # every fp16 class, denormals included
        b = rng.integers(0, 2**16, (k, 2 * n), dtype=np.uint16)
        c = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
        cases.append((c, a, b))
    for numerics in ("sdm", "honour denormals"):
        assert _check_same_bits(_fp16_bits, cases, NUMERICS[numerics], MODES[mode]) == 0


@pytest.mark.parametrize("value", [RZ, FTZ | DAZ, RNE | 0x3F, FTZ | DAZ | RZ | 0x21])
def test_the_callers_mxcsr_comes_back_exactly_flags_included(value):
    c, a, b = _cases(1, 4)[0]
    # A process's first call imports pyamx's modules, and Python's import machinery itself sets
    # the inexact flag (0x20) once (docs/engine.md); every call after that keeps the flags.
    pyamx.tdpbf16ps(c, a, b, backend="emulator")
    pyamx.TileMachine()
    with mxcsr(value):
        pyamx.tdpbf16ps(c, a, b, backend="emulator")
        pyamx.tdpbf16ps(c, a, b, backend="emulator", engine="numpy")
        emulator.tdpbf16ps(c, a, b, numerics="straight")
        machine = pyamx.TileMachine()
        machine.ldtilecfg(pyamx.TileConfig.make({0: (2, 8), 1: (2, 8), 2: (2, 8)}))
        machine.tdpbf16ps(0, 1, 2)
        after = _LIB.pyamx_get_mxcsr()
    assert after == value


def test_one_shot_and_machine_entry_points_are_guarded():
    case = _cases(1, 5)[0]
    c, a, b = case
    want = _bf16_bits(case, NUMERICS["sdm"])
    with mxcsr(RZ | 0x8040):
        got = pyamx.tdpbf16ps(c, a, b, backend="emulator").view(np.uint32)
        got_numpy = pyamx.tdpbf16ps(c, a, b, backend="emulator", engine="numpy").view(np.uint32)
        straight = emulator.tdpbf16ps(c, a, b, numerics="straight").view(np.uint32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_numpy, want)
    np.testing.assert_array_equal(straight, _bf16_bits(case, NUMERICS["straight"]))


def test_the_libc_way_works_when_the_extension_is_not_used(monkeypatch):
    way = _fpenv._LibcFenv()
    assert _fpenv._holds(way, FTZ | DAZ | RZ)
    monkeypatch.setattr(_fpenv, "access", lambda: way)
    assert _check_same_bits(_bf16_bits, _cases(60, 6), NUMERICS["honour denormals"], FTZ | DAZ | RZ) == 0


def test_a_pure_python_install_finds_the_libc_way():
    code = (
        "import sys; sys.modules['pyamx._native'] = None\n"
        "from pyamx import _fpenv\n"
        "print(_fpenv.access().name)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=PYAMX_HOME, env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "libc fegetenv/fesetenv"


def test_bad_values_never_reach_the_register():
    assert _LIB.pyamx_set_mxcsr(0x10000) != 0  # reserved bits: refused, not #GP
    with pytest.raises(ValueError):
        _fpenv._LibcFenv().set(0x10000)


def test_without_the_guard_the_same_check_sees_the_difference(monkeypatch):
    """The comparison above can fail: the unguarded arithmetic changes under round-toward-zero and FTZ/DAZ."""
    from pyamx.emulator import fp32

    # The numpy engine (dot.py) also sets the environment itself; switch that off too.
    monkeypatch.setattr(fp32, "default_fp_env", contextlib.nullcontext)
    raw = instructions.tdpbf16ps.__wrapped__
    cases = _cases(300, 1)
    changed_rz = _check_same_bits(lambda case, num: raw(*case, num).view(np.uint32), cases, NUMERICS["sdm"], RZ)
    assert changed_rz > 100, changed_rz  # 240 of these 300 when this was written
    changed_daz = _check_same_bits(lambda case, num: raw(*case, num).view(np.uint32), cases[:60],
                                   NUMERICS["honour denormals"], FTZ | DAZ)
    assert changed_daz > 0


@pytest.mark.parametrize("engine", ["avx512", "avx2", "portable"])
@pytest.mark.parametrize("value", [RNE, RZ | FTZ | DAZ], ids=hex)
def test_far_more_threads_than_the_work_warrants_raise_no_flag(engine, value):
    """The thread count is capped by the work: that cap must not leave the precision flag (0x20) behind.

    300 x 300 outputs over 150 dwords is about 51 threads' worth of work, not a whole number of them,
    so a floating-point cap would round; 256 threads are asked for.
    """
    from pyamx.emulator import engine as _engine

    available = {name: (ok, why) for name, ok, why in _engine.available_engines()}
    if not available[engine][0]:
        pytest.skip(f"engine {engine} cannot run here: {available[engine][1]}")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 300)).astype(np.float16)
    b = rng.standard_normal((300, 300)).astype(np.float16)
    want = pyamx.matmul(a, b, backend="emulator", engine=engine, threads=1)  # also the first-call imports
    with mxcsr(value):
        got = pyamx.matmul(a, b, backend="emulator", engine=engine, threads=256)
        after = _LIB.pyamx_get_mxcsr()
    assert after == value, f"the call left MXCSR {after:#06x}, the caller had {value:#06x}"
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
