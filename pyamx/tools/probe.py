"""Which numerics does a backend implement? Discriminating experiments, point by point.

Each point of docs/semantics.md section 3 (and a few more a user of silicon asks
about) gets experiments whose answers differ between the candidate options.
The backend's bits are compared with what the emulator predicts under each
candidate; the candidates that reproduce every experiment of a point are
its verdict. Finally the complete option set built from the verdicts is run
on every experiment, so "matches bit for bit" is a claim about all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, Union

import numpy as np
import numpy.typing as npt

from .. import _backend, emulator
from ..table import isa
from ..emulator.complex_rows import fp16_operand
from ..table.numerics import FP8_ACCUMS, FP8_NAN_RULES, NAN_RULES, STRUCTURES, TININESS, Numerics, resolve
from .testing import operands

if TYPE_CHECKING:
    from .._backend import Backend
    from ..cpu.native import NativeMachine
    from ..emulator.machine import TileMachine

#: a report as the CLI prints it with --json: a JSON object (its keys include the point names)
JsonReport = dict[str, Any]
#: a point's candidate value -> the Numerics fields (and the probe's own switches) it sets
Candidates = dict[Union[str, bool], dict[str, Any]]
#: what a row experiment observed: the 16 result dwords (or "#UD") and start_row afterwards
RowObservation = tuple[Union[tuple[int, ...], str], int]


def _route(a: str, b: str) -> str:
    """The name of the dot product pyamx.matmul runs for operand formats ``a`` x ``b`` (the table's route)."""
    return isa.MATMUL_ROUTES[(a, b)].name


def _complex(part: str) -> str:
    """The name of the complex row that accumulates ``part`` (``"real"`` or ``"imaginary"``)."""
    return next(i.name for i in isa.DOTS if i.kind == "dot-complex" and i.part == part)


# The experiments' instructions, chosen from the table by what they compute: the default is the bf16
# dot product; the others answer the same questions for their own formats.
_BF16, _FP16 = _route("bf16", "bf16"), _route("fp16", "fp16")
_BF8, _BF8_HF8, _HF8 = _route("bf8", "bf8"), _route("bf8", "hf8"), _route("hf8", "hf8")
_REAL, _IMAGINARY = _complex("real"), _complex("imaginary")


@dataclass
class Experiment:
    name: str
    c: np.ndarray  # uint32 bits
    a: np.ndarray  # uint16 bf16 (or fp16) bits
    b: np.ndarray  # uint16 bits, pair-interleaved
    instruction: str = _BF16


def _one(name: str, c: int, a_pairs: Iterable[tuple[int, int]], b_pairs: Iterable[tuple[int, int]],
         instruction: str = _BF16) -> Experiment:
    """One output element: c bits, A as a row of (even, odd) pairs per k, B as one row per k."""
    return Experiment(
        name,
        np.array([[c]], np.uint32),
        np.array([[x for pair in a_pairs for x in pair]], np.uint16),
        np.array([list(pair) for pair in b_pairs], np.uint16),
        instruction,
    )


def _random(name: str, seed: int, cls: str) -> Experiment:
    c, a, b = operands(np.random.default_rng(seed), 16, 16, 16, cls)
    return Experiment(name, c, a, b)


def _random_fp16(name: str, seed: int) -> Experiment:
    """Normal fp16 values with exponents near 0, so sums round often and never overflow."""
    rng = np.random.default_rng(seed)

    def halves(shape: tuple[int, ...]) -> npt.NDArray[np.uint16]:
        sign = rng.integers(0, 2, shape, dtype=np.uint16) << 15
        exponent = rng.integers(9, 22, shape).astype(np.uint16) << 10
        mantissa = rng.integers(0, 1024, shape, dtype=np.uint16)
        bits: npt.NDArray[np.uint16] = (sign | exponent | mantissa).astype(np.uint16)
        return bits

    c = (rng.integers(0, 2, (16, 16), dtype=np.uint32) << 31) | np.uint32(0x3F000000) | rng.integers(0, 1 << 23, (16, 16), dtype=np.uint32)
    return Experiment(name, c.astype(np.uint32), halves((16, 32)), halves((16, 32)), _FP16)


def _fp8(name: str, c: int, a_quads: Iterable[Sequence[int]], b_quads: Iterable[Sequence[int]],
         instruction: str = _BF8) -> Experiment:
    """One output element of an AMX-FP8 row: c bits, A as one (4 fp8 codes) dword per k, B one per k."""
    return Experiment(name, np.array([[c]], np.uint32), np.array([[x for quad in a_quads for x in quad]], np.uint8),
                      np.array([list(quad) for quad in b_quads], np.uint8), instruction)


def _random_fp8(name: str, seed: int, instruction: str) -> Experiment:
    """16x16x16 finite fp8 codes of the row's formats (NaN and infinity codes redrawn as zeros), C random normal."""
    rng = np.random.default_rng(seed)
    insn = isa.get(instruction)

    def codes(shape: tuple[int, ...], fmt: isa.Format) -> npt.NDArray[np.uint8]:
        x = rng.integers(0, 256, shape, dtype=np.uint8)
        special = ((x >> fmt.mantissa) & ((1 << fmt.exponent) - 1)) == (1 << fmt.exponent) - 1
        if fmt.specials == "nan-only":
            special = (x & 0x7F) == 0x7F
        drawn: npt.NDArray[np.uint8] = np.where(special, np.uint8(0), x).astype(np.uint8)
        return drawn

    c = (rng.integers(0, 2, (16, 16), dtype=np.uint32) << 31) | np.uint32(0x3F000000) | rng.integers(0, 1 << 23, (16, 16), dtype=np.uint32)
    a_fmt, b_fmt = insn.src_formats
    return Experiment(name, c.astype(np.uint32), codes((16, 64), a_fmt), codes((16, 64), b_fmt),
                      instruction)


ONE = 0x3F80
HALF_ONE = 0x3C00  # fp16 1.0

#: The probes of docs/semantics.md section 3, defined here once for the probe, the tests and the docs:
#: name -> (description, c bits, A as (even, odd) bf16 pairs per k, B as (even, odd) pairs per k).
#: One output element; "products per k" are (A even * B even, A odd * B odd).
POINTS = {
    "P1": ("C=1, k0 products (2^-24, 2^-24)", 0x3F800000, [(0x3980, 0x3980)], [(0x3980, 0x3980)]),
    "P2": ("C=0, k0 (1, 2^-24), k1 (0, 2^-24)", 0, [(ONE, 0x3380), (0, 0x3380)], [(ONE, ONE), (ONE, ONE)]),
    "P7": ("C=-0, all products -0", 0x80000000, [(0x8000, 0x8000)], [(ONE, ONE)]),
}
#: The same three questions asked of TDPFP16PS (fp16 bits: 0x0C00 = 2^-12, HALF_ONE = 1).
FP16_POINTS = {
    "P1": ("C=1, k0 products (2^-24, 2^-24)", 0x3F800000, [(0x0C00, 0x0C00)], [(0x0C00, 0x0C00)]),
    "P2": ("C=0, k0 (1, 2^-24), k1 (0, 2^-24)", 0, [(HALF_ONE, 0x0C00), (0, 0x0C00)],
           [(HALF_ONE, 0x0C00), (HALF_ONE, 0x0C00)]),
    "P7": ("C=-0, all products -0", 0x80000000, [(0x8000, 0x8000)], [(HALF_ONE, HALF_ONE)]),
}


def _is_fp16(instruction: str) -> bool:
    return isa.BY_NAME[instruction].group == "fp16"


def point(name: str, instruction: str = _BF16) -> Experiment:
    """Probe ``name`` (P1, P2, P7) as an experiment: c (1, 1) uint32, a (1, 2K), b (K, 2) uint16 bits."""
    points, prefix = (FP16_POINTS, "FP16 ") if _is_fp16(instruction) else (POINTS, "")
    text, c, a_pairs, b_pairs = points[name]
    return _one(f"{prefix}{name}: {text}", c, a_pairs, b_pairs, instruction)


EXPERIMENTS: dict[str, list[Experiment]] = {
    "structure": [
        point("P1"),
        point("P2"),
        _one("P3: C=2^-24, k0 (1, 2^-25)", 0x33800000, [(ONE, 0x3300)], [(ONE, ONE)]),
        _random("random normal 16x16x16", 11, "normal"),
        _random("random ties 16x16x16", 12, "ties"),
        _random("random cancellation 16x16x16", 13, "cancel"),
    ],
    "zero_signs": [
        point("P7"),
        _one("C=-0, products (+0, -0)", 0x80000000, [(0x0000, 0x8000)], [(ONE, ONE)]),
        _one("C=+0, x - x", 0, [(ONE, ONE)], [(ONE, 0xBF80)]),
        _random("random zeros 16x16x16", 14, "zeros"),
    ],
    "tininess": [
        # even lane: 2^-126 + 2^-149 - 1.25*2^-149 = 2^-126 * (1 - 2^-25), a tie that rounds up to 2^-126
        _one("rounds up to 2^-126", 0, [(0x2000, 0), (0x1A00, 0), (0x9A20, 0)], [(0x2000, 0), (0x1A80, 0), (0x1A80, 0)]),
        _random("random results near 2^-126", 15, "tiny"),
    ],
    "dest_daz": [
        _one("C=-2^-127 (denormal) + 2^-125", 0x80400000, [(0x2000, 0)], [(0x2080, 0)]),
        _one("C=largest denormal + 2^-126", 0x007FFFFF, [(0x2000, 0)], [(0x2000, 0)]),
    ],
    "input_daz": [
        _one("A=2^-127 (bf16 denormal) * 2^10", 0, [(0x0040, 0)], [(0x4480, 0)]),
        _one("B=-(2^-133) (bf16 denormal) * 2^20", 0, [(0x4980, 0)], [(0x8001, 0)]),
    ],
    "products": [
        # k0 even: -2^127; k1 even: 2^64 * 2^64 = 2^128: exact product gives 2^127, a rounded one +inf
        _one("product 2^128 out of fp32 range", 0, [(0xFF00, 0), (0x5F80, 0)], [(ONE, 0), (0x5F80, 0)]),
        # 2^-70 * 2^-70 = 2^-140 below fp32's range, added to 2^-100: kept exactly only inside the fma
        _one("product 2^-140 under fp32 range", 0x0D800000, [(0x1C80, 0)], [(0x1C80, 0)]),
    ],
    "nan": [
        _one("sNaN A even, qNaN B even", 0, [(0x7F81, 0)], [(0xFFC2, 0)]),
        _one("qNaN B even, sNaN A odd", 0, [(ONE, 0x7F83)], [(0x7FC4, ONE)]),
        _one("NaN C and NaN product", 0xFFC12345, [(0x7FC5, 0)], [(ONE, 0)]),
        _one("inf * 0", 0, [(0x7F80, 0)], [(0x0000, 0)]),
        _one("inf - inf across lanes", 0, [(0x7F80, 0xFF80)], [(ONE, ONE)]),
        _random("random NaNs 16x16x16", 16, "nans"),
    ],
    # TDPFP16PS (AMX-FP16): the same structure question, and whether fp16 denormals are honoured.
    "fp16_structure": [
        point("P1", _FP16),
        point("P2", _FP16),
        point("P7", _FP16),
        _random_fp16("random fp16 16x16x16", 17),
    ],
    "fp16_denormals": [
        _one("fp16 2^-24 (denormal) * 1", 0, [(0x0001, 0)], [(HALF_ONE, 0)], _FP16),
        _one("fp16 -(2^-15 - 2^-24) (denormal) * 2^15", 0, [(0x83FF, 0)], [(0x7800, 0)], _FP16),
    ],
    # AMX-FP8 (docs/semantics.md "AMX-FP8", the vectors of amx-family.md section 10.1). BF8 0x78 = 2^15,
    # 0x3C = 1, 0x01 = 2^-16; HF8 0x78 = 2^8, 0x01 = 2^-9.
    "fp8_accum": [
        _fp8("BF8 2^15*2^15 + 1*1 - 2^15*2^15: exact 1, rounded 0", 0, [(0x78, 0x3C, 0xF8, 0)], [(0x78, 0x3C, 0x78, 0)]),
        _fp8("HF8 2^8*2^8 + 2^-9*2^-9 - 2^8*2^8: exact 2^-18, rounded 0", 0, [(0x78, 0x01, 0xF8, 0)],
             [(0x78, 0x01, 0x78, 0)], _HF8),
        _random_fp8("random BF8 16x16x16", 18, _BF8),
        _random_fp8("random BF8 x HF8 16x16x16", 19, _BF8_HF8),
    ],
    "fp8_input_daz": [
        _fp8("BF8 2^-16 (denormal) * 2^-16", 0, [(0x01, 0, 0, 0)], [(0x01, 0, 0, 0)]),
        _fp8("BF8 -(3*2^-16) (denormal) * HF8 1", 0, [(0x83, 0, 0, 0)], [(0x38, 0, 0, 0)], _BF8_HF8),
    ],
    # a denormal C can only show through a zero sum (every non-zero sum is a multiple of 2^-32):
    # -2^-149 + (+0) is kept, flushed to -0 (FTZ of the result) or read as -0 (DAZ on C: -0 + +0 = +0)
    "fp8_ftz": [_fp8("C=-2^-149 (denormal), products 0", 0x80000001, [(0, 0, 0, 0)], [(0, 0, 0, 0)])],
    "fp8_c_daz": [_fp8("C=-2^-149 (denormal), products 0", 0x80000001, [(0, 0, 0, 0)], [(0, 0, 0, 0)])],
    "fp8_nan": [
        _fp8("BF8 NaN 0x7D in A, C=0", 0, [(0x3C, 0x7D, 0, 0)], [(0x3C, 0x3C, 0, 0)]),
        _fp8("C=NaN 0x7FC12345, finite products", 0x7FC12345, [(0x3C, 0, 0, 0)], [(0x3C, 0, 0, 0)]),
        _fp8("HF8 NaN 0xFF in B, C=1", 0x3F800000, [(0x38, 0, 0, 0)], [(0xFF, 0, 0, 0)], _HF8),
        _fp8("inf * 0 and a NaN C", 0x7FC00001, [(0x7C, 0, 0, 0)], [(0, 0, 0, 0)]),
    ],
    # AMX-COMPLEX (docs/semantics.md section 8): pairs are (real, imaginary) fp16.
    "complex_structure": [
        # 4096+4096i squared, real part: products 2^24 and -2^24 cancel in the SDM's even + odd before C = 1
        _one("complex order: (4096+4096i)^2, real, C=1", 0x3F800000, [(0x6C00, 0x6C00)], [(0x6C00, 0x6C00)],
             _REAL),
        _one("complex order: (1+2^-12 i)(2^-12+i), imaginary, C=1", 0x3F800000, [(HALF_ONE, 0x0C00)],
             [(0x0C00, HALF_ONE)], _IMAGINARY),
        # P3's question: C=2^-24, products 1 and 2^-25 (sdm 1.0; fused_pair and wide 1 + 2^-23)
        _one("C=2^-24, products (1, 2^-25), imaginary", 0x33800000, [(0x0C00, HALF_ONE)], [(HALF_ONE, 0x0800)],
             _IMAGINARY),
        # P2's question: C=0, k0 products (1, 2^-24), k1 (0, 2^-24) (sdm 1 + 2^-23; fused_pair 1.0)
        _one("C=0, k0 (1, 2^-24), k1 (0, 2^-24), imaginary", 0, [(0x0C00, HALF_ONE), (0x0C00, 0)],
             [(HALF_ONE, 0x0C00), (HALF_ONE, 0x0C00)], _IMAGINARY),
    ],
    "complex_dest_daz": [
        # A = B = 0: t = +0; a denormal C read as zero gives +0, kept it flushes to -0
        _one("C=-2^-149 (denormal), A=B=0, real", 0x80000001, [(0, 0)], [(0, 0)], _REAL),
        _one("C=-2^-149 (denormal), A=B=0, imaginary", 0x80000001, [(0, 0)], [(0, 0)], _IMAGINARY),
    ],
    "complex_nan_sign": [
        # the real part negates a_im: as an fp16 before conversion (SDM), or the product after (a NaN keeps its sign)
        _one("a_im = +NaN (payload 0x205) * b_im = 1, real", 0, [(0, 0x7E05)], [(0, HALF_ONE)], _REAL),
        _one("a_im = -NaN (payload 0x100) * b_im = 1, real", 0, [(0, 0xFD00)], [(0, HALF_ONE)], _REAL),
    ],
    "complex_nan_order": [
        # k0: inf * 0 makes the even lane the default NaN; k1 brings a NaN a: which wins?
        _one("NaN lane then NaN a_re, real", 0, [(0x7C00, 0), (0x7E05, 0)], [(0, 0), (HALF_ONE, 0)], _REAL),
        _one("NaN lane then NaN a_im, imaginary", 0, [(0, 0x7C00), (0, 0x7E05)], [(0, 0), (HALF_ONE, 0)],
             _IMAGINARY),
    ],
}

_FLUSH_FP16 = "flush fp16 denormal inputs"  # a candidate the Numerics options do not have
_NEGATE_PRODUCT = "negate the product (a NaN a_im keeps its sign)"  # nor these: complex_rows.py's open points
_A_FIRST = "a, b before the accumulator (TDPFP16PS's order)"

# Candidate options of each point, as changes to the base Numerics.
CANDIDATES: dict[str, Candidates] = {
    "structure": {s: dict(structure=s) for s in STRUCTURES},
    "zero_signs": {s: dict(structure=s) for s in STRUCTURES},
    "tininess": {t: dict(tininess=t) for t in TININESS},
    "dest_daz": {d: dict(dest_daz=d) for d in (True, False)},
    "input_daz": {d: dict(input_daz=d) for d in (True, False)},
    "products": {"exact": {}},  # the emulator always keeps products exact (fused)
    "nan": {n: dict(nan=n) for n in NAN_RULES},
    "fp16_structure": {s: dict(structure=s) for s in STRUCTURES},
    "fp16_denormals": {"honoured": {}, "flushed": {_FLUSH_FP16: True}},
    "fp8_accum": {a: dict(fp8_accum=a) for a in FP8_ACCUMS},
    "fp8_input_daz": {d: dict(fp8_input_daz=d) for d in (False, True)},
    "fp8_ftz": {f: dict(fp8_ftz=f) for f in (False, True)},
    "fp8_c_daz": {d: dict(fp8_c_daz=d) for d in (False, True)},
    "fp8_nan": {n: dict(fp8_nan=n) for n in FP8_NAN_RULES},
    "complex_structure": {s: dict(structure=s) for s in STRUCTURES},
    "complex_dest_daz": {d: dict(dest_daz=d) for d in (True, False)},
    "complex_nan_sign": {"negated before conversion": {}, "negated product": {_NEGATE_PRODUCT: True}},
    "complex_nan_order": {"accumulator first": {}, "a, b first": {_A_FIRST: True}},
}

# input DAZ first: the accumulation experiments' random data holds BF8 denormals
_FP8_FIELDS = ("fp8_input_daz", "fp8_accum", "fp8_ftz", "fp8_c_daz", "fp8_nan")
# points that are Numerics fields (under DAZ on C the result's FTZ is unobservable: fp8_ftz stays open there)
_SETTLES = ("structure", "dest_daz", "input_daz", "tininess", "nan") + _FP8_FIELDS


@dataclass
class PointResult:
    point: str
    matches: list[str | bool]  # candidate values that reproduce every experiment
    verdict: str | bool | None  # the single match, or None
    # (experiment, backend bits, {candidate: predicted bits})
    observations: list[tuple[str, int, dict[str, int]]] = field(default_factory=list)


def _emulate(e: Experiment, model: Numerics, flush_fp16: bool = False, negate_product: bool = False,
             a_first: bool = False) -> np.ndarray:
    a, b = e.a, e.b
    if flush_fp16 and _is_fp16(e.instruction):  # denormal (exponent 0) inputs become zeros of their sign
        a, b = (np.where((x & 0x7C00) == 0, x & 0x8000, x).astype(np.uint16) for x in (a, b))
    if negate_product and isa.get(e.instruction).part == "real":  # pre-flip NaN a_im, so the row's flip restores it
        a = a.copy()
        a[:, 1::2] = np.where((a[:, 1::2] & 0x7FFF) > 0x7C00, a[:, 1::2] ^ 0x8000, a[:, 1::2])
    if a_first and isa.get(e.instruction).kind == "dot-complex":  # the same steps in TDPFP16PS's NaN order
        bits: np.ndarray = getattr(emulator, _FP16)(e.c, fp16_operand(e.instruction, a), b, numerics=model)
    else:
        bits = getattr(emulator, e.instruction)(e.c, a, b, numerics=model)
    return bits.view(np.uint32)


def _runner(backend: Backend, numerics: str | Numerics | None) -> Callable[[Experiment], np.ndarray]:
    model = backend.numerics(numerics)  # the numerics rule of pyamx._backend: ValueError on native
    if not backend.is_native:
        return lambda e: _emulate(e, model)
    from .. import _ops

    def native(e: Experiment) -> np.ndarray:
        bits: np.ndarray = getattr(_ops, e.instruction)(e.c, e.a, e.b, backend=backend)
        return bits.view(np.uint32)

    return native


def _predict(base: Numerics, changes: dict[str, Any], experiment: Experiment) -> np.ndarray:
    changes = dict(changes)
    flush = changes.pop(_FLUSH_FP16, False)
    negate_product, a_first = changes.pop(_NEGATE_PRODUCT, False), changes.pop(_A_FIRST, False)
    return _emulate(experiment, base.replace(**changes), flush, negate_product, a_first)


def _points_for(backend: Backend) -> tuple[str, ...]:
    """Every point whose experiments the backend can run (the fp16 ones need AMX-FP16 on native)."""
    return tuple(
        p for p in _ORDER
        if not backend.is_native or all(_backend.native_status(isa.get(e.instruction).kernel_group)[0] for e in EXPERIMENTS[p])
    )


# The order points are settled in: each one's experiments depend only on points settled before.
_ORDER = ("structure", "zero_signs", "dest_daz", "input_daz", "tininess", "products", "nan",
          "fp16_structure", "fp16_denormals", "complex_structure", "complex_dest_daz", "complex_nan_sign",
          "complex_nan_order") + _FP8_FIELDS


def probe(backend: str = "emulator", numerics: str | Numerics | None = None) -> JsonReport:
    """Run every experiment on ``backend`` and return the verdicts (see module docstring)."""
    chosen = _backend.resolve(backend, numerics=numerics)
    run = _runner(chosen, numerics)
    points = _points_for(chosen)
    observed = {p: [run(e) for e in EXPERIMENTS[p]] for p in points}
    results: dict[str, PointResult] = {}
    base = Numerics()
    # Points are settled in an order where each one's experiments depend only on points
    # already settled; every verdict found so far shapes the predictions of the next point.
    for point in points:
        result = PointResult(point, [], None)
        predicted = {value: [_predict(base, changes, e) for e in EXPERIMENTS[point]]
                     for value, changes in CANDIDATES[point].items()}
        result.matches = [value for value, bits in predicted.items()
                          if all(np.array_equal(p, o) for p, o in zip(bits, observed[point]))]
        for i, (e, o) in enumerate(zip(EXPERIMENTS[point], observed[point])):
            if o.size == 1:  # single-element experiments are listed bit by bit in the report
                result.observations.append((e.name, int(o.flat[0]), {str(v): int(bits[i].flat[0]) for v, bits in predicted.items()}))
        result.verdict = result.matches[0] if len(result.matches) == 1 else None
        if result.verdict is not None and point in _SETTLES:
            base = base.replace(**CANDIDATES[point][result.verdict])
        results[point] = result

    complete = None
    # an fp8 point the backend cannot run (no AMX-FP8) leaves its field at the default
    verdicts = {p: results[p].verdict if p in results else getattr(base, p)
                for p in ("structure", "tininess", "dest_daz", "input_daz", "nan") + _FP8_FIELDS}
    if verdicts["fp8_ftz"] is None and verdicts["fp8_c_daz"] is True:
        verdicts["fp8_ftz"] = False  # unobservable under DAZ on C: either value gives the same bits
    if all(v is not None for v in verdicts.values()) and results["products"].verdict is not None:
        model = Numerics().replace(**verdicts)  # every field a verdict (the others at their defaults)
        if all(
            np.array_equal(_predict(model, {}, e), o)
            for p in points
            for e, o in zip(EXPERIMENTS[p], observed[p])
        ):
            complete = model.name
    return {
        "backend": chosen.label,
        "numerics_requested": None if numerics is None else resolve(numerics).name,
        **{p: r.verdict for p, r in results.items()},
        "candidates": {p: r.matches for p, r in results.items()},
        "complete_match": complete,
        "observations": {p: r.observations for p, r in results.items()},
    }


def format_report(report: JsonReport) -> str:
    lines = [f"pyamx probe on backend: {report['backend']}"]
    if report["numerics_requested"]:
        lines[0] += f" (emulator numerics {report['numerics_requested']})"
    for point, matches in report["candidates"].items():  # in the order they were settled
        verdict = report[point]
        text = repr(verdict) if verdict is not None else (
            f"ambiguous, any of {matches}" if matches else "no emulator option reproduces it"
        )
        lines.append(f"  {point:11s}: {text}")
        for name, got, predicted in report["observations"][point]:
            guesses = ", ".join(f"{v}={bits:08x}" for v, bits in predicted.items())
            lines.append(f"      {name}: observed {got:08x}; predicted {guesses}")
    complete = report["complete_match"]
    lines.append(
        f"  complete option set matching bit for bit on every experiment: {complete}"
        if complete else "  no complete emulator option set matches every experiment"
    )
    return "\n".join(lines)


# -- AMX-AVX512's open points (docs/semantics.md section 9) ------------------------------------


@dataclass(frozen=True)
class RowExperiment:
    """One row instruction on tmm0 configured ``rows`` x ``colsb``, loaded from ``words`` (stride 64,
    row r from words[16r:16r+16]); the observation is the 16 result dwords (or "#UD") and start_row after."""

    name: str
    instruction: str
    rows: int
    colsb: int
    words: tuple[int, ...]
    selector: int
    imm: bool = False
    start_row: int = 0


def _f32_bits(x: float) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def _row_words(*values: int) -> tuple[int, ...]:
    return tuple(values) + (0,) * (256 - len(values))


_COUNTING = tuple(0x01010101 * (r + 1) for r in range(16) for _ in range(16))

#: Numerics field -> experiments whose bits differ between its values
ROW_EXPERIMENTS = {
    "row_index": (
        RowExperiment("TILEMOVROW row 4 of a 4-row tile", "tilemovrow", 4, 64, _COUNTING, 4),
        RowExperiment("TILEMOVROW row 17 of a 4-row tile", "tilemovrow", 4, 64, _COUNTING, 17),
        RowExperiment("TILEMOVROW row 16 of a 16-row tile", "tilemovrow", 16, 64, _COUNTING, 16),
        RowExperiment("TILEMOVROW imm8 row 18 of a 16-row tile", "tilemovrow", 16, 64, _COUNTING, 18, imm=True),
    ),
    "row_bf16": (
        RowExperiment("TCVTROWPS2BF16L of denormals", "tcvtrowps2bf16l", 1, 16,
                      _row_words(0x00400000, 0x80000001, 0x007FFFFF, 0x00800000), 0),
    ),
    "row_fp16": (
        RowExperiment("TCVTROWPS2PHL of fp16 denormal results", "tcvtrowps2phl", 1, 16,
                      _row_words(_f32_bits(2.0**-24), _f32_bits(-(2.0**-15)), _f32_bits(2.0**-14 - 2.0**-25),
                                 _f32_bits(2.0**-14)), 0),
    ),
    "row_movrow_start_row": (
        RowExperiment("TILEMOVROW with start_row 1 pending", "tilemovrow", 4, 64, _COUNTING, 0, start_row=1),
    ),
}


def _run_row(machine: TileMachine | NativeMachine, e: RowExperiment) -> RowObservation:
    """(result dwords or "#UD", start_row afterwards) of one experiment on a fresh tile state."""
    from ..errors import InvalidOpcodeFault
    from ..table.tilecfg import TileConfig

    # A pending start_row comes only from LDTILECFG, which zeroes the tiles and a load would consume,
    # so such an experiment reads zeros and observes start_row alone.
    _do(machine, "load-config", TileConfig.make({0: (e.rows, e.colsb)}, start_row=e.start_row))
    if not e.start_row:
        _do(machine, "load", 0, np.array(e.words, np.uint32).view(np.uint8), 64)
    lanes: tuple[int, ...] | str
    try:
        lanes = tuple(int(x) for x in getattr(machine, e.instruction)(0, e.selector, imm=e.imm))
    except InvalidOpcodeFault:
        lanes = "#UD"
    after: int = _do(machine, "store-config")[1]
    _do(machine, "release")
    return lanes, after


def _do(machine: TileMachine | NativeMachine, action: str, *args: object) -> Any:  # the instruction's result
    """Run the machine's instruction of ``action`` (pyamx.table.isa.ACTIONS) on ``args``."""
    return getattr(machine, isa.of_action(action).name)(*args)


def probe_rows(backend: str = "emulator", numerics: str | Numerics | None = None) -> dict[str, JsonReport]:
    """Which value of each AMX-AVX512 numerics option reproduces ``backend`` (``"emulator"`` or
    ``"native"``): ``{field: {"verdict", "candidates", "observed"}}``. On native the instructions need
    AMX-AVX512 (NativeUnavailableError otherwise); its guard refuses a row index of 16 or more before
    the instruction runs, so those experiments show pyamx's rule there, not silicon's."""
    from ..table import numerics as _numerics
    from ..emulator.machine import TileMachine

    if backend == "native":
        from ..cpu.native import NativeMachine

        machine: TileMachine | NativeMachine = NativeMachine()
    elif backend == "emulator":
        machine = TileMachine(numerics or "sdm")
    else:
        raise ValueError(f"probe_rows: backend is 'emulator' or 'native', not {backend!r}")
    values = {"row_index": _numerics.ROW_INDEX_RULES, "row_bf16": _numerics.ROW_BF16_RULES,
              "row_fp16": _numerics.ROW_FP16_RULES, "row_movrow_start_row": (True, False)}
    out: dict[str, JsonReport] = {}
    for point, experiments in ROW_EXPERIMENTS.items():
        observed = [_run_row(machine, e) for e in experiments]
        matches = [v for v in values[point]
                   if [_run_row(TileMachine(Numerics().replace(**{point: v})), e) for e in experiments] == observed]
        out[point] = {"verdict": matches[0] if len(matches) == 1 else None, "candidates": matches,
                      "observed": observed}
    return out


def rows_report(backend: str = "emulator", numerics: str | Numerics | None = None) -> JsonReport:
    """:func:`probe_rows` for the CLI: ``{"probed": True, "points": ...}``, or ``{"probed": False,
    "reason": why}`` where ``backend`` cannot run the row instructions (native without AMX-AVX512:
    the native machine refuses before anything runs)."""
    from ..errors import NativeUnavailableError

    try:
        return {"probed": True, "points": probe_rows(str(backend), numerics)}
    except NativeUnavailableError as exc:
        return {"probed": False, "reason": str(exc)}


def _lanes(observed: RowObservation) -> str:
    lanes, start_row = observed
    if isinstance(lanes, str):  # "#UD"
        text = lanes
    else:
        shown = len(lanes) - next((i for i, x in enumerate(reversed(lanes)) if x), len(lanes))
        text = " ".join(f"{x:08x}" for x in lanes[:shown])
        text = f"{text} (lanes {shown}-15 zero)" if 0 < shown < len(lanes) else text or "every lane zero"
    return f"{text}; start_row after {start_row}"


def format_rows(report: JsonReport) -> str:
    """The row instructions' points (AMX-AVX512, docs/semantics.md section 9) as text."""
    if not report["probed"]:
        return f"  row instructions: not probed: {report['reason']}"
    lines = ["  row instructions (AMX-AVX512):"]
    for point, result in report["points"].items():
        verdict, matches = result["verdict"], result["candidates"]
        text = repr(verdict) if verdict is not None else (
            f"ambiguous, any of {matches}" if matches else "no emulator option reproduces it")
        lines.append(f"  {point:11s}: {text}")
        for e, observed in zip(ROW_EXPERIMENTS[point], result["observed"]):
            lines.append(f"      {e.name}: observed {_lanes(observed)}")
    return "\n".join(lines)
