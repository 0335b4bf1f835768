"""AMX-COMPLEX (TCMMIMFP16PS, TCMMRLFP16PS) against the independent reference (tests/reference.py).

Every path -- the public function, the emulator's function, the tile machine, each engine --
is compared as uint32 bits with reference.tcmm, which computes the SDM pseudo-code directly
with exact rationals (not through the TDPFP16PS identity the code uses).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pyamx
from pyamx import emulator
from pyamx.table import isa
from pyamx.emulator import engine as _engine
from pyamx.emulator import Numerics
from pyamx.table.tilecfg import TileConfig
from mxcsr import DAZ, FTZ, RZ, caller_mxcsr
from tile_encodings import vex_register_form

import reference

COMPLEX = tuple(insn.name for insn in isa.DOTS if insn.kind == "dot-complex")
IMAGINARY = {"tcmmimfp16ps": True, "tcmmrlfp16ps": False}
ENGINES = ["numpy"] + [name for name, ok, _ in _engine.available_engines() if ok and name != "numpy"]

# fp16 halves that break things: zeros of both signs, denormals, max, infinities, NaNs with payloads
HALVES = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                   0x7C01, 0x7E05, 0xFE00, 0xFD00, 0x3C00, 0xBC00, 0x6C00, 0xEC00, 0x1400, 0x3555], np.uint16)
C_SPECIALS = np.array([0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x7F800000, 0xFF800000,
                       0x7FC00005, 0xFFA00001, 0x3F800000, 0x4B800000, 0x7F7FFFFF], np.uint32)


def _words(pairs: np.ndarray) -> np.ndarray:
    """(R, 2C) fp16 bits (re, im interleaved) -> (R, C) complex words (im << 16 | re)."""
    p = pairs.astype(np.uint32)
    return p[:, 0::2] | (p[:, 1::2] << 16)


def _want(name, c, a, b, **options):
    return np.array(reference.tcmm(IMAGINARY[name], c, _words(a), _words(b), **options), dtype=np.uint32)


def _operands(rng, m, k, n, cls):
    if cls == "random":
        a = rng.standard_normal((m, 2 * k)).astype(np.float16).view(np.uint16)
        b = rng.standard_normal((k, 2 * n)).astype(np.float16).view(np.uint16)
        c = rng.standard_normal((m, n)).astype(np.float32).view(np.uint32)
    elif cls == "bits":  # every fp16 code is possible
        a = rng.integers(0, 2**16, (m, 2 * k), dtype=np.uint16)
        b = rng.integers(0, 2**16, (k, 2 * n), dtype=np.uint16)
        c = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
    else:  # adversarial: specials in both halves and in C
        a = rng.choice(HALVES, (m, 2 * k))
        b = rng.choice(HALVES, (k, 2 * n))
        c = rng.choice(C_SPECIALS, (m, n))
    return c, a, b


SHAPES = [(1, 1, 1), (2, 3, 4), (3, 16, 2), (16, 2, 3)]


@pytest.mark.parametrize("cls", ["random", "bits", "adversarial"])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", COMPLEX)
def test_every_engine_matches_the_reference(name, engine, cls):
    rng = np.random.default_rng(hash((name, cls)) % 2**32)
    for m, k, n in SHAPES:
        c, a, b = _operands(rng, m, k, n, cls)
        got = getattr(pyamx, name)(c.view(np.float32), a, b, backend="emulator", engine=engine)
        assert got.backend == "emulator" and got.engine == engine
        np.testing.assert_array_equal(np.asarray(got).view(np.uint32), _want(name, c, a, b), err_msg=f"{m}x{k}x{n}")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", COMPLEX)
def test_the_tile_machine_matches_the_reference(name, engine):
    rng = np.random.default_rng(7)
    m, k, n = 5, 6, 7
    c, a, b = _operands(rng, m, k, n, "adversarial")
    tm = emulator.TileMachine(engine=engine)
    tm.ldtilecfg(TileConfig.make({0: (m, 4 * n), 1: (m, 4 * k), 2: (k, 4 * n)}).to_bytes())
    for tmm, x in ((0, c), (1, a), (2, b)):
        tm.tileloadd(tmm, np.ascontiguousarray(x).view(np.uint8).tobytes(), x.shape[1] * x.itemsize)
    getattr(tm, name)(0, 1, 2)
    out = tm.tile(0)[:m, : 4 * n].copy().view(np.uint32)
    np.testing.assert_array_equal(out, _want(name, c, a, b))


STRUCTURES = ("sdm", "straight", "fused_pair", "wide")


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("name", COMPLEX)
def test_every_numerics_option_matches_the_reference(name, structure):
    rng = np.random.default_rng(11)
    for options in (dict(), dict(dest_daz=False), dict(tininess="before"), dict(nan="default"), dict(nan="canonical")):
        for cls in ("adversarial", "bits"):
            c, a, b = _operands(rng, 3, 4, 3, cls)
            numerics = Numerics(structure=structure, **options)
            got = getattr(emulator, name)(c, a, b, numerics=numerics, engine="numpy")
            want = _want(name, c, a, b, structure=structure, **options)
            np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want, err_msg=f"{options} {cls}")


def _swap(a):
    return np.ascontiguousarray(a.reshape(a.shape[0], -1, 2)[:, :, ::-1]).reshape(a.shape)


def _negate_imaginary(a):
    out = a.copy()
    out[:, 1::2] ^= np.uint16(0x8000)
    return out


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("name", COMPLEX)
def test_the_tdpfp16ps_identity_holds_except_where_a_nan_accumulator_meets_a_nan(name, structure):
    """docs/semantics.md section 8: TCMMIM(C, A, B) = TDPFP16PS(C, swap(A), B), TCMMRL(C, A, B) =
    TDPFP16PS(C, A with bit 31 of each dword flipped, B), in the reference itself (two
    independent readings), for every option; under the x86 NaN rule only without NaN operands
    in A and B (the complex rows put the accumulator's NaN first)."""
    rng = np.random.default_rng(3)
    transform = _swap if IMAGINARY[name] else _negate_imaginary
    for nan in ("x86", "default", "canonical"):
        for cls in ("random", "adversarial"):
            c, a, b = _operands(rng, 2, 5, 2, cls)
            if nan == "x86":  # no NaN operand in A and B: the NaN priority cannot matter
                a = np.where((a & 0x7FFF) > 0x7C00, np.uint16(0x3C00), a)
                b = np.where((b & 0x7FFF) > 0x7C00, np.uint16(0x3C00), b)
            want = _want(name, c, a, b, structure=structure, nan=nan)
            fp16 = np.array(reference.tdpfp16ps(c, transform(a), b), dtype=np.uint32) if structure == "sdm" else None
            got = emulator.tdpfp16ps(c, transform(a), b, numerics=Numerics(structure=structure, nan=nan),
                                     engine="numpy")
            np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want, err_msg=f"{nan} {cls}")
            if fp16 is not None and nan == "x86":
                np.testing.assert_array_equal(fp16, want)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", COMPLEX)
def test_a_nan_accumulator_wins_over_a_later_nan_operand(name, engine):
    """k0: inf * 0 makes the lane the default NaN; k1: a NaN with a payload in that lane. The SDM's
    fma32(acc, a, b) keeps 0xFFC00000; TDPFP16PS's order (a first) would give the payload."""
    a = np.zeros((1, 4), np.uint16)  # the even lane's a half: a_im (imaginary row), a_re (real row)
    a[0, 0:2] = (0, 0x7C00) if IMAGINARY[name] else (0x7C00, 0)
    a[0, 2:4] = (0, 0x7E05) if IMAGINARY[name] else (0x7E05, 0)
    b = np.array([[0x0000, 0], [0x3C00, 0]], np.uint16)  # b_re: 0, then 1
    c = np.zeros((1, 1), np.uint32)
    want = _want(name, c, a, b)
    assert want[0, 0] == 0xFFC00000
    got = getattr(pyamx, name)(c.view(np.float32), a, b, backend="emulator", engine=engine)
    assert np.asarray(got).view(np.uint32)[0, 0] == 0xFFC00000
    transformed = _swap(a) if IMAGINARY[name] else _negate_imaginary(a)
    assert np.asarray(emulator.tdpfp16ps(c, transformed, b)).view(np.uint32)[0, 0] != 0xFFC00000


@pytest.mark.parametrize("engine", ENGINES)
def test_the_discriminating_vectors_of_the_reference_document(engine):
    # complex order (amx-family.md 10.1): products 2^24 and -2^24 cancel before C = 1.0 is added
    a = np.array([[0x6C00, 0x6C00]], np.uint16)  # 4096 + 4096i
    c = np.array([[0x3F800000]], np.uint32)
    got = pyamx.tcmmrlfp16ps(c.view(np.float32), a, a.copy(), backend="emulator", engine=engine)
    assert np.asarray(got).view(np.uint32)[0, 0] == 0x3F800000 == _want("tcmmrlfp16ps", c, a, a)[0, 0]
    # DAZ on C: -denormal + (+0) is +0 (without DAZ it would stay, or flush to -0)
    for name in COMPLEX:
        z = np.zeros((1, 2), np.uint16)
        c = np.array([[0x80000001]], np.uint32)
        got = getattr(pyamx, name)(c.view(np.float32), z, z, backend="emulator", engine=engine)
        assert np.asarray(got).view(np.uint32)[0, 0] == 0 == _want(name, c, z, z)[0, 0]
    # the sign of a NaN a_im flips in the real part, payload kept
    a = np.array([[0x0000, 0x7E05]], np.uint16)
    b = np.array([[0x0000, 0x3C00]], np.uint16)
    got = pyamx.tcmmrlfp16ps(np.zeros((1, 1), np.float32), a, b, backend="emulator", engine=engine)
    assert np.asarray(got).view(np.uint32)[0, 0] == 0xFFC0A000 == _want("tcmmrlfp16ps", np.zeros((1, 1), np.uint32), a, b)[0, 0]


@pytest.mark.parametrize("name", COMPLEX)
def test_operand_forms_give_the_same_bits(name):
    rng = np.random.default_rng(5)
    values_a = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))) * 300
    values_b = rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))
    values_a[0, 0] = 70000 - 1e5j  # beyond fp16: rounds to infinities
    c = np.zeros((3, 2), np.float32)
    with np.errstate(over="ignore"):
        pairs_a = np.stack([values_a.real, values_a.imag], -1).reshape(3, 8).astype(np.float16)
    pairs_b = np.stack([values_b.real, values_b.imag], -1).reshape(4, 4).astype(np.float16)
    fn = getattr(pyamx, name)
    want = _want(name, c.view(np.uint32), pairs_a.view(np.uint16), pairs_b.view(np.uint16))
    for a, b in ((values_a, values_b), (values_a.astype(np.complex64), values_b.astype(np.complex64)),
                 (pairs_a, pairs_b), (pairs_a.view(np.uint16), pairs_b.view(np.int16)),
                 (_words(pairs_a.view(np.uint16)), _words(pairs_b.view(np.uint16)))):
        got = fn(c, a, b, backend="emulator")
        np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want, err_msg=str(a.dtype))
    # numpy's float16 conversion of a complex128 part is one round to nearest even (no double rounding)
    tie = np.array([[1 + 2**-11 + 2**-40 + 0j]])  # just above a tie between 1 and 1 + 2^-10
    assert pyamx.tcmmrlfp16ps(np.zeros((1, 1), np.float32), tie, np.array([[1 + 0j]]), backend="emulator")[0, 0] == 1 + 2**-10


def test_native_refuses_without_amx_complex_and_auto_says_emulator():
    from pyamx.cpu import native

    usable, why = native.available("complex")
    z = np.zeros((1, 2), np.float16)
    c = np.zeros((1, 1), np.float32)
    if usable:
        pytest.skip("this CPU has AMX-COMPLEX")
    # where native runs nothing at all (no kernels built, no AMX) the refusal says that instead
    feature = "AMX-COMPLEX" if native.available()[0] else ""
    with pytest.raises(Exception, match=feature) as info:
        pyamx.tcmmimfp16ps(c, z, z, backend="native")
    assert not feature or "CPUID.(EAX=0x7,ECX=1):EDX[8]" in str(info.value)
    got = pyamx.tcmmrlfp16ps(c, z, z, backend="auto")
    assert got.backend == "emulator"
    if native.available()[0]:  # the native tile machine refuses the methods before any instruction
        machine = native.NativeMachine()
        for name in COMPLEX:
            with pytest.raises(Exception, match="AMX-COMPLEX"):
                getattr(machine, name)(0, 1, 2)


@pytest.mark.parametrize("name", COMPLEX)
def test_the_row_encodes_as_clang_assembles_the_mnemonic(name):
    """The bytes the table gives (VEX C4, map, pp, opcode, ModRM) against clang's encoding, via objdump."""
    insn = isa.get(name)
    enc = insn.encoding
    # Intel operand order: tmm6 (reg, dst), tmm5 (rm, src1), tmm4 (vvvv, src2)
    ours = vex_register_form(enc, reg=6, rm=5, vvvv=4)
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pytest.skip("clang comes with the ziglang package (pip install ziglang)")
    if shutil.which("objdump") is None:
        pytest.skip("objdump is not installed")
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "x.s", Path(tmp) / "x.o"
        src.write_text(f".intel_syntax noprefix\n{insn.mnemonic.lower()} tmm6, tmm5, tmm4\n")
        subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu", "-c", str(src),
                        "-o", str(obj)], check=True, capture_output=True)
        # the section's bytes (an objdump older than the mnemonic disassembles it as "(bad)")
        dump = subprocess.run(["objdump", "-s", "-j", ".text", str(obj)], check=True, capture_output=True,
                              text=True).stdout
    line = next(x for x in dump.splitlines() if x.startswith(" 0000 "))
    clang_bytes = bytes.fromhex("".join(line[6:41].split()))
    assert clang_bytes == ours, (line, ours.hex())


def test_the_probe_experiments_of_the_complex_rows_agree_with_the_reference():
    """pyamx probe's complex points (docs/semantics.md section 8): the emulator's default bits are the SDM's."""
    from pyamx.tools import probe

    complex_points = [p for p in probe.EXPERIMENTS if p.startswith("complex_")]
    assert complex_points == ["complex_structure", "complex_dest_daz", "complex_nan_sign", "complex_nan_order"]
    for point in complex_points:
        for e in probe.EXPERIMENTS[point]:
            got = getattr(emulator, e.instruction)(e.c, e.a, e.b)
            np.testing.assert_array_equal(np.asarray(got).view(np.uint32), _want(e.instruction, e.c, e.a, e.b),
                                          err_msg=e.name)
    report = probe.probe("emulator")
    assert report["complete_match"] == "sdm"
    assert report["complex_nan_sign"] == "negated before conversion"
    assert report["complex_nan_order"] == "accumulator first"
    assert report["complex_dest_daz"] is True and report["complex_structure"] == "sdm"


def _reference_matmul(a_words, b_words, c_re, c_im):
    """The matmul schedule from the reference: K in blocks of 16 complex, each block one instruction."""
    parts = []
    for imaginary, c in ((False, c_re), (True, c_im)):
        for k0 in range(0, a_words.shape[1], 16):
            c = reference.tcmm(imaginary, c, a_words[:, k0:k0 + 16], b_words[k0:k0 + 16])
        parts.append(np.array(c, dtype=np.uint32))
    return parts


@pytest.mark.parametrize("engine", ENGINES)
def test_complex_matmul_is_the_schedule_of_the_two_instructions(engine):
    rng = np.random.default_rng(21)
    m, k, n = 3, 37, 2  # three K blocks, the last one short
    a_pairs = rng.choice(HALVES, (m, 2 * k))
    b_pairs = rng.standard_normal((k, 2 * n)).astype(np.float16).view(np.uint16)
    a_words, b_words = _words(a_pairs), _words(b_pairs)
    c = (rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))).astype(np.complex64)
    c[0, 0] = complex(np.float32(1e-40), -0.0)  # a denormal real part: DAZ on C
    want_re, want_im = _reference_matmul(a_words, b_words, c.real.copy().view(np.uint32), c.imag.copy().view(np.uint32))
    got = pyamx.matmul(a_words, b_words, c, kind="complex", backend="emulator", engine=engine)
    assert got.dtype == np.complex64 and got.backend == "emulator" and got.engine == engine
    np.testing.assert_array_equal(got.real.copy().view(np.uint32), want_re)
    np.testing.assert_array_equal(got.imag.copy().view(np.uint32), want_im)


def test_complex_matmul_of_numpy_complex_values():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 20)) + 1j * rng.standard_normal((5, 20))
    b = (rng.standard_normal((20, 4)) + 1j * rng.standard_normal((20, 4))).astype(np.complex64)
    got = pyamx.matmul(a, b, backend="emulator")
    pairs = [np.stack([x.real, x.imag], -1).reshape(x.shape[0], -1).astype(np.float16).view(np.uint16) for x in (a, b)]
    zeros = np.zeros((5, 4), np.uint32)
    want_re, want_im = _reference_matmul(_words(pairs[0]), _words(pairs[1]), zeros, zeros)
    np.testing.assert_array_equal(got.real.copy().view(np.uint32), want_re)
    np.testing.assert_array_equal(got.imag.copy().view(np.uint32), want_im)
    with pytest.raises(TypeError, match="complex64"):
        pyamx.matmul(a, b, np.zeros((5, 4), np.complex128))
    with pytest.raises(TypeError, match="kind='complex'"):
        pyamx.matmul(a, np.zeros((20, 4), np.float32))
    from pyamx.cpu import native

    if not native.available("complex")[0]:
        with pytest.raises(Exception, match="AMX-COMPLEX" if native.available()[0] else ""):
            pyamx.matmul(a, b, backend="native")
        assert pyamx.matmul(a, b, backend="auto").backend == "emulator"


@pytest.mark.skipif(not _engine.resolve("auto").compiled, reason="needs a compiled engine")
def test_complex_matmul_under_a_changed_mxcsr():
    """Round toward zero with FTZ and DAZ set in the caller's MXCSR changes no bit (the engines set their own)."""
    rng = np.random.default_rng(8)
    a = rng.choice(HALVES, (4, 2 * 20))
    b = rng.choice(HALVES, (20, 2 * 3))
    want = pyamx.matmul(_words(a), _words(b), kind="complex", backend="emulator", engine="numpy")
    with caller_mxcsr(RZ | FTZ | DAZ):  # skips where MXCSR cannot be set (not x86-64)
        got = [pyamx.matmul(_words(a), _words(b), kind="complex", backend="emulator", engine=e) for e in ENGINES]
        one = [pyamx.tcmmimfp16ps(np.zeros((4, 3), np.float32), a[:, :32], b[:16], backend="emulator", engine=e)
               for e in ENGINES]
    for g in got:
        np.testing.assert_array_equal(g.view(np.uint64), want.view(np.uint64))
    ref = _want("tcmmimfp16ps", np.zeros((4, 3), np.uint32), a[:, :32], b[:16])
    for o in one:
        np.testing.assert_array_equal(np.asarray(o).view(np.uint32), ref)


def test_the_c_entries_refuse_the_rows_on_a_cpu_without_amx_complex():
    """Below the Python checks: pyamx_dp_oneshot, pyamx_tdp and the native matmul answer E_NO_KERNEL
    and execute nothing (in a child process, so a SIGILL would fail the test, not kill the suite)."""
    from pyamx.cpu import native

    if not native.available()[0]:
        pytest.skip("native is not usable here")
    if native.available("complex")[0]:
        pytest.skip("this CPU has AMX-COMPLEX")
    import sys

    child = """
import numpy as np
from pyamx.table import isa
from pyamx.cpu import native
ffi, lib = native._lib("bf16")
c = np.zeros((16, 16), np.uint32); a = np.zeros((16, 32), np.uint16); b = np.zeros((16, 32), np.uint16)
cfg = bytearray(64); cfg[0] = 1
for t in range(3):
    cfg[16 + 2 * t] = 64; cfg[48 + t] = 16
assert lib.pyamx_load_config(ffi.from_buffer(bytes(cfg))) == lib.PYAMX_OK
for insn in (i for i in isa.DOTS if i.kind == "dot-complex"):
    op = getattr(lib, insn.c_op)
    ptr = lambda x: ffi.cast("void *", x.ctypes.data)
    assert lib.pyamx_dp_oneshot(op, ffi.cast("uint32_t *", c.ctypes.data), ptr(a), ptr(b), 4, 4, 4) == lib.PYAMX_E_NO_KERNEL
    assert lib.pyamx_tdp(op, 0, 1, 2) == lib.PYAMX_E_NO_KERNEL
    assert lib.pyamx_matmul_amx_panels(op, 4, 4, 4, ptr(a), 64, ptr(b), 64, ffi.cast("uint32_t *", c.ctypes.data),
                                       64, 1, 16, 16) == lib.PYAMX_E_NO_KERNEL
print("refused")
"""
    # from the installed package's parent: a checkout's root holds an unbuilt pyamx/ that -c would import
    parent = str(Path(pyamx.__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=parent)
    assert proc.returncode == 0 and "refused" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def test_the_row_major_engine_entry_refuses_the_complex_rows():
    eng = _engine.resolve("auto")
    if not eng.compiled:
        pytest.skip("needs a compiled engine")
    a = np.zeros((2, 4), np.uint16)
    for name in COMPLEX:
        with pytest.raises(ValueError, match="dot"):
            eng.matmul(name, a, np.zeros((4, 4), np.uint16))
    ffi, lib = _engine._lib()
    out = np.zeros((2, 2), np.uint32)
    call = _engine.call_descriptor(ffi, lib, eng._kind, lib.PYAMX_OP_TCMMIMFP16PS, a, 8, a, 8, None, 2, out, 2,
                                   2, 2, 4, 1, rows_of_b=True)
    assert lib.pyamx_engine_run(call.struct) == lib.PYAMX_ENGINE_E_ARG


@pytest.mark.parametrize("cls", ["random", "adversarial"])
def test_compiled_engines_equal_the_numpy_engine_on_large_products(cls):
    """Whole kernel panels, threads and the exact NaN path of the compiled engines, against the
    numpy engine (which the tests above hold to the reference)."""
    rng = np.random.default_rng(31)
    m, k, n = 70, 40, 50
    c, a, b = _operands(rng, m, k, n, cls)
    if cls == "random":  # a few NaNs and infinities in otherwise ordinary data
        a.flat[rng.integers(0, a.size, 6)] = rng.choice(HALVES[8:14], 6)
        b.flat[rng.integers(0, b.size, 6)] = rng.choice(HALVES[8:14], 6)
    numpy_engine = _engine.resolve("numpy")
    for name in COMPLEX:
        want = numpy_engine.dot(name, c, a, b, k)
        for e in ENGINES[1:]:
            for threads in (1, 2):
                got = _engine.resolve(e).dot(name, c, a, b, k, threads)
                np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want, err_msg=f"{name} {e} {threads}")
