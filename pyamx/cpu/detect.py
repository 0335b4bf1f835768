"""Is AMX usable in this process? Every stage, its raw value and its verdict.

Three parts:

* the table of facts (:class:`RawFacts`): what the CPU, the OS, the kernel and the build say
  (CPUID's leaves, the AMX feature bits of :mod:`pyamx.isa`'s feature rows, XCR0, the kernel's
  XCOMP_SUPP, the trap variable), read by :func:`facts` once per process without changing
  anything (:func:`refresh` reads again, for tests), and what the native backend's start did
  (:mod:`pyamx.cpu._native_start`: the permission request, the granted permission, the forked
  child, the trap or complement mode), recorded here by :func:`note_start`;
* pure functions over those values (CPUID register tuples, the XCR0 integer, errno numbers, a
  child's wait status) that decode and judge them; they are tested with values recorded on real
  and virtual machines;
* :func:`collect` and :func:`report`: the table as it stands and its verdict, no side effect.

The stages follow docs/semantics.md section 5: CPUID feature bits and palette,
OSXSAVE and XCR0, the kernel's XCOMP_SUPP, the permission request, the
granted permission, and finally a forked child that executes one tile
instruction, so a hypervisor that advertises AMX without delivering it kills
the child, never this process.

This module only reads and judges: the actions (asking the kernel for the permission, forking the
child, switching the trap or the complement mode on) are the native start's, which the backend
choice runs before the first native call; before it, the report says what is still to be done and
what the trap mode would do. The runtime report that prints all this is pyamx._runtime's.
"""

from __future__ import annotations

import errno as _errno
import os
import platform
import signal
import sys
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, NamedTuple, Optional, Tuple, TypedDict

from .._first_use import LOCK
from ..table import isa

if TYPE_CHECKING:
    from typing import AbstractSet, Callable, Iterable

    from ._nativelib import FFI, Lib

#: one CPUID result: (EAX, EBX, ECX, EDX)
Registers = Tuple[int, int, int, int]
#: CPUID's leaves as read: {(leaf, sub-leaf): registers}
CpuidLeaves = Mapping[Tuple[int, int], Registers]

# -- constants of the hardware and kernel interfaces --------------------------

# The AMX feature bits are pyamx.table.isa's Feature rows (leaf, sub-leaf, register, bit)
BIT_AMX_BF16, BIT_AMX_TILE, BIT_AMX_INT8, BIT_AMX_FP16 = (
    isa.FEATURES[name].bit for name in ("AMX-BF16", "AMX-TILE", "AMX-INT8", "AMX-FP16"))
BIT_OSXSAVE = 27  # CPUID.1:ECX
XFEATURE_XTILECFG = 17
XFEATURE_XTILEDATA = 18
ARCH_GET_XCOMP_SUPP = 0x1021
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023

#: the leaves detection reads besides the feature rows': the vendor and maximum leaf, the signature
#: and OSXSAVE, the tile palette and the TMUL limits
_FIXED_LEAVES = ((0, 0), (1, 0), (0x1D, 0), (0x1D, 1), (0x1E, 0))


def cpuid_leaves(rows: Iterable[isa.Feature] = isa.FEATURE_ROWS) -> Tuple[Tuple[int, int], ...]:
    """The (leaf, sub-leaf) pairs detection reads (pure): the fixed ones and each feature row's, with
    sub-leaf 0 of its leaf (whose EAX says how many sub-leaves there are)."""
    wanted = set(_FIXED_LEAVES)
    for feature in rows:
        wanted.update({(feature.leaf, 0), (feature.leaf, feature.subleaf)})
    return tuple(sorted(wanted))


#: the (leaf, sub-leaf) pairs detection reads
CPUID_LEAVES = cpuid_leaves()

#: what pyamx's tile model (docs/semantics.md section 1) assumes of palette 1
PALETTE1 = MappingProxyType(
    {"total_tile_bytes": 8192, "bytes_per_tile": 1024, "bytes_per_row": 64, "max_names": 8, "max_rows": 16}
)
TMUL = MappingProxyType({"tmul_maxk": 16, "tmul_maxn": 64})

#: Intel family-6 models that have AMX on silicon; a zero AMX-TILE bit on one
#: of them means something between the program and the CPU hides it.
AMX_MODELS = MappingProxyType(
    {143: "Sapphire Rapids", 207: "Emerald Rapids", 173: "Granite Rapids", 174: "Granite Rapids-D"}
)
#: the name of a CPU whose vendor, family and model match no entry of AMX_MODELS: pyamx does not guess
UNKNOWN_CPU = "unknown"


def cpu_name(vendor: str, family: int, model: int) -> str:
    """The name AMX_MODELS gives CPUID's vendor, family and model, or :data:`UNKNOWN_CPU` (pure).

    A name says which entry matched, nothing more: a hypervisor may report any signature (one
    VM with AMX reported family 6 model 167, which no AMX part has), so what the CPU does is
    told by the feature bits and the probes, never by the name.
    """
    if vendor == "GenuineIntel" and family == 6 and model in AMX_MODELS:
        return AMX_MODELS[model]
    return UNKNOWN_CPU


class _CpuInfoBase(TypedDict):
    vendor: str
    family: int
    model: int
    stepping: int
    name: str


class CpuInfo(_CpuInfoBase, total=False):
    """What CPUID's leaves 0 and 1 say (:func:`cpu_name` gives ``name``); ``codename`` only for a
    CPU model of :data:`AMX_MODELS`."""

    codename: str


def describe_cpu(cpu: CpuInfo, features: Mapping[str, int], executed: Optional[bool] = None) -> str:
    """The CPU line of ``pyamx info`` from CPUID's facts (pure): signature, the table's name or
    "unknown", the AMX feature bits set, and whether a forked child executed a tile instruction."""
    name = cpu_name(cpu["vendor"], cpu["family"], cpu["model"])
    source = ("no entry of pyamx's table of AMX CPU models matches" if name == UNKNOWN_CPU
              else "pyamx's table of AMX CPU models, by family and model")
    reported = [f.name for f in isa.FEATURE_ROWS if features.get(f.key)]
    line = (f"{cpu['vendor']} family {cpu['family']} model {cpu['model']} stepping {cpu['stepping']}: "
            f"{name} ({source}); CPUID reports {', '.join(reported) or 'no AMX feature'}")
    if executed is not None:
        line += ("; a forked child executed a tile instruction" if executed
                 else "; a forked child did not execute a tile instruction")
    return line

#: C status codes (csrc/pyamx.h, enum pyamx_status): ``detect.E_ARG`` is ``lib.PYAMX_E_ARG``, read
#: from the compiled module on first use (None without it: then no C code runs to return one)
_C_STATUS = ("E_NOT_READY", "E_NO_KERNEL", "E_ARG", "E_START_ROW", "E_UNSUPPORTED")


def _c(name: str) -> Optional[int]:
    from ..table.isa import c_constant

    value: Optional[int] = c_constant("PYAMX_" + name)
    return value


def _kernel_bits() -> Mapping[str, Optional[int]]:
    """group -> bit of pyamx_build_kernels() (csrc/pyamx.h, enum pyamx_kernel_bits)."""
    return MappingProxyType({group: _c("KERNEL_" + group.upper()) for group in KERNEL_FEATURE})


def __getattr__(name: str) -> Optional[int] | Mapping[str, Optional[int]]:
    if name in _C_STATUS:
        return _c(name)
    if name == "KERNEL_BITS":
        return _kernel_bits()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: kernel group -> the feature key (decode_features) its kernels need, from pyamx.table.isa
KERNEL_FEATURE = MappingProxyType({group: isa.FEATURES[name].key for group, name in isa.GROUP_FEATURE.items()})

# (major, minor) -> the first release whose faulthandler is fixed; 3.11+ fixed from the start
FAULTHANDLER_FIXED: dict[Tuple[int, ...], Tuple[int, ...]] = {(3, 9): (3, 9, 12), (3, 10): (3, 10, 4)}

# -- raw values ----------------------------------------------------------------


@dataclass(frozen=True)
class BuildFacts:
    """What the C module says about itself."""

    version: str
    compiler: str
    kernels: frozenset[str]  # groups compiled in: {"bf16", "int8", "fp16"}
    x86_64_linux: bool
    kernels_reason: str = ""  # the build's decision: why the AMX kernels are (not) compiled in


@dataclass(frozen=True)
class TrapFacts:
    """The trap-and-emulate mode: what ``PYAMX_TRAP_EMULATION`` asks for (:func:`facts`) and, once the
    native start consulted it where silicon said no, what switching it on did."""

    available: bool  # pyamx.trap could be imported
    requested: bool = False
    error: Optional[str] = None  # why requested() / enable() / the grant failed
    active: bool = False
    kernels: Optional[frozenset[str]] = None  # groups the trap emulates; None = all built ones
    guard: Optional[str] = None  # pyamx.trap.guard().reason: whether other SIGILL handlers are kept out
    pending: bool = False  # requested, and the native start has not tried to switch it on yet


@dataclass(frozen=True)
class RawFacts:
    """The table of facts detection judges; ``None`` means "not read" (an earlier stage failed, or
    the native start that fills the field has not run yet).

    :func:`facts` fills the readings (everything up to ``cpuinfo_flags``, ``trap`` as requested);
    the native start (:mod:`pyamx.cpu._native_start`) fills :data:`START_FIELDS`.
    """

    system: str
    machine: str
    python: Tuple[int, int, int]
    build: Optional[BuildFacts] = None
    build_error: Optional[str] = None
    cpuid: Optional[CpuidLeaves] = None  # {(leaf, subleaf): (eax, ebx, ecx, edx)}
    xcr0: Optional[int] = None
    xcomp_supp: Optional[Tuple[int, int]] = None  # (errno, value)
    perm_request: Optional[int] = None  # errno, 0 = granted
    xcomp_perm: Optional[Tuple[int, int]] = None  # (errno, value)
    child: Optional[Tuple[int, int]] = None  # (errno or C status, wait status)
    trap: Optional[TrapFacts] = None
    # On AMX silicon with the trap variable set: the CPUID features the complement mode emulates
    # (pyamx.cpu.trap.complement), or the error that kept it out
    complement: Optional[Tuple[str, ...]] = None
    complement_error: Optional[str] = None
    cpuinfo_flags: Optional[Tuple[str, ...]] = None  # AMX flags of /proc/cpuinfo, read when there is no extension

    @property
    def features(self) -> Mapping[str, int]:
        """Each feature row of pyamx.isa by its key (and ``osxsave``, ``max_leaf``), from ``cpuid``;
        empty where CPUID was not read."""
        return MappingProxyType(decode_features(self.cpuid) if self.cpuid is not None else {})


#: the fields of :class:`RawFacts` that the native start fills: what its actions returned
START_FIELDS = ("perm_request", "xcomp_perm", "child", "trap", "complement", "complement_error")


class Stage(NamedTuple):
    """One detection stage: ``ok`` is True/False, or None for information and stages not run."""

    name: str
    value: str
    ok: Optional[bool]


@dataclass(frozen=True)
class Report:
    """The verdict: frozen, one per process from :func:`report`."""

    native_usable: bool  # the native backend can run: on silicon, or in trap mode
    reason: str  # "ok", or the first failing stage and its remedy
    mode: Optional[str]  # "silicon", "trap" or None
    stages: Tuple[Stage, ...]
    kernels: frozenset[str]  # groups native can run: subset of {"bf16", "int8", "fp16"}
    # CpuInfo's entries and the feature bits (decode_features)
    cpu: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    # the build's version, compiler, kernel groups and why
    build: Mapping[str, str | list[str]] = field(default_factory=lambda: MappingProxyType({}))
    warning: Optional[str] = None  # loud text when native means trapped, not silicon
    # CPUID features whose instructions the complement mode emulates here (silicon runs the rest)
    complemented: frozenset[str] = frozenset()

    def mode_for(self, insn: isa.Instruction) -> Optional[str]:
        """How native runs ``insn`` (an isa row): ``"complement"`` where the complement mode
        emulates its feature on this silicon, else :attr:`mode`."""
        return "complement" if self.mode == "silicon" and insn.feature.name in self.complemented else self.mode

    @property
    def amx_usable(self) -> bool:
        """AMX silicon executes the tile instructions here (never true in trap mode)."""
        return self.mode == "silicon"

    @property
    def cpu_runs_amx(self) -> bool:
        """The CPU and the kernel run tile instructions for this process: every silicon stage said yes.

        Unlike ``amx_usable`` this does not ask for pyamx's own kernels, so it is what a test of
        *other* code's AMX kernels needs (the pytest plugin), also under a pyamx built without them.
        """
        # The child runs only after every earlier stage said yes (gate_passed), so its verdict is theirs too.
        return any(s.name == SILICON_STAGES_AFTER_CPUID[-1] and s.ok for s in self.stages)

    @property
    def trap_mode(self) -> bool:
        """The native backend runs, but through the SIGILL trap-and-emulate mode."""
        return self.mode == "trap"

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready dict of everything in the report.

        ``amx_usable`` means silicon; ``trap_mode`` says the native backend
        runs trapped; ``native_usable`` is either of the two.
        """
        return {
            "amx_usable": self.amx_usable,
            "cpu_runs_amx": self.cpu_runs_amx,
            "native_usable": self.native_usable,
            "trap_mode": self.trap_mode,
            "reason": self.reason,
            "mode": self.mode,
            "kernels": sorted(self.kernels),
            "warning": self.warning,
            "cpu": dict(self.cpu),
            "build": dict(self.build),
            "stages": [{"name": s.name, "value": s.value, "ok": s.ok} for s in self.stages],
        }


# -- pure decoders ---------------------------------------------------------------


def bit(value: int, n: int) -> bool:
    return bool((value >> n) & 1)


def decode_vendor(leaf0: Tuple[int, int, int, int]) -> str:
    """The 12-character vendor string of CPUID leaf 0 (EBX, EDX, ECX order)."""
    _, ebx, ecx, edx = leaf0
    return b"".join(r.to_bytes(4, "little") for r in (ebx, edx, ecx)).decode("ascii", "replace")


def decode_signature(eax: int) -> Tuple[int, int, int]:
    """(family, model, stepping) from CPUID.1:EAX with the extended fields applied."""
    stepping = eax & 0xF
    base_family = (eax >> 8) & 0xF
    family, model = base_family, (eax >> 4) & 0xF
    if base_family == 0xF:
        family += (eax >> 20) & 0xFF
    if base_family in (6, 0xF):
        model += ((eax >> 16) & 0xF) << 4
    return family, model, stepping


def cpuid_leaf(cpuid: CpuidLeaves, leaf: int, subleaf: int = 0) -> Registers:
    """CPUID.(leaf, subleaf) as the CPU defines it (pure): zeros above the maximum leaf, and above the
    last sub-leaf where sub-leaf 0's EAX counts them (leaves 7 and 0x1E), never another leaf's data."""
    zero = (0, 0, 0, 0)
    if cpuid.get((0, 0), zero)[0] < leaf:
        return zero
    if subleaf and cpuid.get((leaf, 0), zero)[0] < subleaf:
        return zero
    return cpuid.get((leaf, subleaf), zero)


def decode_features(cpuid: CpuidLeaves, rows: Iterable[isa.Feature] = isa.FEATURE_ROWS) -> dict[str, int]:
    """AMX and XSAVE feature bits from the CPUID leaves (missing leaves read as zero): one entry per
    feature row of pyamx.isa (``rows``), by its key, plus ``max_leaf`` and ``osxsave``."""
    out: dict[str, int] = {"max_leaf": cpuid.get((0, 0), (0, 0, 0, 0))[0]}
    for feature in rows:
        registers = cpuid_leaf(cpuid, feature.leaf, feature.subleaf)
        out[feature.key] = bit(registers[_REGISTERS.index(feature.register)], feature.bit)
    out["osxsave"] = bit(cpuid_leaf(cpuid, 1)[2], BIT_OSXSAVE)
    return out


_REGISTERS = ("eax", "ebx", "ecx", "edx")  # the order of a CPUID result tuple


def decode_palette(cpuid: CpuidLeaves) -> Optional[dict[str, int]]:
    """Palette 1 and TMUL limits from leaves 0x1D/0x1E, or None when the CPU has no leaf 0x1D."""
    zero = (0, 0, 0, 0)
    if cpuid.get((0, 0), zero)[0] < 0x1D:
        return None
    max_palette = cpuid.get((0x1D, 0), zero)[0]
    a, b, c, _ = cpuid.get((0x1D, 1), zero)
    out = {
        "max_palette": max_palette,
        "total_tile_bytes": a & 0xFFFF,
        "bytes_per_tile": a >> 16,
        "bytes_per_row": b & 0xFFFF,
        "max_names": b >> 16,
        "max_rows": c & 0xFFFF,
    }
    if cpuid.get((0, 0), zero)[0] >= 0x1E:
        tb = cpuid.get((0x1E, 0), zero)[1]
        out.update(tmul_maxk=tb & 0xFF, tmul_maxn=(tb >> 8) & 0xFFFF)
    return out


def errno_name(err: int) -> str:
    """``"ENOSPC"`` for 28 on Linux; C status codes and unknown numbers get a readable name."""
    if err == 0:
        return "OK"
    if err == _c("E_UNSUPPORTED"):
        return "UNSUPPORTED (not x86-64 Linux)"
    if err == _c("E_NOT_READY"):
        return "NOT_READY"
    return _errno.errorcode.get(err, f"errno {err}")


def faulthandler_fixed(python: Tuple[int, ...]) -> bool:
    """Whether this CPython's faulthandler sizes its sigaltstack for AMX (3.9.12, 3.10.4, 3.11+)."""
    version = tuple(python[:3])
    if version[:2] >= (3, 11):
        return True
    fixed = FAULTHANDLER_FIXED.get(version[:2])
    return fixed is not None and version >= fixed


def permission_remedy(err: int, python: Tuple[int, int, int] = (3, 11, 0)) -> str:
    """Why ARCH_REQ_XCOMP_PERM failed with ``err`` and what to do about it."""
    if err == _errno.ENOSPC:
        where = ".".join(map(str, python[:3]))
        old = (
            f"this CPython {where} predates the fix (3.9.12 / 3.10.4 / 3.11), so its faulthandler "
            "(enabled by pytest, -X faulthandler, PYTHONFAULTHANDLER) installs a too-small one"
            if not faulthandler_fixed(python)
            else f"this CPython {where} sizes faulthandler's stack correctly, so another library installed a small one"
        )
        return (
            "ENOSPC: a thread's sigaltstack is too small for the AMX signal frame (about 11 KiB); "
            f"{old}. Fix: upgrade CPython, or run pytest with -p no:faulthandler, or request the "
            "permission (import pyamx.cpu.native and call pyamx.cpu.native.available()) before faulthandler is enabled"
        )
    if err == _errno.EINVAL:
        return (
            "EINVAL: the kernel does not know XTILEDATA: Linux older than 5.16, or a sandbox "
            "(gVisor) that implements arch_prctl without AMX. Fix: run on Linux >= 5.16, outside gVisor"
        )
    if err == _errno.EOPNOTSUPP:
        return (
            "EOPNOTSUPP: the kernel does not support AMX state on this CPU (XTILEDATA missing from "
            "its supported features: the CPU lacks AMX, a hypervisor hides it, or AMX was disabled at boot)"
        )
    if err == _errno.EPERM:
        return (
            "EPERM: arch_prctl is forbidden here (a seccomp profile or security module, e.g. an old "
            "container runtime's default profile). Fix: allow arch_prctl in the container's seccomp profile"
        )
    if err == _errno.EBUSY:
        return (
            "EBUSY: the kernel refused to change this process's XSTATE permission at this point "
            "(it is locked once in use). Fix: request it early, before other threads start, e.g. "
            "import pyamx.cpu.native and call pyamx.cpu.native.available() at start-up"
        )
    if err == _errno.ENOSYS:
        return "ENOSYS: this kernel (or sandbox) has no arch_prctl AMX interface; Linux >= 5.16 is needed"
    if err == _c("E_UNSUPPORTED"):
        return "arch_prctl exists on x86-64 Linux only"
    return f"{errno_name(err)}: unexpected error from arch_prctl(ARCH_REQ_XCOMP_PERM, 18)"


def child_verdict(err: int, status: int) -> Tuple[bool, str]:
    """Judge the forked child that ran one tile instruction: ``(ok, text)``."""
    if err == _c("E_NOT_READY"):
        return False, "not run: the permission was not granted first"
    if err == _c("E_UNSUPPORTED"):
        return False, "not run: x86-64 Linux only"
    if err != 0:
        return False, f"could not fork/wait for the probe child: {errno_name(err)}"
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if code == 0:
            ran = "+".join(isa.of_action(a).mnemonic for a in ("load-config", "zero", "release"))
            return True, f"{ran} ran in a child, which exited 0"
        return False, f"the probe child exited with status {code}"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        why_by_signal: dict[int, str] = {
            signal.SIGILL: "the CPU or hypervisor advertises AMX but does not deliver it (#UD on the "
            "first tile instruction), or the permission is not in effect",
            signal.SIGSEGV: f"{isa.of_action('load-config').mnemonic} raised #GP: the hypervisor reports palette 1 "
            "but rejects it",
            signal.SIGALRM: "the tile instructions hung for 10 s",
        }
        why = why_by_signal.get(sig, "unexpected signal")
        return False, f"the probe child was killed by {name}: {why}"
    return False, f"the probe child ended with wait status 0x{status:x}"


# -- the judgement ---------------------------------------------------------------


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


class _Stages:
    """Accumulates stages and remembers the first failure's reason."""

    def __init__(self) -> None:
        self.items: list[Stage] = []
        self.reason: Optional[str] = None

    def add(self, name: str, value: str, ok: Optional[bool], remedy: str = "") -> Optional[bool]:
        self.items.append(Stage(name, value, ok))
        if ok is False and self.reason is None:
            self.reason = f"{name}: {remedy or value}"
        return ok

    def skip(self, *names: str) -> None:
        for name in names:
            self.items.append(Stage(name, "not checked (an earlier stage failed)", None))

    def not_started(self, name: str, what: str) -> None:
        """A stage of the native start: skipped after a failure, else still to come."""
        if self.failed:
            self.skip(name)
        else:
            self.items.append(Stage(name, f"{what}: {NOT_STARTED}", None))

    @property
    def failed(self) -> bool:
        return self.reason is not None


#: what a stage of the native start says before the start ran
NOT_STARTED = ("the native backend's start does it (the backend choice, before the first native call; "
               "pyamx info)")


def _feature_stage(feature: isa.Feature) -> str:
    """A stage named after a pyamx.table.isa feature row: ``"AMX-BF16 (CPUID.7.0:EDX[22])"``."""
    return f"{feature.name} (CPUID.{feature.leaf:X}.{feature.subleaf:X}:{feature.register.upper()}[{feature.bit}])"


#: the AMX features of pyamx.table.isa: AMX-TILE first (the verdict of the stage), then each kernel group's
_FEATURES = (isa.FEATURES["AMX-TILE"],) + tuple(f for f in isa.FEATURE_ROWS if f.name != "AMX-TILE")

SILICON_STAGES_AFTER_CPUID = (
    *(_feature_stage(f) for f in _FEATURES),
    "palette 1 (CPUID.1D/1E)",
    "OSXSAVE (CPUID.1:ECX[27])",
    "XCR0 XTILECFG/XTILEDATA (bits 17, 18)",
    "kernel support (ARCH_GET_XCOMP_SUPP)",
    "permission request (ARCH_REQ_XCOMP_PERM, 18)",
    "permission granted (ARCH_GET_XCOMP_PERM)",
    "tile instruction in a forked child",
)


def _cpu_info(cpuid: CpuidLeaves) -> CpuInfo:
    zero = (0, 0, 0, 0)
    family, model, stepping = decode_signature(cpuid.get((1, 0), zero)[0])
    vendor = decode_vendor(cpuid.get((0, 0), zero))
    info: CpuInfo = {"vendor": vendor, "family": family, "model": model, "stepping": stepping,
                     "name": cpu_name(vendor, family, model)}
    if info["name"] != UNKNOWN_CPU:
        info["codename"] = info["name"]
    return info


def _hidden_hint(cpu: CpuInfo) -> str:
    codename = cpu.get("codename")
    if codename:
        return (
            f" This CPU (family {cpu['family']} model {cpu['model']}, {codename}) has AMX on silicon, "
            "so a hypervisor or sandbox is hiding it (some VMs, e.g. Firecracker-style ones, mask AMX)"
        )
    return " AMX needs an Intel Xeon of the Sapphire Rapids generation or later"


def _silicon_stages(raw: RawFacts, st: _Stages, cpu: CpuInfo) -> Tuple[set[str], dict[str, int]]:
    """CPUID through the child probe; returns (CPU kernel groups, feature dict)."""
    names = iter(SILICON_STAGES_AFTER_CPUID)
    cpuid = raw.cpuid
    assert cpuid is not None  # evaluate() judges these stages only where CPUID was read
    feats = decode_features(cpuid)
    cpu_groups = {group for group, feat in KERNEL_FEATURE.items() if feats[feat]}

    name = next(names)
    st.add(name, _yes(feats["amx_tile"]), bool(feats["amx_tile"]),
           "the CPU does not report AMX (CPUID.(7,0):EDX bit 24 is 0)." + _hidden_hint(cpu))
    for feature in _FEATURES[1:]:
        st.add(next(names), _yes(feats[feature.key]), None)

    name = next(names)
    pal = decode_palette(cpuid)
    if not feats["amx_tile"]:
        st.skip(name)
    elif pal is None:
        st.add(name, f"CPUID max leaf 0x{feats['max_leaf']:x} < 0x1D", False,
               "the CPU reports AMX-TILE but no tile palette leaf 0x1D (a hypervisor's incomplete CPUID)")
    else:
        palette = (
            f"max palette {pal['max_palette']}; {pal['max_names']} tiles x {pal['max_rows']} rows x "
            f"{pal['bytes_per_row']} B ({pal['bytes_per_tile']} B/tile, {pal['total_tile_bytes']} B total); "
            f"tmul_maxk {pal.get('tmul_maxk', '?')}, tmul_maxn {pal.get('tmul_maxn', '?')} B"
        )
        expected = dict(PALETTE1, **TMUL)
        wrong = [k for k, v in expected.items() if pal.get(k) != v]
        if pal["max_palette"] < 1:
            st.add(name, palette, False, "the CPU reports palette 0 only (some VMs do): no tiles to configure")
        elif wrong:
            st.add(name, palette, False,
                   f"palette 1 differs from the 8 x 16 x 64-byte tiles pyamx models ({', '.join(wrong)})")
        else:
            st.add(name, palette, True)

    name = next(names)
    st.add(name, _yes(feats["osxsave"]), bool(feats["osxsave"]),
           "the OS has not enabled XSAVE (CR4.OSXSAVE): XCR0 cannot be read and AMX state cannot be enabled")

    name = next(names)
    if raw.xcr0 is None:
        st.skip(name)
    else:
        cfg, data = bit(raw.xcr0, XFEATURE_XTILECFG), bit(raw.xcr0, XFEATURE_XTILEDATA)
        st.add(name, f"XCR0=0x{raw.xcr0:x} (17: {_yes(cfg)}, 18: {_yes(data)})", cfg and data,
               f"XCR0=0x{raw.xcr0:x} lacks bits 17/18: the OS has not enabled AMX state. The kernel is "
               "older than 5.16, or a hypervisor sets the CPUID bits without the XSAVE state (a VM that "
               "advertises AMX it cannot deliver)")

    name = next(names)
    if raw.xcomp_supp is None:
        st.skip(name)
    else:
        err, value = raw.xcomp_supp
        if err:
            st.add(name, errno_name(err), False,
                   f"arch_prctl(ARCH_GET_XCOMP_SUPP) failed with {errno_name(err)}: Linux >= 5.16 is needed")
        else:
            has = bit(value, XFEATURE_XTILEDATA)
            st.add(name, f"0x{value:x} (bit 18: {_yes(has)})", has,
                   "the kernel does not list XTILEDATA among its supported XSTATE features: "
                   "Linux older than 5.16, or AMX disabled by the kernel or hypervisor")

    name = next(names)
    if raw.perm_request is None:
        st.not_started(name, "not requested yet")
    else:
        err = raw.perm_request
        st.add(name, "granted" if err == 0 else errno_name(err), err == 0, permission_remedy(err, raw.python))

    name = next(names)
    if raw.xcomp_perm is None:
        st.not_started(name, "not read yet")
    else:
        err, value = raw.xcomp_perm
        both = not err and bit(value, XFEATURE_XTILECFG) and bit(value, XFEATURE_XTILEDATA)
        st.add(name, errno_name(err) if err else f"0x{value:x}", both,
               "the permission request returned success but ARCH_GET_XCOMP_PERM does not show bits 17 and 18")

    name = next(names)
    if raw.child is None:
        st.not_started(name, "not run yet")
    else:
        ok, text = child_verdict(*raw.child)
        st.add(name, text, ok)
    return cpu_groups, feats


def _trap_stage(raw: RawFacts, st: _Stages, silicon_reason: str) -> bool:
    """Adds the trap-mode stage; True when native runs trapped."""
    trap_env = _trap_env_var()
    name = f"trap mode ({trap_env})"
    trap = raw.trap
    if trap is None:
        return False
    if not trap.available:
        st.add(name, "unavailable: " + (trap.error or "pyamx.cpu.trap is not installed"), None)
        return False
    if trap.error and not trap.requested:  # e.g. a value of the variable the parser refused
        st.add(name, f"refused: {trap.error}", False)
        return False
    if not trap.requested:
        st.add(name, f"not requested (set {trap_env}=1 to run the native code through the SIGILL emulator)", None)
        return False
    if trap.pending:
        st.add(name, "requested, not on yet: the native backend's start switches it on, as silicon said no "
               "(the backend choice, before the first native call); native code would then run, but every "
               "tile instruction TRAPPED and EMULATED, not executed by AMX silicon", None)
        return False
    if trap.error or not trap.active:
        st.add(name, f"requested but failed: {trap.error or 'not active'}", None)
        return False
    guard = f"; guard: {trap.guard}" if trap.guard else ""
    st.add(name, "ACTIVE: native code runs, but every tile instruction is TRAPPED and EMULATED, "
           f"not executed by AMX silicon (silicon: {silicon_reason}){guard}", True)
    return True


def evaluate(raw: RawFacts) -> Report:
    """Judge the raw values (pure): every stage with its verdict, the first failure, the kernels."""
    st = _Stages()
    x86 = raw.machine.lower() in ("x86_64", "amd64")
    st.add("platform", f"{raw.system} {raw.machine}", x86 and raw.system == "Linux",
           "AMX is an x86-64 feature" if not x86 else
           f"the native backend runs on Linux (arch_prctl permission); this is {raw.system}")

    build = raw.build
    build_info: dict[str, str | list[str]] = {}
    if build is None:
        st.add("native module (pyamx._native)", raw.build_error or "not built", False,
               raw.build_error or "the C extension is not built: run `pip install .` or `python build.py`")
        if raw.cpuinfo_flags is not None:
            st.add("cpu flags (/proc/cpuinfo)", " ".join(raw.cpuinfo_flags) or "no AMX flags", None)
    else:
        kernels_text = ", ".join(sorted(build.kernels)) or f"none ({build.kernels_reason or 'reason not recorded'})"
        build_info = {"version": build.version, "compiler": build.compiler, "kernels": sorted(build.kernels),
                      "kernels_reason": build.kernels_reason}
        st.add("native module (pyamx._native)", f"{build.version}, {build.compiler}, kernels: {kernels_text}", True)

    cpu: dict[str, object] = {}
    groups: AbstractSet[str] = set()
    if raw.cpuid is None:
        st.skip("cpu", *SILICON_STAGES_AFTER_CPUID)
    else:
        info = _cpu_info(raw.cpuid)
        line = len(st.items)
        st.add("cpu", "", None)  # worded below, once the forked child has said what executes
        groups, feats = _silicon_stages(raw, st, info)
        child = next(s for s in st.items if s.name == SILICON_STAGES_AFTER_CPUID[-1])
        st.items[line] = Stage("cpu", describe_cpu(info, feats, child.ok), None)
        cpu = {**info, **feats}

    built = set(build.kernels) if build else set()
    # every stage so far said yes, but the permission and the child are the native start's, still to come
    not_started = raw.cpuid is not None and not st.failed and raw.child is None
    silicon_ok = not st.failed and not not_started
    kernels: AbstractSet[str] = built & groups
    if silicon_ok:
        if not built:
            st.add("kernels", "none in this build", False,
                   f"this build of pyamx has no AMX kernels ({build.kernels_reason if build else '?'}; "
                   f"compiled with {build.compiler if build else '?'}): rebuild with GCC >= 11 or clang >= 12 "
                   "on x86-64, without PYAMX_DISABLE_AMX_KERNELS")
        else:
            st.add("kernels", ", ".join(sorted(kernels)) or "none", bool(kernels),
                   "the CPU supports none of the kernel groups this build has")

    silicon_reason = st.reason or ("not started yet: the native backend's start requests the AMX permission "
                                   "and runs one tile instruction in a forked child (the backend choice, "
                                   "before the first native call)" if not_started else "ok")
    mode = "silicon" if silicon_ok and not st.failed else None
    warning = None
    if not_started and raw.trap is not None and raw.trap.pending:
        st.add(f"complement mode ({_trap_env_var()})", "requested, not on yet: the native backend's start "
               "installs it for the AMX extensions this CPU lacks, if silicon says yes", None)
    if mode is None and not not_started and raw.trap is not None and _trap_stage(raw, st, silicon_reason):
        mode = "trap"
        kernels = built if raw.trap.kernels is None else built & set(raw.trap.kernels)
        warning = (
            "TRAP MODE: 'native' does NOT mean AMX silicon here. Every tile instruction raises SIGILL "
            "and is emulated by pyamx's trap handler; results prove the native code path, not the hardware."
        )
        if not kernels:
            mode, warning = None, None
            silicon_reason += ("; the trap mode is active but this build has no AMX kernels to run "
                               f"({build.kernels_reason if build else 'no module'})")

    complemented: frozenset[str] = frozenset()
    if mode == "silicon" and (raw.complement is not None or raw.complement_error):
        name = f"complement mode ({_trap_env_var()})"
        if raw.complement_error:
            st.add(name, f"requested but failed: {raw.complement_error}", None)
        else:
            assert raw.complement is not None  # no complement_error, so the condition above held by complement
            complemented = frozenset(raw.complement)
            groups = {g for g, feature in isa.GROUP_FEATURE.items() if feature in complemented}
            kernels = frozenset(kernels) | (built & groups)
            st.add(name, ("emulates " + ", ".join(raw.complement)) if raw.complement else
                   "nothing to emulate: the CPU has every AMX extension pyamx knows", True)
            if complemented:
                warning = ("COMPLEMENT MODE: " + ", ".join(raw.complement) + " instructions are NOT run by "
                           "this CPU, which lacks them: pyamx's SIGILL handler emulates them on the tile "
                           "registers; every other AMX instruction runs on silicon.")
    usable = mode is not None
    if mode == "silicon":
        reason = "ok"
    elif mode == "trap":
        reason = "ok (TRAP MODE: native runs through the SIGILL emulator, not AMX silicon; silicon: " + silicon_reason + ")"
    else:
        reason = silicon_reason
    return Report(
        native_usable=usable,
        reason=reason,
        mode=mode,
        stages=tuple(st.items),
        kernels=frozenset(kernels if usable else ()),
        cpu=MappingProxyType(cpu),
        build=MappingProxyType(build_info),
        warning=warning,
        complemented=complemented,
    )


def gate_passed(raw: RawFacts) -> bool:
    """Whether every stage judged so far said yes, so the next side-effecting stage may run (pure)."""
    rep = evaluate(replace(raw, trap=None))
    return not any(s.ok is False for s in rep.stages if s.name != "kernels")


# -- the live part ----------------------------------------------------------------


def read_build(lib: Lib, ffi: FFI) -> BuildFacts:
    """The build facts the C module reports."""
    bits: int = lib.pyamx_build_kernels()
    return BuildFacts(
        version=ffi.string(lib.pyamx_build_version()).decode(),
        compiler=ffi.string(lib.pyamx_build_compiler()).decode(),
        # a bit is None only without the C module, which this reads from
        kernels=frozenset(name for name, b in _kernel_bits().items() if b is not None and bits & b),
        x86_64_linux=bool(lib.pyamx_build_x86_64_linux()),
        kernels_reason=ffi.string(lib.pyamx_build_kernels_reason()).decode(),
    )


AMX_CPUINFO_FLAGS = ("amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "amx_complex")


def cpuinfo_amx_flags(text: str) -> Tuple[str, ...]:
    """The AMX flags of the first CPU in a /proc/cpuinfo text (pure): what the kernel saw, no extension needed."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags = set(value.split())
            return tuple(f for f in AMX_CPUINFO_FLAGS if f in flags)
    return ()


def _read_cpuinfo_flags() -> Optional[Tuple[str, ...]]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return cpuinfo_amx_flags(f.read())
    except OSError:
        return None


def _read_cpuid(lib: Lib, ffi: FFI) -> dict[Tuple[int, int], Registers]:
    out = ffi.new("uint32_t[4]")
    leaves: dict[Tuple[int, int], Registers] = {}
    for leaf, sub in CPUID_LEAVES:
        if lib.pyamx_cpuid(leaf, sub, out) == 0:
            leaves[(leaf, sub)] = (int(out[0]), int(out[1]), int(out[2]), int(out[3]))
    return leaves


def read_u64(ffi: FFI, fn: Callable[..., int], *args: int) -> Tuple[int, int]:
    """``(status, value)`` of a C reader that fills one uint64_t (XGETBV, arch_prctl's GET codes)."""
    value = ffi.new("uint64_t *")
    rc = fn(*args, value)
    return int(rc), int(value[0])


def _read_trap() -> TrapFacts:
    """What the trap variable asks for (read, never acted on: the native start switches the mode on)."""
    try:
        from . import trap
    except ImportError as exc:
        return TrapFacts(available=False, error=str(exc))
    try:
        requested = bool(trap.requested())
    except Exception as exc:  # a strict env parser refusing a value
        return TrapFacts(available=True, requested=False, error=f"{type(exc).__name__}: {exc}")
    return TrapFacts(available=True, requested=requested, pending=requested)


def _trap_env_var() -> str:
    """The trap variable's name (pyamx.trap owns it), for the stage names."""
    from .trap import ENV_VAR

    return ENV_VAR


def _read() -> RawFacts:
    """Every reading of this process, none of which changes anything: the platform, the build,
    CPUID's leaves, XCR0, the kernel's XCOMP_SUPP and the trap variable."""
    raw = RawFacts(system=platform.system(), machine=platform.machine(), python=sys.version_info[:3])
    from . import _nativelib

    try:
        ffi, lib = _nativelib.load()
    except ImportError as exc:
        return replace(raw, build_error=str(exc), cpuinfo_flags=_read_cpuinfo_flags())
    build = read_build(lib, ffi)
    raw = replace(raw, build=build, trap=_read_trap())
    if build.x86_64_linux:
        raw = replace(raw, cpuid=_read_cpuid(lib, ffi))
        if raw.features["osxsave"]:
            rc, xcr0 = read_u64(ffi, lib.pyamx_xgetbv0)
            raw = replace(raw, xcr0=xcr0 if rc == 0 else None)
        raw = replace(raw, xcomp_supp=read_u64(ffi, lib.pyamx_arch_prctl_get, ARCH_GET_XCOMP_SUPP))
    return raw


_lock = LOCK  # the one-time work's lock, which fork waits for (pyamx._first_use)
_facts: Optional[RawFacts] = None  # the readings, once per process
_started: Mapping[str, object] = MappingProxyType({})  # what the native start did: START_FIELDS -> value
_start_ran = False
_cached: Optional[Tuple[RawFacts, Mapping[str, object], "Report"]] = None  # the report of (_facts, _started)


def facts() -> RawFacts:
    """The table of readings of this process, read once (no side effect) and then kept."""
    table = _facts
    if table is None:
        with _lock:
            table = _facts or _read_once()
    return table


def _read_once() -> RawFacts:
    global _facts
    _facts = _read()
    return _facts


def refresh() -> RawFacts:
    """Read the table again (a test that changed the environment); what the native start did stays."""
    global _facts, _cached
    with _lock:
        _facts = _cached = None
        return facts()


def note_start(outcome: Mapping[str, object]) -> None:
    """Record what the native start did (pyamx.cpu._native_start, once per process): ``outcome`` maps
    :data:`START_FIELDS` to the values its actions returned; the report judges them from now on."""
    global _started, _start_ran
    unknown = set(outcome) - set(START_FIELDS)
    if unknown:
        raise ValueError(f"not a field the native start fills: {', '.join(sorted(unknown))}")
    _started = MappingProxyType(dict(outcome))
    _start_ran = True


def started() -> bool:
    """Whether the native start has run in this process (its outcome is in the table)."""
    return _start_ran


def collect() -> RawFacts:
    """The table as it stands: the readings (:func:`facts`) and what the native start did so far.

    No side effect: nothing is requested, forked or switched on here (pyamx.cpu._native_start does
    that, once, at the backend choice). Not cached beyond the readings: use :func:`report`.
    """
    return _with_start(facts(), _started)


def _with_start(table: RawFacts, started: Mapping[str, object]) -> RawFacts:
    """``table`` with what the native start did (:func:`note_start`) in its :data:`START_FIELDS`."""
    # note_start admits START_FIELDS only; their values are what pyamx.cpu._native_start's actions returned
    return replace(table, **started)  # type: ignore[arg-type]


def report() -> Report:
    """The detection report of this process: judged from :func:`collect`, no side effect, and the
    same object until the native start adds what it did.

    ``native_usable``, ``amx_usable`` (silicon only), ``trap_mode``,
    ``reason`` ("ok" or the first failing stage with its
    remedy), ``mode`` ("silicon", "trap" or None), ``stages`` (ordered
    ``Stage(name, value, ok)`` tuples), ``kernels`` (frozenset of "bf16",
    "int8", "fp16" that native can run). Never raises for a missing feature
    and never runs a tile instruction. Before the native start (``pyamx.cpu.native.available()``, the
    backend choice, the first native call) the permission and child stages say they are still to
    come, native is not usable yet, and the trap stage says what the trap mode would do.
    """
    global _cached
    cached = _cached
    if cached is not None and cached[0] is _facts and cached[1] is _started:
        return cached[2]  # no lock once judged: a hook that raises inside `with` must not leave it held
    with _lock:
        table = facts()
        started_now = _started
        cached = _cached
        if cached is None or cached[0] is not table or cached[1] is not started_now:
            cached = _cached = (table, started_now, evaluate(_with_start(table, started_now)))
        return cached[2]


def format_report(rep: Report) -> str:
    """The report as readable text, one stage per line (pure)."""
    mark = {True: "ok  ", False: "FAIL", None: "    "}
    lines = []
    if rep.warning:
        bar = "!" * 78
        lines += [bar, rep.warning, bar]
    from .._result import backend_label

    native = backend_label("native", rep.mode) if rep.native_usable else "not usable"
    lines.append(f"AMX silicon usable: {_yes(rep.amx_usable)}   native backend: {native}   "
                 f"kernels: {', '.join(sorted(rep.kernels)) or 'none'}")
    lines.append(f"reason: {rep.reason}")
    lines.append("stages:")
    width = max((len(s.name) for s in rep.stages), default=0)
    for s in rep.stages:
        lines.append(f"  [{mark[s.ok]}] {s.name.ljust(width)}  {s.value}")
    return "\n".join(lines)


def cpu_features() -> dict[str, object]:
    """Every detection stage and fact as a plain dict (what :func:`report` found)."""
    rep = report()
    out = rep.as_dict()
    out.update({k: v for k, v in rep.cpu.items()})
    out["compiler"] = rep.build.get("compiler")
    out["build_kernels"] = list(rep.build.get("kernels", []))
    return out
