"""python -m pyamx probe / record / replay, and the same checks on the native backend where it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from childproc import PYAMX_HOME, child_env
from pyamx import _backend
from pyamx.table import isa
from pyamx.tools import probe, vectors
from pyamx.emulator import PRESETS

DATA = Path(__file__).resolve().parents[1] / "data"


def _pyamx(*args, check_rc=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pyamx", *args], capture_output=True, text=True,
                          env=child_env(drop=("PYAMX_BACKEND",)), timeout=300, cwd=PYAMX_HOME)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_probe_cli_names_each_emulator_model_back(model):
    proc = _pyamx("probe", "--backend", "emulator", "--numerics", model, "--json", check_rc=0)
    report = json.loads(proc.stdout)
    assert report["structure"] == PRESETS[model].structure
    assert report["complete_match"] == model
    assert report["backend"] == "emulator"


def test_record_and_replay_cli_round_trip(tmp_path):
    path = tmp_path / "v.json"
    proc = _pyamx("record", str(path), "--backend", "emulator", "--seed", "5", "--per-class", "1", check_rc=0)
    assert "NOT silicon" in proc.stdout
    proc = _pyamx("replay", str(path), "--backend", "emulator", check_rc=0)
    assert " 0 differ" in proc.stdout
    document = json.loads(path.read_text())
    out = document["cases"][0]["out"]
    document["cases"][0]["out"] = f"{int(out[:2], 16) ^ 1:02x}" + out[2:]
    path.write_text(json.dumps(document))
    proc = _pyamx("replay", str(path), "--backend", "emulator", check_rc=1)
    assert "1 differ" in proc.stdout and "case 0" in proc.stdout
    path.write_text(path.read_text()[:100])
    proc = _pyamx("replay", str(path), check_rc=2)
    assert str(path) in proc.stderr and "truncated" in proc.stderr and "Traceback" not in proc.stderr


# ---- the same numerics checks on the native backend (silicon, or the trap mode in CI) ----


def test_native_probe_matches_the_default_numerics(native):
    """On silicon this is the measurement the project exists for: it fails if silicon is not the SDM model."""
    report = probe.probe("native")
    assert report["complete_match"] == "sdm", probe.format_report(report)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
def test_committed_vectors_replay_on_native(native, path):
    result = vectors.replay(path, backend="native")
    assert not result.mismatches, vectors.format_replay(path, result, "native")


def test_native_recording_says_what_it_was(native, tmp_path):
    prov = vectors.record(tmp_path / "n.json", backend="native", seed=3, per_class=1)
    mode = _backend.native_mode()
    assert prov["native_mode"] == mode and prov["silicon"] == (mode == "silicon")
    if mode == "trap":
        assert "native (trap mode) (NOT silicon)" in vectors.describe_provenance(prov)


def test_probe_cli_prints_the_row_instructions_points_too():
    """Every point of probe.ROW_EXPERIMENTS, with probe_rows' verdict, in the text and the JSON."""
    rows = probe.probe_rows("emulator")
    text = _pyamx("probe", "--backend", "emulator", check_rc=0).stdout
    assert "row instructions (AMX-AVX512):" in text
    for point, experiments in probe.ROW_EXPERIMENTS.items():
        assert f"  {point:11s}: {rows[point]['verdict']!r}" in text, point
        for e in experiments:
            assert f"      {e.name}: observed " in text, e.name
    report = json.loads(_pyamx("probe", "--backend", "emulator", "--json", check_rc=0).stdout)
    assert report["rows"]["probed"] is True
    assert {p: r["verdict"] for p, r in report["rows"]["points"].items()} == {p: r["verdict"] for p, r in rows.items()}
    assert report["rows"]["points"]["row_index"]["verdict"] == "storage"  # the sdm model's rule


def test_native_probe_cli_names_why_the_row_points_were_not_probed(native):
    """In a child: where the CPU lacks AMX-AVX512 the native machine refuses, and probe says so (no SIGILL)."""
    from pyamx.cpu import detect

    proc = _pyamx("probe", "--backend", "native", check_rc=0)
    report = detect.report()
    row = next(insn for insn in isa.TABLE if insn.is_row)
    if report.mode_for(row) == "silicon" and not report.cpu.get("amx_avx512"):
        line = next(x for x in proc.stdout.splitlines() if "row instructions: not probed:" in x)
        assert "AMX-AVX512" in line and "nothing ran" in line, line
    else:
        assert "row instructions (AMX-AVX512):" in proc.stdout
