"""Every file made from the instruction table (pyamx/table/isa.py), written and checked by one module.

The files are listed in :data:`FILES`: the C op numbering and traits (csrc/pyamx_ops.h,
csrc/pyamx_op_traits.h), the type declarations of the functions and methods the table makes at
import (pyamx/_dot_types.py, pyamx/emulator/_dot_types.py), and docs/isa.md's instruction table
(the part between its markers; each group's links come from tests/isa_doc_groups.py). They are
committed; tests/table/test_generated.py checks that each is what this module makes, byte for byte.

    python pyamx/table/generate.py           rewrite the files that differ (python build.py: all but docs/isa.md)
    python pyamx/table/generate.py --check   list the files that differ and exit 1, writing nothing

``python -m pyamx.table.generate`` runs the same, but imports the pyamx package (and numpy) first.
This module imports neither: build.py loads it by path before numpy may be installed, and it
loads isa.py by path as well.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: the checkout this module sits in (pyamx/table/generate.py)
ROOT = Path(__file__).resolve().parents[2]
ISA_PY = Path("pyamx") / "table" / "isa.py"
DOC_GROUPS_PY = Path("tests") / "isa_doc_groups.py"
COMMAND = "python pyamx/table/generate.py"
_GENERATED_NOTE = f"Generated from pyamx/table/isa.py: do not edit; {COMMAND} regenerates it."


class GenerateError(ValueError):
    """The table or the doc groups cannot make a file (a message says which and what to add)."""


#: a row of the table, an encoding of one: isa.py is loaded by path, so its classes are no importable types here
Row = Any
Encoding = Any
#: one group's docs/isa.md cells: (emulator, kernel, trap case, tests)
DocGroup = Tuple[str, str, str, Tuple[str, ...]]


def _load_by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise GenerateError(f"{path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the rows are made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def load_isa(root: Path = ROOT) -> ModuleType:
    """pyamx/table/isa.py as a module of its own: the package's __init__ needs numpy, a build may not have it."""
    return _load_by_path("pyamx_isa_for_generate", root / ISA_PY)


# -- csrc/pyamx_ops.h and csrc/pyamx_op_traits.h ----------------------------------------------------


def _c_name(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z]", "_", name).upper()


def ops_header_text(isa: ModuleType) -> str:
    """csrc/pyamx_ops.h: ``enum pyamx_op``, ids in table order from 1 (a new row goes at the end, so
    no id moves). Plain declarations only: cffi's cdef() reads it."""
    rows = ",\n".join(f"    PYAMX_OP_{insn.mnemonic} = {i}" for i, insn in enumerate(isa.TABLE, 1))
    return f"""/* The one numbering of the AMX instructions, shared by every layer.
 *
 * {_GENERATED_NOTE}
 *
 * Plain declarations only: build.py feeds this file to cffi's cdef(), so
 * Python reads the same ids from each module's lib. The rows' traits are
 * csrc/pyamx_op_traits.h.
 */
#ifndef PYAMX_OPS_H
#define PYAMX_OPS_H

/* Instruction ids in the order of pyamx/table/isa.py's TABLE; 0 is no instruction. */
enum pyamx_op {{
    PYAMX_OP_NONE = 0,
{rows}
}};

#endif
"""


#: The traits of a row, in the order of the X-macro's arguments (after the mnemonic) and of
#: ``struct pyamx_op_traits``: (field, the enum prefix its value is a name of or "", the C comment).
TRAIT_FIELDS = (
    ("kind", "PYAMX_KIND_", "enum pyamx_op_kind"),
    ("a_format", "PYAMX_FMT_", "enum pyamx_format of src1, src2, dst"),
    ("b_format", "PYAMX_FMT_", ""),
    ("acc_format", "PYAMX_FMT_", ""),
    ("a_signed", "", "1: an integer src1/src2 is sign-extended"),
    ("b_signed", "", ""),
    ("lanes", "", "operand values per dword; 0 for a non-dot row"),
    ("prefix", "PYAMX_PREFIX_", "enum pyamx_encoding_prefix"),
    ("map", "", "opcode map: 2 is 0F38"),
    ("pp", "", "0 NP, 1 66, 2 F3, 3 F2"),
    ("w", "", ""),
    ("l", "", ""),
    ("opcode", "", ""),
    ("form", "PYAMX_FORM_", "enum pyamx_modrm_form"),
    ("imm_prefix", "PYAMX_PREFIX_", "the imm8 form's encoding (AMX-AVX512): NONE and zeros where absent"),
    ("imm_map", "", ""),
    ("imm_pp", "", ""),
    ("imm_w", "", ""),
    ("imm_l", "", ""),
    ("imm_opcode", "", ""),
    ("feature_leaf", "", "the CPUID feature bit the row needs"),
    ("feature_subleaf", "", ""),
    ("feature_reg", "", "0 EAX, 1 EBX, 2 ECX, 3 EDX"),
    ("feature_bit", "", ""),
    ("part", "", "the complex product's part a complex row computes: 1 real, 2 imaginary; 0 elsewhere"),
)


def _trait_fields(isa: ModuleType, insn: Row) -> Tuple[object, ...]:
    """One row's X-macro arguments: its mnemonic, then its traits in TRAIT_FIELDS' order (names of
    the enums below, then numbers)."""
    enc = insn.encoding

    def fmt(f: Any) -> str:
        return "NONE" if f is None else _c_name(f.name)

    def signed(f: Any) -> int:
        return int(bool(f is not None and f.signed))

    imm = ("imm_prefix", "imm_map", "imm_pp", "imm_w", "imm_l", "imm_opcode")
    values = dict(
        kind=_c_name(insn.kind), a_format=fmt(insn.a_format), b_format=fmt(insn.b_format),
        acc_format=fmt(insn.acc_format), a_signed=signed(insn.a_format), b_signed=signed(insn.b_format),
        lanes=insn.lanes or 0, prefix=_c_name(enc.prefix), map=f"0x{enc.map:X}", pp=enc.pp, w=enc.w, l=enc.l,
        opcode=f"0x{enc.opcode:02X}", form=_c_name(enc.form), **dict(zip(imm, _imm_fields(insn.imm_encoding))),
        feature_leaf=f"0x{insn.feature.leaf:X}", feature_subleaf=insn.feature.subleaf,
        feature_reg=_REGISTERS.index(insn.feature.register), feature_bit=insn.feature.bit,
        part=_PARTS.index(insn.part))
    if set(values) != {name for name, _, _ in TRAIT_FIELDS}:
        raise GenerateError(f"the traits of {insn.mnemonic} are not TRAIT_FIELDS: {sorted(values)}")
    return (insn.mnemonic, *(values[name] for name, _, _ in TRAIT_FIELDS))


#: complex parts in the order the traits number them
_PARTS = (None, "real", "imaginary")

#: CPUID result registers in the order the traits number them
_REGISTERS = ("eax", "ebx", "ecx", "edx")


def _imm_fields(enc: Optional[Encoding]) -> Tuple[object, ...]:
    """The imm8 form's prefix, map, pp, w, l and opcode; NONE and zeros where the row has none."""
    if enc is None:
        return ("NONE", "0x0", 0, 0, 0, "0x00")
    return (_c_name(enc.prefix), f"0x{enc.map:X}", enc.pp, enc.w, enc.l, f"0x{enc.opcode:02X}")


#: the operand names of the table's roles -> the slot of the C decoder's result they fill
_OPERAND_SLOTS = {"dst": "DST", "src": "SRC1", "src1": "SRC1", "src2": "SRC2", "row": "ROW"}
#: the instruction fields a register operand can live in (memory operands are the ModRM form)
_REGISTER_FIELDS = ("reg", "rm", "vvvv", "imm8")


def _operand_slots(enc: Optional[Encoding]) -> Tuple[str, ...]:
    """What each of ModRM.reg, ModRM.rm, vvvv and an imm8 holds in one encoding (NONE: nothing, so
    the decoder requires the field's all-zero value)."""
    slots = dict.fromkeys(_REGISTER_FIELDS, "NONE")
    for operand, field in (enc.roles if enc is not None else ()):
        if field in ("mem", "sibmem"):
            continue
        if field not in slots or operand not in _OPERAND_SLOTS:
            raise GenerateError(f"operand {operand!r} in field {field!r} has no decoder slot (_OPERAND_SLOTS)")
        slots[field] = _OPERAND_SLOTS[operand]
    return tuple(slots.values())


def traits_header_text(isa: ModuleType) -> str:
    """csrc/pyamx_op_traits.h: ``PYAMX_FOR_EACH_OP(X)`` and ``pyamx_op_traits[]``, one entry per row.

    Not included by pyamx_ops.h: cffi's cdef() cannot read macros with arguments or initialized
    tables, so C code that wants a row's traits includes this header itself."""

    def enum(tag: str, prefix: str, names: Sequence[str]) -> str:
        return f"enum {tag} {{\n" + ",\n".join(
            f"    {prefix}{_c_name(n)} = {i}" for i, n in enumerate(names)) + "\n};\n"

    forms = tuple(dict.fromkeys(insn.encoding.form for insn in isa.TABLE))
    prefixes = ("VEX", "EVEX")
    fields = [_trait_fields(isa, insn) for insn in isa.TABLE]
    xrows = " \\\n".join(f"    X({', '.join(str(v) for v in row)})" for row in fields)
    table = "\n".join(
        f"    [PYAMX_OP_{r[0]}] = {{"
        + ", ".join(f"{prefix}{v}" for (_, prefix, _), v in zip(TRAIT_FIELDS, r[1:])) + "},"
        for r in fields)
    width = max(len(f"unsigned char {name};") for name, _, _ in TRAIT_FIELDS) + 1
    members = "\n".join(
        f"    {f'unsigned char {name};':<{width}}/* {note} */" if note else f"    unsigned char {name};"
        for name, _, note in TRAIT_FIELDS)
    xargs = textwrap.fill(", ".join(("mnemonic",) + tuple(name for name, _, _ in TRAIT_FIELDS))
                          + ") once per row, in table order;",
                          width=78, initial_indent=" * PYAMX_FOR_EACH_OP(X) calls X(", subsequent_indent=" * ")

    def slot(enc: Optional[Encoding]) -> str:
        return "{" + ", ".join(f"PYAMX_OPERAND_{v}" for v in _operand_slots(enc)) + "}"

    operands = "\n".join(f"    [PYAMX_OP_{i.mnemonic}] = {{{slot(i.encoding)}, {slot(i.imm_encoding)}}},"
                          for i in isa.TABLE)
    names = "\n".join(f'    [PYAMX_OP_{i.mnemonic}] = "{i.mnemonic}",' for i in isa.TABLE)
    actions = "\n".join(f"    [PYAMX_OP_{i.mnemonic}] = PYAMX_ACTION_{_c_name(i.action)},"
                         for i in isa.TABLE if i.action is not None)
    action_ops = ",\n".join(f"    PYAMX_OP_OF_{_c_name(a)} = PYAMX_OP_{isa.BY_ACTION[a].mnemonic}" for a in isa.ACTIONS)
    # (mnemonic, map, pp, opcode) of each imm8 form: _imm_fields' map, pp and opcode
    imm_rows = [(insn.mnemonic, *(_imm_fields(insn.imm_encoding)[i] for i in (1, 2, 5)))
                for insn in isa.TABLE if insn.imm_encoding is not None]
    imm_xrows = " \\\n".join(f"    X({', '.join(str(v) for v in row)})" for row in imm_rows) or "    /* none */"
    return f"""/* Traits of every AMX instruction row of pyamx/table/isa.py, for C.
 *
 * {_GENERATED_NOTE}
 *
{xargs}
 * pyamx_op_traits[] holds the same fields by op id. A format of NONE: the
 * row has no such operand; an imm_prefix of NONE: no imm8 form. The feature
 * is the CPUID bit the row needs: CPUID.(leaf, subleaf) register
 * feature_reg (0 EAX, 1 EBX, 2 ECX, 3 EDX), bit feature_bit.
 * pyamx_op_names[] holds each op's mnemonic, pyamx_op_operands[] what each
 * instruction field holds, per encoding.
 * PYAMX_FOR_EACH_IMM_FORM(X) calls X(mnemonic, imm_map, imm_pp, imm_opcode)
 * once per row that has an imm8 form.
 */
#ifndef PYAMX_OP_TRAITS_H
#define PYAMX_OP_TRAITS_H

#include "pyamx_ops.h"

{enum("pyamx_op_kind", "PYAMX_KIND_", ("none",) + tuple(isa.KINDS_OF_ARITHMETIC))}
{enum("pyamx_format", "PYAMX_FMT_", ("none",) + tuple(f.name for f in isa.FORMAT_ROWS))}
{enum("pyamx_encoding_prefix", "PYAMX_PREFIX_", ("none",) + prefixes)}
{enum("pyamx_modrm_form", "PYAMX_FORM_", ("none",) + forms)}
#define PYAMX_FOR_EACH_OP(X) \\
{xrows}

#define PYAMX_FOR_EACH_IMM_FORM(X) \\
{imm_xrows}

struct pyamx_op_traits {{
{members}
}};

static const struct pyamx_op_traits pyamx_op_traits[] = {{
{table}
}};

{enum("pyamx_operand", "PYAMX_OPERAND_", ("none",) + tuple(dict.fromkeys(_OPERAND_SLOTS.values())))}
/* What each instruction field holds in one encoding; NONE: no operand, the
 * field must hold its all-zero value (vvvv: 1111b as encoded). */
struct pyamx_op_fields {{
    unsigned char reg;        /* enum pyamx_operand */
    unsigned char rm;         /* a register operand only in a ModRM.mod = 11 form */
    unsigned char vvvv;
    unsigned char imm8;
}};

/* [op][0]: the encoding; [op][1]: the imm8 form (all NONE where absent). */
static const struct pyamx_op_fields pyamx_op_operands[][2] = {{
{operands}
}};

/* What a config or memory row does (pyamx.table.isa.ACTIONS): code that executes these rows switches on
 * it, never on an op id. NONE for a row without an action. */
{enum("pyamx_op_action", "PYAMX_ACTION_", ("none",) + tuple(isa.ACTIONS))}
static const unsigned char pyamx_op_actions[{len(isa.TABLE) + 1}] = {{
{actions}
}};

/* The one row of each action, for code that must name it (a message, its CPUID feature). */
enum pyamx_op_of_action {{
{action_ops}
}};

/* Indexed by op id: the mnemonic, for messages. */
static const char *const pyamx_op_names[] = {{
    [PYAMX_OP_NONE] = "(none)",
{names}
}};

#endif
"""


# -- docs/isa.md's instruction table -----------------------------------------------------------------

ISA_MD = Path("docs") / "isa.md"
DOC_BEGIN = f"<!-- instruction table: generated from pyamx/table/isa.py; {COMMAND} regenerates it -->"
DOC_END = "<!-- end of the generated instruction table -->"
DOC_HEADER = ("| Instruction | Kind | Group | CPUID | Encoding | Emulator | Kernel | Trap case | Tests |\n"
              "|---|---|---|---|---|---|---|---|---|")


def load_doc_groups(root: Path = ROOT) -> ModuleType:
    """tests/isa_doc_groups.py: what the table links for each group (``GROUPS``)."""
    return _load_by_path("pyamx_isa_doc_groups_for_generate", root / DOC_GROUPS_PY)


def group_of(insn: Row) -> str:
    """The key of ``insn``'s kernels and tests in tests/isa_doc_groups.py's ``GROUPS``."""
    if insn.action is not None:
        return str(insn.action)
    if insn.is_row:
        return str(insn.kind)
    return f"{insn.kind}/{insn.group}"


def encoding_cell(insn: Row) -> str:
    """The encoding as the SDM writes it: prefix bytes, map, opcode, ModRM, operand form."""
    pp = {0: "NP", 1: "66", 2: "F3", 3: "F2"}
    enc = insn.encoding
    if insn.is_row:
        imm = insn.imm_encoding
        return (f"EVEX.512 {pp[enc.pp]} {enc.map_name} {enc.opcode:02X} /r, reg; "
                f"imm8: EVEX.512 {pp[imm.pp]} {imm.map_name} {imm.opcode:02X} /r ib")
    fields = {field for _, field in enc.roles}
    # ModRM.reg is an operand (/r), else a fixed digit (/0) for a memory form, else the whole byte is fixed
    # (TILERELEASE's C0)
    modrm = "/r" if "reg" in fields else ("/0" if enc.form != "reg" else "C0")
    return f"{pp[enc.pp]} {enc.map_name} {enc.opcode:02X} {modrm}, {enc.form}"


def _test_links(tests: Sequence[str]) -> str:
    return ", ".join(f"[{t}](../tests/{t.split('::')[0]})" for t in tests)


def doc_table_text(isa: ModuleType, groups: Dict[str, DocGroup]) -> str:
    """The whole table, header included, one line per row of ``isa.TABLE`` in table order."""
    used = {group_of(insn) for insn in isa.TABLE}
    missing, unused = sorted(used - set(groups)), sorted(set(groups) - used)
    if missing or unused:
        raise GenerateError(
            f"{ISA_MD.as_posix()}: {DOC_GROUPS_PY.as_posix()}'s GROUPS "
            + (f"has no entry for {', '.join(missing)} (add its emulator, kernel, trap case and tests)"
               if missing else f"has entries no row has: {', '.join(unused)} (remove them)"))
    lines = [DOC_HEADER]
    for insn in isa.TABLE:
        emulator, kernel, trap, tests = groups[group_of(insn)]
        cells = (f"`{insn.mnemonic}`", insn.kind, insn.group or "-", insn.cpuid, encoding_cell(insn),
                 emulator.format(name=insn.name), kernel, trap, _test_links(tests))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def isa_md_text(isa: ModuleType, current: str, groups: Dict[str, DocGroup]) -> str:
    """docs/isa.md (``current``) with the lines between its markers replaced by the table."""
    begin = re.search(r"^<!-- instruction table: generated from .*-->$", current, re.M)
    if begin is None or DOC_END not in current:
        raise GenerateError(f"{ISA_MD.as_posix()} lacks the table's markers ({DOC_BEGIN} ... {DOC_END})")
    end = current.index(DOC_END)
    return current[:begin.start()] + DOC_BEGIN + "\n" + doc_table_text(isa, groups) + "\n" + current[end:]


# -- the types of the functions and methods the table makes at import ----------------------------------


_SIG = "c: ArrayInput, a: ArrayInput, b: ArrayInput, *"


def _py_header(what: str, imports: str) -> str:
    # A type checker cannot see functions made at import (isa.export_functions), so it reads these
    # declarations instead; generating them keeps the instruction names out of hand-written code.
    return f'''"""{what}

{_GENERATED_NOTE}
Imported under TYPE_CHECKING only: at run time the table makes these names.
"""

from __future__ import annotations

{imports}
'''


#: a config or memory method's parameter (pyamx.table.isa.STATE_IMPLEMENTATIONS) as the stub declares it:
#: a config is a TileConfig or any 64-byte buffer, a memory operand any buffer, which typing cannot spell
_STATE_PARAM_TYPES = {"cfg": "cfg: Any", "tmm": "tmm: int",
                      "buf": "buf: Any", "stride": "stride: int", "offset": "offset: int = 0"}
#: the action whose method returns something
_STATE_RETURNS = {"store-config": "bytes"}


def _dot_functions(isa: ModuleType, keywords: Callable[[Row], str]) -> str:
    """``__all__`` and one function per dot-product row, ``keywords(row)`` before its ``engine=``."""
    names = "__all__ = [\n" + "".join(f"    \"{n}\",\n" for n in isa.DOT_NAMES) + "]\n"
    return names + "".join(f"\n\ndef {insn.name}({_SIG},{keywords(insn)} engine: str | None = None) -> AMXResult: ...\n"
                           for insn in isa.DOTS)


def types_text(isa: ModuleType) -> str:
    """pyamx/_dot_types.py: the public one-instruction functions and the tile machines' per-instruction methods."""
    out = [_py_header("Types of pyamx's per-instruction functions and tile machine methods.",
                      "from typing import Any\n\nimport numpy as np\nimport numpy.typing as npt\n\n"
                      "from ._result import AMXResult\nfrom ._types import ArrayInput\n")]
    out.append(_dot_functions(isa, lambda insn: " backend: str | None = None,"))
    out.append("\n\nclass TileMachine:\n    \"\"\"The methods isa.add_state_methods, add_dot_methods and add_row_methods put on both tile machines\n    (named as the machines are, so a type checker's message names the machine).\"\"\"\n")
    for insn in isa.STATE_OPS:
        _, params = isa.STATE_IMPLEMENTATIONS[insn.action]
        typed = "".join(f", {_STATE_PARAM_TYPES[p]}" for p in params)
        out.append(f"\n    def {insn.name}(self{typed}) -> {_STATE_RETURNS.get(insn.action, 'None')}: ...\n")
    for insn in isa.DOTS:
        out.append(f"\n    def {insn.name}(self, dst: int, src1: int, src2: int) -> None: ...\n")
    for insn in isa.ROWS:
        out.append(f"\n    def {insn.name}(self, tmm: int, row: int, *, imm: bool = False) -> npt.NDArray[np.uint32]: ...\n")
    return "".join(out)


def emulator_types_text(isa: ModuleType) -> str:
    """pyamx/emulator/_dot_types.py: the emulator's array-level functions (``numerics=`` on float rows)."""
    out = [_py_header("Types of pyamx.emulator's array-level per-instruction functions.",
                      "from .._result import AMXResult\nfrom .._types import ArrayInput\n"
                      "from ..table.numerics import Numerics\n")]
    out.append(_dot_functions(isa, lambda insn: " numerics: str | Numerics = \"sdm\"," if insn.is_float else ""))
    return "".join(out)


# -- the files --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What the files are made from: the table, and for docs/isa.md its groups' links and its own text."""

    isa: ModuleType
    root: Path

    def doc_groups(self) -> Dict[str, DocGroup]:
        groups: Dict[str, DocGroup] = load_doc_groups(self.root).GROUPS
        return groups

    def current(self, rel: Path) -> str:
        return (self.root / rel).read_text(encoding="utf-8")


#: every generated file (relative to the checkout) -> how it is made; a new generated file is one entry
FILES: Dict[Path, Callable[[Inputs], str]] = {
    Path("csrc") / "pyamx_ops.h": lambda i: ops_header_text(i.isa),
    Path("csrc") / "pyamx_op_traits.h": lambda i: traits_header_text(i.isa),
    # what type checkers see of the functions and methods isa.py makes at import (read under TYPE_CHECKING)
    Path("pyamx") / "_dot_types.py": lambda i: types_text(i.isa),
    Path("pyamx") / "emulator" / "_dot_types.py": lambda i: emulator_types_text(i.isa),
    ISA_MD: lambda i: isa_md_text(i.isa, i.current(ISA_MD), i.doc_groups()),
}
#: the files a build compiles or ships as code: all but the docs table, whose inputs (docs/isa.md,
#: tests/isa_doc_groups.py) a build neither needs nor may have; the tests and this command keep it
BUILD_FILES = tuple(rel for rel in FILES if rel != ISA_MD)


def expected(root: Path = ROOT, isa: Optional[ModuleType] = None,
             only: Optional[Sequence[Path]] = None) -> Dict[Path, str]:
    """Every generated file (relative path; ``only`` these) -> the text the table makes of it."""
    inputs = Inputs(isa if isa is not None else load_isa(root), Path(root))
    return {rel: make(inputs) for rel, make in FILES.items() if only is None or rel in only}


def _differs(path: Path, text: str) -> bool:
    # bytes, not text: a file whose line ends or encoding were changed by hand is stale too
    return not path.is_file() or path.read_bytes() != text.encode("utf-8")


def stale(root: Path = ROOT) -> List[Path]:
    """The generated files whose committed bytes are not what the table makes."""
    return [rel for rel, text in expected(root).items() if _differs(Path(root) / rel, text)]


def write(root: Path = ROOT, only: Optional[Sequence[Path]] = None) -> List[Path]:
    """Write the generated files (``only`` these) that differ (a file left as is keeps its time);
    the paths written."""
    written = []
    for rel, text in expected(root, only=only).items():
        path = Path(root) / rel
        if _differs(path, text):
            path.write_bytes(text.encode("utf-8"))
            written.append(rel)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write (or check) every file made from "
                                     "pyamx/table/isa.py.")
    parser.add_argument("--check", action="store_true", help="list the files that differ and exit 1; write nothing")
    args = parser.parse_args(argv)
    if not (ROOT / "csrc").is_dir():
        print(f"{COMMAND}: {ROOT} is not a pyamx source checkout (no csrc/)", file=sys.stderr)
        return 2
    try:
        if args.check:
            found = stale()
            for rel in found:
                print(f"{rel.as_posix()} is not what pyamx/table/isa.py makes: run {COMMAND}", file=sys.stderr)
            return 1 if found else 0
        for rel in write():
            print(f"regenerated {rel.as_posix()}")
    except GenerateError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
