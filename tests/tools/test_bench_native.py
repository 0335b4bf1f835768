"""benchmarks/bench_native.py: its arguments, its refusal without AMX silicon, and its measuring code
run through the trap mode on tiny shapes (no timing asserted: the trap measures nothing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pyamx.cpu import native

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_native.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_native", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments(bench):
    args = bench.parse_args([])
    assert args.threads == [1, 2] and not args.quick and args.seconds > 0
    assert bench.parse_args(["--threads", "1", "4", "--quick", "--no-torch"]).threads == [1, 4]
    for bad in (["--threads", "0"], ["--seconds", "0"], ["--threads"], ["--nonsense"]):
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(bad)
        assert exc.value.code == 2


def test_the_issue_shapes_are_measured(bench):
    full = {(c[1], c[2], c[3], c[4], c[5]) for c in bench.cases(bench.parse_args([]))}
    for s in (64, 256, 1024, 2048, 4096):
        assert ("bf16", s, s, s, False) in full
    for m in (1, 8, 32, 128):
        assert ("bf16", m, 4096, 4096, True) in full
    assert ("bf16", 4096, 4096, 11008, True) in full
    assert ("int8", 1024, 1024, 1024, False) in full


def test_without_silicon_it_says_so_and_exits_0(bench, capsys):
    if native.report().mode == "silicon":
        pytest.skip("AMX silicon here: the benchmark would measure (seconds to minutes)")
    assert bench.main(["--quick"]) == 0
    assert "no AMX silicon here" in capsys.readouterr().out


def test_the_measuring_code_runs_through_the_trap(bench, native_group):
    native_group("bf16")
    native_group("int8")
    if native.report().mode != "trap":
        pytest.skip("checks the code path in trap mode; on silicon run the benchmark itself")
    for name in bench.PROBES:
        assert bench.probe(name, seconds=1e-4) > 0
    rng = np.random.default_rng(0)
    for case in (("t", "bf16", 3, 40, 33, True), ("t", "int8", 17, 70, 5, False)):
        best = bench.measure(case, 2, None, 1e-3, rng)
        assert set(best) == {"pyamx"} and best["pyamx"] > 0
    torch = bench._torch()
    if torch is not None:  # the optional extra: its side of the table runs on the same bits
        for case in (("t", "bf16", 3, 40, 33, True), ("t", "int8", 32, 64, 32, False)):
            best = bench.measure(case, 1, torch, 1e-3, rng)
            assert set(best) == {"pyamx", "torch"} and min(best.values()) > 0
