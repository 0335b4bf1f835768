"""Native-only behaviour: refusals, thread affinity, validation before execution, the build."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from pyamx.cpu import _nativelib
from pyamx import emulator
from pyamx.emulator import PRESETS, instructions
from pyamx.errors import (
    BackendError,
    GeneralProtectionFault,
    InvalidOpcodeFault,
    MemoryAccessFault,
    WrongThreadError,
)
from pyamx.table.tilecfg import TileConfig

from childproc import PYAMX_HOME as ROOT  # the pyamx under test, not necessarily this checkout



# -- the build ---------------------------------------------------------------------------


def test_stale_build_is_detected_by_a_pure_check():
    assert _nativelib.stale_build_message("0.1.0", "0.1.0") is None
    message = _nativelib.stale_build_message("0.0.9", "0.1.0")
    assert "0.0.9" in message and "0.1.0" in message and "stale" in message
    assert "pip install ." in message and "python build.py" in message
    assert issubclass(_nativelib.StaleBuildError, ImportError)


def test_built_module_matches_the_package_version():
    try:
        ffi, lib = _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"extension not built: {exc}")
    from pyamx._version import __version__

    assert ffi.string(lib.pyamx_build_version()).decode() == __version__


# -- interface ---------------------------------------------------------------------------


def test_native_machine_has_every_emulator_method():
    from pyamx.cpu.native import NativeMachine

    public = {name for name in dir(emulator.TileMachine) if not name.startswith("_")} - {"numerics"}
    missing = {name for name in public if not hasattr(NativeMachine, name)}
    assert not missing, missing
    assert NativeMachine.backend == "native"


def test_native_machine_refuses_an_emulator_numerics_model():
    from pyamx.cpu.native import NativeMachine

    with pytest.raises(ValueError, match="silicon"):
        NativeMachine(numerics="straight")


# -- refusal at the C level -----------------------------------------------------------------

_REFUSAL_SCRIPT = r"""
from pyamx._native import ffi, lib
# No detection has run in this process: nothing may execute a tile instruction.
assert lib.pyamx_native_ready() == 0
refused = {lib.PYAMX_E_NOT_READY, lib.PYAMX_E_NO_KERNEL}
buf = ffi.new("uint8_t[8192]")
c = ffi.new("uint32_t[256]")
calls = {
    "dp_oneshot": lambda: lib.pyamx_dp_oneshot(0, c, buf, buf, 1, 1, 1),
    "ldtilecfg": lambda: lib.pyamx_load_config(buf),
    "sttilecfg": lambda: lib.pyamx_store_config(buf),
    "tileloadd": lambda: lib.pyamx_load_tile(0, buf, 8192, 0, 64, 0),
    "tilestored": lambda: lib.pyamx_store_tile(0, buf, 8192, 0, 64),
    "tilezero": lambda: lib.pyamx_zero_tile(0),
    "tilerelease": lambda: lib.pyamx_release_tiles(),
    "tdp": lambda: lib.pyamx_tdp(lib.PYAMX_OP_TDPBF16PS, 0, 1, 2),
    "save": lambda: lib.pyamx_save_tiles(buf, buf),
    "restore": lambda: lib.pyamx_restore_tiles(buf, buf),
}
for name, call in calls.items():
    rc = call()
    assert rc in refused, (name, rc)
status = ffi.new("int *")
# The child probe is refused too before a permission was granted.
assert lib.pyamx_probe_child(status) in (lib.PYAMX_E_NOT_READY, lib.PYAMX_E_UNSUPPORTED)
print("refused", len(calls))
"""


def test_c_module_refuses_before_detection_and_permission():
    try:
        _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"extension not built: {exc}")
    env = {k: v for k, v in os.environ.items() if k != "PYAMX_TRAP_EMULATION"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _REFUSAL_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr  # a SIGILL would show as -4
    assert proc.stdout.strip() == "refused 10"


def test_native_python_layer_raises_where_native_is_unavailable():
    from pyamx.cpu import native
    from pyamx.errors import NativeUnavailableError

    usable, reason = native.available()
    if usable:
        pytest.skip("native is usable here")
    with pytest.raises(NativeUnavailableError, match="cannot run here"):
        native.tdpbf16ps(np.zeros((1, 1), np.uint32), np.zeros((1, 2), np.uint16), np.zeros((1, 2), np.uint16))
    with pytest.raises(NativeUnavailableError):
        native.NativeMachine()


# -- behaviour where native runs ----------------------------------------------------------------


def _trapped(native):
    """A callable counting trapped instructions in trap mode (None on silicon)."""
    from pyamx.cpu import detect

    if detect.report().mode != "trap":
        return None
    from pyamx.cpu import trap

    return trap.trapped_count


def test_machine_refuses_other_threads(native):
    machine = native.NativeMachine()
    machine.ldtilecfg(TileConfig.make({0: (1, 4)}))
    errors = []

    def use():
        for call in (lambda: machine.tilezero(0), machine.sttilecfg, machine.snapshot, machine.tilerelease,
                     lambda: machine.ldtilecfg(bytes(64))):
            try:
                call()
            except WrongThreadError as exc:
                errors.append(exc)

    t = threading.Thread(target=use, name="intruder")
    t.start()
    t.join()
    assert len(errors) == 5 and "intruder" in str(errors[0])
    assert machine.config.rows[0] == 1  # untouched: the owner still sees its configuration
    assert machine.sttilecfg() == TileConfig.make({0: (1, 4)}).to_bytes()


def test_machine_of_a_finished_thread_is_refused_even_if_its_ident_is_reused(native):
    made = []
    first = threading.Thread(target=lambda: made.append((native.NativeMachine(), threading.get_ident())))
    first.start()
    first.join()
    machine, dead_ident = made[0]
    outcome = []

    def use():
        try:
            machine.tilezero(0)
            outcome.append("ran")
        except WrongThreadError:
            outcome.append(("refused", threading.get_ident() == dead_ident))

    for _ in range(3):  # CPython usually hands the next thread the finished thread's ident
        t = threading.Thread(target=use)
        t.start()
        t.join()
    assert all(o != "ran" for o in outcome), outcome


def test_tile_machine_accepts_the_sdm_numerics_object(native):
    import pyamx

    assert pyamx.tile_machine(backend="native", numerics=pyamx.Numerics()).backend == "native"
    with pytest.raises(ValueError, match="emulator model"):
        pyamx.tile_machine(backend="native", numerics="straight")


def test_faults_are_raised_before_any_instruction_runs(native):
    machine = native.NativeMachine()
    cfg = TileConfig.make({0: (2, 8), 1: (2, 8), 2: (2, 8), 3: (4, 16)})
    machine.ldtilecfg(cfg)
    mem = np.arange(256, dtype=np.uint8)
    machine.tileloadd(3, mem, 16)
    before = machine.snapshot()
    count = _trapped(native)
    start = count() if count else None
    faults = [
        (GeneralProtectionFault, lambda: machine.ldtilecfg(b"\x02" + bytes(63))),
        (GeneralProtectionFault, lambda: machine.ldtilecfg(b"\x01\x00\x01" + bytes(61))),
        (InvalidOpcodeFault, lambda: machine.tileloadd(9, mem, 16)),
        (MemoryAccessFault, lambda: machine.tileloadd(3, mem, 16, offset=200)),
        (MemoryAccessFault, lambda: machine.tilestored(3, np.zeros(10, np.uint8), 16)),
        (MemoryAccessFault, lambda: machine.tileloadd(3, mem, -16)),
        (InvalidOpcodeFault, lambda: machine.tdpbf16ps(0, 0, 1)),
        (InvalidOpcodeFault, lambda: machine.tdpbf16ps(0, 1, 3)),  # shapes do not fit
        (InvalidOpcodeFault, lambda: machine.tdpbf16ps(0, 1, 5)),  # unconfigured tile
        (InvalidOpcodeFault, lambda: machine.tilezero(8)),
        (TypeError, lambda: machine.tilezero("0")),
        (ValueError, lambda: machine.tilestored(3, b"read-only" * 20, 16)),
    ]
    for expected, call in faults:
        with pytest.raises(expected):
            call()
    if count:
        assert count() == start, "a faulting call reached a tile instruction"
    after = machine.snapshot()
    assert before[0] == after[0] and np.array_equal(before[1], after[1])
    machine.tilerelease()
    with pytest.raises(InvalidOpcodeFault, match="not configured"):
        machine.tilezero(0)


def test_machine_matches_emulator_on_a_small_program(native):
    nat, emu = native.NativeMachine(), emulator.TileMachine()
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((4, 8)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b = (rng.standard_normal((4, 6)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    cfg = TileConfig.make({0: (4, 12), 1: (4, 16), 2: (4, 12)})
    for m in (nat, emu):
        m.ldtilecfg(cfg)
        m.tileloadd(1, a, 16)
        m.tileloadd(2, b, 12)
        m.tdpbf16ps(0, 1, 2)
    out_n, out_e = np.zeros((4, 3), np.uint32), np.zeros((4, 3), np.uint32)
    nat.tilestored(0, out_n, 12)
    emu.tilestored(0, out_e, 12)
    assert np.array_equal(out_n, out_e)
    assert np.array_equal(out_n, instructions.tdpbf16ps(np.zeros((4, 3), np.uint32), a, b, PRESETS["sdm"]))


def test_pending_start_row_is_refused_rather_than_lost(native):
    nat = native.NativeMachine()
    nat.ldtilecfg(TileConfig.make({0: (4, 4)}, start_row=2))
    with pytest.raises(BackendError, match="start_row"):
        nat.snapshot()
    with pytest.raises(BackendError, match="start_row"):
        native.tdpbf16ps(np.zeros((1, 1), np.uint32), np.zeros((1, 2), np.uint16), np.zeros((1, 2), np.uint16))
    other = native.NativeMachine()
    with pytest.raises(BackendError, match="start_row"):
        other.sttilecfg()  # switching machines would have to save the pending start_row
    assert nat.sttilecfg()[1] == 2  # still pending, untouched
    nat.tilezero(0)  # consumes it, as on silicon
    assert other.sttilecfg() == bytes(64)


def test_threads_have_their_own_tile_state(native):
    """Tile registers are per OS thread: machines and one-shots in parallel threads do not mix."""
    results, failures = {}, []

    def work(i):
        try:
            rng = np.random.default_rng(i)
            m = native.NativeMachine()
            cfg = TileConfig.make({0: (i + 1, 4 * (i + 1))})
            m.ldtilecfg(cfg)
            data = rng.integers(0, 256, 4096, dtype=np.uint8)
            for _ in range(20):
                m.tileloadd(0, data, 64)
                c = rng.standard_normal((i + 1, 2)).astype(np.float32).view(np.uint32)
                a = np.full((i + 1, 2), 0x3F80, np.uint16)
                b = np.full((1, 4), 0x3F80, np.uint16)
                got = native.tdpbf16ps(c, a, b)
                assert np.array_equal(got, instructions.tdpbf16ps(c, a, b, PRESETS["sdm"]))
            results[i] = (m.sttilecfg(), m.snapshot()[1][0, : i + 1, : 4 * (i + 1)].copy(), data)
        except Exception as exc:  # reported in the main thread
            failures.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    for i, (cfg, tile, data) in results.items():
        assert cfg == TileConfig.make({0: (i + 1, 4 * (i + 1))}).to_bytes()
        assert np.array_equal(tile, data[: 64 * (i + 1)].reshape(i + 1, 64)[:, : 4 * (i + 1)])


def test_available_by_group(native):
    from pyamx.cpu import detect

    for group in ("bf16", "int8", "fp16", "fp8"):
        assert native.available(group)[0] == (group in detect.report().kernels)
    with pytest.raises(ValueError):
        native.available("fp4")
