"""AMX-FP8 (TDPBF8PS, TDPBHF8PS, TDPHBF8PS, TDPHF8PS): every path against tests/reference_fp8.py, bit for bit.

The reference is exact rational arithmetic written from docs/semantics.md;
the hand vectors below carry values worked out by hand from the spec, so the
reference itself is held to them too. Results compare as uint32 bit patterns.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

import pyamx
import reference_fp8 as ref
from mxcsr import caller_mxcsr, library
from pyamx import emulator
from pyamx.table import isa
from pyamx.emulator import engine as _engine
from pyamx.emulator import Numerics
from pyamx.errors import BackendError, InvalidOpcodeFault
from tile_encodings import vex_register_form

FP8_ROWS = [insn for insn in isa.DOTS if insn.is_float and insn.a_format.width == 8]
NAMES = [insn.name for insn in FP8_ROWS]
SEED = 20261203


def _formats(name):
    insn = isa.get(name)
    return insn.a_format.name, insn.b_format.name


def _special_codes(fmt_name):
    return np.array(isa.FORMATS[fmt_name].special_values, np.uint8)


def _finite_codes(rng, shape, fmt_name):
    """Random codes with the NaN and infinity codes replaced by +0."""
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    if fmt_name == "bf8":
        special = (x & 0x7C) == 0x7C
    else:
        special = (x & 0x7F) == 0x7F
    return np.where(special, np.uint8(0), x).astype(np.uint8)


def _c_bits(rng, shape, specials=True):
    c = (rng.standard_normal(shape) * 2.0 ** rng.integers(-40, 40, shape)).astype(np.float32).view(np.uint32)
    if specials:
        pool = np.array([0, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC12345, 0x7F7FFFFF],
                        np.uint32)
        c = np.where(rng.random(shape) < 0.15, rng.choice(pool, shape), c)
    return c.astype(np.uint32)


def _bits(result):
    return np.asarray(result).view(np.uint32)


def _reference(name, c, a, b, **options):
    # the formats as the reference reads them off the mnemonic, not from pyamx.table.isa
    return np.array(ref.dot(c.tolist(), a.tolist(), b.tolist(), *ref.formats(name), **options), np.uint32)


def test_the_table_names_the_formats_the_mnemonics_spell():
    assert [ref.formats(insn.mnemonic) for insn in FP8_ROWS] == [_formats(name) for name in NAMES]
    # the four AMX-FP8 rows are there; a further fp8 row may join them without editing this test
    assert {"tdpbf8ps", "tdpbhf8ps", "tdphbf8ps", "tdphf8ps"} <= set(NAMES)


# -- hand vectors: expected bits worked out from the spec, not by any code ----------------------

# (row, C bits, A's dwords as 4 codes each, B's dwords (N = 1), expected fp32 bits)
HAND = [
    # amx-family.md 10.1: 2^15*2^15 + 1*1 - 2^15*2^15 = 1 exactly (a rounded sum gives 0)
    ("tdpbf8ps", 0, [(0x78, 0x3C, 0xF8, 0)], [(0x78, 0x3C, 0x78, 0)], 0x3F800000),
    # BF8 denormals 2^-16 * 2^-16 = 2^-32
    ("tdpbf8ps", 0, [(0x01, 0, 0, 0)], [(0x01, 0, 0, 0)], 0x2F800000),
    # HF8 denormals 2^-9 * 2^-9 = 2^-18
    ("tdphf8ps", 0, [(0x01, 0, 0, 0)], [(0x01, 0, 0, 0)], 0x36800000),
    # HF8 max 448 * 448 = 200704 = 1.53125 * 2^17
    ("tdphf8ps", 0, [(0x7E, 0, 0, 0)], [(0x7E, 0, 0, 0)], 0x48440000),
    # HF8 0x78 is 256 (no infinity in E4M3) times BF8 1
    ("tdphbf8ps", 0, [(0x78, 0, 0, 0)], [(0x3C, 0, 0, 0)], 0x43800000),
    # 2^12 * 2^12 + 1 = 2^24 + 1: a tie, to even 2^24
    ("tdpbf8ps", 0, [(0x6C, 0x3C, 0, 0)], [(0x6C, 0x3C, 0, 0)], 0x4B800000),
    # 2^24 + 1 + 2 = 2^24 + 3: a tie, to even 2^24 + 4
    ("tdpbf8ps", 0, [(0x6C, 0x3C, 0x3C, 0)], [(0x6C, 0x3C, 0x40, 0)], 0x4B800002),
    # the sum over two dwords is exact too: 2^24 + 1 (k0) + 1 (k1) = 2^24 + 2
    ("tdpbf8ps", 0, [(0x6C, 0x3C, 0, 0), (0x3C, 0, 0, 0)], [(0x6C, 0x3C, 0, 0), (0x3C, 0, 0, 0)], 0x4B800001),
    # then C + t rounds once: 1 + 2^-24 is a tie, to even 1 (BF8 0x0C = 2^-12)
    ("tdpbf8ps", 0x3F800000, [(0x0C, 0, 0, 0)], [(0x0C, 0, 0, 0)], 0x3F800000),
    # 1 + 1.5 * 2^-24 is above the half: up to 1 + 2^-23 (BF8 0x0E = 1.5 * 2^-12)
    ("tdpbf8ps", 0x3F800000, [(0x0E, 0, 0, 0)], [(0x0C, 0, 0, 0)], 0x3F800001),
    # 1 + 3 * 2^-24 is a tie between 1 + 2^-23 and 1 + 2^-22: to even 1 + 2^-22 (BF8 0x10 = 2^-11)
    ("tdpbf8ps", 0x3F800000, [(0x0E, 0, 0, 0)], [(0x10, 0, 0, 0)], 0x3F800002),
    # 2^30 + 2^6 + 2^-32: just above the tie between 2^30 and 2^30 + 2^7 -> up. The sum spans 62 bits,
    # so a float64 sum before the fp32 rounding would lose 2^-32 and round the tie to even 2^30
    ("tdpbf8ps", 0, [(0x78, 0x54, 0x01, 0)], [(0x78, 0x3C, 0x01, 0)], 0x4E800001),
    # 2^30 + 2^6 - 2^-32: just below the tie -> down
    ("tdpbf8ps", 0, [(0x78, 0x54, 0x81, 0)], [(0x78, 0x3C, 0x01, 0)], 0x4E800000),
    # inf * 0 -> default NaN
    ("tdpbf8ps", 0, [(0x7C, 0, 0, 0)], [(0x00, 0, 0, 0)], 0xFFC00000),
    # +inf + -inf inside one sum -> default NaN
    ("tdpbf8ps", 0, [(0x7C, 0xFC, 0, 0)], [(0x3C, 0x3C, 0, 0)], 0xFFC00000),
    # +inf products in two dwords: one sign -> +inf
    ("tdpbf8ps", 0x3F800000, [(0x7C, 0, 0, 0), (0x3C, 0x7C, 0, 0)], [(0x3C, 0, 0, 0), (0x3C, 0x40, 0, 0)], 0x7F800000),
    # C = -inf plus a +inf product: IEEE -inf + +inf -> default NaN
    ("tdpbf8ps", 0xFF800000, [(0x7C, 0, 0, 0)], [(0x3C, 0, 0, 0)], 0xFFC00000),
    # C = +inf plus finite products -> +inf
    ("tdpbhf8ps", 0x7F800000, [(0x3C, 0, 0, 0)], [(0x38, 0, 0, 0)], 0x7F800000),
    # a NaN C -> the default NaN, not C's payload
    ("tdphf8ps", 0x7FC12345, [(0x38, 0, 0, 0)], [(0x38, 0, 0, 0)], 0xFFC00000),
    # a NaN operand paired with 0 still makes the result NaN (BF8 0x7D, HF8 0xFF)
    ("tdpbhf8ps", 0x3F800000, [(0x7D, 0, 0, 0)], [(0x00, 0, 0, 0)], 0xFFC00000),
    ("tdphf8ps", 0x3F800000, [(0x38, 0, 0, 0)], [(0xFF, 0, 0, 0)], 0xFFC00000),
    # zero signs: -0 + (+0 from the exact zero sum of -1 * 0) = +0
    ("tdpbf8ps", 0x80000000, [(0xBC, 0, 0, 0)], [(0x00, 0, 0, 0)], 0x00000000),
    # an exact zero sum of non-zero products is +0 as well; C = -0 gives +0
    ("tdpbf8ps", 0x80000000, [(0x3C, 0x3C, 0, 0)], [(0x3C, 0xBC, 0, 0)], 0x00000000),
    # C denormal (-2^-149) is kept, no DAZ: -2^-149 + 0 = -2^-149
    ("tdpbf8ps", 0x80000001, [(0, 0, 0, 0)], [(0, 0, 0, 0)], 0x80000001),
    # C denormal + 2^-32: 2^-32 + 2^-149 rounds to 2^-32
    ("tdpbf8ps", 0x00000001, [(0x01, 0, 0, 0)], [(0x01, 0, 0, 0)], 0x2F800000),
    # largest C plus the largest t stays the largest finite (t is far below one ulp)
    ("tdpbf8ps", 0x7F7FFFFF, [(0x7B,) * 4] * 16, [(0x7B,) * 4] * 16, 0x7F7FFFFF),
    # 64 * 57344^2, the largest sum, exactly: 64 * 1.75^2 * 2^30 = 1.53125 * 2^37
    ("tdpbf8ps", 0, [(0x7B,) * 4] * 16, [(0x7B,) * 4] * 16, 0x52440000),
    # cancellation of the largest products leaves the smallest: (57344^2 - 57344^2) + 2^-32
    ("tdpbf8ps", 0, [(0x7B, 0xFB, 0x01, 0)], [(0x7B, 0x7B, 0x01, 0)], 0x2F800000),
]


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_vectors_hold_for_the_reference_and_every_path(case):
    name, c, a_quads, b_quads, expected = HAND[case]
    c_arr = np.array([[c]], np.uint32)
    a = np.array([[x for quad in a_quads for x in quad]], np.uint8)
    b = np.array([list(quad) for quad in b_quads], np.uint8)
    assert _reference(name, c_arr, a, b)[0, 0] == expected, "the reference disagrees with the spec"
    for result in (getattr(pyamx, name)(c_arr, a, b, backend="emulator"), getattr(emulator, name)(c_arr, a, b)):
        assert int(_bits(result)[0, 0]) == expected, f"{name}: got {int(_bits(result)[0, 0]):08x}, want {expected:08x}"


# -- every code of each format, against a spread of others -------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_code_of_both_operands_matches_the_reference(name):
    a_fmt, b_fmt = _formats(name)
    rng = np.random.default_rng([SEED, 1, NAMES.index(name)])
    fn = getattr(pyamx, name)
    for batch in range(16):
        codes = np.arange(16 * batch, 16 * batch + 16, dtype=np.uint8)
        a = _finite_codes(rng, (16, 8), a_fmt)
        b = _finite_codes(rng, (2, 64), b_fmt)
        a[:, 0] = codes  # A's code m of this batch in row m, lane 0 of k0
        b[0, 1::4] = codes  # B's code n in column n, lane 1 of k0
        c = _c_bits(rng, (16, 16), specials=False)
        got = _bits(fn(c, a, b, backend="emulator"))
        np.testing.assert_array_equal(got, _reference(name, c, a, b), err_msg=f"batch {batch}")


@pytest.mark.parametrize("name", NAMES)
def test_random_data_with_specials_matches_the_reference(name):
    a_fmt, b_fmt = _formats(name)
    rng = np.random.default_rng([SEED, 2, NAMES.index(name)])
    for m, k, n, special_rate in ((16, 16, 16, 0.0), (16, 16, 16, 0.002), (5, 3, 7, 0.05), (1, 1, 1, 0.2),
                                  (16, 1, 9, 0.1), (3, 16, 2, 0.01)):
        a = _finite_codes(rng, (m, 4 * k), a_fmt)
        b = _finite_codes(rng, (k, 4 * n), b_fmt)
        a = np.where(rng.random(a.shape) < special_rate, rng.choice(_special_codes(a_fmt), a.shape), a).astype(np.uint8)
        b = np.where(rng.random(b.shape) < special_rate, rng.choice(_special_codes(b_fmt), b.shape), b).astype(np.uint8)
        c = _c_bits(rng, (m, n))
        np.testing.assert_array_equal(_bits(getattr(pyamx, name)(c, a, b, backend="emulator")),
                                      _reference(name, c, a, b), err_msg=f"{m}x{k}x{n}")


def test_ml_dtypes_arrays_read_as_their_format():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng([SEED, 3])
    for name in NAMES:
        a_fmt, b_fmt = _formats(name)
        a = _finite_codes(rng, (4, 8), a_fmt)
        b = _finite_codes(rng, (2, 12), b_fmt)
        as_dtype = {"bf8": ml_dtypes.float8_e5m2, "hf8": ml_dtypes.float8_e4m3fn}
        c = np.zeros((4, 3), np.float32)
        got = getattr(pyamx, name)(c, a.view(as_dtype[a_fmt]), b.view(as_dtype[b_fmt]), backend="emulator")
        np.testing.assert_array_equal(_bits(got), _reference(name, c.view(np.uint32), a, b))


# -- the numerics options ------------------------------------------------------------------------

OPTIONS = [
    dict(accum="bochs_pairwise"),
    dict(input_daz=True),
    dict(c_daz=True),
    dict(ftz=True),
    dict(nan="propagate"),
    dict(accum="bochs_pairwise", input_daz=True, c_daz=True, ftz=True, nan="propagate"),
]


def _numerics(options):
    return Numerics(**{("fp8_" + k if k != "input_daz" else "fp8_input_daz"): v for k, v in options.items()})


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_every_option_matches_the_reference(options):
    rng = np.random.default_rng([SEED, 4])
    numerics = _numerics(options)
    for name in NAMES:
        a_fmt, b_fmt = _formats(name)
        for m, k, n, rate in ((6, 4, 5, 0.03), (4, 16, 4, 0.0)):
            a = rng.integers(0, 256, (m, 4 * k), dtype=np.uint8)
            b = rng.integers(0, 256, (k, 4 * n), dtype=np.uint8)
            if rate == 0.0:
                a, b = _finite_codes(rng, a.shape, a_fmt), _finite_codes(rng, b.shape, b_fmt)
            else:
                a = np.where(rng.random(a.shape) < 0.9, _finite_codes(rng, a.shape, a_fmt), a).astype(np.uint8)
            # small exponents: denormal inputs and cancellations matter; denormal C for the DAZ/FTZ options
            c = _c_bits(rng, (m, n))
            c[0, 0], c[-1, -1] = 0x80000001, 0x00400000
            a[0, :] = 0  # row 0 sums to zero: the denormal C shows through
            got = _bits(getattr(emulator, name)(c, a, b, numerics=numerics))
            np.testing.assert_array_equal(got, _reference(name, c, a, b, **options), err_msg=f"{name} {m}x{k}x{n}")


def test_the_rounded_model_differs_from_the_exact_one_where_the_probe_says():
    a, b = np.array([[0x78, 0x3C, 0xF8, 0]], np.uint8), np.array([[0x78, 0x3C, 0x78, 0]], np.uint8)
    c = np.zeros((1, 1), np.uint32)
    assert int(_bits(emulator.tdpbf8ps(c, a, b))[0, 0]) == 0x3F800000
    assert int(_bits(emulator.tdpbf8ps(c, a, b, numerics=Numerics(fp8_accum="bochs_pairwise")))[0, 0]) == 0


def test_numerics_validates_the_fp8_fields():
    with pytest.raises(ValueError, match="fp8_accum"):
        Numerics(fp8_accum="sequential")
    with pytest.raises(ValueError, match="fp8_nan"):
        Numerics(fp8_nan="x86")
    with pytest.raises(TypeError, match="fp8_ftz"):
        Numerics(fp8_ftz=1)


# -- the machine, matmul and the engines ---------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_tile_machine_matches_the_reference_and_clears_the_rest(name):
    a_fmt, b_fmt = _formats(name)
    rng = np.random.default_rng([SEED, 5, NAMES.index(name)])
    m, k, n = 7, 5, 6
    a = _finite_codes(rng, (m, 4 * k), a_fmt)
    b = _finite_codes(rng, (k, 4 * n), b_fmt)
    c = _c_bits(rng, (m, n))
    machine = pyamx.emulator.TileMachine()
    machine.ldtilecfg(pyamx.TileConfig.make({0: (m, 4 * n), 1: (m, 4 * k), 2: (k, 4 * n)}))
    machine.tileloadd(0, c, 4 * n)
    machine.tileloadd(1, a, 4 * k)
    machine.tileloadd(2, b, 4 * n)
    getattr(machine, name)(0, 1, 2)
    tile = machine.tile(0)
    assert not tile[m:].any() and not tile[:m, 4 * n:].any()
    np.testing.assert_array_equal(tile[:m, :4 * n].copy().view(np.uint32), _reference(name, c, a, b))
    with pytest.raises(InvalidOpcodeFault):
        getattr(machine, name)(0, 0, 2)  # tiles must be distinct: #UD


@pytest.mark.parametrize("name", NAMES)
def test_matmul_runs_the_schedule_with_padding(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    insn = isa.get(name)
    a_fmt, b_fmt = _formats(name)
    rng = np.random.default_rng([SEED, 6, NAMES.index(name)])
    as_dtype = {"bf8": ml_dtypes.float8_e5m2, "hf8": ml_dtypes.float8_e4m3fn}
    for m, kk, n in ((3, 70, 4), (2, 130, 3), (1, 1, 1)):
        a = _finite_codes(rng, (m, kk), a_fmt)
        b = _finite_codes(rng, (kk, n), b_fmt)
        a[0, :3] = _special_codes(a_fmt)[:min(3, kk)]  # zeros and denormals too
        c = _c_bits(rng, (m, n), specials=False)
        want = np.array(ref.matmul(c.tolist(), a.tolist(), b.tolist(), *ref.formats(name)), np.uint32)
        for engine in (None, "numpy"):  # the default (auto: a compiled engine where one runs) and numpy
            result = pyamx.matmul(a.view(as_dtype[a_fmt]), b.view(as_dtype[b_fmt]), c.view(np.float32),
                                  backend="emulator", engine=engine)
            expected_engine = engine or _engine.resolve(None, op=name).name
            assert result.dtype == np.float32 and (result.backend, result.engine) == ("emulator", expected_engine)
            np.testing.assert_array_equal(_bits(result), want, err_msg=f"{insn.mnemonic} {m}x{kk}x{n} {engine}")


def test_matmul_kind_fp8_reads_uint8_as_bf8_and_refuses_floats():
    rng = np.random.default_rng([SEED, 7])
    a, b = _finite_codes(rng, (2, 9), "bf8"), _finite_codes(rng, (9, 3), "bf8")
    got = pyamx.matmul(a, b, kind="fp8", backend="emulator")
    want = ref.matmul([[0] * 3] * 2, a.tolist(), b.tolist(), "bf8", "bf8")
    np.testing.assert_array_equal(_bits(got), np.array(want, np.uint32))
    with pytest.raises(TypeError, match="kind='fp8'"):
        pyamx.matmul(np.ones((2, 4), np.float32), np.ones((4, 2), np.float32), kind="fp8")


@pytest.mark.parametrize("name", NAMES)
def test_auto_engine_is_the_best_compiled_one_and_named_engines_run(name):
    c, a, b = np.zeros((1, 1), np.float32), np.zeros((1, 4), np.uint8), np.zeros((1, 4), np.uint8)
    compiled = [e for e, ok, _ in _engine.available_engines() if ok and e != "numpy"]
    best = compiled[0] if compiled else "numpy"
    assert getattr(pyamx, name)(c, a, b, backend="emulator", engine="auto").engine == best
    assert getattr(emulator, name)(c, a, b, engine="auto").engine == best
    for engine in [*compiled, "numpy"]:
        assert getattr(pyamx, name)(c, a, b, backend="emulator", engine=engine).engine == engine
        assert pyamx.matmul(a, b.T, kind="fp8", backend="emulator", engine=engine).engine == engine
    bochs = Numerics(fp8_accum="bochs_pairwise")  # non-default fp8 numerics: numpy only
    assert getattr(emulator, name)(c, a, b, engine="auto", numerics=bochs).engine == "numpy"
    for engine in compiled:
        with pytest.raises(ValueError, match="implements only the default"):
            getattr(emulator, name)(c, a, b, engine=engine, numerics=bochs)


def test_the_compiled_engine_entry_reads_fp8_rows_as_fp8():
    """The one entry (pyamx_engine_run) takes every dot row: fp8 codes go to their own arithmetic
    (engine_fp8.c), never widened as if they were fp16 bits, in either layout of B."""
    try:
        from pyamx.cpu import _nativelib

        ffi, lib = _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"pyamx._native is not built: {exc}")
    kinds = [getattr(lib, k) for name, k in _engine._KINDS.items() if _engine._compiled_status(name)[0]]
    if not kinds:
        pytest.skip("no compiled engine runs here")
    a, b = np.full((1, 4), 0x3C, np.uint8), np.full((1, 4), 0x3C, np.uint8)  # as fp16 bits these would be numbers
    c = np.zeros((1, 1), np.uint32)
    for insn in FP8_ROWS:
        want = np.asarray(_engine.resolve("numpy").dot(insn.name, c, a, b, 1)).view(np.uint32)
        for rows_of_b, b_operand, ldb in ((False, b, 4), (True, b.reshape(4, 1), 1)):
            out = np.full((1, 1), 0xDEADBEEF, np.uint32)
            call = _engine.call_descriptor(ffi, lib, kinds[0], insn.op_id, a, 4, b_operand, ldb, c, 1, out, 1,
                                           1, 1, 4, 1, rows_of_b=rows_of_b)
            assert lib.pyamx_engine_run(call.struct) == lib.PYAMX_ENGINE_OK, insn.mnemonic
            np.testing.assert_array_equal(out, want, err_msg=insn.mnemonic)


# -- MXCSR: the caller's rounding mode and FTZ/DAZ change nothing ---------------------------------


@pytest.mark.parametrize("mode", [0x1F80 | 0x6000, 0x1F80 | 0x8040, 0x1F80 | 0x8040 | 0x2000])
def test_results_do_not_depend_on_the_callers_mxcsr(mode):
    lib = library()
    rng = np.random.default_rng([SEED, 8])
    for name in NAMES:
        a_fmt, b_fmt = _formats(name)
        a = _finite_codes(rng, (6, 16), a_fmt)
        b = _finite_codes(rng, (4, 20), b_fmt)
        a[:, :4] = _special_codes(a_fmt)[:4]  # denormals and zeros
        c = _c_bits(rng, (6, 5))
        c[0, 0], c[1, 1] = 0x80000001, 0x007FFFFF
        a[0], a[1] = 0, 0  # exact zero sums: the denormal Cs come through
        want = _reference(name, c, a, b)
        for numerics in ("sdm", Numerics(fp8_accum="bochs_pairwise")):
            with caller_mxcsr(mode):
                got = _bits(getattr(emulator, name)(c, a, b, numerics=numerics))
                machine_ok = lib.pyamx_get_mxcsr() & ~0x3F == mode & ~0x3F
            assert machine_ok
            if numerics == "sdm":
                np.testing.assert_array_equal(got, want, err_msg=name)
            else:
                np.testing.assert_array_equal(got, _reference(name, c, a, b, accum="bochs_pairwise"), err_msg=name)


# -- native: refused without AMX-FP8, never a SIGILL ------------------------------------------------


def _has_amx_fp8() -> bool:
    """Native runs the AMX-FP8 rows here (silicon with the feature, or the trap mode's say)."""
    from pyamx.cpu import native

    return "fp8" in native.report().kernels


def test_native_refuses_without_amx_fp8_naming_the_feature():
    from pyamx.cpu import native

    if _has_amx_fp8():
        pytest.skip("this CPU has AMX-FP8")
    c, a = np.zeros((1, 1), np.float32), np.zeros((1, 4), np.uint8)
    # where native runs nothing at all (no kernels built, no AMX) the refusal says that instead
    feature = "AMX-FP8" if native.available()[0] else ""
    for name in NAMES:
        with pytest.raises(BackendError, match=feature):
            getattr(pyamx, name)(c, a, a, backend="native")
        auto = getattr(pyamx, name)(c, a, a, backend="auto")
        assert auto.backend == "emulator"
    assert native.available("fp8")[0] is False
    with pytest.raises(BackendError, match=feature):
        pyamx.matmul(a, a.T, kind="fp8", backend="native")


def test_the_native_matmul_kernel_refuses_fp8_without_the_cpuid_bit():
    if _has_amx_fp8():
        pytest.skip("this CPU has AMX-FP8")
    from pyamx.cpu import _native_matmul
    from pyamx.cpu import native

    try:
        ffi, lib = native._lib("bf16")
    except Exception as exc:  # noqa: BLE001 - any reason native cannot start here
        pytest.skip(f"native is not usable here: {exc}")
    a = np.zeros((1, 4), np.uint8)
    c = np.zeros((1, 1), np.uint32)
    native._before_entry()
    for insn in FP8_ROWS:
        rc = lib.pyamx_matmul_amx(insn.op_id, 1, 1, 1, ffi.from_buffer(a), 4, ffi.from_buffer(a), 4,
                                  ffi.cast("uint32_t *", ffi.from_buffer(c)), 4, 1)
        assert rc == lib.PYAMX_E_NO_KERNEL, insn.mnemonic
    assert _native_matmul is not None


# -- the encoding: the table's bytes, clang's bytes and the native kernels' bytes agree --------------

# register triples (dst, src1, src2) the native kernels use: pyamx_dp_oneshot and matmul_amx's blocks
KERNEL_TRIPLES = [(0, 1, 2), (0, 4, 6), (1, 4, 7), (2, 5, 6), (3, 5, 7)]


def _table_bytes(insn, d, s1, s2) -> bytes:
    return vex_register_form(insn.encoding, d, s1, s2)


def _clang_bytes(tmp_path, lines):
    if shutil.which("objcopy") is None:
        pytest.skip("objcopy is not installed")
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pytest.skip("clang comes from the ziglang package (pip install ziglang)")
    src, obj, raw = tmp_path / "fp8.s", tmp_path / "fp8.o", tmp_path / "fp8.bin"
    src.write_text("".join(line + "\n" for line in lines))
    subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu", "-c", str(src), "-o",
                    str(obj)], check=True, capture_output=True, timeout=300)
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.text", str(obj), str(raw)], check=True)
    return raw.read_bytes()


def test_table_encodings_are_what_clang_assembles(tmp_path):
    lines, want = [], b""
    for insn in FP8_ROWS:
        for d, s1, s2 in KERNEL_TRIPLES:
            lines.append(f"{insn.name} %tmm{s2}, %tmm{s1}, %tmm{d}")  # AT&T: src2, src1, dst
            want += _table_bytes(insn, d, s1, s2)
    assert _clang_bytes(tmp_path, lines) == want


def test_the_native_kernels_hold_the_tables_fp8_instructions():
    from pathlib import Path

    import pyamx as package

    built = sorted(Path(package.__file__).parent.glob("_native*.so"))
    if not built:
        pytest.skip("pyamx._native is not built")
    from pyamx.cpu import _nativelib

    if not _nativelib.load()[1].pyamx_build_kernels():
        pytest.skip("this build of pyamx._native has no AMX kernels (a toolchain without AMX, or disabled)")
    code = built[0].read_bytes()
    for insn in FP8_ROWS:
        for d, s1, s2 in KERNEL_TRIPLES:
            assert _table_bytes(insn, d, s1, s2) in code, (insn.mnemonic, d, s1, s2)
