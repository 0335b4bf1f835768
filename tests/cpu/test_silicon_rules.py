"""The emulator's fault rules against the CPU's own, on AMX silicon.

The native tile machine refuses every #UD/#GP case in C before running an
instruction, so its tests can never see what silicon does there. Here
``tests/programs/fault_rules.c`` runs each case raw under a SIGILL/SIGSEGV
handler, and the answer (ran, #UD or #GP, and start_row afterwards) must be
the emulator's for the same configuration and instruction: seeded random
configurations and operands plus every edge of docs/semantics.md section 7
(unconfigured tiles, colsb not a multiple of 4, start_row at or past rows,
equal or out-of-shape dot-product operands, illegal LDTILECFG images).

Runs only on AMX silicon with AMX-BF16 and AMX-INT8; skipped elsewhere, and
failed when ``PYAMX_REQUIRE_NATIVE=1`` is set without the trap mode (a run
that promises silicon).
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import native_required_by_env
from pyamx import _env
from pyamx.emulator import TileMachine
from pyamx.errors import GeneralProtectionFault, InvalidOpcodeFault
from pyamx.table.tilecfg import TileConfig

BUFFER = np.zeros(16 * 64 + 64, np.uint8)  # the program's buffer: any tile at stride 64 fits
OPS = ["ldtilecfg", "tilezero", "tileloadd", "tileloaddt1", "tilestored", "tdpbf16ps", "tdpbssd"]


@pytest.fixture(scope="module")
def silicon_program(c_program):
    from pyamx.cpu import native

    report = native.report()
    if report.mode != "silicon" or not {"bf16", "int8"} <= set(report.kernels):
        reason = f"needs AMX silicon with AMX-BF16 and AMX-INT8 (backend here: {report.mode}; {report.reason})"
        if native_required_by_env() and not _env.flag("PYAMX_TRAP_EMULATION"):
            pytest.fail(f"PYAMX_REQUIRE_NATIVE=1 without the trap mode promises silicon, but this test {reason}",
                        pytrace=False)
        pytest.skip(reason)
    # optional: a compiler without AMX intrinsics cannot build it
    return c_program("fault_rules", "-O1", optional=True)


def _line(op: str, tiles, cfg: bytes) -> str:
    return " ".join([op, *(str(t) for t in tiles), cfg.hex()])


def _emulated(op: str, tiles, cfg: bytes) -> str:
    """What the emulator answers, in the program's words."""
    machine = TileMachine()
    try:
        machine.ldtilecfg(cfg)
        if op in ("tilezero", "tileloadd", "tileloaddt1", "tilestored"):
            getattr(machine, op)(tiles[0], *(() if op == "tilezero" else (BUFFER, 64)))
        elif op != "ldtilecfg":
            getattr(machine, op)(*tiles)
    except InvalidOpcodeFault:
        return "UD"
    except GeneralProtectionFault:
        return "GP"
    return f"ok {machine.config.start_row}"


def _random_config(rng) -> TileConfig:
    """Mostly dot-product-shaped tiles, with every kind of edge mixed in."""
    shapes = {}
    for t in range(8):
        kind = rng.random()
        if kind < 0.15:
            continue  # unconfigured
        rows = int(rng.integers(1, 17))
        colsb = int(rng.integers(1, 65)) if kind < 0.35 else 4 * int(rng.integers(1, 17))
        shapes[t] = (rows, colsb)
    if rng.random() < 0.5:  # a consistent dot-product triple
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        d, s1, s2 = (int(t) for t in rng.permutation(8)[:3])
        shapes[d], shapes[s1], shapes[s2] = (m, 4 * n), (m, 4 * k), (k, 4 * n)
    start_row = int(rng.choice([0, 0, 0, int(rng.integers(0, 17)), int(rng.integers(0, 256))]))
    return TileConfig.make(shapes, start_row=start_row)


def _illegal_image(rng) -> bytes:
    image = bytearray(TileConfig.make({0: (4, 16)}).to_bytes())
    choice = int(rng.integers(0, 5))
    if choice == 0:
        image[0] = int(rng.integers(2, 256))
    elif choice == 1:
        image[int(rng.choice([2, 15, 32, 47, 56, 63]))] = int(rng.integers(1, 256))
    elif choice == 2:
        image[16] = int(rng.integers(65, 256))
    elif choice == 3:
        image[49] = int(rng.integers(1, 17))  # rows without colsb
    else:
        image[48] = int(rng.integers(17, 256))
    return bytes(image)


def _cases(seed: int, count: int):
    rng = np.random.default_rng(seed)
    edges = [
        TileConfig.make({0: (4, 16), 1: (4, 10), 2: (3, 64)}),
        TileConfig.make({0: (4, 16), 1: (4, 10), 2: (3, 64)}, start_row=3),
        TileConfig.make({0: (4, 16), 1: (4, 10), 2: (3, 64)}, start_row=4),
        TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}, start_row=16),
        TileConfig.make({0: (16, 64), 1: (16, 64), 2: (16, 64)}, start_row=255),
    ]
    for cfg in edges:
        for op in OPS:
            for t in range(4):
                yield op, (t, (t + 1) % 8, (t + 2) % 8), cfg.to_bytes()
    for _ in range(40):
        yield "ldtilecfg", (0, 0, 0), _illegal_image(rng)
    for _ in range(count):
        cfg = _random_config(rng).to_bytes()
        op = str(rng.choice(OPS[1:]))
        tiles = tuple(int(t) for t in rng.integers(0, 8, 3))
        if op.startswith("tdp") and rng.random() < 0.7:
            tiles = tuple(int(t) for t in rng.permutation(8)[:3])
        yield op, tiles, cfg


def test_fault_rules_match_the_cpu(silicon_program):
    cases = list(_cases(seed=20261203, count=3000))
    stdin = "".join(_line(op, tiles, cfg) + "\n" for op, tiles, cfg in cases)
    proc = subprocess.run([str(silicon_program)], input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = proc.stdout.splitlines()
    assert len(answers) == len(cases), proc.stdout[-500:]
    mismatches = []
    outcomes = set()
    for (op, tiles, cfg), cpu in zip(cases, answers):
        emulated = _emulated(op, tiles, cfg)
        outcomes.add((op, cpu.split()[0]))
        if emulated != cpu:
            mismatches.append(f"{op} {tiles} config {cfg.hex()}: CPU {cpu!r}, emulator {emulated!r}")
    assert not mismatches, f"{len(mismatches)} of {len(cases)} cases differ:\n" + "\n".join(mismatches[:20])
    # The cases must have made every instruction both run and fault, or they prove little.
    for op in OPS:
        assert (op, "ok") in outcomes and ((op, "UD") in outcomes or op == "ldtilecfg"), (op, outcomes)
    assert ("ldtilecfg", "GP") in outcomes
