"""csrc/pyamx_ops.h, csrc/pyamx_op_traits.h and the _dot_types.py type declarations: generated from
pyamx/table/isa.py, committed; the headers are valid C."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyamx.table import isa

ROOT = Path(__file__).resolve().parents[2]
BUILD_PY = ROOT / "build.py"

if not BUILD_PY.exists():
    pytest.skip("build.py is not next to these tests (an installed copy of the tests)", allow_module_level=True)


def _build_script():
    spec = importlib.util.spec_from_file_location("pyamx_build_script_for_generated_c", BUILD_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # compiles nothing
    return module


build = _build_script()


@pytest.mark.parametrize("rel", sorted(build.generated_headers(), key=str))
def test_the_committed_header_is_what_the_table_generates_byte_for_byte(rel):
    committed = (ROOT / rel).read_bytes()
    assert committed == build.generated_headers()[rel].encode("utf-8"), (
        f"{rel} differs from what pyamx/table/isa.py generates: run python build.py and commit the result")
    assert b"do not edit; python build.py regenerates it" in committed


def test_the_build_reads_the_table_without_numpy():
    code = ("import sys, importlib.util; sys.modules['numpy'] = None\n"
            f"spec = importlib.util.spec_from_file_location('b', {str(BUILD_PY)!r})\n"
            "b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)\n"
            "print(len(b.generated_headers()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "4", proc.stderr


_PRINT_ROWS = r"""
#include <stdio.h>
#include "pyamx_op_traits.h"
#define PRINT(name_, kind_, a_, b_, acc_, as_, bs_, lanes_, prefix_, map_, pp_, w_, l_, opcode_, form_, \
              ip_, imap_, ipp_, iw_, il_, iopc_, fleaf_, fsub_, freg_, fbit_, part_) { \
    const struct pyamx_op_traits *t = &pyamx_op_traits[PYAMX_OP_##name_]; \
    printf("%s %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %s\n", #name_, t->kind, \
           t->a_format, \
           t->b_format, t->acc_format, t->a_signed, t->b_signed, t->lanes, t->prefix, t->map, t->pp, t->w, t->l, \
           t->opcode, t->form, t->imm_prefix, t->imm_map, t->imm_pp, t->imm_w, t->imm_l, t->imm_opcode, \
           t->feature_leaf, t->feature_subleaf, t->feature_reg, t->feature_bit, t->part, \
           pyamx_op_names[PYAMX_OP_##name_]); \
    if (t->kind != PYAMX_KIND_##kind_ || t->a_format != PYAMX_FMT_##a_ || t->acc_format != PYAMX_FMT_##acc_ \
        || t->lanes != lanes_ || t->opcode != opcode_ || t->pp != pp_ || t->form != PYAMX_FORM_##form_ \
        || t->imm_prefix != PYAMX_PREFIX_##ip_ || t->imm_map != imap_ || t->imm_pp != ipp_ || t->imm_w != iw_ \
        || t->imm_l != il_ || t->imm_opcode != iopc_ || t->feature_leaf != fleaf_ || t->feature_subleaf != fsub_ \
        || t->feature_reg != freg_ || t->feature_bit != fbit_ || t->part != part_) return 1; }
#define PRINT_IMM(name_, map_, pp_, opcode_) { \
    const struct pyamx_op_traits *t = &pyamx_op_traits[PYAMX_OP_##name_]; \
    printf("imm %s %d %d %d\n", #name_, map_, pp_, opcode_); \
    if (t->imm_map != map_ || t->imm_pp != pp_ || t->imm_opcode != opcode_) return 1; }
int main(void) { PYAMX_FOR_EACH_OP(PRINT) PYAMX_FOR_EACH_IMM_FORM(PRINT_IMM) return 0; }
"""


def _expected_line(insn) -> str:
    """A row's traits as the C table must number them, from the row itself."""
    enc = insn.encoding
    fmt = (lambda f: 0 if f is None else isa.FORMAT_ROWS.index(f) + 1)
    signed = (lambda f: int(bool(f is not None and f.signed)))
    forms = list(dict.fromkeys(i.encoding.form for i in isa.TABLE))
    fields = (isa.KINDS_OF_ARITHMETIC.index(insn.kind) + 1, fmt(insn.a_format), fmt(insn.b_format),
              fmt(insn.acc_format), signed(insn.a_format), signed(insn.b_format), insn.lanes or 0,
              ("VEX", "EVEX").index(enc.prefix) + 1, enc.map, enc.pp, enc.w, enc.l, enc.opcode,
              forms.index(enc.form) + 1)
    imm = insn.imm_encoding
    imm_fields = ((0, 0, 0, 0, 0, 0) if imm is None else
                  (("VEX", "EVEX").index(imm.prefix) + 1, imm.map, imm.pp, imm.w, imm.l, imm.opcode))
    feature = insn.feature
    feature_fields = (feature.leaf, feature.subleaf, ("eax", "ebx", "ecx", "edx").index(feature.register), feature.bit)
    part = ((None, "real", "imaginary").index(insn.part),)
    return " ".join([insn.mnemonic, *map(str, fields + imm_fields + feature_fields + part), insn.mnemonic])


def test_the_traits_header_compiles_and_holds_every_rows_fields(tmp_path):
    cc = build.compiler_command()
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]})")
    source = tmp_path / "rows.c"
    source.write_text(_PRINT_ROWS)
    exe = tmp_path / "rows"
    compiled = subprocess.run([cc[0], "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'csrc'}",
                               str(source), "-o", str(exe)], capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stdout
    imm_lines = [f"imm {i.mnemonic} {i.imm_encoding.map} {i.imm_encoding.pp} {i.imm_encoding.opcode}"
                 for i in isa.TABLE if i.imm_encoding is not None]
    assert ran.stdout.splitlines() == [_expected_line(insn) for insn in isa.TABLE] + imm_lines
