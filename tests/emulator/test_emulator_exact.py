"""The emulator against the independent Fraction reference, bit for bit (uint32)."""

from __future__ import annotations

import numpy as np
import pytest

from pyamx.tools import testing as gen
import reference
import pyamx
from pyamx import emulator
from pyamx.emulator import Numerics

SEED = 20261202


def _compare(name, got, want, c, a, b):
    got = np.asarray(got).view(np.uint32)
    want = np.asarray(want, dtype=np.uint64).astype(np.uint32)
    bad = np.argwhere(got != want)
    if bad.size:
        m, n = bad[0]
        pytest.fail(
            f"{name}: {len(bad)} elements differ; first at (m={m}, n={n}): got {int(got[m, n]):08x}, "
            f"reference {int(want[m, n]):08x}\n"
            + "\n".join(gen.hexdump(label, x) for label, x in (("c", c), ("a", a), ("b", b)))
        )


@pytest.mark.parametrize("structure", ["sdm", "straight", "fused_pair", "wide"])
@pytest.mark.parametrize("cls", gen.CLASSES)
def test_every_input_class_matches_reference(cls, structure):
    rng = np.random.default_rng([SEED, gen.CLASSES.index(cls), len(structure)])
    shape_count = 10 if structure in ("sdm", "straight") else 4
    for m, k, n in gen.shapes(rng, shape_count)[:: 1 if structure in ("sdm", "straight") else 2]:
        c, a, b = gen.operands(rng, m, k, n, cls)
        got = emulator.tdpbf16ps(c, a, b, numerics=structure)
        want = reference.tdpbf16ps(c, a, b, structure=structure)
        _compare(f"{structure}/{cls} M={m} K={k} N={n}", got, want, c, a, b)


@pytest.mark.parametrize("cls", gen.CLASSES)
def test_default_backend_matches_reference(cls):
    """pyamx.tdpbf16ps on the process default backend: under PYAMX_BACKEND=native this holds
    silicon (or the trap mode) directly against the independent reference."""
    rng = np.random.default_rng([SEED, 99, gen.CLASSES.index(cls)])
    for m, k, n in gen.shapes(rng, 10):
        c, a, b = gen.operands(rng, m, k, n, cls)
        got = pyamx.tdpbf16ps(c, a, b)
        _compare(f"backend {got.backend}/{cls} M={m} K={k} N={n}", got, reference.tdpbf16ps(c, a, b), c, a, b)


@pytest.mark.parametrize(
    "options",
    [
        dict(tininess="before"),
        dict(dest_daz=False),
        dict(input_daz=False),
        dict(structure="straight", tininess="before", dest_daz=False, input_daz=False),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
@pytest.mark.parametrize("cls", ["denormal", "tiny", "mixed"])
def test_numerics_options_match_reference(cls, options):
    rng = np.random.default_rng([SEED, 7, gen.CLASSES.index(cls)])
    numerics = Numerics(**options)
    for m, k, n in gen.shapes(rng, 10):
        c, a, b = gen.operands(rng, m, k, n, cls)
        got = emulator.tdpbf16ps(c, a, b, numerics=numerics)
        want = reference.tdpbf16ps(c, a, b, **options)
        _compare(f"{numerics.name}/{cls} M={m} K={k} N={n}", got, want, c, a, b)


def test_adversarial_classes_reach_their_rules():
    """The generators must actually produce flushes, round-ups to 2**-126, overflow, NaNs, -0 and cancellation."""
    rng = np.random.default_rng(SEED)
    seen = set()
    for cls in gen.CLASSES:
        for m, k, n in gen.shapes(rng, 8):
            c, a, b = gen.operands(rng, m, k, n, cls)
            bits = emulator.tdpbf16ps(c, a, b).view(np.uint32)
            magnitude = bits & 0x7FFFFFFF
            if (magnitude == 0x00800000).any():
                seen.add("min_normal")
            if ((magnitude == 0x7F800000) & ~np.isinf(c.view(np.float32))).any():
                seen.add("overflow")
            if ((bits & 0x7F800000) == 0x7F800000).any() and (magnitude > 0x7F800000).any():
                seen.add("nan")
            if (bits == 0xFFC00000).any():
                seen.add("default_nan")
            if (bits == 0x80000000).any():
                seen.add("negative_zero")
            if cls == "cancel" and (magnitude == 0).any():
                seen.add("cancellation")
            if cls == "tiny" and (magnitude == 0).any():
                seen.add("flushed")
    assert seen >= {"min_normal", "overflow", "nan", "default_nan", "negative_zero", "cancellation", "flushed"}, seen


# Probes of docs/semantics.md section 3: the operands are pyamx.tools.probe.POINTS (defined once, used by
# `pyamx probe` too); the bits each model gives are the spec's, restated here as the expectation.
PROBES = {
    "sdm": {"P1": 0x3F800001, "P2": 0x3F800001, "P7": 0x00000000},
    "straight": {"P1": 0x3F800000, "P2": 0x3F800000, "P7": 0x80000000},
    "fused_pair": {"P1": 0x3F800001, "P2": 0x3F800000},
    "wide": {"P1": 0x3F800001, "P2": 0x3F800001},
}


@pytest.mark.parametrize("model", sorted(PROBES))
def test_probe_points_give_the_published_bits_on_emulator_and_reference(model):
    from pyamx.tools.probe import point

    for name, expected in PROBES[model].items():
        e = point(name)
        got = int(emulator.tdpbf16ps(e.c, e.a, e.b, numerics=model).view(np.uint32)[0, 0])
        ref = reference.tdpbf16ps(e.c, e.a, e.b, structure=model)[0][0]
        assert got == ref == expected, f"{name} under {model}: emulator {got:08x}, reference {ref:08x}, spec {expected:08x}"


def test_single_rules_by_hand():
    """A few rules of docs/semantics.md section 2 spelled out, one element each."""

    def run(c, a_pair, b_pair, **kw):
        c = np.array([[c]], np.uint32)
        return int(emulator.tdpbf16ps(c, np.array([a_pair], np.uint16), np.array([b_pair], np.uint16), **kw).view(np.uint32)[0, 0])

    one = 0x3F80
    assert run(0x00000001, (0, 0), (0, 0)) == 0x00000000  # denormal destination is DAZ'd, +0 result
    # C = -2**-127 (denormal) plus t = 2**-125: DAZ drops C, "used as is" keeps it
    assert run(0x80400000, (0x2000, 0), (0x2080, 0)) == 0x01000000
    assert run(0x80400000, (0x2000, 0), (0x2080, 0), numerics=Numerics(dest_daz=False)) == 0x00C00000
    assert run(0, (0x0001, 0), (one, 0)) == 0  # bf16 denormal input counts as zero
    assert run(0, (0x7F80, 0), (0x0000, 0)) == 0xFFC00000  # inf * 0 is invalid
    assert run(0, (0x7F81, 0x7FC2), (one, one)) == 0x7FC10000  # first NaN (even lane), quieted
    assert run(0xFFC12345, (0x7F81, 0), (one, 0)) == 0xFFC12345  # C is the first operand of the final add
    assert run(0, (0x7F81, 0), (one, 0), numerics=Numerics(nan="canonical")) == 0x7FC00000
    assert run(0, (0x2000, 0), (0x2000, 0)) == 0x00800000  # 2**-63 * 2**-63 = 2**-126 exactly: kept
    assert run(0, (0x1FFF, 0), (0x2000, 0)) == 0x00000000  # (1 - 2**-8) * 2**-126: flushed
    assert run(0x7F7FFFFF, (0x7F00, 0), (0x4000, 0)) == 0x7F800000  # overflow to +inf


def test_result_that_rounds_up_to_min_normal():
    """Even lane: 2**-126, + 2**-149, - 1.25 * 2**-149 = 2**-126 * (1 - 2**-25): a tie that rounds up to 2**-126."""
    c = np.zeros((1, 1), np.uint32)
    a = np.array([[0x2000, 0, 0x1A00, 0, 0x9A20, 0]], np.uint16)
    b = np.array([[0x2000, 0], [0x1A80, 0], [0x1A80, 0]], np.uint16)
    after = int(emulator.tdpbf16ps(c, a, b).view(np.uint32)[0, 0])
    before = int(emulator.tdpbf16ps(c, a, b, numerics=Numerics(tininess="before")).view(np.uint32)[0, 0])
    assert after == reference.tdpbf16ps(c, a, b)[0][0] == 0x00800000
    assert before == reference.tdpbf16ps(c, a, b, tininess="before")[0][0] == 0x00000000
