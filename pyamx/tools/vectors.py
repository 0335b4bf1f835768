"""Golden vectors: record a backend's answers to seeded cases, replay them anywhere.

A vector file is one JSON document: a format tag, the provenance of the
recording (backend, whether that was silicon, CPU, microcode, kernel, pyamx
version, date, the instructions the backend could not run and why) and the
cases, each with its instruction, operands and output as little-endian hex.
A case's shape follows its instruction's kind in :mod:`pyamx.table.isa`: a dot
product (C, A, B -> C), a row instruction (tile bytes and a row selector ->
the 64-byte zmm result) or a load (memory, stride, offset -> the tile); the
last two are :mod:`pyamx._vector_tiles`'. Format version 1 held dot products
only and still loads. Recordings made on the emulator or the trap mode say
so in ``provenance.silicon = false`` and every replay prints it, so they
are never mistaken for silicon.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from dataclasses import dataclass
from typing import IO, Any, Collection, NoReturn, Optional, Union, cast

import numpy as np
import numpy.typing as npt

from .. import _backend, _ops
from . import _vector_tiles
from ..table import isa
from ._files import atomic_writer
from .._version import __version__
from ..errors import AMXError
from .probe import EXPERIMENTS
from .testing import CLASSES, operands, shapes

#: a JSON object of a vector file (its provenance, a case)
Json = dict[str, Any]
#: a path a vector file is read from or written to
Path = Union[str, "os.PathLike[str]"]

FORMAT = "pyamx-vectors"
#: the version record writes: 2 added the row and load cases
VERSION = 2
#: the versions load reads (a version 1 file holds dot products only)
READS = (1, 2)

# instruction -> (dtype of c, dtype of a and b, lanes per dword) as the file stores them, from pyamx.table.isa
INSTRUCTIONS = {insn.name: (insn.c_dtype, insn.ab_dtype, insn.lanes) for insn in isa.DOTS}
# instruction -> (dtype of c, dtype of a and b) the public function is called with
_CALL_DTYPES = {insn.name: (np.dtype(insn.c_dtype), np.dtype(insn.call_dtype)) for insn in isa.DOTS}
#: every instruction a vector file records -> its case kind ("dot", "row", "load"), in table order
KINDS = {insn.name: kind for insn in isa.TABLE if (kind := _vector_tiles.case_kind(insn)) is not None}


class VectorFileError(AMXError, ValueError):
    """A vector file that cannot be read: the message names the file and the problem."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


@dataclass
class Case:
    instruction: str
    label: str
    c: np.ndarray
    a: np.ndarray
    b: np.ndarray
    out: np.ndarray | None = None


#: a case of any kind: a dot product's, a row instruction's, a load's
AnyCase = Union[Case, _vector_tiles.RowCase, _vector_tiles.LoadCase]


def _cpu_provenance() -> dict[str, str]:
    info = {"machine": platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read().split("\n\n", 1)[0]
    except OSError:
        return info
    wanted = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping",
              "microcode": "microcode", "model name": "model_name"}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in wanted:
            info[wanted[key.strip()]] = value.strip()
    reported = _cpuid_amx_features()
    if reported is not None:
        info["cpuid_amx"] = " ".join(reported) or "none"
    return info


def _cpuid_amx_features() -> Optional[list[str]]:
    """The AMX features CPUID reports here, as detection read them (None where it could not read CPUID)."""
    from ..cpu import detect

    cpu = detect.report().cpu
    if "vendor" not in cpu:
        return None
    return [f.name for f in isa.FEATURE_ROWS if cpu.get(f.key)]


def executed_on_silicon(backend: str, native_mode: Optional[str], instructions: Collection[str]) -> str:
    """The CPUID features whose instructions a recording ran on the CPU itself ("" where none did):
    what executed, which on a VM may be more than CPUID reports."""
    if backend != "native" or native_mode != "silicon":
        return ""
    from ..cpu import detect

    rep = detect.report()
    features = [isa.get(name).feature.name for name in instructions
                if rep.mode_for(isa.get(name)) == "silicon"]
    return " ".join(dict.fromkeys(features))


def provenance(backend: str, seed: int) -> Json:
    mode = _backend.native_mode() if backend == "native" else None
    return {
        "backend": backend,
        "native_mode": mode,
        "silicon": backend == "native" and mode == "silicon",
        "numerics": "sdm" if backend == "emulator" else None,
        "cpu": _cpu_provenance(),
        "kernel": platform.release(),
        "os": platform.system(),
        "pyamx": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
    }


def generate(seed: int, per_class: int = 4, instructions: Collection[str] = tuple(KINDS)) -> list[AnyCase]:
    """The seeded cases of ``instructions``: for the dot products every adversarial class at the shape
    edges and random shapes, plus the probes; then the row and load cases."""
    rng = np.random.default_rng(seed)
    cases: list[AnyCase] = []
    # the classes and probes are bf16's, the random bit patterns fp16's: each the matmul route of its format
    bf16, fp16 = (isa.MATMUL_ROUTES[(f, f)].name for f in ("bf16", "fp16"))
    if bf16 in instructions:
        for index, cls in enumerate(CLASSES):
            every = shapes(rng, 8 + per_class)  # the 8 edge shapes first, then random ones
            for m, k, n in every[index % 2 : 8 : 2] + every[8:]:
                c, a, b = operands(rng, m, k, n, cls)
                cases.append(Case(bf16, f"{cls} {m}x{k}x{n}", c, a, b))
        for point, experiments in EXPERIMENTS.items():
            # Each probe experiment runs through its own instruction (the FP16 points through TDPFP16PS).
            cases += [Case(e.instruction, f"probe {point}: {e.name}", e.c, e.a, e.b)
                      for e in experiments if e.instruction in instructions]
    fp16_specials = np.array([0x0001, 0x03FF, 0x8001, 0x7C00, 0xFC00, 0x7C01, 0x7E05, 0x0000, 0x8000, 0x7BFF], np.uint16)
    for m, k, n in shapes(rng, 10):
        if fp16 in instructions:
            cases.append(Case(fp16, f"random bits {m}x{k}x{n}", *_fp16_pair_operands(rng, m, k, n, fp16_specials, 0.2)))
        for mnemonic in (insn.name for insn in isa.DOTS if insn.signed is not None):
            if mnemonic in instructions:
                a = rng.integers(0, 256, (m, 4 * k), dtype=np.uint8)
                b = rng.integers(0, 256, (k, 4 * n), dtype=np.uint8)
                c = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
                cases.append(Case(mnemonic, f"random bytes {m}x{k}x{n}", c, a, b))
    # a generator of their own, so the fp8 rows leave every older case's draws as they were
    fp8_rng = np.random.default_rng([seed, 8])
    for m, k, n in shapes(fp8_rng, 10):
        for insn in isa.DOTS:
            if insn.is_float and insn.a_format is not None and insn.a_format.width == 8 and insn.name in instructions:
                cases.append(_fp8_case(fp8_rng, insn, m, k, n))
    cases += _complex_cases(np.random.default_rng([seed, 1]), instructions, fp16_specials)
    return cases + _vector_tiles.generate(seed, instructions)


def _fp16_pair_operands(rng: np.random.Generator, m: int, k: int, n: int, specials: npt.NDArray[np.uint16],
                        share: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, A, B) of an fp16-pair row: random bits with ``share`` of each operand's values drawn from
    ``specials``, C any bits. The draws keep one order, so recorded files stay reproducible."""
    a = rng.integers(0, 2**16, (m, 2 * k), dtype=np.uint16)
    b = rng.integers(0, 2**16, (k, 2 * n), dtype=np.uint16)
    a = np.where(rng.random(a.shape) < share, rng.choice(specials, a.shape), a)
    b = np.where(rng.random(b.shape) < share, rng.choice(specials, b.shape), b)
    c = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
    return c, a, b


def _complex_cases(rng: np.random.Generator, instructions: Collection[str],
                   specials: npt.NDArray[np.uint16]) -> list[Case]:
    """AMX-COMPLEX rows: fp16 bits of every code and the specials in both halves, C any bits.

    A generator of their own, so the cases of the older rows stay as they were recorded.
    """
    cases: list[Case] = []
    for m, k, n in shapes(rng, 10):
        for name in (insn.name for insn in isa.DOTS if insn.kind == "dot-complex"):
            if name in instructions:
                cases.append(Case(name, f"random complex fp16 {m}x{k}x{n}",
                                  *_fp16_pair_operands(rng, m, k, n, specials, 0.3)))
    return cases


def _fp8_case(rng: np.random.Generator, insn: isa.Instruction, m: int, k: int, n: int) -> Case:
    """Random fp8 codes, a fifth of them the formats' specials (denormals, zeros, infinities, NaNs)."""
    a = rng.integers(0, 256, (m, 4 * k), dtype=np.uint8)
    b = rng.integers(0, 256, (k, 4 * n), dtype=np.uint8)
    a_fmt, b_fmt = insn.src_formats
    a_special = np.array(a_fmt.special_values, np.uint8)
    b_special = np.array(b_fmt.special_values, np.uint8)
    a = np.where(rng.random(a.shape) < 0.2, rng.choice(a_special, a.shape), a).astype(np.uint8)
    b = np.where(rng.random(b.shape) < 0.2, rng.choice(b_special, b.shape), b).astype(np.uint8)
    c = rng.integers(0, 2**32, (m, n), dtype=np.uint64).astype(np.uint32)
    return Case(insn.name, f"random fp8 codes {m}x{k}x{n}", c, a, b)


def run_case(case: AnyCase, backend: str) -> np.ndarray:
    """The backend's output bits for one case: uint32 for fp32 results, int32 for int8 ones; the 16
    result dwords of a row case; the 16 x 64 tile bytes of a load case."""
    if not isinstance(case, Case):
        return _vector_tiles.run(case, backend)
    c_dtype, ab_dtype = _CALL_DTYPES[case.instruction]
    fn = getattr(_ops, case.instruction)
    result = fn(case.c.view(c_dtype), case.a.view(ab_dtype), case.b.view(ab_dtype), backend=backend)
    bits: np.ndarray = np.asarray(result).view(np.dtype(INSTRUCTIONS[case.instruction][0]))
    return bits


def unsupported(backend: str) -> dict[str, str]:
    """``{name: why}`` of the recordable instructions ``backend`` cannot run: none on the emulator; on
    native those whose kernels or CPUID feature this build and CPU lack, asked before anything runs
    (executing one would be SIGILL)."""
    if backend == "emulator":
        return {}
    from ..cpu import native

    why: dict[str, str] = {}
    report = native.report()
    for name, kind in KINDS.items():
        insn = isa.get(name)
        if kind == "dot":
            usable, reason = native.available(insn.group)
            if not usable:
                why[name] = reason
        else:
            usable, unusable_reason = native.available()
            missing = unusable_reason if not usable else native.feature_missing(report, insn)
            if missing is not None:
                why[name] = missing
    return why


def _supported(backend: str) -> tuple[str, ...]:
    """Instructions the backend can run: the emulator all; native those its build and CPU have."""
    missing = unsupported(backend)
    return tuple(name for name in KINDS if name not in missing)


def record(path: Path | IO[str], backend: str = "emulator", seed: int = 2026, per_class: int = 4) -> Json:
    """Run the seeded cases on ``backend`` and write the vector file; returns its provenance."""
    chosen = _backend.resolve(backend)
    skipped = {isa.get(name).mnemonic: why for name, why in unsupported(chosen).items()}
    cases = generate(seed, per_class, tuple(n for n in KINDS if isa.get(n).mnemonic not in skipped))
    for case in cases:
        case.out = run_case(case, chosen)
    prov: Json = {**provenance(chosen, seed), "skipped": skipped}
    executed = executed_on_silicon(chosen, prov["native_mode"], dict.fromkeys(case.instruction for case in cases))
    if executed:
        prov["cpu"]["executed_on_silicon"] = executed
    document = {
        "format": FORMAT,
        "version": VERSION,
        "provenance": prov,
        "cases": [_case_json(case) for case in cases],
    }
    if hasattr(path, "write"):  # an open text stream (the CLI's `record -`)
        stream = cast("IO[str]", path)
        json.dump(document, stream, indent=1)
        stream.write("\n")
    else:  # the previous recording survives a full disk or a kill half way
        with atomic_writer(path) as f:
            json.dump(document, f, indent=1)
            f.write("\n")
    return prov


def _case_json(case: AnyCase) -> Json:
    if not isinstance(case, Case):
        return case.to_json()
    lanes = INSTRUCTIONS[case.instruction][2]
    return {
        "instruction": case.instruction,
        "label": case.label,
        "shape": [int(case.c.shape[0]), int(case.a.shape[1] // lanes), int(case.c.shape[1])],
        **{name: _hex(getattr(case, name), dtype) for name, dtype in
           zip(("c", "a", "b", "out"), _dtypes(case.instruction))},
    }


def _dtypes(instruction: str) -> tuple[str, str, str, str]:
    c_dtype, ab_dtype, _ = INSTRUCTIONS[instruction]
    assert c_dtype is not None and ab_dtype is not None  # a dot product's row
    return c_dtype, ab_dtype, ab_dtype, c_dtype


def _hex(array: np.ndarray, dtype: str) -> str:
    return np.ascontiguousarray(array).astype(dtype, copy=False).tobytes().hex()


def load(path: Path) -> tuple[Json, list[AnyCase]]:
    """``(provenance, cases)`` from a vector file, or VectorFileError naming the problem."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as exc:
        raise VectorFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise VectorFileError(path, f"is not a complete JSON document (truncated or corrupt: {exc})") from None
    except RecursionError:
        raise VectorFileError(path, "nests arrays or objects too deeply to be a pyamx vector file") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise VectorFileError(path, f"is not a pyamx vector file (no \"format\": \"{FORMAT}\")")
    version = document.get("version")
    if type(version) is not int or version not in READS:
        raise VectorFileError(path, f"has format version {version!r}; this pyamx reads "
                              f"{', '.join(map(str, READS))}")
    if not isinstance(document.get("provenance"), dict) or not isinstance(document.get("cases"), list):
        raise VectorFileError(path, "lacks its \"provenance\" object or its \"cases\" list")
    if not document["cases"]:
        raise VectorFileError(path, "holds no cases: there is nothing to check")
    _check_provenance(path, document["provenance"])
    cases = [_parse_case(path, i, raw, version) for i, raw in enumerate(document["cases"])]
    prov: Json = document["provenance"]
    return prov, cases


# provenance field -> the JSON types it may hold (absent is fine: an older file; it prints as "?")
_PROVENANCE_TYPES = {
    "backend": (str,), "native_mode": (str, type(None)), "silicon": (bool,), "numerics": (str, type(None)),
    "cpu": (dict,), "kernel": (str,), "os": (str,), "pyamx": (str,), "python": (str,), "numpy": (str,),
    "date": (str,), "seed": (int,), "skipped": (dict,),
}
_JSON_NAMES = {str: "a string", bool: "true/false", int: "an integer", dict: "an object", type(None): "null"}


def _json_type(value: object) -> str:
    return {list: "a list", float: "a number"}.get(type(value)) or _JSON_NAMES.get(type(value), type(value).__name__)


def _check_provenance(path: Path, prov: Json) -> None:
    """Every provenance field a replay prints has its recorded type (a wrong one would print a lie,
    "silicon": "no" as SILICON, or fail deep inside)."""
    for key, types in _PROVENANCE_TYPES.items():
        value = prov.get(key)
        if key in prov and (not isinstance(value, types) or (bool not in types and isinstance(value, bool))):
            expected = " or ".join(_JSON_NAMES[t] for t in types)
            raise VectorFileError(path, f"provenance field {key!r} is {_json_type(value)}; it must be {expected}")
    for key in ("cpu", "skipped"):
        bad = [k for k, v in prov.get(key, {}).items() if not isinstance(v, str)]
        if bad:
            raise VectorFileError(path, f"provenance field {key!r} holds {bad[0]!r} as "
                                  f"{_json_type(prov[key][bad[0]])}; its values must be strings")


def _parse_case(path: Path, index: int, raw: object, version: int = VERSION) -> AnyCase:
    where = f"case {index}"
    if not isinstance(raw, dict):
        raise VectorFileError(path, f"{where} is not an object")
    instruction = raw.get("instruction")
    if not isinstance(instruction, str) or instruction not in KINDS:
        raise VectorFileError(path, f"{where} names an unknown instruction {instruction!r}")
    kind = KINDS[instruction]
    if kind != "dot":
        if version < 2:
            raise VectorFileError(path, f"{where} is a {kind} case ({instruction}); format version {version} "
                                  "holds dot products only")

        def fail(problem: str) -> NoReturn:
            raise VectorFileError(path, f"{where} ({instruction}) {problem}")

        return _vector_tiles.parse(raw, kind, fail)
    shape = raw.get("shape")
    # type() and not isinstance(): JSON's true is a Python bool, which isinstance counts as an int.
    if not (isinstance(shape, list) and len(shape) == 3 and all(type(x) is int and 1 <= x <= 16 for x in shape)):
        raise VectorFileError(path, f"{where} has a bad shape {shape!r} (three ints 1..16: M, K, N)")
    m, k, n = shape
    lanes = INSTRUCTIONS[instruction][2]
    expected = {"c": (m, n), "a": (m, lanes * k), "b": (k, lanes * n), "out": (m, n)}
    arrays: dict[str, np.ndarray] = {}
    for (name, dims), dtype in zip(expected.items(), _dtypes(instruction)):
        text = raw.get(name)
        if not isinstance(text, str):
            raise VectorFileError(path, f"{where} field {name!r} is not a hex string")
        try:
            data = bytes.fromhex(text)
        except ValueError:
            raise VectorFileError(path, f"{where} field {name!r} is not a hex string") from None
        size = dims[0] * dims[1] * np.dtype(dtype).itemsize
        if len(data) != size:
            raise VectorFileError(
                path, f"{where} field {name!r} holds {len(data)} bytes; shape {m}x{k}x{n} needs {size}"
            )
        arrays[name] = np.frombuffer(data, dtype=dtype).reshape(dims)
    return Case(instruction, str(raw.get("label", where)), arrays["c"], arrays["a"], arrays["b"], arrays["out"])


@dataclass
class ReplayResult:
    provenance: Json
    total: int
    mismatches: list[tuple[int, AnyCase, np.ndarray]]  # (index, case, got)
    skipped: dict[str, int]  # instruction -> count the backend cannot run
    why: dict[str, str] | None = None  # instruction -> why the backend cannot run it
    tally: dict[str, list[int]] | None = None  # instruction -> [cases run, cases that differ], in file order


def replay(path: Path, backend: str = "emulator") -> ReplayResult:
    """Run every case of a vector file on ``backend`` and compare the output bits."""
    chosen = _backend.resolve(backend)
    prov, cases = load(path)
    why = unsupported(chosen)
    mismatches: list[tuple[int, AnyCase, np.ndarray]] = []
    skipped: dict[str, int] = {}
    tally: dict[str, list[int]] = {}
    for index, case in enumerate(cases):
        if case.instruction in why:
            skipped[case.instruction] = skipped.get(case.instruction, 0) + 1
            continue
        got = run_case(case, chosen)
        counts = tally.setdefault(case.instruction, [0, 0])
        counts[0] += 1
        assert case.out is not None  # a loaded case holds its recorded output
        if not np.array_equal(got.view(case.out.dtype), case.out):
            mismatches.append((index, case, got))
            counts[1] += 1
    return ReplayResult(prov, len(cases), mismatches, skipped, {n: why[n] for n in skipped}, tally)


def recorded_cpu_name(cpu: Json) -> str:
    """The name pyamx's table gives a recording's CPUID vendor, family and model, or "unknown"."""
    from ..cpu import detect

    try:
        return detect.cpu_name(cpu.get("vendor", ""), int(cpu.get("family", "")), int(cpu.get("model", "")))
    except ValueError:  # not recorded (an old file, no /proc/cpuinfo)
        return detect.UNKNOWN_CPU


def describe_provenance(prov: Json) -> str:
    cpu = prov.get("cpu", {})
    from .._result import backend_label

    label = backend_label(prov.get("backend"), prov.get("native_mode"))
    where = f"{label}: SILICON" if prov.get("silicon") else f"{label} (NOT silicon)"
    facts = "".join(f"; {what}: {cpu[key]}" for key, what in (("cpuid_amx", "CPUID's AMX features"),
                                                              ("executed_on_silicon", "executed on silicon"))
                    if key in cpu)
    return (
        f"recorded on {where}; CPU {cpu.get('vendor', '?')} family {cpu.get('family', '?')} model "
        f"{cpu.get('model', '?')} stepping {cpu.get('stepping', '?')} ({recorded_cpu_name(cpu)}) microcode "
        f"{cpu.get('microcode', '?')}{facts}; kernel {prov.get('kernel', '?')}; pyamx {prov.get('pyamx', '?')}; "
        f"{prov.get('date', '?')}"
    )


def suggested_file_name(prov: Json) -> str:
    """A name for a recording from its provenance: the backend, and for native the CPUID signature
    (never a guessed CPU name); the seed. "emulator-sdm-seed2026.json",
    "silicon-genuineintel-family6-model167-stepping1-seed2026.json"."""
    seed = prov.get("seed", "unknown")
    if prov.get("backend") == "emulator":
        return f"emulator-{prov.get('numerics') or 'sdm'}-seed{seed}.json"
    cpu = prov.get("cpu", {})
    where = "silicon" if prov.get("silicon") else f"native-{prov.get('native_mode') or 'unknown'}"
    signature = "-".join(f"{field}{cpu.get(field, 'unknown')}" for field in ("family", "model", "stepping"))
    return f"{where}-{cpu.get('vendor', 'unknown').lower()}-{signature}-seed{seed}.json"


def describe_skipped(skipped: dict[str, str]) -> Optional[str]:
    """One line for the instructions a recording left out (None where none was): their count and
    CPUID features; each one's reason is in the file (provenance ``skipped``), not one line apiece."""
    if not skipped:
        return None
    features = []
    for mnemonic in skipped:
        try:
            feature = isa.get(mnemonic).feature.name
        except KeyError:  # a name from a newer table: counted, its feature unknown here
            continue
        if feature not in features:
            features.append(feature)
    of = f" (of {', '.join(features)})" if features else ""
    return (f"skipped {len(skipped)} instruction(s){of} that this backend cannot run here; the file's "
            f"provenance (\"skipped\") has each one's reason")


def format_replay(path: Path, result: ReplayResult, backend: str, show: int = 5) -> str:
    ran = result.total - sum(result.skipped.values())
    lines = [f"{path}: {describe_provenance(result.provenance)}",
             f"replayed on {backend}: {ran} cases, {ran - len(result.mismatches)} match, {len(result.mismatches)} differ"]
    tally = result.tally or {}
    for instruction in sorted(tally, key=lambda name: list(KINDS).index(name) if name in KINDS else len(KINDS)):
        ran_here, differ = tally[instruction]
        lines.append(f"  {instruction}: {ran_here} cases, {ran_here - differ} match, {differ} differ")
    for instruction, count in result.skipped.items():
        reason = (result.why or {}).get(instruction) or f"this backend cannot run {instruction}"
        lines.append(f"  skipped {count} {instruction} cases: {reason}")
    for index, case, got in result.mismatches[:show]:
        if not isinstance(case, Case):
            lines += case.mismatch_lines(index, got)
            continue
        assert case.out is not None  # a loaded case holds its recorded output
        bad = np.argwhere(got.view(case.out.dtype) != case.out)
        m, n = (int(x) for x in bad[0])
        lines.append(
            f"  case {index} ({case.instruction}, {case.label}): {len(bad)} elements differ; first (m={m}, n={n}): "
            f"recorded {int(case.out.view('<u4')[m, n]):08x}, got {int(got.view('<u4')[m, n]):08x}"
        )
        lines.append(f"    c = {case.c.tobytes().hex()}\n    a = {case.a.tobytes().hex()}\n    b = {case.b.tobytes().hex()}")
    return "\n".join(lines)

