"""The per-call fast paths: same results, errors and labels as the full checks, on every engine.

pyamx._validate.fast_dot_shape lets plain valid operands skip the copying
checks, pyamx.emulator.call.run_one hands them to the engine, TileMachine
caches its #UD shape checks per config; onetile's ordered reduction is only
used after a probe. Each shortcut is held here against the long way.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyamx
from pyamx import _validate, emulator
from pyamx.table import isa
from pyamx.emulator import engine as _engine
from pyamx._result import AMXResult, label
from pyamx.emulator import onetile

SEED = 20261202


def _engines():
    names = ["numpy"] + [name for name, ok, _ in _engine.available_engines() if ok and name != "numpy"]
    return names


def _operands(rng, insn, m, k, n):
    if insn.is_float:
        c = rng.standard_normal((m, n)).astype(np.float32)
        if insn.a_format.width == 8:  # fp8 codes as uint8 bits
            return c, rng.integers(0, 256, (m, 4 * k)).astype(np.uint8), rng.integers(0, 256, (k, 4 * n)).astype(np.uint8)
        if insn.group == "bf16":
            a = (rng.standard_normal((m, 2 * k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            b = (rng.standard_normal((k, 2 * n)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        else:
            a = rng.standard_normal((m, 2 * k)).astype(np.float16)
            b = rng.standard_normal((k, 2 * n)).astype(np.float16)
        return c, a, b
    c = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
    return c, rng.integers(-128, 128, (m, 4 * k)).astype(np.int8), rng.integers(0, 256, (k, 4 * n)).astype(np.uint8)


def _strided(x):
    """The same values as a non-contiguous view: the fast check must decline it."""
    wide = np.zeros((x.shape[0], 2 * x.shape[1]), dtype=x.dtype)
    wide[:, ::2] = x
    return wide[:, ::2]


@pytest.mark.parametrize("engine", _engines())
@pytest.mark.parametrize("name", isa.DOT_NAMES)
def test_fast_and_full_paths_give_the_same_bits_and_labels(name, engine):
    insn = isa.get(name)
    rng = np.random.default_rng([SEED, isa.DOT_NAMES.index(name)])
    fn, emu = getattr(pyamx, name), getattr(emulator, name)
    if name in _engine.NUMPY_ONLY and engine != "numpy":
        # no compiled engine computes this row: naming one is refused, auto takes numpy
        c, a, b = _operands(rng, insn, 2, 2, 2)
        for call in (lambda: fn(c, a, b, backend="emulator", engine=engine), lambda: emu(c, a, b, engine=engine)):
            with pytest.raises(ValueError, match=f"{engine} engine does not implement {insn.mnemonic}"):
                call()
        assert fn(c, a, b, backend="emulator", engine="auto").engine == "numpy"
        return
    for m, k, n in ((16, 16, 16), (1, 1, 1), (3, 7, 5), (16, 1, 9)):
        c, a, b = _operands(rng, insn, m, k, n)
        before = [x.copy() for x in (c, a, b)]
        assert _validate.fast_dot_shape(insn.name, c, a, b) == (m, k, n)
        slow = [_strided(x) for x in (c, a, b)]
        assert _validate.fast_dot_shape(insn.name, *slow) is None
        fast_result = fn(c, a, b, backend="emulator", engine=engine)
        full_result = fn(*slow, backend="emulator", engine=engine)
        emu_result = emu(c, a, b, engine=engine)
        for result in (fast_result, full_result, emu_result):
            assert type(result) is AMXResult and result.flags.c_contiguous
            assert result.dtype == (np.float32 if insn.is_float else np.int32)
            assert (result.backend, result.native_mode, result.engine) == ("emulator", None, engine)
            assert result.__dict__ == label(np.zeros(1), "emulator", engine=engine).__dict__
        np.testing.assert_array_equal(fast_result.view(np.uint32), full_result.view(np.uint32))
        np.testing.assert_array_equal(fast_result.view(np.uint32), emu_result.view(np.uint32))
        for x, y in zip((c, a, b), before):  # inputs are never modified
            np.testing.assert_array_equal(x, y)


def test_a_result_fed_back_as_c_stays_on_the_fast_path():
    rng = np.random.default_rng([SEED, 1])
    c, a, b = _operands(rng, isa.get("tdpbf16ps"), 16, 16, 16)
    first = pyamx.tdpbf16ps(c, a, b, backend="emulator")
    assert _validate.fast_dot_shape("tdpbf16ps", first, a, b) == (16, 16, 16)
    second = pyamx.tdpbf16ps(first, a, b, backend="emulator")
    np.testing.assert_array_equal(second.view(np.uint32),
                                  pyamx.tdpbf16ps(np.asarray(first).copy(), a, b, backend="emulator").view(np.uint32))


@pytest.mark.parametrize("case", ["big-endian", "list", "masked", "M=17", "K=17", "3-D", "float64 c", "b rows"])
def test_the_fast_check_declines_and_the_full_checks_decide(case):
    rng = np.random.default_rng([SEED, 2])
    c, a, b = _operands(rng, isa.get("tdpbf16ps"), 4, 3, 5)
    if case == "big-endian":
        a = a.astype(">u2")
    elif case == "list":
        a = a.tolist()
    elif case == "masked":
        c = np.ma.masked_array(c)
    elif case == "M=17":
        c, a = np.zeros((17, 5), np.float32), np.zeros((17, 6), np.uint16)
    elif case == "K=17":
        a, b = np.zeros((4, 34), np.uint16), np.zeros((17, 10), np.uint16)
    elif case == "3-D":
        c = c[None]
    elif case == "float64 c":
        c = c.astype(np.float64)
    elif case == "b rows":
        b = b[:2]
    assert _validate.fast_dot_shape("tdpbf16ps", c, a, b) is None
    try:
        want = emulator.operands("tdpbf16ps", c, a, b)
    except (TypeError, ValueError) as exc:  # the full checks refuse it: the call raises the same error
        with pytest.raises(type(exc)) as raised:
            pyamx.tdpbf16ps(c, a, b, backend="emulator")
        assert str(raised.value) == str(exc)
        return
    got = pyamx.tdpbf16ps(c, a, b, backend="emulator")  # accepted with a copy: same bits as the copy
    np.testing.assert_array_equal(got.view(np.uint32),
                                  pyamx.tdpbf16ps(want.c, want.a, want.b, backend="emulator").view(np.uint32))


def test_a_dtype_accepted_by_name_joins_the_fast_check():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng([SEED, 3])
    c, a, b = _operands(rng, isa.get("tdpbf16ps"), 2, 2, 2)
    a16, b16 = a.view(ml_dtypes.bfloat16), b.view(ml_dtypes.bfloat16)
    first = pyamx.tdpbf16ps(c, a16, b16, backend="emulator")  # the full check learns the dtype
    assert _validate.fast_dot_shape("tdpbf16ps", c, a16, b16) == (2, 2, 2)
    np.testing.assert_array_equal(first, pyamx.tdpbf16ps(c, a16, b16, backend="emulator"))
    np.testing.assert_array_equal(first, pyamx.tdpbf16ps(c, a, b, backend="emulator"))
    assert _validate.fast_dot_shape("tdpbf16ps", c, a.astype(">u2"), b) is None  # never a foreign byte order


def test_errors_keep_their_order_and_words_on_the_fast_path():
    rng = np.random.default_rng([SEED, 4])
    c, a, b = _operands(rng, isa.get("tdpbf16ps"), 2, 2, 2)
    with pytest.raises(pyamx.errors.BackendError, match="backend is 'fast'"):
        pyamx.tdpbf16ps(c, a, b, backend="fast")
    with pytest.raises(pyamx.errors.BackendError, match="engine is 'fast'"):
        pyamx.tdpbf16ps(c, a, b, backend="emulator", engine="fast")
    with pytest.raises(TypeError, match="a has dtype float32"):  # operands first, as before
        pyamx.tdpbf16ps(c, a.astype(np.float32), b, backend="fast")


# -- TileMachine: the #UD checks run once per config, and again after any change -----------------


@pytest.mark.parametrize("engine", _engines())
def test_machine_shape_cache_follows_the_config(engine):
    machine = pyamx.emulator.TileMachine(engine=engine)
    machine.ldtilecfg(pyamx.TileConfig.make({0: (2, 8), 1: (2, 8), 2: (2, 8)}))
    machine.tileloadd(1, np.full((2, 8), 0x3F80, np.uint16), 16)  # bf16 1.0
    machine.tileloadd(2, np.full((2, 8), 0x3F80, np.uint16), 16)
    machine.tdpbf16ps(0, 1, 2)
    assert machine.tile(0).view(np.float32)[:2, :2].tolist() == [[4.0, 4.0], [4.0, 4.0]]
    # the same registers under a config where the shapes disagree: #UD, and the tile is untouched
    machine.ldtilecfg(pyamx.TileConfig.make({0: (2, 8), 1: (3, 8), 2: (2, 8)}))
    with pytest.raises(pyamx.InvalidOpcodeFault):
        machine.tdpbf16ps(0, 1, 2)
    machine.ldtilecfg(pyamx.TileConfig.make({0: (1, 4), 1: (1, 16), 2: (4, 4)}))
    machine.tileloadd(1, np.full((1, 8), 0x3F80, np.uint16), 16)
    machine.tileloadd(2, np.full((4, 2), 0x3F80, np.uint16), 4)
    machine.tdpbf16ps(0, 1, 2)
    assert machine.tile(0).view(np.float32)[0, 0] == 8.0
    assert not machine.tile(0).view(np.uint32)[1:].any() and not machine.tile(0).view(np.uint32)[0, 1:].any()
    with pytest.raises(TypeError):  # a bool is no register number, cached or not
        machine.tdpbf16ps(True, 1, 2)
    machine.tdpbf16ps(np.int64(0), np.int32(1), 2)  # numpy integers are registers too (uncached)
    assert machine.tile(0).view(np.float32)[0, 0] == 16.0


@pytest.mark.parametrize("name", isa.DOT_NAMES)
def test_machine_methods_agree_with_the_array_functions_on_both_engines(name):
    insn = isa.get(name)
    rng = np.random.default_rng([SEED, 5, isa.DOT_NAMES.index(name)])
    m, k, n = 5, 3, 7
    c, a, b = _operands(rng, insn, m, k, n)
    results = []
    numpy_only = name in _engine.NUMPY_ONLY
    for engine in _engines() + (["auto"] if numpy_only else []):
        machine = pyamx.emulator.TileMachine(engine=engine)
        machine.ldtilecfg(pyamx.TileConfig.make({0: (m, 4 * n), 1: (m, 4 * k), 2: (k, 4 * n)}))
        machine.tileloadd(0, np.ascontiguousarray(c), 4 * n)
        machine.tileloadd(1, np.ascontiguousarray(a), 4 * k)
        machine.tileloadd(2, np.ascontiguousarray(b), 4 * n)
        if numpy_only and engine not in ("numpy", "auto"):  # a machine on a named compiled engine refuses the row
            with pytest.raises(ValueError, match="only the numpy engine computes it"):
                getattr(machine, name)(0, 1, 2)
            continue
        getattr(machine, name)(0, 1, 2)
        tile = machine.tile(0)
        assert not tile[m:].any() and not tile[:m, 4 * n:].any()
        results.append(tile[:m, : 4 * n].copy().view(np.uint32))
        np.testing.assert_array_equal(results[-1], getattr(emulator, name)(c, a, b, engine=engine).view(np.uint32))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


# -- onetile's ordered reduction ------------------------------------------------------------------


@pytest.mark.parametrize("initial", [np.float32(0.0), np.float32(-0.0)])
def test_the_reduction_probe_rejects_any_other_order(initial):
    def pairwise(x, start):
        while x.shape[0] > 1:
            half = x.shape[0] // 2
            x = np.concatenate([x[:half] + x[half:2 * half], x[2 * half:]])
        return start + x[0]

    def reverse(x, start):
        return onetile._ordered_reduce(np.ascontiguousarray(x[::-1]), start)

    def from_the_first_row(x, start):  # the chain without the start value
        acc = x[0].copy()
        for row in x[1:]:
            acc += row
        return acc

    def from_the_other_zero(x, start):
        return onetile._ordered_reduce(x, -start)

    for count in (3, 4, 16, 33):
        for width in (2, 512):
            assert onetile._probe_reduce(count, width, initial)
            if count > 3:  # for three rows the pairwise grouping is the chain itself
                assert not onetile._probe_reduce(count, width, initial, pairwise)
            assert not onetile._probe_reduce(count, width, initial, reverse)
            if not np.signbit(initial):  # -0 + x is x for every x: from -0 is from the first row
                assert not onetile._probe_reduce(count, width, initial, from_the_first_row)
            assert not onetile._probe_reduce(count, width, initial, from_the_other_zero)


@pytest.mark.parametrize("count", list(range(1, 18)) + [33])
def test_chains_equal_the_explicit_chain(count):
    rng = np.random.default_rng([SEED, 6, count])
    for width in (2, 6, 32, 512):
        rows = (rng.standard_normal((count, width)) * np.exp2(rng.integers(-20, 20, (count, width)))).astype(np.float32)
        rows[rng.random(rows.shape) < 0.1] = -0.0
        rows[rng.random(rows.shape) < 0.1] = 0.0
        for initial in (np.float32(0.0), np.float32(-0.0)):
            want = np.add(rows[0], initial)
            for k in range(1, count):
                want = want + rows[k]
            got = onetile._chain(rows.copy(), initial)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("engine", _engines())
def test_machine_reads_its_tiles_in_place_without_touching_them(engine):
    import reference
    from pyamx.tools import testing as gen

    rng = np.random.default_rng([SEED, 7])
    machine = pyamx.emulator.TileMachine(engine=engine)
    for cls in gen.CLASSES:  # every tier of the numpy engine sees strided tile views
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        c, a, b = gen.operands(rng, m, k, n, cls)
        machine.ldtilecfg(pyamx.TileConfig.make({3: (m, 4 * n), 5: (m, 4 * k), 6: (k, 4 * n)}))
        machine.tileloadd(3, c, 4 * n)
        machine.tileloadd(5, a, 4 * k)
        machine.tileloadd(6, b, 4 * n)
        sources = machine.tile(5), machine.tile(6)
        machine.tdpbf16ps(3, 5, 6)
        np.testing.assert_array_equal(machine.tile(5), sources[0])
        np.testing.assert_array_equal(machine.tile(6), sources[1])
        want = np.asarray(reference.tdpbf16ps(c, a, b), dtype=np.uint64).astype(np.uint32)
        np.testing.assert_array_equal(machine.tile(3)[:m, : 4 * n].view(np.uint32), want, err_msg=cls)


def test_misaligned_operands_are_copied_before_any_engine_reads_them():
    rng = np.random.default_rng([SEED, 8])
    c, a, b = _operands(rng, isa.get("tdpbf16ps"), 4, 3, 5)
    buf = bytearray(a.nbytes + 1)
    odd = np.frombuffer(buf, dtype=np.uint16, offset=1, count=a.size).reshape(a.shape)
    odd[...] = a
    assert not odd.flags.aligned and odd.flags.c_contiguous
    assert _validate.fast_dot_shape("tdpbf16ps", c, odd, b) is None
    assert emulator.operands("tdpbf16ps", c, odd, b).a.flags.aligned
    for engine in _engines():
        np.testing.assert_array_equal(pyamx.tdpbf16ps(c, odd, b, backend="emulator", engine=engine),
                                      pyamx.tdpbf16ps(c, a, b, backend="emulator", engine=engine))
