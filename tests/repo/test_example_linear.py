"""examples/linear.py (docs/torch.md): nn.Linear layers through pyamx, run as a user runs it.

Needs PyTorch, an optional extra pyamx never depends on: skipped where it is missing. The example
compares every layer's output with the emulator's bit for bit itself (--check) and exits 1 on a
difference; on a CPU without AMX the native backend runs in the trap mode, where it can.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from childproc import child_env

pytest.importorskip("torch", reason="examples/linear.py needs PyTorch (an optional extra)")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "linear.py"
SMALL = ["--layers", "1", "--batch", "2", "--seq", "5", "--hidden", "48", "--rounds", "1", "--check"]


def _native_env() -> "dict | None":
    """The environment in which the example's native backend runs here: as it is on AMX silicon,
    with the trap mode elsewhere; None where neither can run."""
    from pyamx.cpu import native

    if native.report().amx_usable:
        return child_env()
    try:
        import pyamx.cpu.trap

        pyamx.cpu.trap._lib()
    except Exception:
        return None
    return child_env(PYAMX_TRAP_EMULATION="1")


@pytest.mark.parametrize("out", ["float32", "bf16"])
@pytest.mark.parametrize("backend", ["emulator", "native"])
def test_linear_example_runs_and_matches_the_emulator(out, backend):
    env = child_env() if backend == "emulator" else _native_env()
    if env is None:
        pytest.skip("neither AMX silicon nor the trap mode runs the native backend here")
    done = subprocess.run([sys.executable, str(EXAMPLE), *SMALL, "--out", out, "--backend", backend],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"pyamx: {backend}" in done.stdout, done.stdout
    assert "bit-identical to the emulator's: True" in done.stdout, done.stdout
    errors = [float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith(("pyamx ", "torch "))]
    assert len(errors) == 3 and max(errors) < 0.05, done.stdout  # against float64: bf16's rounding, no more
