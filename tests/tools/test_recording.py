"""`pyamx record`: each case runs through the instruction it names, and the shipped file stays current."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from pyamx.tools import cli, vectors
from pyamx.tools.probe import EXPERIMENTS

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "emulator-sdm-seed2026.json"


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
    """Regenerate with `pyamx record --backend emulator --seed 2026 tests/data/emulator-sdm-seed2026.json`
    when this fails."""
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


def _previous_recording(tmp_path):
    path = tmp_path / "golden.json"
    path.write_text("the previous recording\n")
    return path


def _full_disk(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("fail", ["fsync", "write"])
def test_a_failed_record_keeps_the_previous_file_and_names_it(tmp_path, monkeypatch, fail):
    path = _previous_recording(tmp_path)
    if fail == "fsync":
        monkeypatch.setattr(os, "fsync", _full_disk)
    else:  # the disk fills half way through the document
        def dump_then_fill(obj, stream, **kw):
            stream.write(json.dumps(obj, **kw)[:1000])
            _full_disk()

        monkeypatch.setattr(json, "dump", dump_then_fill)
    with pytest.raises(OSError, match="No space left") as info:
        vectors.record(path, backend="emulator", seed=1, per_class=1)
    assert info.value.filename == str(path) and str(path) in cli.error_message(info.value, "record")
    assert path.read_text() == "the previous recording\n"
    assert os.listdir(tmp_path) == ["golden.json"]  # no temporary file left behind


def test_record_replaces_the_previous_file_whole_with_the_mode_open_would_give(tmp_path):
    path = _previous_recording(tmp_path)
    plain = tmp_path / "plain"
    plain.write_text("")
    vectors.record(path, backend="emulator", seed=1, per_class=1)
    assert vectors.load(path)[0]["seed"] == 1
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    assert sorted(os.listdir(tmp_path)) == ["golden.json", "plain"]
