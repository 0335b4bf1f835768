"""pyamx.matmul against the tile instructions it is defined by, and against the exact reference.

The schedule is run here, independently of pyamx.matmul's own packing, as
explicit LDTILECFG / TILELOADD / TDP* / TILESTORED sequences on the emulated
TileMachine, with edge tiles configured smaller as real code configures them.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyamx
import reference
from pyamx import TileConfig, TileMachine
from pyamx.table import bf16, isa

# matmul runs on each of these engines; the schedule it is held against runs on the numpy engine's
# one-instruction path. "auto" is the best compiled engine where one is built (else numpy again).
# None: PYAMX_ENGINE (auto when unset), so the CI leg that sets it runs these on every engine.
ENGINES = ["numpy", None]

SEED = 20261210
BF16_POOL = np.array(
    [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F,  # +-0, bf16 denormals
     0x7F80, 0xFF80, 0x7F81, 0xFFC1, 0x7FA5, 0xFF92,  # infinities, NaNs (signalling, quiet, payloads)
     0x2000, 0xA000, 0x1FFF, 0x2080, 0x1A00,  # products near 2**-126
     0x5F80, 0xDF80, 0x7F7F, 0x6000,  # products that overflow
     0x3F80, 0xBF80, 0x3980, 0xB980, 0x3400, 0x3A00],  # ones and half-ulp ties
    dtype=np.uint16,
)
FP32_POOL = np.array(
    [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,
     0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC12345, 0x7F800001, 0x3F800000, 0xBF800001],
    dtype=np.uint32,
)


# -- the schedule, written out as tile instructions -----------------------------------------

GROUP = {insn.name: (insn.lanes, np.uint16 if insn.is_float else np.uint8) for insn in isa.DOTS}


def tile_schedule(mnemonic, a_bits, b_bits, c_bits, numerics="sdm"):
    """What the documented schedule of tile instructions leaves in C, bit for bit.

    a_bits (M, K), b_bits (K, N) raw element bits; c_bits (M, N) uint32.
    Output tiles of up to 16 x 16, K blocks of 16 dwords (the last one
    smaller), the last dword padded with -0 (A) and +0 (B) for floats, 0 for
    bytes. One LDTILECFG per output tile: tmm0 C, tmm1/tmm2 a full A/B block,
    tmm3/tmm4 the edge block.
    """
    lanes, dtype = GROUP[mnemonic]
    m, k = a_bits.shape
    n = b_bits.shape[1]
    kd = -(-k // lanes)
    a_pad = np.full((m, kd * lanes), 0x8000 if lanes == 2 else 0, dtype=dtype)
    a_pad[:, :k] = a_bits
    b_pad = np.zeros((kd * lanes, n), dtype=dtype)
    b_pad[:k] = b_bits
    b_vnni = bf16.pack_pairs(b_pad) if lanes == 2 else bf16.pack_quads(b_pad)
    c_mem = np.array(c_bits, dtype=np.uint32)
    a_stride, b_stride, c_stride = a_pad.strides[0], b_vnni.strides[0], c_mem.strides[0]
    machine = TileMachine(numerics, engine="numpy")
    for m0 in range(0, m, 16):
        rows = min(16, m - m0)
        for n0 in range(0, n, 16):
            cols = min(16, n - n0)
            edge = kd % 16
            shapes = {0: (rows, 4 * cols), 1: (rows, 64), 2: (16, 4 * cols)}
            if edge:
                shapes.update({3: (rows, 4 * edge), 4: (edge, 4 * cols)})
            if kd < 16:
                del shapes[1], shapes[2]
            machine.ldtilecfg(TileConfig.make(shapes))
            machine.tileloadd(0, c_mem, c_stride, offset=m0 * c_stride + 4 * n0)
            for k0 in range(0, kd, 16):
                ta, tb = (1, 2) if k0 + 16 <= kd else (3, 4)
                machine.tileloadd(ta, a_pad, a_stride, offset=m0 * a_stride + 4 * k0)
                machine.tileloadd(tb, b_vnni, b_stride, offset=k0 * b_stride + 4 * n0)
                getattr(machine, mnemonic)(0, ta, tb)
            machine.tilestored(0, c_mem, c_stride, offset=m0 * c_stride + 4 * n0)
    return c_mem


def _bits(x):
    return np.asarray(x).view(np.uint32)


def assert_same_bits(got, want, what):
    got, want = _bits(got), _bits(want)
    bad = np.argwhere(got != want)
    assert not bad.size, (
        f"{what}: {len(bad)} of {got.size} elements differ; first at {tuple(bad[0])}: "
        f"got {int(got[tuple(bad[0])]):08x}, want {int(want[tuple(bad[0])]):08x}"
    )


def random_bf16(rng, shape, adversarial):
    values = bf16.from_float32(rng.standard_normal(shape).astype(np.float32))
    if adversarial:
        pick = rng.random(shape) < 0.3
        values = np.where(pick, rng.choice(BF16_POOL, shape), values).astype(np.uint16)
    return values


def random_fp16(rng, shape, adversarial):
    values = rng.standard_normal(shape).astype(np.float16).view(np.uint16)
    if adversarial:
        pool = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7C01, 0xFE3F, 0x7BFF, 0xFBFF, 0x3C00],
                        dtype=np.uint16)
        values = np.where(rng.random(shape) < 0.3, rng.choice(pool, shape), values).astype(np.uint16)
    return values


def random_c(rng, shape, adversarial):
    c = rng.standard_normal(shape).astype(np.float32).view(np.uint32)
    if adversarial:
        c = np.where(rng.random(shape) < 0.3, rng.choice(FP32_POOL, shape), c).astype(np.uint32)
    return c


ODD_SHAPES = [(1, 1, 1), (1, 70, 1), (70, 1, 70), (17, 33, 15), (16, 32, 16), (3, 31, 29), (13, 65, 7),
              (31, 97, 2), (2, 129, 37), (47, 5, 53), (5, 3, 70), (19, 64, 23), (61, 11, 17)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("m, k, n", ODD_SHAPES)
@pytest.mark.parametrize("adversarial", [False, True], ids=["random", "adversarial"])
def test_bf16_matmul_is_the_tile_schedule(m, k, n, adversarial, engine):
    rng = np.random.default_rng([SEED, m, k, n, adversarial])
    a, b, c = random_bf16(rng, (m, k), adversarial), random_bf16(rng, (k, n), adversarial), random_c(rng, (m, n), adversarial)
    want = tile_schedule("tdpbf16ps", a, b, c)
    got = pyamx.matmul(a, b, c.view(np.float32), backend="emulator", engine=engine)
    assert_same_bits(got, want, f"bf16 {m}x{k}x{n} on {got.engine}")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("m, k, n", ODD_SHAPES[::2])
@pytest.mark.parametrize("adversarial", [False, True], ids=["random", "adversarial"])
def test_fp16_matmul_is_the_tile_schedule(m, k, n, adversarial, engine):
    rng = np.random.default_rng([SEED, 2, m, k, n, adversarial])
    a, b, c = random_fp16(rng, (m, k), adversarial), random_fp16(rng, (k, n), adversarial), random_c(rng, (m, n), adversarial)
    want = tile_schedule("tdpfp16ps", a, b, c)
    got = pyamx.matmul(a.view(np.float16), b.view(np.float16), c.view(np.float32), backend="emulator", engine=engine)
    assert_same_bits(got, want, f"fp16 {m}x{k}x{n} on {got.engine}")
    assert_same_bits(pyamx.matmul(a, b, c, kind="fp16", backend="emulator", engine=engine), want, "fp16 as uint16 bits")


@pytest.mark.parametrize("a_dtype, b_dtype, mnemonic", [
    (np.int8, np.int8, "tdpbssd"), (np.int8, np.uint8, "tdpbsud"),
    (np.uint8, np.int8, "tdpbusd"), (np.uint8, np.uint8, "tdpbuud")])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("m, k, n", ODD_SHAPES[1::2] + [(9, 130, 11)])
def test_int8_matmul_is_the_tile_schedule(a_dtype, b_dtype, mnemonic, m, k, n, engine):
    rng = np.random.default_rng([SEED, 3, m, k, n])
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    a[:, ::3] = 0x80 if a_dtype is np.int8 else 0xFF  # extremes
    c = rng.integers(-(2**31), 2**31, (m, n)).astype(np.int32)
    c.flat[::5] = 2**31 - 1  # wrap-around
    want = tile_schedule(mnemonic, a, b, c.view(np.uint32))
    got = pyamx.matmul(a.view(a_dtype), b.view(b_dtype), c, backend="emulator", engine=engine)
    assert got.dtype == np.int32
    assert_same_bits(got, want, f"{mnemonic} {m}x{k}x{n}")


@pytest.mark.parametrize("numerics", ["straight", "fused_pair", "wide",
                                      pyamx.Numerics(tininess="before", dest_daz=False, input_daz=False, nan="canonical")],
                         ids=lambda x: getattr(x, "name", x))
def test_other_numerics_follow_the_same_schedule(numerics):
    rng = np.random.default_rng([SEED, 4])
    m, k, n = (7, 37, 18) if numerics in ("fused_pair", "wide") else (19, 67, 17)
    a, b, c = random_bf16(rng, (m, k), True), random_bf16(rng, (k, n), True), random_c(rng, (m, n), True)
    want = tile_schedule("tdpbf16ps", a, b, c, numerics)
    got = pyamx.matmul(a, b, c, backend="emulator", numerics=numerics)
    assert_same_bits(got, want, f"{numerics} {m}x{k}x{n}")


# -- against the exact reference, with no padding at all -------------------------------------


def reference_chain(a_values, b_values, c_bits, *, lanes_per_block=32, structure="sdm", tininess="after",
                    dest_daz=True, pad=None):
    """One output element by the schedule, from docs/semantics.md, with the reference's own fma32/add32.

    a_values, b_values: the K decoded values of a row of A and a column of B.
    With ``pad=None`` an odd K simply ends with an even-lane step (no
    padding step at all); ``pad=(a_value, b_value)`` runs the padding step.
    """
    k = len(a_values)
    c = c_bits
    for k0 in range(0, k, lanes_per_block):
        block = list(range(k0, min(k0 + lanes_per_block, k)))
        pairs = [(a_values[i], b_values[i]) for i in block]
        if pad is not None and len(pairs) % 2:
            pairs.append(pad)
        c_value = reference.decode32(c, dest_daz)
        if structure == "sdm":
            lanes = [("num", reference.Fraction(0), False)] * 2
            for i, (x, y) in enumerate(pairs):
                lanes[i % 2] = reference.decode32(reference.fma32(x, y, lanes[i % 2], tininess), True)
            t = reference.decode32(reference.add32(lanes[0], lanes[1], tininess), True)
            c = reference.add32(c_value, t, tininess)
        else:
            acc = c_value
            for x, y in pairs:
                c = reference.fma32(x, y, acc, tininess)
                acc = reference.decode32(c, True)
    return c


def _reference_matrix(a, b, c, decode, **kw):
    m, k = a.shape
    n = b.shape[1]
    a_values = [[decode(int(x)) for x in row] for row in a]
    b_values = [[decode(int(x)) for x in col] for col in b.T]
    return np.array([[reference_chain(a_values[i], b_values[j], int(c[i, j]), **kw) for j in range(n)]
                     for i in range(m)], dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("m, k, n", [(3, 1, 2), (4, 33, 3), (2, 65, 5), (5, 7, 4), (3, 64, 3), (2, 45, 3)])
@pytest.mark.parametrize("seed", range(3))
def test_bf16_matmul_matches_the_reference_without_padding(m, k, n, seed, engine):
    """Adversarial data (denormals, +-0, inf, NaN payloads, overflow, ties) and no padding step in the reference."""
    rng = np.random.default_rng([SEED, 5, m, k, n, seed])
    a, b, c = random_bf16(rng, (m, k), True), random_bf16(rng, (k, n), True), random_c(rng, (m, n), True)
    want = _reference_matrix(a, b, c, lambda x: reference.decode_bf16(x, True))
    got = pyamx.matmul(a, b, c, backend="emulator", engine=engine)
    assert_same_bits(got, want, f"bf16 {m}x{k}x{n} on {got.engine} vs reference")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("m, k, n", [(3, 1, 2), (4, 33, 3), (2, 65, 5), (5, 7, 4)])
def test_fp16_matmul_matches_the_reference_without_padding(m, k, n, engine):
    rng = np.random.default_rng([SEED, 6, m, k, n])
    a, b, c = random_fp16(rng, (m, k), True), random_fp16(rng, (k, n), True), random_c(rng, (m, n), True)
    want = _reference_matrix(a, b, c, reference.decode_fp16)
    got = pyamx.matmul(a, b, c, kind="fp16", backend="emulator", engine=engine)
    assert_same_bits(got, want, f"fp16 {m}x{k}x{n} on {got.engine} vs reference")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("signed_a, signed_b", [(True, True), (True, False), (False, True), (False, False)])
def test_int8_matmul_matches_exact_integers(signed_a, signed_b, engine):
    rng = np.random.default_rng([SEED, 7, signed_a, signed_b])
    m, k, n = 6, 4099, 5  # many blocks, K not a multiple of 4
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    a[0], b[:, 0] = 0x80, 0x80  # -128 * -128 (or 128 * 128) all along
    c = rng.integers(-(2**31), 2**31, (m, n)).astype(np.int32)
    av = a.view(np.int8) if signed_a else a
    bv = b.view(np.int8) if signed_b else b
    exact = [[(int(c[i, j]) + sum(int(x) * int(y) for x, y in zip(av[i], bv[:, j]))) % 2**32 for j in range(n)]
             for i in range(m)]
    want = np.array(exact, dtype=np.uint64).astype(np.uint32)
    assert_same_bits(pyamx.matmul(av, bv, c, backend="emulator", engine=engine), want, "int8 vs Python integers")


# -- padding ------------------------------------------------------------------------------------

# Every lane value a padding step can meet: lanes are fma32/add32 results, so
# never denormal, and their NaNs are quiet (and canonical under those rules).
LANES = [0x00000000, 0x80000000, 0x00800000, 0x80800000, 0x3F800001, 0xC0490FDB, 0x7F7FFFFF, 0xFF7FFFFF,
         0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFE00001]


@pytest.mark.parametrize("tininess", ["after", "before"])
def test_minus_zero_padding_step_never_changes_a_lane(tininess):
    """fma32(-0, +0, lane) == lane for every lane value, in both tininess rules.

    The padded product is -0 * +0 = -0, exact; -0 + x = x for every x
    (+0 + -0 = +0, -0 + -0 = -0, inf, a quiet NaN returns itself quieted,
    i.e. unchanged), and a lane is never denormal so no flush can act.
    The same holds for the straight accumulator and (a -0 term) for the
    exact sums of fused_pair and wide.
    """
    minus_zero, plus_zero = reference.decode_bf16(0x8000, True), reference.decode_bf16(0x0000, True)
    for lane in LANES:
        assert reference.fma32(minus_zero, plus_zero, reference.decode32(lane, True), tininess) == lane, hex(lane)
        for other in LANES:  # fused_pair/wide: the pad term joins another product and the accumulator
            x = reference.decode32(other, True)
            y = reference.decode_bf16(0x3F80, True)
            with_pad = reference.single_rounding([x, y, minus_zero, plus_zero], reference.decode32(lane, True), tininess)
            without = reference.single_rounding([x, y], reference.decode32(lane, True), tininess)
            assert with_pad == without, (hex(lane), hex(other))


def test_plus_zero_padding_would_be_visible_under_ftz():
    """Why A is padded with -0: a lane can be -0 (FTZ keeps the sign of a tiny negative product),
    and +0 * +0 added to it makes +0. With C = -0 and both lanes -0 that reaches the result."""
    tiny, minus_tiny = 0x1F80, 0x9F80  # 2**-64, -2**-64: each product is -2**-128, flushed to -0
    a = np.array([[tiny, tiny, tiny]], dtype=np.uint16)  # K = 3: the second dword is half padding
    b = np.array([[minus_tiny], [minus_tiny], [minus_tiny]], dtype=np.uint16)
    c = np.array([[0x80000000]], dtype=np.uint32)
    a_values = [reference.decode_bf16(int(x), True) for x in a[0]]
    b_values = [reference.decode_bf16(int(x), True) for x in b[:, 0]]
    unpadded = reference_chain(a_values, b_values, 0x80000000)
    plus_zero_pad = reference_chain(a_values, b_values, 0x80000000,
                                    pad=(reference.decode_bf16(0, True), reference.decode_bf16(0, True)))
    minus_zero_pad = reference_chain(a_values, b_values, 0x80000000,
                                     pad=(reference.decode_bf16(0x8000, True), reference.decode_bf16(0, True)))
    assert (unpadded, plus_zero_pad, minus_zero_pad) == (0x80000000, 0x00000000, 0x80000000)
    for engine in ENGINES:
        assert int(_bits(pyamx.matmul(a, b, c, backend="emulator", engine=engine))[0, 0]) == unpadded


@pytest.mark.parametrize("options", [
    dict(structure="straight"), dict(tininess="before"), dict(dest_daz=False), dict(input_daz=False),
    dict(structure="straight", tininess="before", dest_daz=False, input_daz=False)], ids=str)
def test_odd_k_under_every_numerics_option_matches_the_unpadded_reference(options):
    """fused_pair and wide are covered by the schedule test above and the padding-term check."""
    rng = np.random.default_rng([SEED, 8, len(str(options))])
    options = dict(options)
    input_daz = options.pop("input_daz", True)
    for m, k, n in [(3, 5, 2), (2, 35, 3), (2, 1, 2)]:
        a, b, c = random_bf16(rng, (m, k), True), random_bf16(rng, (k, n), True), random_c(rng, (m, n), True)
        want = _reference_matrix(a, b, c, lambda x: reference.decode_bf16(x, input_daz), **options)
        got = pyamx.matmul(a, b, c, backend="emulator", numerics=pyamx.Numerics(input_daz=input_daz, **options))
        assert_same_bits(got, want, f"{options} {m}x{k}x{n}")


# -- the native backend: the same bits --------------------------------------------------------


@pytest.mark.parametrize("mnemonic", isa.DOT_NAMES)
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (17, 33, 15), (5, 70, 3), (33, 129, 18)])
def test_native_matmul_is_the_emulator_bit_for_bit(native_group, mnemonic, m, k, n):
    """On silicon, or in the trap mode in CI: the native kernels against the emulator, adversarial data."""
    group = isa.get(mnemonic).group
    native_group(group)
    rng = np.random.default_rng([SEED, 9, m, k, n, len(mnemonic)])
    if group == "int8":
        signed = isa.get(mnemonic).signed
        a = rng.integers(0, 256, (m, k)).astype(np.uint8).view(np.int8 if signed[0] else np.uint8)
        b = rng.integers(0, 256, (k, n)).astype(np.uint8).view(np.int8 if signed[1] else np.uint8)
        c = rng.integers(-(2**31), 2**31, (m, n)).astype(np.int32)
        kind = None
    elif group == "fp8":  # every code, NaN and infinity encodings included, as the row's two formats
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="fp8 operands by their dtypes need ml_dtypes")
        insn = isa.get(mnemonic)
        dtype = (lambda fmt: getattr(ml_dtypes, fmt.infers[0]))
        a = rng.integers(0, 256, (m, k)).astype(np.uint8).view(dtype(insn.a_format))
        b = rng.integers(0, 256, (k, n)).astype(np.uint8).view(dtype(insn.b_format))
        c, kind = random_c(rng, (m, n), True), None
    elif group == "complex":  # both instructions: the real and the imaginary chain
        a = random_fp16(rng, (m, 2 * k), True).view(np.uint16).view(np.uint32)
        b = random_fp16(rng, (k, 2 * n), True).view(np.uint16).view(np.uint32)
        c = np.stack([random_c(rng, (m, n), True), random_c(rng, (m, n), True)], axis=-1).view(np.complex64)[..., 0]
        kind = "complex"
    else:
        make = random_bf16 if group == "bf16" else random_fp16
        a, b, c = make(rng, (m, k), True), make(rng, (k, n), True), random_c(rng, (m, n), True)
        kind = group
    got = pyamx.matmul(a, b, c, kind=kind, backend="native")
    assert got.backend == "native" and got.native_mode in ("silicon", "trap", "complement")
    want = pyamx.matmul(a, b, c, kind=kind, backend="emulator")
    assert_same_bits(got, want, f"native {mnemonic} {m}x{k}x{n}")
