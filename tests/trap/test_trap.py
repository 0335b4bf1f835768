"""The trap-and-emulate mode (pyamx._trap from csrc/trap/, pyamx/cpu/trap.py), end to end.

Real AMX instructions compiled for the tests only (tests/csrc/trap_selftest.c,
built by tests/trap_selftest_build.py) run under the SIGILL handler in this very pytest process -- whose
faulthandler was enabled before the handler, so chaining is exercised --
and their results are compared with the independent Fraction reference
of tests/reference.py (exact rational arithmetic, not pyamx's emulator). The fatal cases
run in subprocesses and must die with the signal silicon would raise.
"""

from __future__ import annotations

import errno
import faulthandler
import os
import platform
import random
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

import reference
from pyamx.table import isa
from pyamx.errors import BackendError

_trap = pytest.importorskip("pyamx._trap", reason="the trap module is not built (x86-64 Linux only; python build.py)")
lib, ffi = _trap.lib, _trap.ffi

from childproc import PYAMX_HOME as ROOT  # the pyamx under test, not necessarily this checkout
from trap_selftest_build import selftest_dir, selftest_lib
from trap_cfg import make_cfg, u8p, vp

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # for trap_cfg in the children


def _why_not():
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "the trap mode needs x86-64 Linux"
    if lib.pyamx_trap_cpu_has_amx():
        return "this CPU has usable AMX: the trap mode is refused here by design"
    return None


WHY_NOT = _why_not()
needs_trap = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

OP = {i.mnemonic: getattr(lib, i.c_op) for i in isa.TABLE}


# ---------------------------------------------------------------------------------------------
# pyamx.cpu.trap: the switch


@pytest.mark.parametrize("value,expected", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True),
                                            ("TRUE", True), ("no", False)])
def test_requested_values(monkeypatch, value, expected):
    from pyamx.cpu import trap

    if value is None:
        monkeypatch.delenv(trap.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(trap.ENV_VAR, value)
    assert trap.requested() is expected


@pytest.mark.parametrize("value", [" 1", "1 ", "2", "01", "y", "enable"])
def test_requested_is_strict(monkeypatch, value):
    from pyamx.cpu import trap

    monkeypatch.setenv(trap.ENV_VAR, value)
    with pytest.raises(BackendError) as exc:
        trap.requested()
    msg = str(exc.value)
    assert "PYAMX_TRAP_EMULATION" in msg and "1/0" in msg and "yes/no" in msg and repr(value) in msg


class _FakeLib:
    def __init__(self, bits):
        self.bits = bits
        self.installed = False

    def pyamx_trap_guard_install(self):
        return 0

    def pyamx_trap_cpu_amx_bits(self):
        return self.bits

    def pyamx_trap_cpu_has_amx(self):  # as csrc/trap/handler/sigill_handler.c: all three bits (AMX-TILE, OSXSAVE, XCR0 17+18)
        return int(self.bits == 7)

    def pyamx_trap_install(self):
        self.installed = True
        return 0

    def pyamx_trap_active(self):
        return int(self.installed)


def test_enable_refuses_a_cpu_with_amx(monkeypatch):
    from pyamx.cpu import trap

    fake = _FakeLib(bits=7)
    monkeypatch.setattr(trap, "_lib", lambda: fake)
    monkeypatch.setattr(trap, "_hook_into_native", lambda lib: None)
    monkeypatch.setattr(trap.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(trap.sys, "platform", "linux")
    with pytest.raises(BackendError, match="usable AMX"):
        trap.enable()
    assert not fake.installed
    # CPUID says AMX but the OS did not enable the tile state: not usable, so allowed.
    fake = _FakeLib(bits=3)
    monkeypatch.setattr(trap, "_lib", lambda: fake)
    trap.enable()
    assert fake.installed


def test_enable_refuses_other_platforms(monkeypatch):
    from pyamx.cpu import trap

    monkeypatch.setattr(trap.platform, "machine", lambda: "aarch64")
    with pytest.raises(BackendError, match="x86-64 Linux"):
        trap.enable()


def test_enable_refuses_without_the_extension(monkeypatch):
    from pyamx.cpu import trap

    try:
        from pyamx.cpu import _nativelib
    except ModuleNotFoundError:
        pytest.skip("no pyamx.cpu._nativelib to make fail")

    def boom():
        raise ImportError("no module named pyamx._native")

    was_installed = lib.pyamx_trap_installed()
    monkeypatch.setattr(_nativelib, "load", boom)
    monkeypatch.setattr(trap.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(trap.sys, "platform", "linux")
    with pytest.raises(BackendError, match="needs the C extension"):
        trap.enable()
    assert lib.pyamx_trap_installed() == was_installed  # refused before installing anything


class _FakeLibWithoutSeccomp(_FakeLib):
    """A CPU without AMX in a container that forbids seccomp filters: the xcomp install fails."""

    def pyamx_trap_xcomp_install(self):
        return errno.EPERM


def test_emulate_process_without_seccomp_says_why(monkeypatch):
    from pyamx.cpu import trap

    fake = _FakeLibWithoutSeccomp(bits=3)
    monkeypatch.setattr(trap, "_load_or_backend_error", lambda: (None, fake))
    monkeypatch.setattr(trap, "_preload_active", lambda: False)
    monkeypatch.setattr(trap, "_hook_into_native", lambda lib: None)
    monkeypatch.setattr(trap.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(trap.sys, "platform", "linux")
    with pytest.raises(BackendError) as exc:
        trap.emulate_process()
    msg = str(exc.value)
    assert "arch_prctl" in msg and os.strerror(errno.EPERM) in msg and "seccomp" in msg


# ---------------------------------------------------------------------------------------------
# The module boundary: pyamx._trap on its own, one hook into pyamx._native


def _build_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("pyamx_build_script", os.path.join(ROOT, "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # compiles nothing
    return module


def test_build_script_makes_the_trap_module_from_csrc_trap():
    if not os.path.exists(os.path.join(ROOT, "build.py")):
        pytest.skip("not a source checkout")
    build = _build_script()
    (trap_module,) = [m for m in build.MODULES if m.name == "pyamx._trap"]
    assert trap_module.x86_64_linux_only and not trap_module.kernels  # no AMX support needed from the compiler
    cdef = build.cdef_text(build.HERE / trap_module.headers[0])
    assert "pyamx_trap_decode" in cdef and "PYAMX_OP_TDPBUUD" in cdef  # pyamx_ops.h inlined
    assert "pyamx_request_permission" not in cdef  # none of _native's API
    assert "PYAMX_OP_TDPBUUD" in build.cdef_text()  # the same enum in _native's cdef
    sources = build.module_sources(trap_module)
    trap_dir = os.path.join(ROOT, "csrc", "trap")
    want = sorted(f"csrc/trap/{part}/{n}" for part in os.listdir(trap_dir) if os.path.isdir(os.path.join(trap_dir, part))
                  for n in os.listdir(os.path.join(trap_dir, part)) if n.endswith(".c"))
    assert sources == want
    plan = build.BuildPlan(build.Decision(True, False, "test"), compiler="cc", version="0", python="test")
    build.make_ffi(trap_module, plan)  # declares, compiles nothing


def test_the_product_module_holds_no_trap_code_and_no_self_test_kernels():
    from pyamx.cpu import _nativelib

    try:
        _, nlib = _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"pyamx._native is not built: {exc}")
    names = dir(nlib)
    assert not [n for n in names if n.startswith("pyamx_trap")]
    assert "pyamx_set_trap_hook" in names  # the one hook
    assert not [n for n in dir(lib) if "selftest" in n]


def test_op_ids_are_one_numbering_in_both_modules():
    from pyamx.cpu import _nativelib

    try:
        _, nlib = _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"pyamx._native is not built: {exc}")
    from pyamx.table import isa

    names = [n for n in dir(lib) if n.startswith("PYAMX_OP_")]
    assert sorted(names) == sorted(["PYAMX_OP_NONE"] + [i.c_op for i in isa.TABLE])
    assert {n: getattr(lib, n) for n in names} == {n: getattr(nlib, n) for n in names}
    # The AMX-AVX512 and AMX-MOVRS rows get their trap names on the trap decoder's own branch.
    pending = {i.c_op for i in isa.TABLE if i.feature.name in ("AMX-AVX512", "AMX-MOVRS")}
    for n in names:
        if n != "PYAMX_OP_NONE" and n not in pending:
            assert ffi.string(lib.pyamx_trap_op_name(getattr(lib, n))).decode() == n[len("PYAMX_OP_"):]


@needs_trap
def test_native_permission_goes_through_the_hook_only_after_enable():
    res = run_py("""
        from pyamx.cpu import _nativelib
        nffi, nlib = _nativelib.load()
        from pyamx.cpu import trap
        before = lib.pyamx_trap_permission_granted()
        trap.enable()
        rc = nlib.pyamx_request_permission()
        print(before, rc, lib.pyamx_trap_permission_granted(), nlib.pyamx_native_ready())
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "0", "1", "1"]


# ---------------------------------------------------------------------------------------------
# Subprocess helper for everything that installs a handler for good or dies


def run_py(code: str, env_extra=None, timeout=60):
    """Runs code in a child Python: ``lib``/``ffi`` are pyamx._trap's, ``st`` the self-test kernels."""
    env = dict(os.environ)
    env.pop("PYAMX_TRAP_EMULATION", None)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, selftest_dir(), TESTS, env.get("PYTHONPATH", "")])
    env.update(env_extra or {})
    prelude = ("from pyamx._trap import lib, ffi\nfrom _pyamx_trap_selftest import lib as st\n"
               "import numpy as np\nfrom trap_cfg import make_cfg, u8p, vp\n")
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
    )


def dies_with(res, sig):
    return res.returncode == -sig


def test_children_build_the_configurations_pyamx_builds():
    # Runs on AMX silicon too, where every other child of run_py is skipped: the children's
    # helpers are the ones imported here, and they encode what pyamx.table.tilecfg encodes.
    from pyamx.table.tilecfg import TileConfig

    shapes = {0: (2, 8), 3: (16, 64), 7: (1, 4)}
    res = run_py(f"""
        c = make_cfg({shapes!r}, start_row=5)
        assert int(ffi.cast("uintptr_t", u8p(c))) == int(ffi.cast("uintptr_t", vp(c))) == c.ctypes.data
        print(bytes(c).hex())
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == TileConfig.make(shapes, start_row=5).to_bytes().hex()


@needs_trap
def test_never_enabled_by_default():
    res = run_py("""
        import pyamx, pyamx.cpu.trap
        print(pyamx.cpu.trap.requested(), pyamx.cpu.trap.active(), lib.pyamx_trap_installed())
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "0"]


@needs_trap
def test_enable_through_the_module():
    res = run_py("""
        from pyamx.cpu import trap
        assert trap.requested()
        trap.enable()
        trap.enable()  # idempotent
        assert trap.active()
        trap.grant_permission()
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (2, 8)})))
        out = np.zeros(64, np.uint8)
        st.pyamx_trap_selftest_sttilecfg(u8p(out))
        print(trap.trapped_count(), sorted(trap.op_counts().items()), out[0], out[16], out[48])
    """, env_extra={"PYAMX_TRAP_EMULATION": "1"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split(None, 1)[0] == "2"
    assert "('LDTILECFG', 1), ('STTILECFG', 1)" in res.stdout
    assert res.stdout.split()[-3:] == ["1", "8", "2"]


# ---------------------------------------------------------------------------------------------
# Fatal cases: the signal silicon raises


@needs_trap
def test_tile_instruction_before_permission_dies_with_sigill():
    # As on silicon (docs/run.md): LDTILECFG touches only XTILECFG and runs without the
    # permission; TILEZERO touches XTILEDATA, which the permission guards.
    res = run_py("""
        assert lib.pyamx_trap_install() == 0
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (1, 4)})))
        print("ldtilecfg survived", flush=True)
        st.pyamx_trap_selftest_tilezero(0)
        print("survived")
    """)
    assert dies_with(res, signal.SIGILL), (res.returncode, res.stderr)
    assert "ldtilecfg survived" in res.stdout and "\nsurvived" not in res.stdout
    assert "no AMX permission" in res.stderr


@needs_trap
def test_permission_reaches_faulthandler_too():
    res = run_py("""
        import faulthandler; faulthandler.enable()
        assert lib.pyamx_trap_install() == 0
        st.pyamx_trap_selftest_tilezero(0)
    """)
    assert dies_with(res, signal.SIGILL)
    assert "Fatal Python error: Illegal instruction" in res.stderr


BAD_CFGS = {
    "palette 2": "make_cfg({0: (1, 4)}, palette=2)",
    "reserved byte 5": "(lambda c: (c.__setitem__(5, 1), c)[1])(make_cfg({0: (1, 4)}))",
    "reserved byte 40": "(lambda c: (c.__setitem__(40, 7), c)[1])(make_cfg({0: (1, 4)}))",
    "reserved byte 60": "(lambda c: (c.__setitem__(60, 1), c)[1])(make_cfg({0: (1, 4)}))",
    "colsb 65": "make_cfg({3: (1, 65)})",
    "colsb 0x100": "make_cfg({3: (1, 256)})",
    "rows 17": "make_cfg({7: (17, 4)})",
    "rows without colsb": "make_cfg({2: (4, 0)})",
    "colsb without rows": "make_cfg({2: (0, 4)})",
}


@needs_trap
@pytest.mark.parametrize("what", list(BAD_CFGS))
def test_illegal_ldtilecfg_is_sigsegv(what):
    res = run_py(f"""
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        st.pyamx_trap_selftest_ldtilecfg(u8p({BAD_CFGS[what]}))
        print("survived")
    """)
    assert dies_with(res, signal.SIGSEGV), (res.returncode, res.stderr)
    assert "#GP" in res.stderr and "survived" not in res.stdout


@needs_trap
def test_illegal_ldtilecfg_reaches_faulthandler_as_segfault():
    res = run_py("""
        import faulthandler; faulthandler.enable()
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (1, 4)}, palette=9)))
    """)
    assert dies_with(res, signal.SIGSEGV)
    assert "Fatal Python error: Segmentation fault" in res.stderr


@needs_trap
def test_tile_load_from_unmapped_memory_is_sigsegv():
    res = run_py("""
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        out = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_addressing(0, u8p(make_cfg({3: (2, 8)})), ffi.cast("void *", 16), 64, vp(out))
        print("survived")
    """)
    assert dies_with(res, signal.SIGSEGV), (res.returncode, res.stderr)
    assert "survived" not in res.stdout


UD_SNIPPETS = {
    "tilezero before any LDTILECFG": "st.pyamx_trap_selftest_tilezero(1)",
    "tilezero after palette 0": """
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({}, palette=0)))
        st.pyamx_trap_selftest_tilezero(1)""",
    "operands not distinct": """
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (2, 8), 1: (2, 8)})))
        st.pyamx_trap_selftest_dp_same()""",
    "unconfigured operand tile (tmm2)": """
        a = np.zeros(256, np.uint8)
        st.pyamx_trap_selftest_dot(lib.PYAMX_OP_TDPBF16PS, u8p(make_cfg({0: (2, 8), 1: (2, 8)})),
                                    vp(a), 64, vp(a), 64, vp(a), 64)""",
    "tsrc1 colsb/4 != tsrc2 rows": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_dot(lib.PYAMX_OP_TDPBSSD, u8p(make_cfg({0: (2, 8), 1: (2, 8), 2: (3, 8)})),
                                    vp(a), 64, vp(a), 64, vp(a), 64)""",
    "dest colsb != tsrc2 colsb": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_dot(lib.PYAMX_OP_TDPBF16PS, u8p(make_cfg({0: (2, 8), 1: (2, 8), 2: (2, 12)})),
                                    vp(a), 64, vp(a), 64, vp(a), 64)""",
    "dest rows != tsrc1 rows": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_dot(lib.PYAMX_OP_TDPFP16PS, u8p(make_cfg({0: (3, 8), 1: (2, 8), 2: (2, 8)})),
                                    vp(a), 64, vp(a), 64, vp(a), 64)""",
    "colsb not a multiple of 4": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_dot(lib.PYAMX_OP_TDPBUUD, u8p(make_cfg({0: (2, 6), 1: (2, 8), 2: (2, 6)})),
                                    vp(a), 64, vp(a), 64, vp(a), 64)""",
    # Silicon's rules where the SDM's classes are silent (docs/semantics.md section 7):
    "tilezero of an unconfigured tile": """
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (2, 8)})))
        st.pyamx_trap_selftest_tilezero(1)""",
    "load of an unconfigured tile": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_addressing(0, u8p(make_cfg({0: (2, 8)})), vp(a), 64, vp(a))""",
    "load of a tile whose colsb is not a multiple of 4": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_addressing(0, u8p(make_cfg({3: (2, 6)})), vp(a), 64, vp(a))""",
    "load with start_row at the tile's rows": """
        a = np.zeros(1024, np.uint8)
        st.pyamx_trap_selftest_addressing(0, u8p(make_cfg({3: (2, 8)}, start_row=2)), vp(a), 64, vp(a))""",
}


@needs_trap
@pytest.mark.parametrize("what", list(UD_SNIPPETS))
def test_ud_cases_die_with_sigill(what):
    res = run_py("assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0\n"
                 + textwrap.dedent(UD_SNIPPETS[what]).strip() + "\nprint('survived')\n")
    assert dies_with(res, signal.SIGILL), (res.returncode, res.stderr)
    assert "#UD" in res.stderr and "survived" not in res.stdout


@needs_trap
def test_genuine_illegal_instruction_reaches_faulthandler():
    res = run_py("""
        import faulthandler; faulthandler.enable()
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        st.pyamx_trap_selftest_ud2()
    """)
    assert dies_with(res, signal.SIGILL)
    assert res.stderr.count("Fatal Python error: Illegal instruction") == 1
    assert "pyamx trap emulation" not in res.stderr  # not an AMX instruction: not ours to explain


@needs_trap
def test_genuine_illegal_instruction_without_faulthandler():
    res = run_py("""
        assert lib.pyamx_trap_install() == 0
        st.pyamx_trap_selftest_ud2()
    """)
    assert dies_with(res, signal.SIGILL)


@needs_trap
def test_faulthandler_reenabled_after_install():
    # faulthandler.disable() restores what it replaced (not this handler);
    # ensure_installed() notices and reinstalls, chaining to the new faulthandler.
    res = run_py("""
        import faulthandler; faulthandler.enable()
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        faulthandler.disable(); faulthandler.enable()
        assert lib.pyamx_trap_active() == 0
        assert lib.pyamx_trap_ensure_installed() == 1
        assert lib.pyamx_trap_ensure_installed() == 0 and lib.pyamx_trap_active() == 1
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (1, 4)})))
        print("emulated", lib.pyamx_trap_count(), flush=True)
        st.pyamx_trap_selftest_ud2()
    """)
    assert "emulated 1" in res.stdout, res.stderr
    assert dies_with(res, signal.SIGILL)
    assert res.stderr.count("Fatal Python error: Illegal instruction") == 1


@needs_trap
def test_faulthandler_installed_on_top_then_reinstalled_does_not_loop():
    # faulthandler's "previous" is this handler and this handler's previous is
    # faulthandler: the re-raise must end in the default action, not a loop.
    res = run_py("""
        assert lib.pyamx_trap_install() == 0
        import faulthandler; faulthandler.enable()
        assert lib.pyamx_trap_ensure_installed() == 1
        st.pyamx_trap_selftest_ud2()
    """, timeout=30)
    assert dies_with(res, signal.SIGILL)
    assert res.stderr.count("Fatal Python error: Illegal instruction") == 1


@needs_trap
def test_previous_handler_that_returns_does_not_hang():
    # Python's own C-level handler only sets a flag and returns; silicon would
    # re-fault forever, the trap mode takes the default action instead.
    res = run_py("""
        import signal
        signal.signal(signal.SIGILL, lambda *a: None)
        assert lib.pyamx_trap_install() == 0
        st.pyamx_trap_selftest_ud2()
    """, timeout=30)
    assert dies_with(res, signal.SIGILL)


@needs_trap
def test_sent_sigill_is_not_decoded():
    res = run_py("""
        import os, signal
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        os.kill(os.getpid(), signal.SIGILL)
        import time; time.sleep(1)
        print("survived")
    """)
    assert dies_with(res, signal.SIGILL) and "survived" not in res.stdout


@needs_trap
def test_fork_keeps_the_forking_threads_tile_state():
    res = run_py("""
        import os
        assert lib.pyamx_trap_install() == 0 and lib.pyamx_trap_grant_permission() == 0
        lib.pyamx_trap_thread_prepare()
        cfg = make_cfg({1: (3, 12), 6: (16, 64)})
        st.pyamx_trap_selftest_ldtilecfg(u8p(cfg))
        pid = os.fork()
        if pid == 0:
            out = np.zeros(64, np.uint8)
            st.pyamx_trap_selftest_sttilecfg(u8p(out))   # permission inherited, state too
            os._exit(0 if (out == cfg).all() and lib.pyamx_trap_slots_in_use() == 1 else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert res.returncode == 0, res.stderr
    assert "child 0" in res.stdout


# ---------------------------------------------------------------------------------------------
# End to end in this process (pytest's faulthandler was enabled before the handler)


st = None  # the self-test kernels in this process, loaded by `trapped`


@pytest.fixture(scope="module")
def trapped():
    global st
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    st = selftest_lib()
    # Under PYAMX_TRAP_EMULATION=1 detection may have installed the mode already;
    # then it stays installed for the tests that follow.
    was_installed = lib.pyamx_trap_installed()
    assert lib.pyamx_trap_install() == 0
    assert lib.pyamx_trap_grant_permission() == 0
    assert lib.pyamx_trap_active() == 1
    lib.pyamx_trap_thread_prepare()
    yield
    st.pyamx_trap_selftest_release()
    if not was_installed:
        lib.pyamx_trap_uninstall()


def thread_state():
    cfg = np.zeros(64, np.uint8)
    tiles = np.zeros((8, 16, 64), np.uint8)
    lib.pyamx_trap_thread_state(u8p(cfg), u8p(tiles))
    return cfg, tiles


def test_installed_over_pytests_faulthandler(trapped):
    if not faulthandler.is_enabled():
        pytest.skip("pytest ran without its faulthandler plugin")
    # The handler sits on top of faulthandler's and stays there.
    assert lib.pyamx_trap_active() == 1
    assert lib.pyamx_trap_ensure_installed() == 0


def test_config_roundtrip_and_counts(trapped):
    lib.pyamx_trap_reset_counts()
    cfg = make_cfg({0: (16, 64), 3: (5, 12), 7: (1, 1)}, start_row=4)
    st.pyamx_trap_selftest_ldtilecfg(u8p(cfg))
    out = np.full(64, 0xAA, np.uint8)
    st.pyamx_trap_selftest_sttilecfg(u8p(out))
    assert (out == cfg).all()
    state_cfg, tiles = thread_state()
    assert (state_cfg == cfg).all() and not tiles.any()
    st.pyamx_trap_selftest_release()
    st.pyamx_trap_selftest_sttilecfg(u8p(out))
    assert not out.any()  # init state stores 64 zero bytes
    assert lib.pyamx_trap_count() == 4
    assert lib.pyamx_trap_op_count(OP["LDTILECFG"]) == 1
    assert lib.pyamx_trap_op_count(OP["STTILECFG"]) == 2
    assert lib.pyamx_trap_op_count(OP["TILERELEASE"]) == 1


def test_config_through_rip_relative_and_stack_operands(trapped):
    cfg = make_cfg({2: (7, 28), 5: (16, 64)})
    out = np.zeros(64, np.uint8)
    st.pyamx_trap_selftest_cfg_riprel(u8p(cfg), u8p(out))
    assert (out == cfg).all()
    cfg2 = make_cfg({1: (3, 4)}, start_row=2)
    st.pyamx_trap_selftest_hold(u8p(cfg2), 0, u8p(out))
    assert (out == cfg2).all()


def test_palette_zero_is_the_init_state(trapped):
    st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (4, 16)})))
    junk = make_cfg({0: (4, 16)}, palette=0)
    junk[5] = 0x55  # ignored with palette 0
    st.pyamx_trap_selftest_ldtilecfg(u8p(junk))
    cfg, tiles = thread_state()
    assert not cfg.any() and not tiles.any()


@pytest.mark.parametrize("form", range(6))
@pytest.mark.parametrize("rows,colsb", [(16, 64), (5, 12), (1, 4), (9, 36)])
def test_load_store_addressing_forms(trapped, form, rows, colsb):
    rng = np.random.default_rng(form * 100 + rows)
    stride = 128
    src = rng.integers(0, 256, 16 * stride + 64, dtype=np.uint8)
    dst = np.full(16 * stride + 64, 0xEE, np.uint8)
    cfg = make_cfg({t: (rows, colsb) for t in range(8)})
    assert st.pyamx_trap_selftest_addressing(form, u8p(cfg), vp(src), stride, vp(dst)) == 0
    for r in range(16):
        got = dst[r * stride: r * stride + 64]
        if r < rows:
            want_row = 0 if form == 4 else r  # form 4 has no index register: stride 0
            assert (got[:colsb] == src[want_row * stride: want_row * stride + colsb]).all(), r
            assert (got[colsb:] == 0xEE).all()
        else:
            assert (got == 0xEE).all()


def test_negative_stride(trapped):
    src = np.arange(16 * 64, dtype=np.uint32).astype(np.uint8)
    dst = np.zeros(16 * 64, np.uint8)
    cfg = make_cfg({3: (4, 64)})
    last = ffi.cast("uint8_t *", src.ctypes.data) + 3 * 64
    dst_last = ffi.cast("uint8_t *", dst.ctypes.data) + 3 * 64
    assert st.pyamx_trap_selftest_addressing(0, u8p(cfg), last, -64, dst_last) == 0
    assert (dst[:256] == src[:256]).all()


def test_start_row_restarts_a_load_and_is_reset(trapped):
    src = np.arange(1, 16 * 64 + 1, dtype=np.uint32).astype(np.uint8) | 1
    dst = np.zeros(16 * 64, np.uint8)
    cfg = make_cfg({3: (6, 64)}, start_row=2)
    st.pyamx_trap_selftest_addressing(0, u8p(cfg), vp(src), 64, vp(dst))
    assert not dst[:128].any()  # rows 0-1 skipped by the load, zero from LDTILECFG
    assert (dst[128:384] == src[128:384]).all()


def test_tilezero(trapped):
    src = np.full(1024, 7, np.uint8)
    cfg = make_cfg({t: (16, 64) for t in range(8)})
    st.pyamx_trap_selftest_ldtilecfg(u8p(cfg))
    st.pyamx_trap_selftest_tilezero(6)
    _, tiles = thread_state()
    assert not tiles.any()
    del src
    st.pyamx_trap_selftest_release()


# ---- the independent model: tests/reference.py (docs/semantics.md sections 2-4) ----
# The trap's scalar primitives take and return fp32 bit patterns; these adapt the one Fraction
# reference of the tests to that interface (it shares no code with the trap or the emulator).

DEFAULT_NAN = reference.DEFAULT_NAN
SIGN = 0x80000000


def _f32(bits):
    return reference.decode32(bits, True)  # every fp32 operand of fma32/add32 counts a denormal as zero


def m_fma32(a, b, c):
    return reference.fma32(_f32(a), _f32(b), _f32(c))


def m_add32_direct(x, y):
    return reference.add32(_f32(x), _f32(y))


def f16_to_f32(h):
    return reference.encode(reference.decode_fp16(h))


def _round32(x: Fraction) -> int:
    """Round a non-zero exact value to fp32: RNE, overflow to inf, FTZ with tininess after rounding."""
    return reference.encode(("num", x, x < 0))


def model_float_dot(a_words, b_words, c_bits, fp16):
    """SDM even/odd model. a_words: M x K uint32, b_words: K x N uint32, c_bits: M x N uint32."""
    # Little-endian dwords: the low half is the even lane, as the reference's (M, 2K) / (K, 2N) layout.
    a = np.ascontiguousarray(a_words, np.uint32).view(np.uint16)
    b = np.ascontiguousarray(b_words, np.uint32).view(np.uint16)
    return np.array((reference.tdpfp16ps if fp16 else reference.tdpbf16ps)(c_bits, a, b), np.uint32)


FP_CASES = [
    # (a, b, c, expected) fp32 bits, straight from docs/semantics.md
    (0x7FA00001, 0x7FC00002, 0x7F800003, 0x7FE00001),  # first NaN (a), quieted
    (0x3F800000, 0xFF900000, 0x7FC00000, 0xFFD00000),  # b before acc
    (0x3F800000, 0x3F800000, 0x7F800001, 0x7FC00001),  # sNaN acc quieted
    (0x7F800000, 0x00000000, 0x3F800000, DEFAULT_NAN),  # inf * 0
    (0x7F800000, 0x00000001, 0x3F800000, DEFAULT_NAN),  # inf * denormal = inf * 0 under DAZ
    (0x7F800000, 0x3F800000, 0xFF800000, DEFAULT_NAN),  # inf - inf
    (0x7F800000, 0x00000000, 0x7FC00005, 0x7FC00005),  # a NaN beats the invalid product
    (0x00000001, 0x3F800000, 0x80000000, 0x00000000),  # DAZ: (+0 * 1) + -0 = +0
    (0x80800000, 0x3F000000, 0x00000000, 0x80000000),  # FTZ: -2^-127 flushes to -0
    (0x00800000, 0x3F000000, 0x00000000, 0x00000000),  # FTZ, exact denormal result too
    (0x7F7FFFFF, 0x40000000, 0x00000000, 0x7F800000),  # overflow -> inf
    (0x3F800000, 0x3F800000, 0xBF800000, 0x00000000),  # x + (-x) = +0
    (0x80000000, 0x3F800000, 0x80000000, 0x80000000),  # -0 + -0 = -0
]
# Tininess after rounding: (2^25 - 1) * 2^-151 rounds to 2^-126 and is kept.
_A = _round32(Fraction(18631) * Fraction(2) ** -75)
_B = _round32(Fraction(1801) * Fraction(2) ** -76)
FP_CASES.append((_A, _B, 0, 0x00800000))
# One step further down is tiny after rounding too: flushed.
FP_CASES.append((_round32(Fraction(18631) * Fraction(2) ** -76), _B, 0, 0))


# The scalar primitives are plain functions of pyamx._trap: no trap mode needed, so these run on
# AMX silicon too (where the trap is refused), as tests/trap/test_trap_direct.py does.
@pytest.mark.parametrize("a,b,c,expected", FP_CASES)
def test_fma32_gives_the_specs_bits_on_each_rule(a, b, c, expected):
    assert lib.pyamx_trap_fma32(a, b, c) == expected
    assert m_fma32(a, b, c) == expected  # the model agrees with the document too


def test_add32_gives_the_specs_bits_on_each_rule():
    cases = [
        (0x7FA00000, 0xFFC00001, 0x7FE00000),
        (0x3F800000, 0xFF800001, 0xFFC00001),
        (0x7F800000, 0xFF800000, DEFAULT_NAN),
        (0x00000001, 0x80000000, 0x00000000),  # DAZ: +0 + -0
        (0x80000001, 0x80000000, 0x80000000),  # -0 + -0
        (0x3F800000, 0x33800000, 0x3F800000),  # 1 + 2^-24: tie to even
        (0x3F800001, 0x33800000, 0x3F800002),  # tie to even, upward
    ]
    for x, y, want in cases:
        assert lib.pyamx_trap_add32(x, y) == want, (hex(x), hex(y))
        assert m_add32_direct(x, y) == want


def test_fma32_and_add32_match_the_reference_on_random_bits():
    rng = random.Random(1234)
    for _ in range(3000):
        vals = []
        for _ in range(3):
            kind = rng.random()
            if kind < 0.6:
                v = rng.getrandbits(32)
            elif kind < 0.8:
                v = rng.choice([0, SIGN, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 1, 0x807FFFFF])
            else:
                v = (rng.getrandbits(1) << 31) | rng.randint(1, 30) << 23 | rng.getrandbits(23)
            vals.append(v)
        assert lib.pyamx_trap_fma32(*vals) == m_fma32(*vals), [hex(v) for v in vals]
        assert lib.pyamx_trap_add32(vals[0], vals[1]) == m_add32_direct(vals[0], vals[1])


def test_f16_widening_is_exact_and_keeps_nan_payloads():
    for h in list(range(0, 0x10000, 97)) + [0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0x8001, 0xFBFF]:
        assert lib.pyamx_trap_f16_to_f32(h) == f16_to_f32(h), hex(h)
        if (h & 0x7C00) != 0x7C00:
            assert np.uint32(lib.pyamx_trap_f16_to_f32(h)).view(np.float32) == np.uint16(h).view(np.float16)


# ---- the dot products, through real instructions ----


def run_dot(op, a_words, b_words, c_words, count=True):
    """a: M x K dwords, b: K x N dwords, c: M x N dwords; returns the new c."""
    M, K = a_words.shape
    N = b_words.shape[1]
    cfg = make_cfg({0: (M, 4 * N), 1: (M, 4 * K), 2: (K, 4 * N)})
    a = np.ascontiguousarray(a_words, np.uint32)
    b = np.ascontiguousarray(b_words, np.uint32)
    c = np.array(c_words, np.uint32, copy=True, order="C")
    before = lib.pyamx_trap_op_count(op)
    rc = st.pyamx_trap_selftest_dot(op, u8p(cfg), vp(a), a.strides[0], vp(b), b.strides[0], vp(c), c.strides[0])
    assert rc == 0
    if count:  # process-wide counter: only exact when one thread traps
        assert lib.pyamx_trap_op_count(op) == before + 1
    return c


def _bf16_pair(hi, lo):
    return (hi << 16) | lo


@pytest.mark.parametrize("name, sdm_bits", [("P1", 0x3F800001), ("P2", 0x3F800001), ("P7", 0x00000000)])
def test_semantics_probes_give_the_sdm_bits(trapped, name, sdm_bits):
    # operands from pyamx.tools.probe.POINTS (defined once); the SDM bits are docs/semantics.md section 3's
    from pyamx.tools.probe import point

    e = point(name)
    words = lambda x: np.ascontiguousarray(x, np.uint16).view(np.uint32)  # noqa: E731 - (even, odd) -> dword
    assert run_dot(OP["TDPBF16PS"], words(e.a), words(e.b), e.c.astype(np.uint32))[0, 0] == sdm_bits


def _random_halves(rng, shape, specials, fp16):
    out = np.zeros(shape, np.uint32)
    flat = out.reshape(-1)
    for i in range(flat.size):
        halves = []
        for _ in range(2):
            r = rng.random()
            if r < 0.55:  # ordinary: exponent near 1.0
                e = rng.randint(12, 18) if fp16 else rng.randint(118, 136)
                h = (rng.getrandbits(1) << 15) | (e << (10 if fp16 else 7)) | rng.getrandbits(10 if fp16 else 7)
            elif r < 0.75:  # anything finite, denormals and huge values included
                while True:
                    h = rng.getrandbits(16)
                    if (h & (0x7C00 if fp16 else 0x7F80)) != (0x7C00 if fp16 else 0x7F80):
                        break
            elif r < 0.85:
                h = rng.choice([0, 0x8000, 1, 0x8001])
            elif specials:
                h = rng.choice([0x7C00, 0xFC00, 0x7E01, 0x7D00, 0xFE42] if fp16 else
                               [0x7F80, 0xFF80, 0x7FC1, 0x7F81, 0xFFA5])
            else:
                h = rng.getrandbits(16) & (0x3BFF if fp16 else 0x3F7F)
            halves.append(h)
        flat[i] = _bf16_pair(halves[1], halves[0])
    return out


def _random_c(rng, shape, specials):
    out = np.zeros(shape, np.uint32)
    flat = out.reshape(-1)
    for i in range(flat.size):
        r = rng.random()
        if r < 0.6:
            flat[i] = (rng.getrandbits(1) << 31) | rng.randint(110, 140) << 23 | rng.getrandbits(23)
        elif r < 0.8 or not specials:
            flat[i] = rng.choice([0, SIGN, 1, 0x807FFFFF, 0x7F7FFFFF])
        else:
            flat[i] = rng.choice([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F812345, 0xFFC0BEEF])
    return out


@pytest.fixture
def dot_path(trapped, dot_path):
    """tests/conftest.py's path, with the trap installed first (its install sets the path up)."""
    return dot_path


@pytest.mark.parametrize("fp16", [False, True], ids=["TDPBF16PS", "TDPFP16PS"])
@pytest.mark.parametrize("specials", [False, True], ids=["finite", "inf-nan"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (16, 16, 16), (16, 2, 9)])
def test_float_dot_products_match_the_reference_bit_for_bit(dot_path, fp16, specials, shape):
    M, K, N = shape
    rng = random.Random(hash((fp16, specials, shape)) & 0xFFFF)
    a = _random_halves(rng, (M, K), specials, fp16)
    b = _random_halves(rng, (K, N), specials, fp16)
    c = _random_c(rng, (M, N), specials)
    want = model_float_dot(a, b, c, fp16)
    got = run_dot(OP["TDPFP16PS" if fp16 else "TDPBF16PS"], a, b, c)
    bad = np.argwhere(got != want)
    assert bad.size == 0, [(tuple(i), hex(got[tuple(i)]), hex(want[tuple(i)])) for i in bad[:5]]


FINITE_EDGES = {  # halves that stay on the vector path: denormals, +-0, extremes, ties' neighbours
    False: [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x3F81,
            0x4B80, 0x3380],
    True: [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x3C01,
           0x6800, 0x1400],
}
C_EDGES = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
           0x7FC00000, 0x7F800001, 0xFFBFFFFF, 0x7FC0BEEF, 0xFFC00000]


@pytest.mark.parametrize("fp16", [False, True], ids=["TDPBF16PS", "TDPFP16PS"])
@pytest.mark.parametrize("shape", [(16, 16, 16), (15, 16, 13), (3, 7, 9), (1, 16, 1), (2, 1, 16)])
def test_float_dot_finite_operands_any_accumulator(dot_path, fp16, shape):
    # The vector path's whole domain: operands without inf/NaN (denormals, +-0, values whose products
    # overflow to inf or cancel exactly) and accumulators holding anything (NaN payloads, sNaN, inf).
    M, K, N = shape
    rng = random.Random(hash((fp16, shape)) & 0xFFFF)
    edges = FINITE_EDGES[fp16]

    def words(rows, cols):
        out = _random_halves(rng, (rows, cols), False, fp16)
        for idx in np.ndindex(rows, cols):
            if rng.random() < 0.5:
                out[idx] = _bf16_pair(rng.choice(edges), rng.choice(edges))
        return out

    a, b = words(M, K), words(K, N)
    c = np.array([[rng.choice(C_EDGES) if rng.random() < 0.6 else rng.getrandbits(32) for _ in range(N)]
                  for _ in range(M)], np.uint32)
    before = lib.pyamx_trap_simd_count()
    got = run_dot(OP["TDPFP16PS" if fp16 else "TDPBF16PS"], a, b, c)
    assert lib.pyamx_trap_simd_count() == before + (dot_path == "avx2")  # the path under test ran
    want = model_float_dot(a, b, c, fp16)
    bad = np.argwhere(got != want)
    assert bad.size == 0, [(tuple(i), hex(got[tuple(i)]), hex(want[tuple(i)])) for i in bad[:5]]


@pytest.mark.parametrize("fp16", [False, True], ids=["TDPBF16PS", "TDPFP16PS"])
def test_float_dot_with_an_inf_or_nan_operand_leaves_the_vector_path(dot_path, fp16):
    # One NaN in an unused column changes nothing; in a used one, the scalar rules decide.
    rng = random.Random(7)
    a = _random_halves(rng, (4, 3), False, fp16)
    b = _random_halves(rng, (3, 5), False, fp16)
    c = _random_c(rng, (4, 5), True)
    nan = 0x7E01 if fp16 else 0x7FC1
    a[2, 1] = _bf16_pair(nan, a[2, 1] & 0xFFFF)
    before = lib.pyamx_trap_simd_count()
    got = run_dot(OP["TDPFP16PS" if fp16 else "TDPBF16PS"], a, b, c)
    assert lib.pyamx_trap_simd_count() == before
    assert (got == model_float_dot(a, b, c, fp16)).all()


@pytest.mark.parametrize("fp16", [False, True], ids=["TDPBF16PS", "TDPFP16PS"])
def test_vector_path_equals_the_scalar_path_on_every_finite_half(trapped, fp16):
    # Every finite bf16/fp16 value passes through the vector widening (in tsrc1 and in tsrc2) and
    # its products, bit for bit against the scalar path, itself checked against the Fraction
    # reference above; accumulators include NaN payloads and infinities.
    was = lib.pyamx_trap_set_simd(-1)
    if not lib.pyamx_trap_set_simd(1):
        pytest.skip("this CPU has no AVX2: the handler runs its scalar dot products only")
    try:
        exp = 0x7C00 if fp16 else 0x7F80
        halves = np.array([h for h in range(1 << 16) if (h & exp) != exp], np.uint16)
        rng = np.random.default_rng(5)
        rng.shuffle(halves)
        halves = np.concatenate([halves, halves[: (-len(halves)) % 512]])
        op = OP["TDPFP16PS" if fp16 else "TDPBF16PS"]
        before = lib.pyamx_trap_simd_count()
        for i, chunk in enumerate(halves.reshape(-1, 16, 32)):
            a = chunk.view(np.uint32)  # 16 x 16 dwords
            b = np.roll(chunk, i + 1, axis=0).view(np.uint32)
            c = rng.choice(np.array(C_EDGES, np.uint32), (16, 16))
            lib.pyamx_trap_set_simd(1)
            vec = run_dot(op, a, b, c)
            lib.pyamx_trap_set_simd(0)
            scalar = run_dot(op, a, b, c)
            bad = np.argwhere(vec != scalar)
            assert bad.size == 0, [(tuple(j), hex(vec[tuple(j)]), hex(scalar[tuple(j)])) for j in bad[:5]]
        assert lib.pyamx_trap_simd_count() == before + len(halves) // 512
    finally:
        lib.pyamx_trap_set_simd(was)


def test_float_dot_overflow_in_the_fast_path(trapped):
    # Products near the top of the range overflow even/odd to inf and back is impossible.
    big = 0x7F00  # bf16 2^127
    a = np.array([[_bf16_pair(big, big)] * 4], np.uint32)
    b = np.array([[_bf16_pair(0x4000, 0xC000)]] * 4, np.uint32)  # 2 and -2
    c = np.zeros((1, 1), np.uint32)
    got = run_dot(OP["TDPBF16PS"], a, b, c)
    assert got[0, 0] == model_float_dot(a, b, c, False)[0, 0] == DEFAULT_NAN  # +inf + -inf


# signedness from the reference, not from pyamx.table.isa: the trap is held to the spec, not to the table
INT8_SIGNS = {i.mnemonic: reference.int8_signedness(i.mnemonic) for i in isa.DOTS if i.group == "int8"}


@pytest.mark.parametrize("name", list(INT8_SIGNS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 16, 16), (7, 3, 11), (15, 16, 16)])
@pytest.mark.parametrize("data", ["random", "extremes"])
def test_int8_dot_products_match_the_reference_with_wraparound(dot_path, name, shape, data):
    M, K, N = shape
    rng = np.random.default_rng(len(name) * 31 + M)
    if data == "random":
        a = rng.integers(0, 256, (M, K * 4), dtype=np.uint8)
        b = rng.integers(0, 256, (K, N * 4), dtype=np.uint8)
    else:  # the largest products of every signedness: -128, 127, 255
        a = rng.choice(np.array([0x80, 0x7F, 0xFF], np.uint8), (M, K * 4))
        b = rng.choice(np.array([0x80, 0x7F, 0xFF], np.uint8), (K, N * 4))
    c = rng.integers(-(2 ** 31), 2 ** 31, (M, N), dtype=np.int64)
    c[0, 0] = 2 ** 31 - 1  # wrap-around, no saturation
    c[-1, -1] = -(2 ** 31)
    s1, s2 = INT8_SIGNS[name]
    av = (a.view(np.int8) if s1 else a).astype(np.int64).reshape(M, K, 4)
    bv = (b.view(np.int8) if s2 else b).astype(np.int64).reshape(K, N, 4)
    want = (c + np.einsum("mki,kni->mn", av, bv)) & 0xFFFFFFFF
    before = lib.pyamx_trap_simd_count()
    got = run_dot(OP[name], a.view(np.uint32), b.view(np.uint32), (c & 0xFFFFFFFF).astype(np.uint32))
    assert lib.pyamx_trap_simd_count() == before + (dot_path == "avx2")
    assert (got.astype(np.int64) == want).all()


# ---- threads ----


def test_threads_run_at_once_with_their_own_tile_state(trapped):
    errors = []
    barrier = threading.Barrier(8)

    def worker(seed):
        try:
            lib.pyamx_trap_thread_prepare()
            rng = np.random.default_rng(seed)
            M, K, N = 4 + seed % 5, 2 + seed % 7, 3 + seed % 6
            barrier.wait()
            for _ in range(25):
                a = rng.integers(0, 256, (M, K * 4), dtype=np.uint8)
                b = rng.integers(0, 256, (K, N * 4), dtype=np.uint8)
                c = rng.integers(-1000, 1000, (M, N)).astype(np.int64)
                want = (c + np.einsum("mki,kni->mn", a.view(np.int8).astype(np.int64).reshape(M, K, 4),
                                      b.view(np.int8).astype(np.int64).reshape(K, N, 4))) & 0xFFFFFFFF
                got = run_dot(OP["TDPBSSD"], a.view(np.uint32), b.view(np.uint32),
                              (c & 0xFFFFFFFF).astype(np.uint32), count=False)
                if not (got.astype(np.int64) == want).all():
                    errors.append(f"thread {seed}: wrong result")
                    return
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(f"thread {seed}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_configuration_does_not_leak_between_threads(trapped):
    mine = make_cfg({1: (9, 36)})
    held_out = np.zeros(64, np.uint8)
    other = make_cfg({4: (2, 2), 5: (16, 64)})
    t = threading.Thread(target=lambda: st.pyamx_trap_selftest_hold(u8p(other), 300_000, u8p(held_out)))
    t.start()
    st.pyamx_trap_selftest_ldtilecfg(u8p(mine))  # while the other thread holds its own config
    out = np.zeros(64, np.uint8)
    st.pyamx_trap_selftest_sttilecfg(u8p(out))
    t.join()
    assert (out == mine).all()
    assert (held_out == other).all()
    st.pyamx_trap_selftest_release()


def test_prepared_thread_frees_its_slot_at_exit(trapped):
    before = lib.pyamx_trap_slots_in_use()

    def worker():
        lib.pyamx_trap_thread_prepare()
        st.pyamx_trap_selftest_ldtilecfg(u8p(make_cfg({0: (1, 4)})))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    # join() returns before the OS thread has run its key destructors. Threads of earlier tests
    # may still be releasing their slots too, so the count can end below `before`, never above.
    deadline = time.monotonic() + 5
    while lib.pyamx_trap_slots_in_use() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lib.pyamx_trap_slots_in_use() <= before


def test_more_threads_than_slots_without_prepare(trapped):
    # Unprepared threads keep their slot after exit; a full table reaps dead ones.
    failures = []

    def worker(i):
        cfg = make_cfg({i % 8: (1 + i % 16, 4)})
        out = np.zeros(64, np.uint8)
        st.pyamx_trap_selftest_hold(u8p(cfg), 0, u8p(out))
        if not (out == cfg).all():
            failures.append(i)

    for i in range(300):
        t = threading.Thread(target=worker, args=(i,))
        t.start()
        t.join()
    assert not failures
    assert lib.pyamx_trap_slots_in_use() <= 256


# ---------------------------------------------------------------------------------------------
# Other SIGILL handlers, installed while trapped instructions run (issue 9): the guard.
#
# A worker thread runs trapped instructions in a C loop (no Python in between, so no
# reinstall-on-entry can help) while the main thread installs SIGILL handlers the ways real
# programs do. Without the guard faulthandler.enable() killed the process (3 of 3 runs) and
# signal.signal(SIGILL, ...) livelocked the worker (2 of 3); a timeout turns a livelock into a
# failure here.

GUARD_PRELUDE = """
import faulthandler, os, signal, sys, threading, time
from pyamx.cpu import trap
trap.enable() if WITH_GUARD else lib.pyamx_trap_install()
trap.grant_permission()
g = trap.guard() if WITH_GUARD else trap.GuardStatus(True, "off for a control run", 0)
print("guard", int(g.active), g.reason, flush=True)
if not g.active:
    sys.exit(0)
stop = threading.Event()
done = [0]

def worker():
    while not stop.is_set():
        if st.pyamx_trap_selftest_loop(1, 200) != 0:  # TILEZERO x 200, trapped
            print("loop failed", flush=True)
            os._exit(3)
        done[0] += 1

th = threading.Thread(target=worker)
th.start()
while done[0] < 3:
    time.sleep(0.005)
"""

GUARD_EPILOGUE = """
before = done[0]
# Progress within 10 s, not within a fixed 0.2 s: on a loaded 2-core machine the worker may not be
# scheduled for a while, and a slow worker is not a stuck one.
waited = time.monotonic() + 10
time.sleep(0.2)
while done[0] == before and time.monotonic() < waited:
    time.sleep(0.05)
progress = done[0] - before
stop.set()
th.join(20)
print("progress", progress, "alive", int(th.is_alive()), "answered", trap.guard().answered, flush=True)
"""


def _skip_if_this_process_holds_the_guard():
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    if lib.pyamx_trap_guard_state() == lib.PYAMX_TRAP_GUARD_ACTIVE:
        pytest.skip("this test process holds the trap guard's seccomp listener (the native start switched "
                    "the PYAMX_TRAP_EMULATION=1 mode on), and the kernel allows one per process tree: run tests/trap/test_trap.py "
                    "in its own pytest process to test the guard")


def run_guarded(scenario: str, after: str = "", timeout: float = 60, with_guard=True):
    """Runs `scenario` in the main thread while the worker traps; the child's output fields."""
    _skip_if_this_process_holds_the_guard()
    code = (f"WITH_GUARD = {with_guard}\n" + GUARD_PRELUDE + textwrap.dedent(scenario) + GUARD_EPILOGUE
            + textwrap.dedent(after))
    try:
        res = run_py(code, env_extra={"PYTHONFAULTHANDLER": ""}, timeout=timeout)
    except subprocess.TimeoutExpired:
        if not with_guard:
            return None, {}
        pytest.fail(f"the child hung (livelock) for {timeout} s")
    first = res.stdout.splitlines()[0].split(" ", 2) if res.stdout else []
    if first[:2] == ["guard", "0"]:
        pytest.skip(f"the guard is unavailable here: {first[2] if len(first) > 2 else res.stderr}")
    fields = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        for key, value in zip(parts[::2], parts[1::2]):
            fields[key] = value
    return res, fields


def _survived(res, fields, answered=True):
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr[-2000:])
    assert int(fields["progress"]) > 0, "the worker made no progress after the handler came"
    assert fields["alive"] == "0"
    if answered:
        assert int(fields["answered"]) > 0, "the guard never answered: the scenario did not exercise it"


GUARD_SCENARIOS = {
    "faulthandler toggled 2000 times": """
        for _ in range(2000):
            faulthandler.enable()
            faulthandler.disable()
        """,
    "faulthandler.enable once": "faulthandler.enable()\n",
    "signal.signal(SIGILL) from Python": "signal.signal(signal.SIGILL, lambda *a: None)\n",
    "sigaction from C (libc)": "assert st.pyamx_trap_selftest_set_sigill(0) == 0\n",
    "rt_sigaction from C (raw syscall)": "assert st.pyamx_trap_selftest_set_sigill(1) == 0\n",
    # A SIGSYS-based design would kill this one: the thread cannot take a signal.
    "sigaction from a thread that blocks every signal": """
        def blocked():
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            assert st.pyamx_trap_selftest_set_sigill(0) == 0
            faulthandler.enable()
        other = threading.Thread(target=blocked)
        other.start()
        other.join()
        """,
}


@pytest.mark.parametrize("what", list(GUARD_SCENARIOS))
def test_guard_keeps_trapped_instructions_running_when_another_handler_comes(what):
    res, fields = run_guarded(GUARD_SCENARIOS[what])
    _survived(res, fields)


@pytest.mark.slow  # the hanging half waits out its timeout
@pytest.mark.parametrize("what", ["faulthandler.enable once", "signal.signal(SIGILL) from Python"])
def test_without_the_guard_the_same_scenario_kills_or_hangs(what):
    """The control: reinstall-on-entry alone does not survive these scenarios (issue 9)."""
    res, fields = run_guarded(GUARD_SCENARIOS[what], timeout=15, with_guard=False)
    survived = res is not None and res.returncode == 0 and int(fields.get("progress", 0)) > 0
    assert not survived, "the scenario no longer shows the race: the guard tests prove nothing"


@pytest.mark.parametrize("how", [0, 1], ids=["libc", "raw-syscall"])
def test_guard_passes_non_tile_sigills_to_a_handler_installed_from_c(how):
    res, fields = run_guarded(f"assert st.pyamx_trap_selftest_set_sigill({how}) == 0\n", after="""
        st.pyamx_trap_selftest_ud2()           # the C handler skips it
        st.pyamx_trap_selftest_ud2()
        print("seen", st.pyamx_trap_selftest_sigill_seen(), flush=True)
        """)
    _survived(res, fields)
    # Exactly the two ud2s: none of the thousands of trapped TILEZEROs reached it.
    assert fields["seen"] == "2"


def test_guard_answers_sigaction_with_what_was_set_before():
    # faulthandler saves the old action it is given and puts it back on disable(): the C
    # handler must come back as the one the trap chains to.
    res, fields = run_guarded("""
        assert st.pyamx_trap_selftest_set_sigill(0) == 0
        faulthandler.enable()
        faulthandler.disable()
        """, after="""
        st.pyamx_trap_selftest_ud2()
        print("seen", st.pyamx_trap_selftest_sigill_seen(), flush=True)
        """)
    _survived(res, fields)
    assert fields["seen"] == "1"


def test_guard_faulthandler_still_reports_a_genuine_illegal_instruction():
    res, fields = run_guarded("faulthandler.enable()\n", after="st.pyamx_trap_selftest_ud2()\n")
    assert int(fields["progress"]) > 0
    assert dies_with(res, signal.SIGILL), (res.returncode, res.stderr[-2000:])
    assert res.stderr.count("Fatal Python error: Illegal instruction") == 1


def test_guard_python_handler_for_a_genuine_illegal_instruction_dies_instead_of_hanging():
    # Python's C-level handler returns without moving RIP: silicon would fault forever.
    res, fields = run_guarded("signal.signal(signal.SIGILL, lambda *a: None)\n",
                              after="st.pyamx_trap_selftest_ud2()\n", timeout=60)
    assert int(fields["progress"]) > 0
    assert dies_with(res, signal.SIGILL), (res.returncode, res.stderr[-2000:])


def test_guard_leaves_child_processes_alone():
    # The filter survives fork and exec; children's own sigaction(SIGILL) calls must work.
    res, fields = run_guarded("", after="""
        import subprocess
        child = subprocess.run([sys.executable, "-c",
                                "import faulthandler, signal\\n"
                                "faulthandler.enable(); faulthandler.disable()\\n"
                                "signal.signal(signal.SIGILL, lambda *a: None)\\n"
                                "print('exec child ok')"],
                               capture_output=True, text=True, timeout=30)
        print("exec", child.returncode, child.stdout.strip().replace(" ", "_"), flush=True)
        pid = os.fork()
        if pid == 0:
            faulthandler.enable()
            signal.signal(signal.SIGILL, signal.SIG_DFL)
            os._exit(7)
        print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        """)
    _survived(res, fields, answered=False)
    assert fields["exec"] == "0", res.stderr[-2000:]
    assert fields["fork"] == "7"


def test_guard_unavailable_in_a_trap_child_of_a_guarded_process_falls_back():
    # One seccomp listener per process tree: the child says so and keeps reinstalling on entry.
    res, fields = run_guarded("", after="""
        import subprocess
        env = dict(os.environ)
        child = subprocess.run([sys.executable, "-c",
                                "from pyamx.cpu import trap; trap.enable(); g = trap.guard(); "
                                "print(int(g.active), g.reason)"],
                               capture_output=True, text=True, timeout=30, env=env)
        print("nested", child.stdout.split()[0] if child.stdout else "none", flush=True)
        print(child.stdout, child.stderr, flush=True)
        """)
    _survived(res, fields, answered=False)
    assert fields["nested"] == "0", res.stdout
    assert "listener" in res.stdout


def test_detection_report_says_whether_the_guard_is_active():
    from dataclasses import replace

    from pyamx.cpu.detect import RawFacts, TrapFacts, evaluate

    raw = RawFacts(system="Linux", machine="x86_64", python=(3, 11, 0))
    for reason in ("active: seccomp answers every sigaction(SIGILL)", "the kernel has no seccomp"):
        rep = evaluate(replace(raw, trap=TrapFacts(available=True, requested=True, active=True, guard=reason)))
        stage = next(s for s in rep.stages if s.name.startswith("trap mode"))
        assert stage.value.endswith(f"; guard: {reason}")


def test_guard_in_this_process_keeps_the_handler_installed():
    """Where this pytest process holds the guard (trap-mode CI leg), the same checks in-process.

    It does not enable the mode itself: the module fixture above would uninstall it again at
    teardown under the feet of a detection report cached meanwhile.
    """
    if lib.pyamx_trap_guard_state() != lib.PYAMX_TRAP_GUARD_ACTIVE:
        pytest.skip("this process holds no guard (the subprocess tests above cover it)")
    from pyamx.table.tilecfg import TileConfig

    import pyamx

    was_enabled = faulthandler.is_enabled()
    before = lib.pyamx_trap_guard_calls()
    machine = pyamx.tile_machine(backend="native")
    try:
        signal.signal(signal.SIGILL, lambda *a: None)
        assert lib.pyamx_trap_active() == 1
        signal.signal(signal.SIGILL, signal.SIG_DFL)
        faulthandler.disable()
        faulthandler.enable()
        assert lib.pyamx_trap_active() == 1  # the real disposition never changed
        assert lib.pyamx_trap_ensure_installed() == 0
        assert lib.pyamx_trap_guard_calls() >= before + 3
        count = lib.pyamx_trap_count()
        machine.ldtilecfg(TileConfig.make({0: (2, 8)}))
        assert machine.sttilecfg()[48] == 2
        assert lib.pyamx_trap_count() >= count + 2
    finally:
        if not was_enabled:
            faulthandler.disable()
        machine.tilerelease()


def test_a_stale_trap_module_is_refused(monkeypatch):
    from pyamx.cpu import trap

    class Stale:
        ffi = _trap.ffi

        class lib:
            @staticmethod
            def pyamx_trap_build_version():
                return ffi.new("char[]", b"0.0.1")

    import pyamx

    trap._load.cache_clear()
    monkeypatch.setitem(sys.modules, "pyamx._trap", Stale)
    monkeypatch.setattr(pyamx, "_trap", Stale, raising=False)
    try:
        with pytest.raises(BackendError, match="stale build"):
            trap.enable()
    finally:
        monkeypatch.undo()
        trap._load.cache_clear()
