"""pyamx/table/isa.py, the one instruction table: complete, consistent with C, and documented row by row."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

import pyamx
from pyamx import emulator
from pyamx.table import isa
from pyamx.cpu import native

ROOT = Path(__file__).resolve().parents[2]
ISA_MD = ROOT / "docs" / "isa.md"


def _lib():
    try:
        from pyamx.cpu import _nativelib

        return _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"the C extension is not built: {exc}")


def _trap_lib():
    try:
        from pyamx import _trap
    except ImportError as exc:
        pytest.skip(f"the trap module is not built (x86-64 Linux only): {exc}")
    return _trap.ffi, _trap.lib


def test_table_has_every_instruction_once_and_each_row_is_of_one_sort():
    # No literal count: adding a row must not mean editing this test (docs/isa.md's recipe).
    names = [i.mnemonic for i in isa.TABLE]
    assert len(names) == len(set(names)) and names
    for insn in isa.TABLE:
        sorts = (insn.is_dot, insn.is_row, insn.action is not None)
        assert sum(sorts) == 1 and insn.kind in isa.KINDS_OF_ARITHMETIC, insn.mnemonic


def test_the_kernel_group_has_one_name_everywhere():
    """``group`` (the row field, ``isa.GROUPS``): the older word is gone from the table, the native
    backend, the backend rule, matmul's calls and ``pyamx bench``, with no alias left to drift."""
    import argparse
    import inspect

    from pyamx import _backend, _matmul
    from pyamx.tools import bench

    assert not any(hasattr(isa, name) for name in ("FAMILIES", "family_of"))
    assert not hasattr(isa.get("tdpbf16ps"), "family") and isa.get("tdpbf16ps").group == "bf16"
    assert list(inspect.signature(native.available).parameters) == ["group"]
    assert not hasattr(native, "FAMILY_FEATURE") and set(native.GROUP_FEATURE) == set(isa.GROUPS)
    for rule in (_backend.choose_backend, _backend.backend_rule, _backend.native_status):
        assert "group" in inspect.signature(rule).parameters, rule
    assert set(_matmul.KINDS) == set(isa.GROUPS)
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert parser.parse_args(["--groups", "int8"]).groups == "int8"
    with pytest.raises(ValueError, match="unknown kernel group"):
        native.available("no-such-group")


def test_every_c_op_of_the_header_has_a_row_and_every_row_an_id():
    ffi, lib = _lib()
    header = (ROOT / "csrc" / "pyamx_ops.h").read_text()  # the one numbering, included by both modules
    enum = re.search(r"enum pyamx_op \{(.*?)\};", header, re.S).group(1)
    in_c = {m for m in re.findall(r"PYAMX_OP_(\w+)\s*=", enum) if m != "NONE"}
    assert in_c == {i.mnemonic for i in isa.TABLE}
    ids = [i.op_id for i in isa.TABLE]
    assert len(set(ids)) == len(ids) and lib.PYAMX_OP_NONE not in ids
    for insn in isa.TABLE:
        assert isa.by_op_id(insn.op_id) is insn


# The trap mode's decoder and op names (csrc/trap) learn the AMX-AVX512 and AMX-MOVRS rows on
# their own branch; until that merge its tests take only the rows it knows.
TRAP_PENDING = {"AMX-AVX512", "AMX-MOVRS"}
TRAP_ROWS = tuple(i for i in isa.TABLE if i.feature.name not in TRAP_PENDING)


def test_c_names_the_op_ids_as_the_table_does():
    ffi, lib = _trap_lib()
    for insn in TRAP_ROWS:
        assert ffi.string(lib.pyamx_trap_op_name(insn.op_id)).decode() == insn.mnemonic


def test_encodings_decode_to_the_rows_op_in_the_trap_decoder():
    """The VEX bytes built from each row (map, pp, opcode, ModRM form) are what the trap decoder reads."""
    ffi, lib = _trap_lib()
    out = ffi.new("struct pyamx_trap_insn *")
    for insn in TRAP_ROWS:
        enc = insn.encoding
        if enc.prefix == "EVEX":
            # AMX-AVX512 row ops: zmm1 (reg) <- tmm2 (rm), row in edx (vvvv) or an imm8 in the imm form
            for e, vvvv, tail in ((enc, ~2 & 15, b""), (insn.imm_encoding, 0b1111, b"\x05")):
                code = _evex(e, vvvv) + bytes((e.opcode, 0xC0 | (1 << 3) | 2)) + tail
                buf = ffi.new("uint8_t[]", code + b"\x90" * 8)
                rc = lib.pyamx_trap_decode(buf, len(code) + 8, ffi.NULL, 0, out)
                assert rc == len(code) and out.op == insn.op_id, (insn.mnemonic, code.hex(), rc, out.op)
            continue
        if enc.form == "reg":
            # dot products: tmm1 (reg) <- tmm2 (rm) . tmm3 (vvvv); TILEZERO tmm1 (reg); TILERELEASE: ModRM C0
            modrm = 0xC0 | (1 << 3) | 2 if insn.is_dot else {"memory": 0xC0 | (1 << 3)}.get(insn.kind, 0xC0)
            code = enc.vex3(vvvv=(~3 & 15) if insn.is_dot else 0b1111) + bytes((enc.opcode, modrm))
        elif enc.form == "mem":
            code = enc.vex3() + bytes((enc.opcode, 0x00))  # (%rax)
        else:
            code = enc.vex3() + bytes((enc.opcode, 0x0C, 0x08))  # (%rax,%rcx,1): SIB with an index
        buf = ffi.new("uint8_t[]", code + b"\x90" * 8)
        rc = lib.pyamx_trap_decode(buf, len(code) + 8, ffi.NULL, 0, out)
        assert rc == len(code), (insn.mnemonic, code.hex(), rc)
        assert out.op == insn.op_id, (insn.mnemonic, code.hex(), out.op)


def _evex(enc, vvvv: int) -> bytes:
    """62 P0 P1 P2 of a register form: R, X, B, R', V' clear (stored inverted), no mask, ``vvvv`` as stored."""
    return bytes((0x62, 0xF0 | enc.map, (enc.w << 7) | (vvvv << 3) | 0x04 | enc.pp, (enc.l << 5) | 0x08))


def _c_code(path: Path) -> str:
    """A C file's code, comments left out."""
    return re.sub(r"//[^\n]*", " ", re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S))


# The compiled engine and the native kernels read every dot product's traits (signedness, lanes,
# formats, encoding) and register their kernels from csrc/pyamx_op_traits.h: a dot row added to
# the table needs no edit in them, and none of them picks a kernel by comparing op ids.
TRAITS_READERS = ("engine.c", "engine.h", "engine_internal.h", "engine_portable.c", "engine_scalar.c",
                  "engine_x86.c", "kernels.c", "matmul_amx.c")


@pytest.mark.parametrize("name", TRAITS_READERS)
def test_c_backends_name_no_dot_product_but_read_the_traits(name):
    code = _c_code(ROOT / "csrc" / name)
    named = [i.mnemonic for i in isa.DOTS if re.search(rf"(?i)(?<![a-z0-9]){i.mnemonic}(?![a-z0-9])", code)]
    assert named == [], f"csrc/{name} names {named}"
    assert "_tile_dp" not in code, f"csrc/{name} spells a dot product by its intrinsic, not the row's encoding"


def test_every_layer_has_exactly_the_tables_dot_products():
    for layer in (pyamx, emulator, native, pyamx.TileMachine, native.NativeMachine):
        for name in isa.DOT_NAMES:
            assert callable(getattr(layer, name)), (layer, name)
    from pyamx.tools import vectors

    assert tuple(vectors.INSTRUCTIONS) == isa.DOT_NAMES
    assert set(emulator.instructions.INT8_SIGNEDNESS) == {i.name for i in isa.DOTS if i.group == "int8"}


def test_generated_functions_keep_their_names_signatures_and_docstrings():
    import inspect

    for name in isa.DOT_NAMES:
        public = getattr(pyamx, name)
        assert public.__name__ == name and name.upper() in public.__doc__
        assert list(inspect.signature(public).parameters) == ["c", "a", "b", "backend", "engine"]
        emu = getattr(emulator, name)
        expected = ["c", "a", "b", "numerics", "engine"] if isa.get(name).is_float else ["c", "a", "b", "engine"]
        assert list(inspect.signature(emu).parameters) == expected and name.upper() in emu.__doc__
        for machine in (pyamx.TileMachine, native.NativeMachine):
            method = getattr(machine, name)
            assert list(inspect.signature(method).parameters) == ["self", "dst", "src1", "src2"]
            assert method.__doc__.startswith(name.upper())


def test_unknown_instruction_names_are_refused_with_the_known_ones():
    with pytest.raises(KeyError, match="tdpbf16ps"):
        isa.get("tdpbf4ps")


def test_c_constants_are_read_from_lib():
    from pyamx.cpu import detect

    ffi, lib = _lib()
    assert detect.E_ARG == lib.PYAMX_E_ARG and detect.E_NOT_READY == lib.PYAMX_E_NOT_READY
    assert dict(detect.KERNEL_BITS) == {"bf16": lib.PYAMX_KERNEL_BF16, "int8": lib.PYAMX_KERNEL_INT8,
                                        "fp16": lib.PYAMX_KERNEL_FP16, "fp8": lib.PYAMX_KERNEL_FP8,
                                        "complex": lib.PYAMX_KERNEL_COMPLEX}


def test_dtypes_of_a_row_run_its_public_function():
    rng = np.random.default_rng(0)
    for insn in isa.DOTS:
        c = np.zeros((2, 3), insn.c_dtype)
        a = rng.integers(0, 4, (2, 2 * insn.lanes)).astype(insn.call_dtype)
        b = rng.integers(0, 4, (2, 3 * insn.lanes)).astype(insn.call_dtype)
        out = getattr(pyamx, insn.name)(c.view(np.float32) if insn.is_float else c, a, b, backend="emulator")
        assert out.shape == (2, 3) and out.dtype == (np.float32 if insn.is_float else np.int32)


# -- docs/isa.md: one row per instruction, every reference resolvable ------------------------


def _doc_rows():
    rows = {}
    for line in ISA_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and re.fullmatch(r"`[A-Z0-9]+`", cells[0]):
            rows[cells[0].strip("`")] = cells
    return rows


def _ticks(cell):
    return re.findall(r"`([^`]+)`", cell)


def _links(cell):
    return re.findall(r"\]\(([^)]+)\)", cell)


def _c_defines(path: Path, function: str) -> bool:
    # a definition starts in column 0 (type, then the name); calls are indented
    return re.search(rf"^\S[^\n=;]*\b{re.escape(function)}\(", path.read_text(), re.M) is not None


def test_isa_md_has_one_row_per_table_row_with_its_encoding():
    rows = _doc_rows()
    assert set(rows) == {i.mnemonic for i in isa.TABLE}, set(rows) ^ {i.mnemonic for i in isa.TABLE}
    pp = {isa.PP_NP: "NP", isa.PP_66: "66", isa.PP_F3: "F3", isa.PP_F2: "F2"}
    for insn in isa.TABLE:
        cells = rows[insn.mnemonic]
        assert cells[1] == insn.kind and cells[2] in (insn.group or "-") and cells[3] == insn.cpuid, cells
        enc = insn.encoding
        if insn.is_row:
            imm = insn.imm_encoding
            assert cells[4] == (f"EVEX.512 {pp[enc.pp]} {enc.map_name} {enc.opcode:02X} /r, reg; imm8: EVEX.512 "
                                f"{pp[imm.pp]} {imm.map_name} {imm.opcode:02X} /r ib"), cells[4]
            assert (enc.prefix, enc.l, imm.prefix, imm.l, imm.map) == ("EVEX", 2, "EVEX", 2, 3), insn.mnemonic
        else:
            assert enc.prefix == "VEX" and cells[4].startswith(f"{pp[enc.pp]} {enc.map_name} {enc.opcode:02X}"), cells[4]


def test_isa_md_emulator_references_import():
    for mnemonic, cells in _doc_rows().items():
        for dotted in _ticks(cells[5]):
            module, _, attr = dotted.rpartition(".")
            try:
                obj = importlib.import_module(module)
            except ImportError:  # Class.method
                module, _, cls = module.rpartition(".")
                obj = getattr(importlib.import_module(module), cls)
            assert callable(getattr(obj, attr)), (mnemonic, dotted)


def test_isa_md_kernel_and_trap_functions_exist_in_the_c_sources():
    trap_sources = sorted((ROOT / "csrc").glob("trap*.c")) + sorted((ROOT / "csrc").glob("trap/*/*.c"))
    assert trap_sources
    for mnemonic, cells in _doc_rows().items():
        (kernel_file,) = _links(cells[6])
        for function in _ticks(cells[6]):
            assert _c_defines(ROOT / "docs" / kernel_file, function), (mnemonic, kernel_file, function)
        for function in _ticks(cells[7]):
            assert any(_c_defines(p, function) for p in trap_sources), (mnemonic, function)


def test_isa_md_tests_exist():
    for mnemonic, cells in _doc_rows().items():
        refs = re.findall(r"\[([\w./]+)::(\w+)\]\(([^)]+)\)", cells[8])
        assert refs, mnemonic
        for file_name, test, link in refs:
            path = (ROOT / "docs" / link).resolve()
            # named by its path under tests/ (tests/isa_doc_groups.py), linked from docs/
            assert path == (ROOT / "tests" / file_name).resolve() and path.exists(), (mnemonic, link)
            assert re.search(rf"^def {test}\(", path.read_text(), re.M), (mnemonic, file_name, test)


def test_without_the_extension_ids_and_constants_are_none_and_the_emulator_still_runs(monkeypatch):
    from pyamx.cpu import detect

    monkeypatch.setattr(isa, "_LIB", [None])  # as on an install without a C compiler
    assert all(i.op_id is None for i in isa.TABLE) and isa.by_op_id(8) is None
    assert isa.c_constant("PYAMX_E_ARG") is None and detect.E_ARG is None
    c, a = np.zeros((1, 1), np.float32), np.full((1, 2), 0x3F80, np.uint16)
    assert pyamx.tdpbf16ps(c, a, a, backend="emulator")[0, 0] == 2.0
