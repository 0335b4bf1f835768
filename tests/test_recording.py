"""`pyamx record`: each case runs through the instruction it names, and the shipped file stays current."""

from __future__ import annotations

import json
from pathlib import Path

from pyamx import vectors
from pyamx.probe import EXPERIMENTS

SHIPPED = Path(__file__).parent / "data" / "emulator-sdm-seed2026.json"


def test_probe_experiments_are_recorded_through_their_own_instruction():
    cases = vectors.generate(2026, per_class=1)
    probes = {case.label: case for case in cases if case.label.startswith("probe ")}
    expected = {f"probe {point}: {e.name}": e.instruction for point, es in EXPERIMENTS.items() for e in es}
    assert set(probes) == set(expected)
    for label, case in probes.items():
        assert case.instruction == expected[label], label
    fp16 = [label for label in probes if "fp16" in label.lower()]
    assert len(fp16) == 6 and all(probes[label].instruction == "tdpfp16ps" for label in fp16)


def test_an_instruction_filter_drops_the_probes_that_need_another_instruction():
    cases = vectors.generate(2026, per_class=1, instructions=("tdpbf16ps",))
    assert {case.instruction for case in cases} == {"tdpbf16ps"}


def test_the_shipped_vector_file_is_what_pyamx_record_writes_today(tmp_path):
    """Regenerate with `pyamx record --seed 2026 tests/data/emulator-sdm-seed2026.json` when this fails."""
    with open(SHIPPED, encoding="utf-8") as f:
        shipped = json.load(f)
    prov = shipped["provenance"]
    assert prov["backend"] == "emulator" and prov["numerics"] == "sdm" and prov["seed"] == 2026
    fresh_path = tmp_path / "fresh.json"
    vectors.record(fresh_path, backend="emulator", seed=prov["seed"])
    with open(fresh_path, encoding="utf-8") as f:
        fresh = json.load(f)
    assert len(shipped["cases"]) == len(fresh["cases"])
    for index, (old, new) in enumerate(zip(shipped["cases"], fresh["cases"])):
        assert old == new, f"case {index}: shipped {old['instruction']} {old['label']!r}, fresh {new['instruction']} {new['label']!r}"
