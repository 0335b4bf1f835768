"""Shared pytest fixtures of pyamx's tests."""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path

import pytest

from pyamx import _env

# ---- native backend: skip, or fail under PYAMX_REQUIRE_NATIVE=1 ----------
# One place decides what a test that needs the native backend does where it
# cannot run: skip with the detection report's reason, or fail when the run
# demands native (CI on AMX silicon, or in trap mode).

REQUIRE_NATIVE_ENV = "PYAMX_REQUIRE_NATIVE"
_require_native = False  # parsed once, in pytest_configure

def pytest_configure(config):
    global _require_native
    try:
        _require_native = _env.flag(REQUIRE_NATIVE_ENV)
    except _env.EnvVarError as exc:  # once, at start-up, not once per test
        raise pytest.UsageError(str(exc)) from None


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (left out by default; CI runs each once)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if {"native", "native_group"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.native)
        if item.path.name.startswith("test_trap"):
            item.add_marker(pytest.mark.trap)
    _leave_out_slow(config, items)


# ---- the one-minute loop: tests marked slow run only when asked for ----------------

_SLOW_LEFT_OUT = "pyamx_slow_left_out"
_slow_key = pytest.StashKey[int]()


def _leave_out_slow(config, items):
    """Deselect the slow tests unless ``--slow`` is given or ``-m`` names the marker itself."""
    if config.getoption("--slow") or "slow" in (config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if not slow:
        return
    items[:] = [item for item in items if not item.get_closest_marker("slow")]
    config.hook.pytest_deselected(items=slow)
    config.stash[_slow_key] = len(slow)
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller prints the line
        config.workeroutput[_SLOW_LEFT_OUT] = len(slow)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: every worker collected the same tests, so any one's count is the count."""
    count = getattr(node, "workeroutput", {}).get(_SLOW_LEFT_OUT)
    if count:
        node.config.stash[_slow_key] = count


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    count = config.stash.get(_slow_key, 0)
    if count:
        terminalreporter.write_line(
            f"{count} slow tests left out: `pytest --slow` runs them too, `pytest --slow -m slow` only "
            "them (CI runs each once; docs/testing.md)"
        )


def native_required_by_env() -> bool:
    """Whether ``PYAMX_REQUIRE_NATIVE`` demands the native backend (parsed once at start-up)."""
    return _require_native


def _cpu_lacks_group(native, group) -> bool:
    """Silicon whose CPU lacks this group's extension (AMX-FP16 on a Sapphire Rapids): no promise broken."""
    from pyamx.cpu import detect

    return group is not None and native.available()[0] and detect.report().mode == "silicon"


def _native_or_skip(group=None):
    from pyamx.cpu import native

    usable, reason = native.available(group)
    if not usable:
        if native_required_by_env() and not _cpu_lacks_group(native, group):
            pytest.fail(f"{REQUIRE_NATIVE_ENV} is set but the native backend is unavailable: {reason}", pytrace=False)
        pytest.skip(f"native backend unavailable: {reason}")
    return native


@pytest.fixture
def native():
    """The ``pyamx.cpu.native`` module where it can run; skip (or fail, see above) elsewhere."""
    module = _native_or_skip()
    # A machine an earlier test dropped inside a reference cycle (an exception raised from a
    # signal handler holds its frame) still owns this thread's tile state until the collector
    # runs; with a pending start_row that state cannot be saved, and the next test's first
    # switch is refused. Tests that count on a fresh thread state get one.
    gc.collect()
    return module


@pytest.fixture
def native_group():
    """A function ``(group) -> pyamx.cpu.native`` that skips/fails when that kernel group cannot run."""
    return _native_or_skip



# ---- the trap's two arithmetic paths (tests/trap/test_trap.py, test_trap_direct.py) ----


@pytest.fixture(params=["avx2", "scalar"])
def dot_path(request):
    """Each dot-product test on both arithmetic paths of the trap (csrc/trap/isa/simd_dot.c and
    semantics.c); the path that was on is put back afterwards, skip or not."""
    lib = pytest.importorskip("pyamx._trap", reason="the trap module is not built (x86-64 Linux only)").lib
    was = lib.pyamx_trap_set_simd(-1)
    on = lib.pyamx_trap_set_simd(1 if request.param == "avx2" else 0)
    try:
        if request.param == "avx2" and not on:
            pytest.skip("this CPU has no AVX2: the trap runs its scalar dot products only")
        yield request.param
    finally:
        lib.pyamx_trap_set_simd(was)


# ---- C programs the tests build: the built path, or skip saying why ---------

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.fixture(scope="session")
def c_program(tmp_path_factory):
    """``build(name, *flags, sources=(), libs=(), output=None, optional=False, needs_run=False) -> Path``.

    Builds tests/programs/<name>.c (plus ``sources``, paths; ``libs`` last on the command line)
    with :func:`childproc.compiler` and ``flags`` into ``output`` (a file name; default ``name``) once per session. Skips where there
    is no compiler, or where ``needs_run`` and ``pyamx run`` cannot work here; a failed build skips
    where ``optional`` (the compiler may lack AMX intrinsics) and fails the test otherwise, with
    the compiler's message either way.
    """
    from childproc import compiler, require_pyamx_run

    built: dict = {}

    def build(name, *flags, sources=(), libs=(), output=None, optional=False, needs_run=False) -> Path:
        source = PROGRAMS / f"{name}.c"
        cc = compiler()
        if not cc:
            pytest.skip(f"no C compiler to build tests/programs/{source.name}")
        if needs_run:
            require_pyamx_run()
        key = (name, flags, tuple(map(str, sources)), libs, output)
        if key not in built:
            out = tmp_path_factory.mktemp("programs") / (output or name)
            proc = subprocess.run([cc, *flags, "-o", str(out), str(source), *map(str, sources), *libs],
                                  capture_output=True, text=True, timeout=300)
            built[key] = (out, proc)
        out, proc = built[key]
        if proc.returncode != 0:
            why = f"{cc} cannot build tests/programs/{source.name}: {proc.stderr.strip()[:300]}"
            if optional:
                pytest.skip(why)
            pytest.fail(why, pytrace=False)
        return out

    return build
