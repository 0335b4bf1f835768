"""The C side's own guards in csrc/kernels.c, called through lib with every Python check skipped.

On silicon a #GP is a SIGSEGV and a #UD a SIGILL that kill the interpreter,
so the kernels refuse, before executing anything, every instruction that
would fault under the configuration loaded in the registers: an illegal
TILECFG (``PYAMX_E_GP_CONFIG``), dot-product registers that are not three
distinct configured tiles below 8 (``PYAMX_E_UD_SHAPE`` /
``PYAMX_E_UD_REGISTER``), register numbers out of range; and they refuse
unknown ops, one-shot shapes out of range and restoring an illegal state
(``PYAMX_E_ARG``). Each must leave the tile state as it was (tests of the
memory-operand and shape guards on every rule: tests/cpu/test_native_guards.py).

The checks run in a child Python with native usable: on AMX silicon as is,
elsewhere in trap mode (``PYAMX_TRAP_EMULATION=1``). Nothing here executes
an illegal instruction, so the child's survival is part of the claim.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env
from conftest import native_required_by_env

_SCRIPT = r"""
import json
import numpy as np
from pyamx.table import isa
from pyamx.cpu import native
from pyamx.table.tilecfg import TileConfig

usable, reason = native.available()
if not usable:
    print(json.dumps({"skip": reason}))
    raise SystemExit(0)
from pyamx.cpu import _nativelib
from pyamx.cpu import detect, trap
ffi, lib = _nativelib.load()
if detect.report().mode == "trap":
    trap.ensure_installed()
    trap.thread_prepare()
CODES = {name: getattr(lib, name) for name in
         ("PYAMX_E_ARG", "PYAMX_E_GP_CONFIG", "PYAMX_E_UD_SHAPE", "PYAMX_E_UD_REGISTER")}

def cfg_ptr(image):
    return ffi.from_buffer("uint8_t[]", bytes(image))

def state():
    out = ffi.new("uint8_t[64]")
    assert lib.pyamx_store_config(out) == 0
    return bytes(ffi.buffer(out))

legal = TileConfig.make({0: (2, 8), 1: (2, 8), 2: (2, 8)}).to_bytes()
assert lib.pyamx_load_config(cfg_ptr(legal)) == 0
assert state() == legal

def illegal(index, value, base=legal):
    image = bytearray(base)
    image[index] = value
    return image

results = {}
# cfg_legal: each #GP rule of LDTILECFG (docs/semantics.md section 1)
bad_cfgs = {
    "palette 2": illegal(0, 2),
    "palette 255": illegal(0, 255),
    "reserved byte 2": illegal(2, 1),
    "reserved byte 15": illegal(15, 1),
    "reserved byte 32": illegal(32, 1),
    "reserved byte 47": illegal(47, 1),
    "reserved byte 56": illegal(56, 1),
    "reserved byte 63": illegal(63, 1),
    "colsb 65": illegal(16, 65),
    "colsb 0x100": illegal(17, 1),
    "rows 17": illegal(48, 17),
    "rows without colsb": illegal(51, 4),
    "colsb without rows": illegal(22, 4),
}
for name, image in bad_cfgs.items():
    results["ldtilecfg " + name] = [lib.pyamx_load_config(cfg_ptr(image)), state() == legal, "PYAMX_E_GP_CONFIG"]
for name, image in bad_cfgs.items():
    tiles = ffi.new("uint8_t[8192]")
    results["restore_tiles " + name] = [lib.pyamx_restore_tiles(cfg_ptr(image), tiles), state() == legal,
                                        "PYAMX_E_ARG"]
results["restore_tiles start_row 1"] = [lib.pyamx_restore_tiles(cfg_ptr(illegal(1, 1)), ffi.new("uint8_t[8192]")),
                                        state() == legal, "PYAMX_E_ARG"]

# distinct_tiles: every dot product, every way of not naming three distinct tiles below 8
triples = {"dst == src1": (0, 0, 1), "dst == src2": (0, 1, 0), "src1 == src2": (0, 1, 1),
           "all equal": (2, 2, 2), "dst 8": (8, 1, 2), "src1 -1": (0, -1, 2), "src2 15": (0, 1, 15)}
for insn in isa.DOTS:
    for name, (d, s1, s2) in triples.items():
        code = "PYAMX_E_UD_SHAPE" if all(0 <= t < 8 for t in (d, s1, s2)) else "PYAMX_E_UD_REGISTER"
        results[f"tdp {insn.mnemonic} {name}"] = [lib.pyamx_tdp(insn.op_id, d, s1, s2), state() == legal, code]
for insn in isa.TABLE:
    if not insn.is_dot:  # a non-dot op id is not a dot product
        results[f"tdp op {insn.mnemonic}"] = [lib.pyamx_tdp(insn.op_id, 0, 1, 2), state() == legal, "PYAMX_E_ARG"]
# the kernels are an array indexed by op: ids off its ends are refused before the index is taken
for op in (-1, max(i.op_id for i in isa.TABLE) + 1, 2**31 - 1, -(2**31)):
    results[f"tdp op id {op}"] = [lib.pyamx_tdp(op, 0, 1, 2), state() == legal, "PYAMX_E_ARG"]

# register numbers and the one-shot's arguments
buf = np.zeros(2048, np.uint8)
ptr = ffi.cast("uint8_t *", buf.ctypes.data)
for tmm in (-1, 8, 16):
    results[f"tileloadd tmm {tmm}"] = [lib.pyamx_load_tile(tmm, ptr, buf.size, 0, 64, 0), state() == legal,
                                       "PYAMX_E_UD_REGISTER"]
    results[f"tilestored tmm {tmm}"] = [lib.pyamx_store_tile(tmm, ptr, buf.size, 0, 64), state() == legal,
                                        "PYAMX_E_UD_REGISTER"]
    results[f"tilezero tmm {tmm}"] = [lib.pyamx_zero_tile(tmm), state() == legal, "PYAMX_E_UD_REGISTER"]
c = ffi.new("uint32_t[256]")
dot = isa.BY_NAME["tdpbf16ps"].op_id
for name, (op, m, k, n) in {"op TILESTORED": (isa.BY_NAME["tilestored"].op_id, 1, 1, 1),
                            "op NONE": (0, 1, 1, 1), "op past the table": (max(i.op_id for i in isa.TABLE) + 1, 1, 1, 1),
                            "op -1": (-1, 1, 1, 1), "op INT_MAX": (2**31 - 1, 1, 1, 1),
                            "m 0": (dot, 0, 1, 1), "m 17": (dot, 17, 1, 1), "k 0": (dot, 1, 0, 1),
                            "k 17": (dot, 1, 17, 1), "n 0": (dot, 1, 1, 0), "n 17": (dot, 1, 1, 17)}.items():
    results["dp_oneshot " + name] = [lib.pyamx_dp_oneshot(op, c, ptr, ptr, m, k, n), state() == legal, "PYAMX_E_ARG"]
lib.pyamx_release_tiles()
print(json.dumps({"codes": CODES, "results": results}))
"""


def _run_guards():
    env = child_env(drop=("PYAMX_BACKEND",))
    env.setdefault("PYAMX_TRAP_EMULATION", "1")
    probe = subprocess.run([sys.executable, "-c", "from pyamx.cpu import native; print(native.available()[0])"],
                           capture_output=True, text=True, env=child_env(drop=("PYAMX_BACKEND", "PYAMX_TRAP_EMULATION")),
                           cwd=PYAMX_HOME, timeout=120)
    if probe.stdout.strip() == "True":  # AMX silicon: the trap mode is refused there, and not needed
        env.pop("PYAMX_TRAP_EMULATION")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env,
                          cwd=PYAMX_HOME, timeout=300)
    assert proc.returncode == 0, f"the child died (rc {proc.returncode}): {proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in report:
        message = f"native backend unavailable (neither AMX silicon nor the trap mode): {report['skip']}"
        if native_required_by_env():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return report


@pytest.fixture(scope="module")
def guards():
    try:
        from pyamx.cpu import _nativelib

        _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"the C extension is not built: {exc}")
    return _run_guards()


def _refused(guards, prefix):
    rows = {k: v for k, v in guards["results"].items() if k.startswith(prefix)}
    assert rows, f"no {prefix!r} checks ran"
    codes = guards["codes"]
    wrong = {k: (rc, f"expected {want} ({codes[want]})") for k, (rc, _, want) in rows.items() if rc != codes[want]}
    touched = [k for k, (_, unchanged, _) in rows.items() if not unchanged]
    assert not wrong, wrong
    assert not touched, f"the tile configuration changed after a refused call: {touched}"
    return rows


def test_ldtilecfg_returns_e_gp_config_for_every_gp_rule_and_keeps_the_config(guards):
    assert len(_refused(guards, "ldtilecfg ")) == 13


def test_restore_tiles_refuses_an_illegal_config_or_a_pending_start_row(guards):
    _refused(guards, "restore_tiles ")


def test_tdp_refuses_unless_three_distinct_tiles_below_8_or_a_dot_op(guards):
    from pyamx.table import isa

    rows = _refused(guards, "tdp ")
    for insn in isa.DOTS:
        assert any(k.startswith(f"tdp {insn.mnemonic} ") for k in rows), insn.mnemonic


def test_register_numbers_out_of_range_return_e_ud_register(guards):
    for prefix in ("tileloadd tmm", "tilestored tmm", "tilezero tmm"):
        _refused(guards, prefix)


def test_dp_oneshot_refuses_unknown_ops_and_shapes_out_of_range(guards):
    _refused(guards, "dp_oneshot ")
