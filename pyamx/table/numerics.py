"""The numerics options of the emulator: one frozen object per open point.

docs/semantics.md section 3 lists what no public document decides. Each point is
a field here; the defaults are the SDM model with the x86 rules, and real
silicon decides which option is right (``python -m pyamx probe``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

STRUCTURES = ("sdm", "straight", "fused_pair", "wide")
TININESS = ("after", "before")
NAN_RULES = ("x86", "default", "canonical")
FP8_ACCUMS = ("exact_ksum", "bochs_pairwise")
FP8_NAN_RULES = ("default", "propagate")
#: AMX-AVX512's open points (docs/semantics.md section 9): a row index past the tile, the FP32->BF16
#: and FP32->FP16 conversion rules
ROW_INDEX_RULES = ("storage", "ud", "zero", "bochs")
ROW_BF16_RULES = ("ieee", "vcvtneps2bf16")
ROW_FP16_RULES = ("ieee", "daz_ftz")


@dataclass(frozen=True)
class Numerics:
    """How a tile dot product rounds, flushes and propagates NaNs.

    structure
        ``"sdm"`` (default): the SDM pseudo-code. Per output element two fp32
        accumulators (even and odd bf16 lanes) start at +0, each k does one
        fused multiply-add into each, then ``C + (even + odd)``.
        ``"straight"``: the intrinsics guide. One accumulator starting at C;
        per k, the even then the odd product, each one fused multiply-add.
        ``"fused_pair"``: per k, ``acc + even*odd-pair`` summed exactly and
        rounded once (acc starts at C).
        ``"wide"``: C plus every product of the instruction summed exactly and
        rounded once.
    tininess
        ``"after"`` (default, x86): a result is flushed to zero (FTZ) when its
        magnitude, rounded to 24 bits with an unbounded exponent, is below
        2**-126, so a result that rounds up to 2**-126 is kept.
        ``"before"``: flushed whenever the exact result is below 2**-126.
    dest_daz
        ``True`` (default): a denormal fp32 destination element counts as a
        zero of its sign. ``False``: it is used as is.
    input_daz
        ``True`` (default): a denormal bf16 input counts as a zero of its
        sign. ``False``: it is used as is (a product then may be tiny).
        Ignored by TDPFP16PS, whose fp16 inputs are always honoured.
    nan
        ``"x86"`` (default): a NaN result is the first NaN operand, quieted
        (bit 22 set), taking operands in the order written (fma32(a, b, acc):
        a, b, acc; add32(x, y): x, y); an invalid operation (inf*0, inf-inf)
        gives the x86 default NaN 0xFFC00000. ``"default"``: every NaN result
        is 0xFFC00000. ``"canonical"``: every NaN result is 0x7FC00000.

    The ``fp8_*`` fields are the open points of the AMX-FP8 dot products
    (TDPBF8PS and kin, docs/semantics.md "AMX-FP8"); the fields above do not
    apply to them, nor these to the other rows.

    fp8_accum
        ``"exact_ksum"`` (default; clang's pseudo-code, GCC's reference): the
        exact sum of the instruction's products, rounded once to fp32 (RNE),
        then ``C + t`` rounded once. ``"bochs_pairwise"`` (Bochs): products in
        fp32, per dword (p0 + p1) and (p2 + p3) rounded, added into even and
        odd fp32 accumulators, then even + odd, then ``C +`` that.
    fp8_input_daz
        ``False`` (default): fp8 denormals are used as they are. ``True``:
        BF8 denormals count as zeros of their sign (Bochs widens through
        fp16 under DAZ; HF8 denormals are fp16 normals there and stay).
    fp8_c_daz
        ``False`` (default): a denormal C is used as is. ``True``: as a zero of its sign.
    fp8_ftz
        ``False`` (default): a denormal result is kept. ``True``: flushed to the zero of its sign.
    fp8_nan
        ``"default"`` (default, GCC's reference): every NaN result is
        0xFFC00000. ``"propagate"``: the first NaN operand value (in K order,
        A's before B's in a lane), else a NaN C, widened to fp32 and quieted;
        an invalid operation alone (inf * 0, inf - inf) gives 0xFFC00000.

    The AMX-AVX512 row instructions (TCVTROW*, TILEMOVROW) read the ``row_``
    fields; the dot products ignore them.

    row_index
        A row index the tile has no data for (Intel's pseudo-code has no check).
        ``"storage"`` (default): an index below 16 reads the tile's storage
        row (zero at or past ``rows``, by zero_upper_rows); 16 and above is #UD.
        ``"ud"``: #UD at or past ``rows``. ``"zero"``: an all-zero result at or
        past ``rows``. ``"bochs"``: Bochs's model, the index taken modulo 16,
        then an all-zero result at or past ``rows``.
    row_bf16
        FP32 -> BF16 of TCVTROWPS2BF16H/L. ``"ieee"`` (default): round to
        nearest even, denormals kept, a NaN quieted (bit 6 set) with its payload
        truncated. ``"vcvtneps2bf16"``: AVX512_BF16's rule, a denormal input
        becomes a zero of its sign.
    row_fp16
        FP32 -> FP16 of TCVTROWPS2PHH/L. ``"ieee"`` (default): round to nearest
        even, denormal inputs and results kept, overflow to infinity, a NaN
        quieted (bit 9 set) with its payload truncated to 9 bits.
        ``"daz_ftz"`` (Bochs): a denormal input counts as a zero of its sign, and
        a result tiny after rounding (below 2**-14 when rounded to 11 bits with
        an unbounded exponent) becomes a zero of its sign.
    row_movrow_start_row
        ``True`` (default): TILEMOVROW resets start_row to 0 as the converts
        do. ``False``: it leaves start_row as it was (clang's text for it omits
        zero_tileconfig_start()).
    """

    structure: str = "sdm"
    tininess: str = "after"
    dest_daz: bool = True
    input_daz: bool = True
    nan: str = "x86"
    fp8_accum: str = "exact_ksum"
    fp8_input_daz: bool = False
    fp8_c_daz: bool = False
    fp8_ftz: bool = False
    fp8_nan: str = "default"
    row_index: str = "storage"
    row_bf16: str = "ieee"
    row_fp16: str = "ieee"
    row_movrow_start_row: bool = True

    def __post_init__(self) -> None:
        for name, allowed in (("structure", STRUCTURES), ("tininess", TININESS), ("nan", NAN_RULES),
                              ("fp8_accum", FP8_ACCUMS), ("fp8_nan", FP8_NAN_RULES),
                              ("row_index", ROW_INDEX_RULES), ("row_bf16", ROW_BF16_RULES),
                              ("row_fp16", ROW_FP16_RULES)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"Numerics.{name} must be one of {allowed}, got {value!r}")
        for name in ("dest_daz", "input_daz", "fp8_input_daz", "fp8_c_daz", "fp8_ftz", "row_movrow_start_row"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Numerics.{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def name(self) -> str:
        """The preset name this equals, or a field listing of the differences."""
        for preset, value in PRESETS.items():
            if value == self:
                return preset
        base = PRESETS["sdm"]
        diff = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) != getattr(base, f.name)]
        return "sdm+" + ",".join(diff)

    def replace(self, **changes: Any) -> Numerics:  # each field's value is checked by __post_init__
        return replace(self, **changes)

    def dot_model(self) -> "Numerics":
        """These numerics with the row instructions' fields at their defaults: what a dot product runs."""
        # the defaults as Numerics() holds them (a field's declared default is typed "or MISSING")
        defaults = PRESETS["sdm"]
        return replace(self, **{f.name: getattr(defaults, f.name) for f in fields(self) if f.name.startswith("row_")})


PRESETS = {
    "sdm": Numerics(),
    "straight": Numerics(structure="straight"),
    "fused_pair": Numerics(structure="fused_pair"),
    "wide": Numerics(structure="wide"),
}


def resolve(numerics: Numerics | str) -> Numerics:
    """Accept a preset name or a Numerics object."""
    if isinstance(numerics, Numerics):
        return numerics
    if isinstance(numerics, str):
        try:
            return PRESETS[numerics]
        except KeyError:
            raise ValueError(f"unknown numerics {numerics!r}; presets are {sorted(PRESETS)}") from None
    raise TypeError(f"numerics must be a preset name or a Numerics object, not {type(numerics).__name__}")
