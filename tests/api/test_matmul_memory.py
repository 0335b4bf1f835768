"""A matmul's peak memory stays near its result plus one operand copy, and what cannot fit is refused.

Scaled down: the block size of pyamx._matmul_memory is made small so that products of a few MiB
take the blocked path a product of 2^31 rows takes at the real size. numpy's own allocations are
measured with tracemalloc (numpy reports them to it); the compiled engines' packing buffers are C
allocations tracemalloc does not see, so their peak is measured as the growth of a child's maximum
resident set. No test allocates more than about 1 GiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import pyamx
from pyamx.cpu import native as _native
from childproc import PYAMX_HOME, child_env
from pyamx import _matmul_memory
from pyamx.emulator import engine as _engine
from pyamx.errors import EnvironmentVariableError

MIB = 1 << 20


def _engines():
    return [name for name, ok, _ in _engine.available_engines() if ok]


def _backends():
    cases = [("emulator", name) for name in _engines()]
    if _native.available("bf16")[0]:
        cases.append(("native", None))
    return cases


def _peak(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("backend, engine", _backends())
@pytest.mark.parametrize("batch", [(), (2,)])
def test_the_peak_stays_near_the_result(monkeypatch, backend, engine, batch):
    monkeypatch.setattr(_matmul_memory, "BLOCK_BYTES", MIB)
    rng = np.random.default_rng(7)
    m, k, n = 1 << 19, 3, 2  # K odd: A is padded to whole dwords, the copy blocks keep small
    a = rng.integers(0, 1 << 16, batch + (m, k), dtype=np.uint16) & np.uint16(0xBFFF)  # finite bf16
    b = rng.integers(0, 1 << 16, (k, n), dtype=np.uint16) & np.uint16(0xBFFF)
    result_bytes = int(np.prod(batch + (m, n))) * 4
    got, peak = _peak(lambda: pyamx.matmul(a, b, backend=backend, engine=engine))
    assert got.shape == batch + (m, n)
    # the result, one block's transients (at most BLOCK_BYTES, one row more) and B's small copies;
    # the numpy engine adds its own per-chunk temporaries (dot.CHUNK_ELEMENTS outputs: about 4 MiB)
    allowed = result_bytes + 2 * MIB + (5 * MIB if engine == "numpy" else 0)
    assert peak <= allowed, (peak / MIB, result_bytes / MIB)
    monkeypatch.setattr(_matmul_memory, "BLOCK_BYTES", 1 << 40)  # one block: the bits must not change
    whole = pyamx.matmul(a[..., : 1 << 12, :], b, backend=backend, engine=engine)
    np.testing.assert_array_equal(got[..., : 1 << 12, :].view(np.uint32), whole.view(np.uint32))


_RSS_CHILD = r"""
import json, resource, sys
import numpy as np
import pyamx
from pyamx.cpu import native as _native

engine, kind, m = sys.argv[1], sys.argv[2], int(sys.argv[3])
dtype = {"bf16": np.uint16, "fp8": np.uint8}[kind]
a = np.full((m, 1), 0x3C if kind == "fp8" else 0x3F80, dtype)  # 1.0, touched: in the resident set
b = np.full((1, 1), 0x3C if kind == "fp8" else 0x3F80, dtype)
pyamx.matmul(a[:64], b, kind=kind, backend="emulator", engine=engine)  # imports, the engine's first use
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = pyamx.matmul(a, b, kind=kind, backend="emulator", engine=engine)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth": (after - before) * 1024, "result": r.nbytes, "ok": bool(np.all(r == 1.0))}))
"""


@pytest.mark.parametrize("engine", [e for e in _engines() if e != "numpy"])
@pytest.mark.parametrize("kind, m", [("bf16", 1 << 25), ("fp8", 1 << 20)])
def test_the_compiled_engines_pack_a_block_not_the_whole_of_a(engine, kind, m):
    """Their packed A (8 bytes per dword, or 8 per value padded to 64 for fp8) is a C allocation."""
    proc = subprocess.run([sys.executable, "-c", _RSS_CHILD, engine, kind, str(m)], capture_output=True,
                          text=True, cwd=PYAMX_HOME, timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"]
    allowed = out["result"] + _matmul_memory.BLOCK_BYTES + 32 * MIB  # the result, one block, the allocator
    assert out["growth"] <= allowed, (out["growth"] / MIB, allowed / MIB)


def test_a_product_that_cannot_fit_is_refused_before_anything_is_allocated(monkeypatch):
    monkeypatch.delenv(_matmul_memory.ENV_VAR, raising=False)
    monkeypatch.setattr(_matmul_memory, "available_bytes", lambda: 100 * MIB)
    a = np.broadcast_to(np.uint16(0x3F80), (1 << 27, 1))  # 2^27 rows, no memory behind them
    b = np.full((1, 1), 0x3F80, np.uint16)
    with pytest.raises(_matmul_memory.MatmulMemoryError) as caught:
        _, peak = _peak(lambda: pyamx.matmul(a, b, backend="emulator"))
    assert isinstance(caught.value, MemoryError)
    assert caught.value.available == 100 * MIB and caught.value.needed >= (1 << 27) * 4
    message = str(caught.value)
    assert "100 MiB" in message and "MemAvailable" in message and _matmul_memory.ENV_VAR in message
    _, peak = _peak(lambda: pytest.raises(MemoryError, pyamx.matmul, a, b, backend="emulator"))
    assert peak < MIB


def test_the_check_can_be_turned_off_and_is_strict(monkeypatch):
    monkeypatch.setattr(_matmul_memory, "available_bytes", lambda: 0)
    monkeypatch.setenv(_matmul_memory.ENV_VAR, "0")
    _matmul_memory.check(1 << 40, "a test")  # off: no refusal
    monkeypatch.setenv(_matmul_memory.ENV_VAR, "1")
    with pytest.raises(_matmul_memory.MatmulMemoryError):
        _matmul_memory.check(1 << 40, "a test")
    monkeypatch.setenv(_matmul_memory.ENV_VAR, "off")
    with pytest.raises(EnvironmentVariableError, match=_matmul_memory.ENV_VAR):
        _matmul_memory.check(1 << 40, "a test")


def test_the_available_figure_is_read_from_the_system():
    available = _matmul_memory.available_bytes()
    assert available is None or 0 < available < (1 << 50)
