"""The benchmark scripts run: each in its --quick mode, in a child process, as a user starts it.

Timings are not checked (the machines are shared); a script that crashes (bench_call.py did, on an
int32 accumulator built for a complex instruction) or stops printing what it promises fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

if not BENCHMARKS.is_dir():
    pytest.skip("the benchmarks are not next to these tests (an installed copy of the tests)", allow_module_level=True)


def _run(script: str, *args: str, env_extra=None) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.update(env_extra or {})
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{script} {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing
def test_bench_call_quick_prints_every_per_call_cost():
    import pyamx

    out = _run("bench_call.py", "--quick")
    assert "pyamx.matmul 64x64x64 bf16" in out and "numpy float32 a @ b" in out
    assert "emulator (" in out
    assert "native" in out  # a time, or why native does not run here
    assert "numpy float32 matmul 16x32 @ 32x16 + C" in out
    for name in pyamx.table.isa.DOT_NAMES:  # every instruction, the complex and fp8 rows included
        assert f"pyamx.{name} " in out, name
    assert "where pyamx.tdpbf16ps" in out
    assert "float32 -> bf16 (bf16.from_float32)" in out and "ml_dtypes" in out


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing
def test_bench_convert_quick_checks_the_bits_and_prints_ratios():
    out = _run("bench_convert.py", "--quick")
    for title in ("float32 -> bf16", "bf16 -> float32", "float32 -> fp16", "float64 -> bf16"):
        assert title in out
    assert "x numpy fallback" in out
