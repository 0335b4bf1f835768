"""Golden vectors: record/replay round trips, damaged files, and the committed vector files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import reference
import reference_fp8
import reference_rows
from pyamx.tools import vectors
from pyamx.tools.vectors import VectorFileError

DATA = Path(__file__).resolve().parents[1] / "data"
VECTOR_FILES = sorted(DATA.glob("*.json"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("vectors") / "emulator.json"
    prov = vectors.record(path, backend="emulator", seed=7, per_class=2)
    return path, prov


def test_emulator_recording_says_it_is_not_silicon(recorded):
    path, prov = recorded
    assert prov["backend"] == "emulator" and prov["silicon"] is False
    for key in ("cpu", "kernel", "pyamx", "date", "seed"):
        assert key in prov
    result = vectors.replay(path, backend="emulator")
    text = vectors.format_replay(path, result, "emulator")
    assert "NOT silicon" in text
    assert result.total > 100 and not result.mismatches
    instructions = {case.instruction for case in vectors.load(path)[1]}
    assert instructions == set(vectors.KINDS)


def test_replay_reports_a_changed_output(recorded, tmp_path):
    path, _ = recorded
    document = json.loads(path.read_text())
    victim = document["cases"][3]
    out = bytearray(bytes.fromhex(victim["out"]))
    out[0] ^= 1
    victim["out"] = out.hex()
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    result = vectors.replay(tampered, backend="emulator")
    assert [index for index, _, _ in result.mismatches] == [3]
    text = vectors.format_replay(tampered, result, "emulator")
    assert "1 differ" in text and "case 3" in text and "a = " in text


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda text: text[: len(text) // 2], "truncated or corrupt"),
        (lambda text: "", "truncated or corrupt"),
        (lambda text: text.replace('"pyamx-vectors"', '"other"'), "not a pyamx vector file"),
        (lambda text: text.replace(f'"version": {vectors.VERSION}', '"version": 9'), "format version 9"),
        (lambda text: text.replace('"instruction": "tdpbf16ps"', '"instruction": "tdpxyz"', 1), "unknown instruction 'tdpxyz'"),
        (lambda text: text.replace('"c": "', '"c": "zz', 1), "'c' is not a hex string"),
        (lambda text: text.replace('"out": "', '"out": "00', 1), "'out' holds"),
        (lambda text: text.replace('"cases": [', '"cases": [7, ', 1), "case 0 is not an object"),
    ],
)
def test_damaged_files_name_the_file_and_the_problem(recorded, tmp_path, damage, words):
    path, _ = recorded
    broken = tmp_path / "broken.json"
    broken.write_text(damage(path.read_text()))
    with pytest.raises(VectorFileError, match=words) as info:
        vectors.load(broken)
    assert str(broken) in str(info.value)


def _edited(document, edit):
    document = json.loads(json.dumps(document))
    edit(document)
    return json.dumps(document)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda doc: "[" * 100_000 + "]" * 100_000, "nests arrays or objects too deeply"),
        (lambda doc: _edited(doc, lambda d: d["provenance"].update(cpu="Sapphire Rapids")),
         "provenance field 'cpu' is a string; it must be an object"),
        (lambda doc: _edited(doc, lambda d: d["provenance"]["cpu"].update(model=143)),
         "'cpu' holds 'model' as an integer"),
        (lambda doc: _edited(doc, lambda d: d["provenance"].update(silicon="no")),
         "provenance field 'silicon' is a string; it must be true/false"),
        (lambda doc: _edited(doc, lambda d: d["provenance"].update(backend=["native"])),
         "provenance field 'backend' is a list"),
        (lambda doc: _edited(doc, lambda d: d["cases"][0].update(shape=[True, True, True])), "case 0 has a bad shape"),
        (lambda doc: _edited(doc, lambda d: d["cases"][1].update(instruction=["tdpbf16ps"])),
         "case 1 names an unknown instruction"),
    ],
    ids=["deep-nesting", "cpu-string", "cpu-value-int", "silicon-string", "backend-list", "bool-shape",
         "list-instruction"],
)
def test_malformed_files_are_a_vector_file_error_not_a_traceback(recorded, tmp_path, make, words):
    path, _ = recorded
    broken = tmp_path / "broken.json"
    broken.write_text(make(json.loads(path.read_text())))
    with pytest.raises(VectorFileError, match=words) as info:
        vectors.replay(broken, backend="emulator")
    assert str(broken) in str(info.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(VectorFileError, match="cannot be read"):
        vectors.load(tmp_path / "absent.json")


@pytest.mark.parametrize("path", VECTOR_FILES, ids=lambda p: p.name)
def test_a_committed_file_is_named_from_its_cpuid_facts_not_a_guess(path):
    prov, cases = vectors.load(path)
    assert path.name == vectors.suggested_file_name(prov)
    if prov.get("silicon"):  # what executed there is what its cases hold, as the file says
        from pyamx.table import isa

        features = dict.fromkeys(isa.get(case.instruction).feature.name for case in cases)
        assert prov["cpu"]["executed_on_silicon"] == " ".join(features)


def test_the_silicon_recording_names_its_cpu_unknown_and_says_what_executed():
    path = DATA / "silicon-genuineintel-family6-model167-stepping1-seed2026.json"
    text = vectors.describe_provenance(vectors.load(path)[0])
    assert "CPU GenuineIntel family 6 model 167 stepping 1 (unknown)" in text
    assert "executed on silicon: AMX-BF16 AMX-INT8" in text and "Sapphire" not in text


def test_names_come_from_the_table_by_cpuid_signature():
    cpu = {"vendor": "GenuineIntel", "family": "6", "model": "143", "stepping": "8"}
    assert vectors.recorded_cpu_name(cpu) == "Sapphire Rapids"
    assert vectors.recorded_cpu_name({**cpu, "model": "167"}) == "unknown"
    assert vectors.recorded_cpu_name({}) == "unknown"
    prov = {"backend": "native", "native_mode": "trap", "silicon": False, "cpu": cpu, "seed": 3}
    assert vectors.suggested_file_name(prov) == "native-trap-genuineintel-family6-model143-stepping8-seed3.json"


def test_a_recording_says_which_amx_features_cpuid_reports(recorded):
    from pyamx.cpu import detect

    _, prov = recorded
    cpu = detect.report().cpu
    if "vendor" not in cpu:
        pytest.skip("CPUID was not read here (no native module or not x86-64 Linux)")
    from pyamx.table import isa

    reported = [f.name for f in isa.FEATURE_ROWS if cpu.get(f.key)]
    assert prov["cpu"]["cpuid_amx"] == (" ".join(reported) or "none")
    assert "executed_on_silicon" not in prov["cpu"]  # the emulator executes nothing on silicon


def test_committed_vector_files_exist():
    assert VECTOR_FILES, "tests/data holds no vector file"


@pytest.mark.parametrize("path", VECTOR_FILES, ids=lambda p: p.name)
def test_committed_vectors_replay_on_the_emulator(path):
    """Every vector file, silicon recordings included, must replay bit for bit on the emulator."""
    result = vectors.replay(path, backend="emulator")
    assert not result.mismatches, vectors.format_replay(path, result, "emulator")


# static: the committed data against the slow references, no pyamx kernel in between.
@pytest.mark.static
@pytest.mark.parametrize("path", VECTOR_FILES, ids=lambda p: p.name)
def test_committed_vectors_agree_with_the_independent_reference(path):
    """The recorded outputs are not just the emulator's word: the Fraction reference gives them too."""
    _, cases = vectors.load(path)
    for index, case in enumerate(cases):
        if not isinstance(case, vectors.Case):
            assert np.array_equal(tile_case_reference(case), case.out), (
                f"{path.name} case {index} ({case.instruction}, {case.label}) disagrees with the reference")
            continue
        if case.instruction == "tdpbf16ps":
            want = reference.tdpbf16ps(case.c.astype(np.uint32), case.a, case.b)
        elif case.instruction == "tdpfp16ps":
            want = reference.tdpfp16ps(case.c.astype(np.uint32), case.a, case.b)
        elif case.instruction.endswith("f8ps"):
            want = reference_fp8.dot(case.c.astype(np.uint32).tolist(), case.a.tolist(), case.b.tolist(),
                                     *reference_fp8.formats(case.instruction))
        elif case.instruction in ("tcmmimfp16ps", "tcmmrlfp16ps"):
            words = [(x[:, 0::2].astype(np.uint32) | (x[:, 1::2].astype(np.uint32) << 16)) for x in (case.a, case.b)]
            want = reference.tcmm(case.instruction == "tcmmimfp16ps", case.c.astype(np.uint32), *words)
        else:
            # signedness from the reference, not from pyamx.table.isa: the recorded bits are checked against it
            want = reference.tdpb_int8(*reference.int8_signedness(case.instruction), case.c, case.a, case.b)
        got = case.out.view("<u4") if case.out.dtype.kind == "u" else case.out
        assert np.array_equal(np.array(want, dtype=np.int64) & 0xFFFFFFFF, got.astype(np.int64) & 0xFFFFFFFF), (
            f"{path.name} case {index} ({case.label}) disagrees with the reference"
        )


def tile_case_reference(case) -> np.ndarray:
    """A row or load case's output from the slow references alone: tests/reference_rows.py for the
    rows (Intel's pseudo-code, exact arithmetic); a byte copy, row by row, for the loads."""
    if hasattr(case, "selector"):
        storage = [[0] * 64 for _ in range(16)]
        for r in range(case.rows):
            storage[r][: case.colsb] = case.data[r].tolist()
        words = reference_rows.row_instruction(case.instruction.upper(), storage, case.rows, case.colsb,
                                               case.selector, case.imm)
        return np.array(words, dtype="<u4")
    tile = np.zeros((16, 64), dtype=np.uint8)
    memory = case.memory.tolist()
    for r in range(case.rows):
        start = case.offset + r * case.stride
        tile[r, : case.colsb] = memory[start : start + case.colsb]
    return tile
