"""Tile state per task, as Linux keeps it, under ``pyamx run`` (tests/programs/task_tiles.c).

A vfork child and a clone(CLONE_VM) child that shares its creator's TLS start
with the creator's TILECFG and tile data in the init state, and their own
LDTILECFG leaves the creator's configuration and tiles alone: measured on
Sapphire Rapids silicon. The full trap mode used to find a task's emulated
state through the creator's thread descriptor, so a vfork child's LDTILECFG
replaced its parent's. Run directly on AMX silicon, the program checks the
rule itself.
"""

from __future__ import annotations


import pytest

from childproc import pyamx_run, require_pyamx_run, run_directly_on_silicon

EXPECTED = ["vfork ok", "clone_vm ok"]


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("task_tiles", "-O1")


def test_tile_state_is_per_task_under_pyamx_run(program):
    require_pyamx_run()
    proc = pyamx_run("--", program, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr


def test_tile_state_is_per_task_on_silicon(program):
    proc = run_directly_on_silicon(program, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr
