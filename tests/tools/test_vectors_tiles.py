"""Vector files of the row instructions and the loads: what is recorded, how damage reads, and
what a backend without the extension does (skips, saying why; never SIGILL)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reference_rows
from childproc import PYAMX_HOME, child_env
from pyamx.table import isa
from pyamx.tools import vectors
from pyamx.tools._vector_tiles import LoadCase, RowCase
from pyamx.tools.vectors import VectorFileError
from test_vectors import tile_case_reference

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "emulator-sdm-seed2026.json"
ROW_NAMES = [insn.name for insn in isa.ROWS]
# the loads: the memory rows of the table whose source is a SIB memory operand
LOAD_NAMES = [i.name for i in isa.TABLE if i.kind == "memory" and ("src", "sibmem") in i.encoding.roles]


def _pyamx(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pyamx", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd or PYAMX_HOME, env=child_env(drop=("PYAMX_BACKEND",)))


@pytest.fixture(scope="module")
def shipped():
    return vectors.load(SHIPPED)


def test_every_row_and_load_of_the_table_is_recorded_with_its_case_shape(shipped):
    assert LOAD_NAMES and ROW_NAMES
    assert {n for n, k in vectors.KINDS.items() if k == "row"} == set(ROW_NAMES)
    assert {n for n, k in vectors.KINDS.items() if k == "load"} == set(LOAD_NAMES)
    assert any(isa.get(n).feature.name == "AMX-MOVRS" for n in LOAD_NAMES)
    _, cases = shipped
    for name in ROW_NAMES + LOAD_NAMES:
        mine = [c for c in cases if c.instruction == name]
        assert mine, f"the shipped file holds no {name} case"
        assert all(isinstance(c, RowCase if name in ROW_NAMES else LoadCase) for c in mine)


def test_the_shipped_new_instruction_vectors_say_the_emulator_recorded_them(shipped):
    prov, _ = shipped
    assert prov["backend"] == "emulator" and prov["silicon"] is False and prov["numerics"] == "sdm"
    assert prov["skipped"] == {}
    result = vectors.replay(SHIPPED, backend="emulator")
    assert "recorded on emulator (NOT silicon)" in vectors.format_replay(SHIPPED, result, "emulator")


def test_rows_cover_both_selector_forms_and_chunks_past_the_tile(shipped):
    _, cases = shipped
    for name in ROW_NAMES:
        mine = [c for c in cases if c.instruction == name]
        assert {c.imm for c in mine} == {True, False}, name
        chunks = {c.selector >> (6 if c.imm else 16) for c in mine}
        assert 0 in chunks and len(chunks) > 1, name
        assert any(c.colsb < 64 for c in mine) and any(c.rows < 16 for c in mine), name


def _selected_words(case) -> list:
    """The source dwords the instruction converts (chunk 0: the whole selected row's colsb)."""
    index, chunk = (case.selector & 0x3F, case.selector >> 6) if case.imm else (case.selector & 0xFFFF,
                                                                                  case.selector >> 16)
    if chunk:
        return []
    return case.data[index, : case.colsb // 4 * 4].copy().view("<u4").tolist()


@pytest.mark.parametrize("name", [n for n in ROW_NAMES if isa.get(n).a_format.name == "fp32"])
def test_fp32_rows_see_the_adversarial_classes(shipped, name):
    """Zeros of both signs, infinities, NaNs, denormals, exact ties of the target's rounding and
    overflow all reach the converted lanes of the shipped cases."""
    target = isa.get(name).acc_format
    convert = reference_rows.fp32_to_bf16 if target.name == "bf16" else reference_rows.fp32_to_fp16
    infinity = ((1 << target.exponent) - 1) << target.mantissa
    drop = 23 - target.mantissa
    words = [w for c in shipped[1] if c.instruction == name for w in _selected_words(c)]
    classes = {
        "+0": 0 in words, "-0": 0x80000000 in words,
        "inf": 0x7F800000 in words and 0xFF800000 in words,
        "nan": any((w >> 23) & 0xFF == 0xFF and w & 0x7FFFFF for w in words),
        "denormal": any((w >> 23) & 0xFF == 0 and w & 0x7FFFFF for w in words),
        "tie": any(w & ((1 << drop) - 1) == 1 << (drop - 1) for w in words),
        "overflow": any((w >> 23) & 0xFF != 0xFF and convert(w, "ieee") & 0x7FFF == infinity for w in words),
    }
    assert all(classes.values()), {k: v for k, v in classes.items() if not v}


def test_int32_rows_see_ties_and_the_extremes(shipped):
    for name in (n for n in ROW_NAMES if isa.get(n).a_format.name == "int32"):
        words = [w for c in shipped[1] if c.instruction == name for w in _selected_words(c)]
        values = [w - 2**32 if w >= 2**31 else w for w in words]
        assert 0x80000000 in words and 0x7FFFFFFF in words and 0 in words
        # a tie of fp32's rounding: odd multiple of half a step, past 2**24
        assert any(abs(v) > 2**24 and abs(v) % (1 << (abs(v).bit_length() - 24)) == 1 << (abs(v).bit_length() - 25)
                   for v in values)
        assert any(v < -(2**24) for v in values)


def test_loads_cover_zero_overlapping_and_negative_strides(shipped):
    for name in LOAD_NAMES:
        mine = [c for c in shipped[1] if c.instruction == name]
        strides = {("zero" if c.stride == 0 else "negative" if c.stride < 0 else
                    "overlap" if c.stride < c.colsb else "apart") for c in mine}
        assert strides == {"zero", "negative", "overlap", "apart"}, name


def test_a_changed_output_disagrees_with_the_reference_and_replay_names_the_lane(shipped, tmp_path):
    """The reference check can fail: one flipped bit of a row and of a load case is caught twice."""
    document = json.loads(SHIPPED.read_text())
    flipped = {}
    for kind in ("row", "load"):
        index = next(i for i, c in enumerate(document["cases"]) if vectors.KINDS[c["instruction"]] == kind)
        out = bytearray(bytes.fromhex(document["cases"][index]["out"]))
        out[5] ^= 0x10
        document["cases"][index]["out"] = out.hex()
        flipped[kind] = index
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    _, cases = vectors.load(tampered)
    for index in flipped.values():
        assert not np.array_equal(tile_case_reference(cases[index]), cases[index].out)
    result = vectors.replay(tampered, backend="emulator")
    assert sorted(i for i, _, _ in result.mismatches) == sorted(flipped.values())
    text = vectors.format_replay(tampered, result, "emulator")
    assert f"case {flipped['row']} (" in text and "first lane 1:" in text
    assert f"case {flipped['load']} (" in text and "first (row 0, byte 5)" in text
    assert f"  {cases[flipped['row']].instruction}: " in text and " 1 differ" in text


def _first(document, kind):
    return next(c for c in document["cases"] if vectors.KINDS[c["instruction"]] == kind)


@pytest.mark.parametrize("kind, edit, words", [
    ("row", lambda c: c.update(tile=[17, 64]), "bad tile"),
    ("row", lambda c: c.update(tile=[True, 64]), "bad tile"),
    ("row", lambda c: c.update(imm=1), "field 'imm' is 1"),
    ("row", lambda c: c.update(imm=True, selector=256), "field 'selector' is 256"),
    ("row", lambda c: c.update(data=c["data"][:-2]), "field 'data' holds"),
    ("row", lambda c: c.update(out="zz"), "field 'out' is not a hex string"),
    ("load", lambda c: c.update(tmm=8), "field 'tmm' is 8"),
    ("load", lambda c: c.update(memory=c["memory"][:2]), "reads row 0 outside its 1-byte memory"),
    ("load", lambda c: c.update(out=c["out"][:-2]), "field 'out' holds 1023 bytes"),
])
def test_damaged_row_and_load_cases_name_the_case_and_the_field(tmp_path, kind, edit, words):
    document = json.loads(SHIPPED.read_text())
    victim = _first(document, kind)
    edit(victim)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document))
    with pytest.raises(VectorFileError, match=words) as info:
        vectors.load(broken)
    assert str(broken) in str(info.value) and victim["instruction"] in str(info.value)


def test_version_1_files_load_and_hold_dot_products_only(tmp_path):
    document = json.loads(SHIPPED.read_text())
    document["version"] = 1
    dots = [c for c in document["cases"] if vectors.KINDS[c["instruction"]] == "dot"]
    old = tmp_path / "v1.json"
    old.write_text(json.dumps({**document, "cases": dots}))
    assert len(vectors.load(old)[1]) == len(dots)
    old.write_text(json.dumps({**document, "cases": dots + [_first(document, "row")]}))
    with pytest.raises(VectorFileError, match="format version 1 holds dot products only"):
        vectors.load(old)


def test_native_record_skips_what_the_cpu_lacks_saying_which_feature(native, tmp_path):
    """In a child process: a native instruction the CPU lacks would be SIGILL, a crash, not a failure."""
    from pyamx.cpu import detect

    out = tmp_path / "native.json"
    proc = _pyamx("record", str(out), "--backend", "native", "--per-class", "1")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    skipped = document["provenance"]["skipped"]
    recorded = {c["instruction"] for c in document["cases"]}
    report = detect.report()
    for name in vectors.KINDS:
        insn = isa.get(name)
        lacks = report.mode_for(insn) == "silicon" and not report.cpu.get(insn.feature.key)
        assert (insn.mnemonic in skipped) == (name not in recorded), name
        if lacks:
            assert insn.mnemonic in skipped, name
            assert insn.feature.name in skipped[insn.mnemonic], skipped[insn.mnemonic]
            assert f"  skipped {insn.mnemonic}: " in proc.stdout
    # native replays its own recording: the loads included
    again = _pyamx("replay", str(out), "--backend", "native")
    assert again.returncode == 0 and " 0 differ" in again.stdout, again.stdout + again.stderr


def test_native_replay_of_the_shipped_file_reports_per_instruction(native):
    from pyamx.cpu import detect

    proc = _pyamx("replay", str(SHIPPED), "--backend", "native")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = detect.report()
    for name in ROW_NAMES + LOAD_NAMES:
        insn = isa.get(name)
        if report.mode_for(insn) == "silicon" and not report.cpu.get(insn.feature.key):
            assert f"  {name}: " not in proc.stdout
            line = next(x for x in proc.stdout.splitlines() if x.startswith("  skipped ") and f" {name} cases:" in x)
            assert insn.feature.name in line, line
        elif report.mode_for(insn) in ("silicon", "complement"):
            assert re.search(rf"^  {name}: (\d+) cases, \1 match, 0 differ$", proc.stdout, re.M), proc.stdout
