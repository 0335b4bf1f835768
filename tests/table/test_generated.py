"""Every file made from pyamx/table/isa.py is committed as pyamx/table/generate.py makes it, byte for byte.

The files are generate.FILES (the C op headers, the type declarations, docs/isa.md's instruction
table); a file edited by hand, or one left behind by a table edit, fails here. The traits header is
also compiled and read back, row by row.
"""

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
GENERATE_PY = ROOT / "pyamx" / "table" / "generate.py"

pytestmark = pytest.mark.static

if not BUILD_PY.exists():
    pytest.skip("build.py is not next to these tests (an installed copy of the tests)", allow_module_level=True)


def _by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # compiles nothing
    return module


build = _by_path("pyamx_build_script_for_generated", BUILD_PY)
# this checkout's generator, by path as build.py loads it (an installed pyamx may be another copy)
generate = _by_path("pyamx_generate_for_tests", GENERATE_PY)
EXPECTED = generate.expected(ROOT)


@pytest.mark.parametrize("rel", [rel.as_posix() for rel in generate.FILES])
def test_the_committed_file_is_what_the_table_makes_byte_for_byte(rel):
    committed = (ROOT / rel).read_bytes()
    assert committed == EXPECTED[Path(rel)].encode("utf-8"), (
        f"{rel} is not what pyamx/table/isa.py makes: run {generate.COMMAND} and commit the result")
    assert f"{generate.COMMAND} regenerates it".encode() in committed, f"{rel} does not say how it is made"


def _copy_inputs(tmp_path: Path) -> Path:
    """A checkout holding only what the generator reads and writes."""
    rels = [Path("pyamx") / "table" / "generate.py", generate.ISA_PY, generate.DOC_GROUPS_PY, *generate.FILES]
    for rel in rels:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, tmp_path / rel)
    return tmp_path


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    # numpy and the pyamx package made unimportable: a build runs the generator before either exists
    code = ("import runpy, sys; sys.modules['numpy'] = None; sys.modules['pyamx'] = None; "
            f"sys.argv = ['generate.py', *{list(args)!r}]; "
            f"runpy.run_path({str(root / 'pyamx' / 'table' / 'generate.py')!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("rel", [rel.as_posix() for rel in generate.FILES])
def test_check_names_a_file_edited_by_hand_and_a_run_restores_it(tmp_path, rel):
    root = _copy_inputs(tmp_path)
    clean = _run(root, "--check")
    assert clean.returncode == 0 and not clean.stderr, clean.stderr
    text = (root / rel).read_bytes()
    # a line in the middle of what is generated (docs/isa.md: of its table) written twice
    begin = text.find(generate.DOC_BEGIN.encode())
    start, end = (begin, text.find(generate.DOC_END.encode())) if begin >= 0 else (0, len(text))
    middle = text.index(b"\n", (start + end) // 2) + 1
    edited = text[:middle] + text[middle:text.index(b"\n", middle) + 1] + text[middle:]
    (root / rel).write_bytes(edited)
    stale = _run(root, "--check")
    assert stale.returncode == 1 and stale.stderr.split()[0] == rel, stale.stderr
    assert (root / rel).read_bytes() == edited, "--check wrote"
    rewritten = _run(root)
    assert rewritten.returncode == 0 and rewritten.stdout.split() == ["regenerated", rel], rewritten.stderr
    assert (root / rel).read_bytes() == (ROOT / rel).read_bytes()


@pytest.mark.parametrize("edit, says", [
    ("first = next(iter(GROUPS))\nGROUPS.pop(first)\n", "has no entry for {first}"),
    ("GROUPS['no-such-group'] = GROUPS[next(iter(GROUPS))]\n", "has entries no row has: no-such-group"),
], ids=["a-group-without-links", "links-without-a-group"])
def test_a_group_without_its_links_or_links_without_a_group_stop_the_generator(tmp_path, edit, says):
    root = _copy_inputs(tmp_path)
    groups = root / generate.DOC_GROUPS_PY
    groups.write_text(groups.read_text(encoding="utf-8") + edit, encoding="utf-8")
    before = (root / generate.ISA_MD).read_bytes()
    done = _run(root)
    first = next(iter(generate.load_doc_groups(ROOT).GROUPS))
    assert done.returncode == 1 and says.format(first=first) in done.stderr, done.stderr
    assert generate.DOC_GROUPS_PY.as_posix() in done.stderr
    assert (root / generate.ISA_MD).read_bytes() == before


def test_the_build_runs_the_generator_without_numpy_or_the_package():
    code = ("import sys, importlib.util; sys.modules['numpy'] = None; sys.modules['pyamx'] = None\n"
            f"spec = importlib.util.spec_from_file_location('b', {str(BUILD_PY)!r})\n"
            "b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)\n"
            "g = b.generator(); print(*sorted(p.as_posix() for p in g.expected(b.HERE, only=g.BUILD_FILES)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == sorted(rel.as_posix() for rel in generate.FILES if rel != generate.ISA_MD)


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
