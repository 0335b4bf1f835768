"""The config and memory rows by action: one row per action, both machines' methods bound to the
implementation of the row's action with the row's name, and the C action tables as the rows say."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pyamx.table import isa
from pyamx.emulator.machine import TileMachine
from pyamx.errors import GeneralProtectionFault, InvalidOpcodeFault

ROOT = Path(__file__).resolve().parents[2]

#: what each config/memory instruction does, written from the SDM's descriptions (not read from the
#: table): the table must agree
SDM_ACTIONS = {
    "LDTILECFG": "load-config", "STTILECFG": "store-config", "TILERELEASE": "release", "TILEZERO": "zero",
    "TILELOADD": "load", "TILELOADDT1": "load-t1", "TILELOADDRS": "load-rs", "TILELOADDRST1": "load-rs-t1",
    "TILESTORED": "store",
}


def test_every_config_and_memory_row_has_its_action_and_no_other_row_has_one():
    assert {i.mnemonic: i.action for i in isa.TABLE if i.action is not None} == SDM_ACTIONS
    assert all((i.action is None) == (i.kind not in ("config", "memory")) for i in isa.TABLE)
    assert sorted(isa.ACTIONS) == sorted(SDM_ACTIONS.values())
    assert set(isa.LOAD_ACTIONS) <= set(isa.ACTIONS)


def test_two_rows_of_one_action_are_refused():
    row = isa.of_action("load")
    twin = isa.Instruction("TILELOADDX", row.kind, row.encoding, row.feature, action="load")
    with pytest.raises(isa.TableError, match="the action 'load'"):
        isa.views(isa.TABLE + (twin,))
    stray = isa.Instruction("TILEFOO", row.kind, row.encoding, row.feature, action="teleport")
    with pytest.raises(isa.TableError, match="TILEFOO"):
        isa.views(isa.TABLE + (stray,))


class _Recorder:
    """Stands in for a machine: records which implementation each bound method calls, with what."""

    def __getattr__(self, implementation):
        return lambda *args: self.calls.append((implementation, args)) or b"image"


@pytest.mark.parametrize("insn", isa.STATE_OPS, ids=lambda i: i.name)
@pytest.mark.parametrize("layer", ["method", "native-method"])
def test_each_method_calls_its_actions_implementation_with_its_own_name(insn, layer):
    machine = type("Machine", (_Recorder,), {})
    isa.add_state_methods(machine, layer)
    method = getattr(machine, insn.name)
    assert method.__name__ == insn.name and method.__doc__.startswith(insn.mnemonic + (" (" if insn.feature.name != "AMX-TILE" else ":"))
    assert method.__doc__ == isa.state_docstring(insn, layer)
    m = machine()
    m.calls = []
    params = isa.STATE_IMPLEMENTATIONS[insn.action][1]
    args = tuple(f"arg{i}" for i in range(len(params)))
    getattr(m, insn.name)(*args)
    expected = {"load-config": "_load_config", "store-config": "_store_config", "release": "_release",
                "zero": "_zero_tile", "store": "_store_tile"}.get(insn.action, "_load_tile")
    assert m.calls == [(expected, (insn.mnemonic, *args))]


def test_the_machines_faults_name_the_instruction_that_faulted():
    machine = TileMachine(engine="numpy")
    buf = np.zeros(64, np.uint8)
    for insn in isa.STATE_OPS:
        if insn.kind == "memory":
            with pytest.raises(InvalidOpcodeFault, match=rf"^{insn.mnemonic}\b"):
                if insn.action == "zero":
                    getattr(machine, insn.name)(0)
                else:
                    getattr(machine, insn.name)(0, buf, 64)
    with pytest.raises(GeneralProtectionFault, match="LDTILECFG"):
        machine.ldtilecfg(bytes([2]) + bytes(63))
    with pytest.raises(InvalidOpcodeFault, match="run LDTILECFG first"):
        machine.tilezero(0)


_PRINT_ACTIONS = r"""
#include <stdio.h>
#include "pyamx_op_traits.h"
#define PRINT(name_, ...) printf("%s %d\n", #name_, (int)pyamx_op_actions[PYAMX_OP_##name_]);
int main(void)
{
    PYAMX_FOR_EACH_OP(PRINT)
    printf("of %d %d %d %d %d %d %d %d %d\n", PYAMX_OP_OF_LOAD_CONFIG, PYAMX_OP_OF_STORE_CONFIG, PYAMX_OP_OF_RELEASE,
           PYAMX_OP_OF_ZERO, PYAMX_OP_OF_LOAD, PYAMX_OP_OF_LOAD_T1, PYAMX_OP_OF_LOAD_RS, PYAMX_OP_OF_LOAD_RS_T1,
           PYAMX_OP_OF_STORE);
    return 0;
}
"""


def test_the_c_action_tables_hold_each_rows_action(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "actions.c").write_text(_PRINT_ACTIONS)
    built = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'csrc'}",
                            str(tmp_path / "actions.c"), "-o", str(tmp_path / "actions")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(tmp_path / "actions")], capture_output=True, text=True, timeout=30).stdout.splitlines()
    # the C enum numbers the actions from 1 in the order the SDM list above gives them (0: none)
    order = ["load-config", "store-config", "release", "zero", "load", "load-t1", "load-rs", "load-rs-t1", "store"]
    expected = [f"{i.mnemonic} {order.index(SDM_ACTIONS[i.mnemonic]) + 1 if i.mnemonic in SDM_ACTIONS else 0}"
                for i in isa.TABLE]
    op_ids = {i.mnemonic: n for n, i in enumerate(isa.TABLE, start=1)}
    by_action = {a: m for m, a in SDM_ACTIONS.items()}
    assert out == expected + ["of " + " ".join(str(op_ids[by_action[a]]) for a in order)]
