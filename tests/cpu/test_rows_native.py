"""The native row instructions (AMX-AVX512) and AMX-MOVRS loads: refused before any instruction
runs where the CPU lacks the feature, and their raw bytes in the built module are the encodings
clang assembles for them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pyamx.cpu import detect, native
from pyamx.table import isa
from pyamx.errors import NativeUnavailableError
from pyamx.table.tilecfg import TileConfig
from tile_encodings import evex_row_form

# clang 22.1.8 (ziglang 0.17.1), `clang -c` of the AT&T lines, bytes from objdump -s
CLANG = {
    "tcvtrowd2ps %eax, %tmm0, %zmm0": "62f27e484ac0",
    "tcvtrowd2ps %eax, %tmm7, %zmm0": "62f27e484ac7",
    "tcvtrowps2bf16h %eax, %tmm3, %zmm0": "62f27f486dc3",
    "tcvtrowps2bf16l %eax, %tmm3, %zmm0": "62f27e486dc3",
    "tcvtrowps2phh %eax, %tmm3, %zmm0": "62f27c486dc3",
    "tcvtrowps2phl %eax, %tmm3, %zmm0": "62f27d486dc3",
    "tilemovrow %eax, %tmm3, %zmm0": "62f27d484ac3",
    "tcvtrowd2ps $0x7b, %tmm5, %zmm0": "62f37e4807c57b",
    "tcvtrowps2phl $0x7b, %tmm5, %zmm0": "62f37f4877c57b",
    "tileloaddrs (%rax,%rcx,1), %tmm0": "c4e27b4a0408",
    "tileloaddrs (%rax,%rcx,1), %tmm7": "c4e27b4a3c08",
    "tileloaddrst1 (%rax,%rcx,1), %tmm3": "c4e2794a1c08",
    "vmovdqu32 %zmm0, (%rdx)": "62f17e487f02",
}


def _evex(enc: isa.Encoding, tmm: int, imm=None) -> str:
    """Hex of a row form from the table's fields: zmm0, tmm, eax (or no register: vvvv 1111 either way)."""
    return evex_row_form(enc, 0, tmm, 0, imm).hex()


def _mnemonic_of(line: str) -> str:
    return line.split()[0].upper()


def test_the_tables_row_encodings_are_clangs():
    for line, code in CLANG.items():
        mnemonic = _mnemonic_of(line)
        if mnemonic == "VMOVDQU32":
            continue
        insn = isa.get(mnemonic)
        tmm = int(re.search(r"%tmm(\d)", line).group(1))
        if insn.is_row:
            imm = re.match(r"\w+ \$(\w+)", line)
            enc = insn.imm_encoding if imm else insn.encoding
            assert _evex(enc, tmm, int(imm.group(1), 16) if imm else None) == code, line
        else:
            assert (insn.encoding.vex3() + bytes((insn.encoding.opcode, 0x04 | tmm << 3, 0x08))).hex() == code, line


def test_clang_assembles_what_the_test_lists(tmp_path):
    """Re-derive CLANG with a live clang where the ziglang package is installed (optional)."""
    ziglang = pytest.importorskip("ziglang")
    del ziglang
    if shutil.which("objdump") is None:
        pytest.skip("no objdump")
    import sys

    for line, code in CLANG.items():
        src = tmp_path / "one.s"
        src.write_text(line + "\n")
        obj = tmp_path / "one.o"
        done = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu", "-c", str(src),
                               "-o", str(obj)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        dump = subprocess.run(["objdump", "-s", "-j", ".text", str(obj)], capture_output=True, text=True).stdout
        hexes = "".join("".join(ln.split()[1:5]) for ln in dump.splitlines() if re.match(r"^ [0-9a-f]{4} ", ln))
        assert hexes.startswith(code), (line, hexes)


def _module_path() -> Path:
    try:
        from pyamx.cpu import _nativelib

        _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"the C extension is not built: {exc}")
    import pyamx

    found = sorted(Path(pyamx.__file__).parent.glob("_native*.so"))
    if not found:
        pytest.skip("no built pyamx._native shared object")
    return found[0]


def _function_bytes(so: Path, function: str) -> str:
    if shutil.which("objdump") is None:
        pytest.skip("no objdump")
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)], capture_output=True, text=True).stdout
    if f"<{function}>:" not in out:
        pytest.skip(f"{function} is not in this build (no AMX kernels, or inlined away)")
    raw = subprocess.run(["objdump", "-d", str(so)], capture_output=True, text=True).stdout
    body = raw.split(f"<{function}>:", 1)[1].split("\n\n", 1)[0]
    return "".join("".join(re.findall(r"\b[0-9a-f]{2}\b", ln.split("\t")[1])) for ln in body.splitlines()
                   if ln.count("\t") >= 1 and ":" in ln.split("\t")[0])


@pytest.mark.parametrize("insn", isa.ROWS, ids=lambda i: i.mnemonic)
def test_the_built_row_kernel_issues_the_rows_encoding_on_every_tile_then_stores_zmm0(insn):
    code = _function_bytes(_module_path(), f"row_{insn.mnemonic}")
    for tmm in range(8):
        assert _evex(insn.encoding, tmm) + CLANG["vmovdqu32 %zmm0, (%rdx)"] in code, (insn.mnemonic, tmm)


@pytest.mark.parametrize("insn", isa.ROWS, ids=lambda i: i.mnemonic)
def test_the_built_imm8_kernel_issues_the_imm_encoding_for_every_tile_and_row_below_16(insn):
    code = _function_bytes(_module_path(), f"rowi_{insn.mnemonic}")
    store = CLANG["vmovdqu32 %zmm0, (%rdx)"]
    for tmm in range(8):
        for imm in range(256):
            present = _evex(insn.imm_encoding, tmm, imm) + store in code
            assert present == (imm & 0x3F < 16), (insn.mnemonic, tmm, hex(imm))


def test_the_built_movrs_loads_issue_the_encodings_on_every_tile():
    code = _function_bytes(_module_path(), "load_tile_movrs")
    for mnemonic in ("TILELOADDRS", "TILELOADDRST1"):
        enc = isa.get(mnemonic).encoding
        for tmm in range(8):
            assert (enc.vex3() + bytes((enc.opcode, 0x04 | tmm << 3, 0x08))).hex() in code, (mnemonic, tmm)


def _lacks(feature: str) -> bool:
    return not detect.report().cpu.get(isa.FEATURES[feature].key)


def _machine():
    usable, reason = native.available()
    if not usable:
        pytest.skip(f"native backend unavailable: {reason}")
    return native.NativeMachine()


@pytest.mark.parametrize("name", [*isa.ROW_NAMES, "tileloaddrs", "tileloaddrst1"])
def test_the_native_machine_refuses_an_extension_the_cpu_lacks_before_anything_runs(name):
    insn = isa.get(name)
    rep = native.report()
    if not _lacks(insn.feature.name) and rep.mode == "silicon":
        pytest.skip(f"this CPU has {insn.feature.name}")
    if insn.feature.name in rep.complemented or rep.mode == "trap":
        pytest.skip(f"the {rep.mode_for(insn)} mode emulates {insn.feature.name} here")
    m = _machine()
    m.ldtilecfg(TileConfig.make({0: (4, 64), 1: (4, 64)}, start_row=1))
    before = m.sttilecfg()
    fn = getattr(m, name)
    call = (lambda: fn(0, 2)) if insn.is_row else (lambda: fn(0, np.zeros(4096, np.uint8), 64))
    f = insn.feature
    try:
        with pytest.raises(NativeUnavailableError,
                           match=rf"{f.name}.*CPUID\.\({f.leaf:#x},{f.subleaf}\):EAX\[{f.bit}\]"):
            call()
        assert m.sttilecfg() == before  # start_row 1 is still pending: no tile instruction ran
    finally:
        m.tilerelease()  # a pending start_row would stop the next machine of this thread


def test_the_c_layer_refuses_them_too_without_the_cpuid_bit():
    """Python is not the only guard: pyamx_tilerow and the MOVRS hints of pyamx_load_tile ask CPUID."""
    from pyamx.cpu import _nativelib

    ffi, lib = _nativelib.load()
    # The C check reads each row's CPUID feature from the generated traits; detection decodes the
    # same registers in Python: they must agree on every row.
    has = {}
    for insn in isa.TABLE:
        c_says = bool(lib.pyamx_cpu_has_op_feature(insn.op_id))
        assert c_says == detect.report().cpu.get(insn.feature.key, c_says), insn.mnemonic
        has[insn.feature.key] = c_says
    assert not lib.pyamx_cpu_has_op_feature(0) and not lib.pyamx_cpu_has_op_feature(len(isa.TABLE) + 1)
    has_avx512, has_movrs = has["amx_avx512"], has["amx_movrs"]
    if has_avx512 or has_movrs:
        pytest.skip("this CPU has AMX-AVX512 or AMX-MOVRS")
    if native.report().complemented or native.report().mode == "trap":
        pytest.skip("the trap or complement mode emulates them here")
    ready = native.available()[0]
    if ready:
        _machine()  # a machine's first use readies the C side in this thread
    allowed = {lib.PYAMX_E_NO_KERNEL} if ready else {lib.PYAMX_E_NO_KERNEL, lib.PYAMX_E_NOT_READY}
    out = np.zeros(16, np.uint32)
    buf = np.zeros(4096, np.uint8)
    for insn in isa.ROWS:
        rc = lib.pyamx_tilerow(insn.op_id, 0, 0, ffi.cast("uint32_t *", out.ctypes.data))
        rc_imm = lib.pyamx_tilerow_imm(insn.op_id, 0, 0, ffi.cast("uint32_t *", out.ctypes.data))
        assert rc in allowed and rc_imm in allowed, (insn.mnemonic, rc, rc_imm)
    for hint in (2, 3):
        rc = lib.pyamx_load_tile(0, ffi.cast("uint8_t *", buf.ctypes.data), buf.size, 0, 64, hint)
        assert rc in allowed, (hint, rc)
