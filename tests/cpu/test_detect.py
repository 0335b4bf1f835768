"""Detection: the pure judgement on recorded values, and the live report on this machine.

The recorded machines carry the fields detection reads as those CPUs report
them: the AMX bits (SDM Vol. 2, CPUID), the signatures (Sapphire Rapids
0x806F8, Granite Rapids 0xA06D1, an AMD EPYC Genoa 0xA10F11), the palette
leaves (8 tiles x 16 rows x 64 bytes, tmul_maxk 16, tmul_maxn 64) and Linux's
XCR0 with AMX enabled (0x602E7). Other bits of those registers are
representative, not a verbatim dump.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from pyamx.cpu import _runtime
from pyamx.cpu import detect
from pyamx.table import isa
from pyamx.cpu.detect import BuildFacts, RawFacts, TrapFacts, evaluate

from childproc import PYAMX_HOME as ROOT  # the pyamx under test, not necessarily this checkout

INTEL = (0x756E6547, 0x6C65746E, 0x49656E69)  # "Genu", "ntel", "ineI" as EBX, ECX, EDX
AMD = (0x68747541, 0x444D4163, 0x69746E65)  # "Auth", "cAMD", "enti"


def leaf0(max_leaf, vendor):
    ebx, ecx, edx = vendor
    return (max_leaf, ebx, ecx, edx)


AMX_EDX = (1 << 22) | (1 << 24) | (1 << 25)
PALETTE_LEAVES = {
    (0x1D, 0): (1, 0, 0, 0),
    (0x1D, 1): (0x04002000, 0x00080040, 0x00000010, 0),
    (0x1E, 0): (0, 0x00004010, 0, 0),
}

SAPPHIRE_RAPIDS = {
    (0, 0): leaf0(0x20, INTEL),
    (1, 0): (0x000806F8, 0x00800800, 0x7FFEFBFF, 0xBFEBFBFF),
    (7, 0): (0x00000002, 0xF3BFBFFB, 0x1BC05FFE, 0xFFD04432 | AMX_EDX),
    (7, 1): (0x00001C30, 0, 0, 0),
    **PALETTE_LEAVES,
}
GRANITE_RAPIDS = {
    **SAPPHIRE_RAPIDS,
    (1, 0): (0x000A06D1, 0x00800800, 0x7FFEFBFF, 0xBFEBFBFF),
    (7, 1): (0x00201C30, 0, 0, 0),  # bit 21: AMX-FP16
}
AMD_EPYC = {
    (0, 0): leaf0(0x10, AMD),
    (1, 0): (0x00A10F11, 0x00800800, 0x7EFAB203, 0x178BFBFF),
    (7, 0): (0x00000001, 0xF1BF97A9, 0x00405FCE, 0x10000010),
    (7, 1): (0x00000020, 0, 0, 0),
}

XCR0_AMX = 0x602E7
XCR0_NO_AMX = 0x2E7
BUILD = BuildFacts(version="0.1.0", compiler="gcc 12.2.0", kernels=frozenset({"bf16", "int8", "fp16"}),
                   x86_64_linux=True)


def machine(cpuid, xcr0=XCR0_AMX, supp=XCR0_AMX, perm_request=0, perm=XCR0_AMX, child=(0, 0),
            build=BUILD, python=(3, 11, 7), trap=None) -> RawFacts:
    return RawFacts(system="Linux", machine="x86_64", python=python, build=build, cpuid=cpuid, xcr0=xcr0,
                    xcomp_supp=(0, supp), perm_request=perm_request, xcomp_perm=(0, perm), child=child, trap=trap)


def stage(rep, prefix):
    return next(s for s in rep.stages if s.name.startswith(prefix))


# -- decoders ---------------------------------------------------------------------------


def test_signatures_decode_with_extended_fields():
    assert detect.decode_signature(0x000806F8) == (6, 143, 8)
    assert detect.decode_signature(0x000A06D1) == (6, 173, 1)
    assert detect.decode_signature(0x000C06F2) == (6, 207, 2)
    assert detect.decode_signature(0x00A10F11) == (25, 17, 1)


def test_vendor_strings():
    assert detect.decode_vendor(SAPPHIRE_RAPIDS[(0, 0)]) == "GenuineIntel"
    assert detect.decode_vendor(AMD_EPYC[(0, 0)]) == "AuthenticAMD"


def test_palette_and_tmul_limits():
    pal = detect.decode_palette(SAPPHIRE_RAPIDS)
    assert pal == {"max_palette": 1, "total_tile_bytes": 8192, "bytes_per_tile": 1024, "bytes_per_row": 64,
                   "max_names": 8, "max_rows": 16, "tmul_maxk": 16, "tmul_maxn": 64}
    assert detect.decode_palette(AMD_EPYC) is None


# -- whole machines -----------------------------------------------------------------------


def test_sapphire_rapids_is_usable_without_fp16():
    rep = evaluate(machine(SAPPHIRE_RAPIDS))
    assert rep.amx_usable and rep.reason == "ok" and rep.mode == "silicon"
    assert rep.kernels == {"bf16", "int8"}
    assert rep.cpu["model"] == 143 and rep.cpu["codename"] == "Sapphire Rapids"
    assert all(s.ok is not False for s in rep.stages)
    assert [s.name for s in rep.stages][:3] == ["platform", "native module (pyamx._native)", "cpu"]
    assert stage(rep, "AMX-FP16").value == "no"
    assert "exited 0" in stage(rep, "tile instruction").value


def test_the_cpu_line_names_cpuid_facts_and_says_unknown_where_no_table_entry_matches():
    # A VM seen with AMX reported family 6 model 167 (no AMX part has that model): named unknown,
    # its features and the child's verdict said as CPUID and the probe found them.
    vm = dict(SAPPHIRE_RAPIDS)
    vm[(1, 0)] = (0x000A0671,) + tuple(SAPPHIRE_RAPIDS[(1, 0)][1:])
    rep = evaluate(machine(vm))
    assert (rep.cpu["family"], rep.cpu["model"], rep.cpu["stepping"]) == (6, 167, 1)
    assert rep.cpu["name"] == "unknown" and "codename" not in rep.cpu
    assert stage(rep, "cpu").value == (
        "GenuineIntel family 6 model 167 stepping 1: unknown (no entry of pyamx's table of AMX CPU models "
        "matches); CPUID reports AMX-TILE, AMX-BF16, AMX-INT8; a forked child executed a tile instruction")
    known = evaluate(machine(SAPPHIRE_RAPIDS))
    assert stage(known, "cpu").value.startswith(
        "GenuineIntel family 6 model 143 stepping 8: Sapphire Rapids (pyamx's table of AMX CPU models")
    assert detect.cpu_name("AuthenticAMD", 6, 143) == "unknown"  # the table is Intel's family 6 only
    assert detect.cpu_name("GenuineIntel", 6, 207) == "Emerald Rapids"


def test_granite_rapids_has_fp16():
    rep = evaluate(machine(GRANITE_RAPIDS))
    assert rep.amx_usable and rep.kernels == {"bf16", "int8", "fp16"}
    assert rep.cpu["model"] == 173 and stage(rep, "AMX-FP16").value == "yes"


def test_amd_epyc_without_amx():
    raw = machine(AMD_EPYC, xcr0=XCR0_NO_AMX, supp=XCR0_NO_AMX, perm_request=None, perm=None, child=None)
    raw = replace(raw, xcomp_perm=None)
    rep = evaluate(raw)
    assert not rep.amx_usable and rep.mode is None and rep.kernels == frozenset()
    assert rep.reason.startswith("AMX-TILE")
    assert "Sapphire Rapids generation" in rep.reason
    assert rep.cpu["vendor"] == "AuthenticAMD" and rep.cpu["family"] == 25
    assert stage(rep, "permission request").ok is None  # never attempted
    assert not detect.gate_passed(raw)


def test_vm_with_cpuid_bits_but_no_xcr0_state():
    raw = replace(machine(SAPPHIRE_RAPIDS, xcr0=XCR0_NO_AMX, supp=XCR0_NO_AMX), perm_request=None,
                  xcomp_perm=None, child=None)
    rep = evaluate(raw)
    assert not rep.amx_usable
    assert rep.reason.startswith("XCR0")
    assert "0x2e7" in rep.reason and "advertises AMX" in rep.reason
    assert stage(rep, "AMX-TILE").ok is True
    assert not detect.gate_passed(raw)


def test_hidden_amx_on_an_amx_model_says_a_hypervisor_hides_it():
    emerald = {**SAPPHIRE_RAPIDS, (1, 0): (0x000C06F2, 0, 0x7FFEFBFF, 0),
               (7, 0): (2, 0, 0, 0xFFD04432 & ~AMX_EDX)}
    rep = evaluate(replace(machine(emerald, xcr0=0xE7, supp=0xE7), perm_request=None, xcomp_perm=None, child=None))
    assert "Emerald Rapids" in rep.reason and "hiding" in rep.reason


def test_palette_zero_vm_fails_the_palette_stage():
    cpuid = {**SAPPHIRE_RAPIDS, (0x1D, 0): (0, 0, 0, 0)}
    rep = evaluate(machine(cpuid))
    assert rep.reason.startswith("palette 1") and "palette 0" in rep.reason


def test_gate_opens_only_when_every_stage_before_said_yes():
    raw = replace(machine(SAPPHIRE_RAPIDS), perm_request=None, xcomp_perm=None, child=None)
    assert detect.gate_passed(raw)
    assert not detect.gate_passed(replace(raw, perm_request=errno.EPERM))


@pytest.mark.parametrize("err, words", [
    (errno.ENOSPC, ["ENOSPC", "sigaltstack", "faulthandler", "-p no:faulthandler"]),
    (errno.EINVAL, ["EINVAL", "5.16", "gVisor"]),
    (errno.EOPNOTSUPP, ["EOPNOTSUPP", "hypervisor"]),
    (errno.EPERM, ["EPERM", "seccomp"]),
    (errno.EBUSY, ["EBUSY", "early"]),
])
def test_each_permission_errno_names_itself_and_a_remedy(err, words):
    rep = evaluate(replace(machine(SAPPHIRE_RAPIDS, perm_request=err), xcomp_perm=None, child=None))
    assert not rep.amx_usable
    assert rep.reason.startswith("permission request")
    for word in words:
        assert word in rep.reason, (word, rep.reason)
    assert stage(rep, "permission request").value == errno.errorcode[err]
    assert stage(rep, "tile instruction").ok is None


def test_enospc_remedy_depends_on_the_python_version():
    old = detect.permission_remedy(errno.ENOSPC, (3, 10, 3))
    assert "3.10.3 predates the fix" in old
    assert "predates" not in detect.permission_remedy(errno.ENOSPC, (3, 10, 4))
    assert "predates" not in detect.permission_remedy(errno.ENOSPC, (3, 11, 0))
    assert detect.faulthandler_fixed((3, 9, 12)) and not detect.faulthandler_fixed((3, 9, 11))


def test_permission_that_does_not_show_up_fails():
    rep = evaluate(replace(machine(SAPPHIRE_RAPIDS, perm=XCR0_NO_AMX), child=None))
    assert rep.reason.startswith("permission granted")


@pytest.mark.parametrize("sig, word", [(signal.SIGILL, "SIGILL"), (signal.SIGSEGV, "SIGSEGV")])
def test_child_killed_by_a_signal_is_caught(sig, word):
    rep = evaluate(machine(SAPPHIRE_RAPIDS, child=(0, int(sig))))  # wait status of a signal death
    assert not rep.amx_usable
    assert rep.reason.startswith("tile instruction in a forked child") and word in rep.reason


def test_child_verdicts():
    assert detect.child_verdict(0, 0)[0]
    assert not detect.child_verdict(0, 3 << 8)[0]  # exit status 3
    assert "not run" in detect.child_verdict(detect.E_NOT_READY, 0)[1]
    assert "ECHILD" in detect.child_verdict(errno.ECHILD, 0)[1]


def test_build_without_kernels():
    rep = evaluate(machine(SAPPHIRE_RAPIDS, build=replace(BUILD, kernels=frozenset())))
    assert not rep.amx_usable and rep.reason.startswith("kernels")
    assert "GCC >= 11" in rep.reason
    # Other code's AMX kernels still run on this CPU: the pytest plugin asks this, not amx_usable.
    assert rep.cpu_runs_amx and rep.as_dict()["cpu_runs_amx"] is True


def test_cpu_runs_amx_needs_every_silicon_stage():
    assert evaluate(machine(SAPPHIRE_RAPIDS)).cpu_runs_amx
    assert not evaluate(NO_AMX_HERE).cpu_runs_amx
    assert not evaluate(machine(SAPPHIRE_RAPIDS, child=(0, 3 << 8))).cpu_runs_amx  # the child died


def test_missing_or_stale_module():
    raw = RawFacts(system="Linux", machine="x86_64", python=(3, 11, 7), build_error="pyamx._native was built "
                   "for pyamx 0.0.9 but this is pyamx 0.1.0 (a stale build): rebuild it with `pip install .`")
    rep = evaluate(raw)
    assert not rep.amx_usable and "stale build" in rep.reason


def test_other_architecture():
    rep = evaluate(RawFacts(system="Linux", machine="aarch64", python=(3, 11, 7), build_error="not built"))
    assert rep.reason.startswith("platform") and "x86-64" in rep.reason


# -- trap mode ------------------------------------------------------------------------------

NO_AMX_HERE = replace(machine(AMD_EPYC, xcr0=XCR0_NO_AMX, supp=XCR0_NO_AMX), perm_request=None,
                      xcomp_perm=None, child=None)


def test_trap_mode_makes_native_usable_and_says_so_loudly():
    rep = evaluate(replace(NO_AMX_HERE, trap=TrapFacts(available=True, requested=True, active=True)))
    assert rep.native_usable and rep.trap_mode and rep.mode == "trap"
    assert not rep.amx_usable  # amx_usable means silicon
    as_dict = rep.as_dict()
    assert as_dict["amx_usable"] is False and as_dict["trap_mode"] is True and as_dict["native_usable"] is True
    assert "native (trap mode)" in detect.format_report(rep)
    assert rep.kernels == BUILD.kernels
    assert "TRAP MODE" in rep.reason and "TRAP MODE" in rep.warning and "NOT" in rep.warning
    assert stage(rep, "trap mode").ok is True
    assert "TRAP MODE" in detect.format_report(rep).splitlines()[1]


def test_trap_mode_absent_or_failing_keeps_the_silicon_reason():
    for trap, word in [
        (TrapFacts(available=False, error="pyamx.cpu.trap cannot be imported"), "unavailable"),
        (TrapFacts(available=True, requested=False), "not requested"),
        (TrapFacts(available=True, requested=True, error="BackendError: refused"), "failed"),
    ]:
        rep = evaluate(replace(NO_AMX_HERE, trap=trap))
        assert not rep.native_usable and not rep.trap_mode and rep.reason.startswith("AMX-TILE")
        assert word in stage(rep, "trap mode").value


def test_trap_mode_without_kernels_is_not_usable():
    rep = evaluate(replace(NO_AMX_HERE, build=replace(BUILD, kernels=frozenset()),
                           trap=TrapFacts(available=True, requested=True, active=True)))
    assert not rep.native_usable and "no AMX kernels" in rep.reason


# -- the live report on this machine ------------------------------------------------------------


def test_live_report_is_cached_and_frozen():
    rep = detect.report()
    assert rep is detect.report()
    with pytest.raises(Exception):
        rep.native_usable = True
    assert isinstance(rep.reason, str) and rep.reason
    assert rep.mode in ("silicon", "trap", None)
    assert rep.kernels <= set(isa.GROUPS)
    assert all(len(s) == 3 for s in rep.stages)
    json.dumps(rep.as_dict())


def test_live_report_explains_missing_amx():
    rep = detect.report()
    if rep.mode == "silicon":
        pytest.skip("AMX is usable on this machine")
    if rep.cpu.get("amx_tile") is False:
        assert rep.stages[[s.name for s in rep.stages].index("AMX-TILE (CPUID.7.0:EDX[24])")].ok is False
        silicon = rep.reason if rep.mode is None else rep.reason.split("silicon: ", 1)[1]
        assert silicon.startswith("AMX-TILE") and "CPUID" in silicon
    else:
        assert rep.mode == "trap" or not rep.native_usable


def test_cpu_features_and_show_runtime(capsys):
    feats = detect.cpu_features()
    for key in ("amx_usable", "native_usable", "trap_mode", "reason", "mode", "stages", "kernels", "compiler"):
        assert key in feats
    _runtime.show_runtime()  # what pyamx.show_runtime() and `pyamx info` print
    out = capsys.readouterr().out
    assert "AMX silicon usable:" in out and "reason:" in out and "platform" in out


def _run(args, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("PYAMX_BACKEND", "PYAMX_TRAP_EMULATION")}
    full.update(env)
    full["PYTHONPATH"] = ROOT + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full, timeout=120, cwd=ROOT)


def test_cli_info_text():
    proc = _run(["-m", "pyamx", "info"])
    assert proc.returncode == 0, proc.stderr
    assert "AMX silicon usable:" in proc.stdout and "backend:" in proc.stdout


def test_cli_info_json():
    proc = _run(["-m", "pyamx", "info", "--json"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("backend", "amx_usable", "native_usable", "trap_mode", "reason", "mode", "stages", "kernels",
                "version"):
        assert key in data
    assert data["backend"] in ("native", "emulator")
    assert (data["backend"] == "native") == data["native_usable"]
    assert data["amx_usable"] == (data["mode"] == "silicon") and data["trap_mode"] == (data["mode"] == "trap")


def test_cli_registry_takes_new_subcommands():
    from pyamx.tools import cli

    assert "info" in cli.COMMANDS
    with pytest.raises(ValueError):
        cli.subcommand("info", "again")(lambda args: 0)


def test_native_requested_where_absent_raises_with_the_reason():
    code = (
        "import numpy as np, pyamx\n"
        "from pyamx.cpu import detect\n"
        "rep = detect.report()\n"
        "if rep.amx_usable: print('USABLE'); raise SystemExit(0)\n"
        "try:\n"
        "    pyamx.tdpbf16ps(np.zeros((1,1), np.float32), np.zeros((1,2), np.uint16), np.zeros((1,2), np.uint16), backend='native')\n"
        "except pyamx.NativeUnavailableError as exc:\n"
        "    assert rep.reason in str(exc), (rep.reason, str(exc))\n"
        "    print('RAISED')\n"
        "from pyamx.cpu import native\n"
        "try:\n"
        "    native.NativeMachine()\n"
        "except pyamx.NativeUnavailableError as exc:\n"
        "    assert rep.reason in str(exc)\n"
        "    print('RAISED')\n"
    )
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stderr
    if "USABLE" in proc.stdout:
        pytest.skip("native is usable on this machine")
    assert proc.stdout.split() == ["RAISED", "RAISED"]


def test_detection_never_kills_the_process():
    """Detection in a fresh interpreter, twice, with faulthandler on as under pytest: exits 0."""
    proc = _run(["-X", "faulthandler", "-c",
                 "from pyamx.cpu import detect; a = detect.report(); b = detect.report(); assert a is b; print('alive')"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "alive"


# -- the table is read without side effects; the native start acts ---------------------------------

_NO_SIDE_EFFECT = r"""
import ctypes, json, signal, sys
from pyamx.cpu import _nativelib, detect, trap
from pyamx._trap import lib as tlib  # loading the trap's module installs nothing

nffi, nlib = _nativelib.load()
libc = ctypes.CDLL(None, use_errno=True)

def state():
    old = ctypes.create_string_buffer(512)  # struct sigaction, sa_handler first
    assert libc.sigaction(signal.SIGILL, None, old) == 0
    return {"sigill_handler": int.from_bytes(old.raw[:8], "little"), "installed": int(tlib.pyamx_trap_installed()),
            "active": trap.active(), "guard": int(tlib.pyamx_trap_guard_state() == tlib.PYAMX_TRAP_GUARD_ACTIVE),
            "permission": int(tlib.pyamx_trap_permission_granted()), "native_ready": int(nlib.pyamx_native_ready())}

before = state()
raw = detect.collect()
rep = detect.report()
out = {"before": before, "after_report": state(), "started": detect.started(), "same_table": raw == detect.facts(),
       "read_once": detect.facts() is detect.facts(), "trap": [s.value for s in rep.stages if s.name.startswith("trap mode")],
       "mode": rep.mode, "usable": rep.native_usable, "kernels": bool(nlib.pyamx_build_kernels())}
import pyamx
out["backend"] = str(pyamx.backend())
out["after_choice"] = state()
out["mode_after"] = detect.report().mode
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", ["auto", "emulator"])
def test_detection_leaves_the_trap_off_until_the_backend_choice(backend):
    """PYAMX_TRAP_EMULATION=1: collect() and report() install no handler and grant nothing, yet say what
    the trap mode would do; the backend choice for native switches it on, a choice of the emulator does not."""
    proc = _run(["-c", _NO_SIDE_EFFECT], PYAMX_TRAP_EMULATION="1", PYAMX_BACKEND=backend)
    if proc.returncode != 0 and ("pyamx._trap" in proc.stderr or "pyamx._native" in proc.stderr):
        pytest.skip(f"the compiled modules are not built here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    off = {"sigill_handler": 0, "installed": 0, "active": False, "guard": 0, "permission": 0, "native_ready": 0}
    assert out["before"] == off
    assert out["after_report"] == off, out
    assert out["started"] is False and out["same_table"] and out["read_once"]
    if out["mode_after"] == "silicon" or "complement" in json.dumps(out):
        pytest.skip("AMX silicon here: the variable asks for the complement mode, not the trap mode")
    assert out["mode"] is None and out["usable"] is False
    assert len(out["trap"]) == 1 and out["trap"][0].startswith("requested, not on yet") and "TRAPPED" in out["trap"][0]
    if backend == "emulator":
        assert out["backend"] == "emulator" and out["after_choice"] == off
    elif not out["kernels"]:
        # A build without the AMX kernels (PYAMX_DISABLE_AMX_KERNELS, a compiler without AMX): the choice
        # still starts native and so the trap, but native has nothing to run, and auto is the emulator.
        assert out["backend"] == "emulator" and out["mode_after"] is None and out["after_choice"]["installed"] == 1
    else:
        assert out["backend"] == "native" and out["mode_after"] == "trap"
        on = out["after_choice"]
        # (the handler is ours, though sigaction now says otherwise: the guard answers other code's queries)
        assert on["installed"] == 1 and on["active"] is True
        assert on["permission"] == 1 and on["native_ready"] == 1


def test_before_the_start_silicon_says_what_is_still_to_come():
    raw = replace(machine(SAPPHIRE_RAPIDS), perm_request=None, xcomp_perm=None, child=None)
    rep = evaluate(raw)
    assert not rep.native_usable and rep.mode is None and not rep.cpu_runs_amx
    assert rep.reason.startswith("not started yet") and "permission" in rep.reason
    assert all(s.ok is not False for s in rep.stages)
    assert stage(rep, "permission request").value.startswith("not requested yet")
    assert stage(rep, "tile instruction").value.startswith("not run yet")
    assert detect.gate_passed(raw)  # what lets the start ask for the permission
    # the variable asks for the complement mode on silicon, which the start installs
    pending = evaluate(replace(raw, trap=TrapFacts(available=True, requested=True, pending=True)))
    assert stage(pending, "complement mode").value.startswith("requested, not on yet")
    assert not any(s.name.startswith("trap mode") for s in pending.stages)


def test_before_the_start_the_trap_stage_says_what_the_trap_mode_would_do():
    rep = evaluate(replace(NO_AMX_HERE, trap=TrapFacts(available=True, requested=True, pending=True)))
    assert not rep.native_usable and rep.mode is None and rep.reason.startswith("AMX-TILE")
    value = stage(rep, "trap mode").value
    assert value.startswith("requested, not on yet") and "TRAPPED and EMULATED" in value


def test_the_feature_rows_drive_the_leaves_read_and_the_bits_decoded():
    future = isa.Feature("AMX-FUTURE", "amx_future", 0x24, 1, "ebx", 3)
    rows = isa.FEATURE_ROWS + (future,)
    assert {(0x24, 0), (0x24, 1)} <= set(detect.cpuid_leaves(rows))
    assert not {(0x24, 0), (0x24, 1)} & set(detect.CPUID_LEAVES)
    has = {**GRANITE_RAPIDS, (0, 0): leaf0(0x24, INTEL), (0x24, 0): (1, 0, 0, 0), (0x24, 1): (0, 1 << 3, 0, 0)}
    assert detect.decode_features(has, rows)["amx_future"] is True
    assert detect.decode_features(has, rows)["amx_fp16"] is True
    # above the maximum leaf, or above the last sub-leaf, the bit reads as 0, never another leaf's data
    assert detect.decode_features({**has, (0, 0): leaf0(0x20, INTEL)}, rows)["amx_future"] is False
    assert detect.decode_features({**has, (0x24, 0): (0, 0, 0, 0)}, rows)["amx_future"] is False


# -- the native start on simulated machines (no AMX here: a fake pyamx._native) ------------------------


class _FakeNative:
    """pyamx._native's start functions: what they are asked, in order, and what they answer."""

    def __init__(self, calls, perm=0, perm_bits=XCR0_AMX, child_status=0):
        self.calls, self.perm, self.perm_bits, self.child_status = calls, perm, perm_bits, child_status
        self.ready = 0

    def pyamx_request_permission(self):
        self.calls.append("request")
        return self.perm

    def pyamx_arch_prctl_get(self, code, out):
        self.calls.append(("get", code))
        out[0] = self.perm_bits
        return 0

    def pyamx_probe_child(self, status):
        self.calls.append("child")
        status[0] = self.child_status
        return 0

    def pyamx_native_ready(self):
        return 1


@pytest.fixture
def start_on(monkeypatch):
    """``(raw, **fake) -> (calls, report)``: the native start on the readings ``raw`` with a fake
    pyamx._native; pyamx.trap's actions record themselves in ``calls`` too."""
    cffi = pytest.importorskip("cffi")  # only its FFI().new for the out-parameters

    from pyamx.cpu import _native_start, _nativelib, trap

    # pyamx.isa keeps the first lib it sees for the C constants (status codes): the real one, not the fake
    isa.c_constant("PYAMX_E_ARG")

    def run(raw, enable_error=None, complement=("AMX-FP16",), **fake):
        calls = []
        lib = _FakeNative(calls, **fake)
        monkeypatch.setattr(_nativelib, "load", lambda: (cffi.FFI(), lib))

        def enable():
            calls.append("enable")
            if enable_error:
                raise pyamx_errors.BackendError(enable_error)

        monkeypatch.setattr(trap, "enable", enable)
        monkeypatch.setattr(trap, "active", lambda: True)
        monkeypatch.setattr(trap, "guard", lambda: trap.GuardStatus(True, "seccomp guard", 0))
        monkeypatch.setattr(trap, "requested", lambda: bool(raw.trap and raw.trap.requested))
        monkeypatch.setattr(trap, "complement", lambda: calls.append("complement") or complement)
        outcome = _native_start._outcome(raw)
        return calls, evaluate(replace(raw, **outcome))

    return run


import pyamx.errors as pyamx_errors  # noqa: E402

READINGS = {field: None for field in detect.START_FIELDS if field != "trap"}
NOT_ASKED = TrapFacts(available=True, requested=False)
ASKED = TrapFacts(available=True, requested=True, pending=True)


def test_the_start_on_silicon_asks_permission_then_reads_it_then_forks_the_child(start_on):
    calls, rep = start_on(replace(machine(SAPPHIRE_RAPIDS), **READINGS, trap=NOT_ASKED))
    assert calls == ["request", ("get", detect.ARCH_GET_XCOMP_PERM), "child"]
    assert rep.mode == "silicon" and rep.kernels == {"bf16", "int8"} and rep.reason == "ok"


def test_the_start_on_sapphire_rapids_with_the_variable_complements_what_it_lacks(start_on):
    calls, rep = start_on(replace(machine(SAPPHIRE_RAPIDS), **READINGS, trap=ASKED))
    assert calls == ["request", ("get", detect.ARCH_GET_XCOMP_PERM), "child", "complement"]  # never enable
    assert rep.mode == "silicon" and rep.complemented == {"AMX-FP16"} and "fp16" in rep.kernels
    assert rep.mode_for(isa.get("tdpfp16ps")) == "complement" and rep.mode_for(isa.get("tdpbf16ps")) == "silicon"
    assert "COMPLEMENT MODE" in rep.warning


def test_the_start_asks_no_permission_where_a_stage_before_said_no(start_on):
    vm = replace(machine(SAPPHIRE_RAPIDS, xcr0=XCR0_NO_AMX, supp=XCR0_NO_AMX), **READINGS, trap=NOT_ASKED)
    calls, rep = start_on(vm)
    assert calls == [] and rep.reason.startswith("XCR0") and rep.mode is None
    # with the variable: the trap mode, and the permission only through its emulated grant, after it
    calls, rep = start_on(replace(vm, trap=ASKED))
    assert calls == ["enable", "request"] and rep.mode == "trap" and rep.trap_mode


def test_the_start_stops_at_a_refused_permission_and_at_a_dead_child(start_on):
    calls, rep = start_on(replace(machine(SAPPHIRE_RAPIDS), **READINGS, trap=NOT_ASKED), perm=errno.ENOSPC)
    assert calls == ["request"] and rep.reason.startswith("permission request") and "ENOSPC" in rep.reason
    calls, rep = start_on(replace(machine(SAPPHIRE_RAPIDS), **READINGS, trap=ASKED),
                          child_status=int(signal.SIGILL), enable_error="refusing the trap mode: usable AMX")
    assert calls == ["request", ("get", detect.ARCH_GET_XCOMP_PERM), "child", "enable"]
    assert rep.mode is None and rep.reason.startswith("tile instruction in a forked child")
    assert stage(rep, "trap mode").value.startswith("requested but failed: BackendError: refusing")


def test_the_table_is_read_once_and_read_again_on_refresh():
    table = detect.facts()
    assert detect.facts() is table and detect.collect() == replace(table, **{
        name: getattr(detect.collect(), name) for name in detect.START_FIELDS})
    again = detect.refresh()
    # the same machine, read anew (CPUID.1:EBX holds the APIC id of whichever core answered)
    assert again is not table and again.features == table.features and again.xcr0 == table.xcr0
    assert detect.facts() is again
