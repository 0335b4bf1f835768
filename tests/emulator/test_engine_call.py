"""The compiled engine's shape: one call descriptor, one entry, one worker pool, no include/call
circle, and test hooks only in a test build (docs/engine.md, "APIs"); and the Python front that
checks a product once, ``threads`` included, whatever form ``b`` takes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyamx
from pyamx import _matmul, _threads
from pyamx.emulator import engine as eng

from childproc import PYAMX_HOME, child_env

CSRC = Path(__file__).resolve().parents[2] / "csrc"
#: what the product's engine API is: the descriptor's one entry, cancelling, and availability
PRODUCT_ENTRIES = {"pyamx_engine_available", "pyamx_engine_reason", "pyamx_engine_run", "pyamx_engine_cancel"}
ENGINE_FILES = ("engine_x86.c", "engine_portable.c", "engine_scalar.c", "engine_fp8.c")


def _declared_functions(header: Path) -> set:
    text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
    return set(re.findall(r"\b(pyamx_\w+)\s*\(", text))


def test_the_engine_api_is_one_entry_and_its_helpers():
    assert _declared_functions(CSRC / "engine.h") == PRODUCT_ENTRIES


def test_test_hooks_are_only_in_a_test_build():
    hooks = _declared_functions(CSRC / "engine_test_hooks.h")
    assert hooks and not hooks & PRODUCT_ENTRIES
    loaded = eng._lib()
    if loaded is None:
        pytest.skip("the C extension is not built")
    present = {name for name in hooks if hasattr(loaded[1], name)}
    assert present in (set(), hooks), f"a build has all of the test hooks or none: {sorted(present)}"


def _defined_functions(source: Path) -> set:
    """Functions with external linkage a C file defines (a name at the start of a line, then '(')."""
    names = set()
    for match in re.finditer(r"^(?!static)[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;{]*\)\s*\{", source.read_text(), re.M):
        names.add(match.group(1))
    return names


def test_the_engine_variants_call_nothing_in_the_driver():
    """engine.c calls its variants; they share lower-level helpers (engine_internal.h,
    engine_scalar.c), never a function of engine.c: no include/call circle."""
    driver = _defined_functions(CSRC / "engine.c")
    assert "pyamx_engine_run" in driver
    for name in ENGINE_FILES:
        text = re.sub(r"/\*.*?\*/", "", (CSRC / name).read_text(), flags=re.S)
        called = {fn for fn in driver if re.search(rf"\b{fn}\s*\(", text)}
        assert not called, f"{name} calls {sorted(called)} of engine.c"


def test_the_engines_run_on_the_native_kernels_pool():
    """A compiled engine's threads are pool.c's persistent workers (the pool the native matmul
    uses), not threads of its own: a fresh process that ran one engine product has pool workers."""
    if not eng._compiled_status("portable")[0]:
        pytest.skip("no compiled engine here")
    script = (
        "import numpy as np, pyamx\n"
        "from pyamx.cpu._nativelib import load\n"
        "lib = load()[1]\n"
        "assert lib.pyamx_pool_workers() == 0\n"
        "a = np.ones((256, 512), np.uint16) << 14\n"
        "pyamx.matmul(a, a.T.copy(), backend='emulator', engine='portable', threads=3)\n"
        "print(lib.pyamx_pool_workers())\n"
    )
    # cwd: the pyamx under test, not a source checkout's unbuilt pyamx/ (a `-c` script imports from its cwd first)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=child_env(), timeout=120,
                          cwd=PYAMX_HOME)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == 2  # the caller and two workers


def test_a_packed_b_goes_through_the_one_check():
    rng = np.random.default_rng(3)
    b = rng.integers(0, 1 << 14, (40, 24), dtype=np.uint16)
    packed = pyamx.pack(b)
    a = rng.integers(0, 1 << 14, (2, 5, 40), dtype=np.uint16)
    call = _matmul.check(a, packed)
    plain = _matmul.check(a, b)
    assert call.packed is packed and (call.mnemonic, call.batch, call.m, call.k, call.n) == \
        (plain.mnemonic, plain.batch, plain.m, plain.k, plain.n)
    with pytest.raises(ValueError, match="5x39 and b was packed as 40x24"):
        _matmul.check(a[..., :39], packed)


@pytest.mark.parametrize("packed", [False, True])
def test_threads_is_checked_once_per_product(monkeypatch, packed):
    seen = []
    real = _threads.check
    monkeypatch.setattr(_threads, "check", lambda threads, fn="threads": seen.append(threads) or real(threads, fn))
    a = np.ones((8, 40), np.uint16) << 14
    b = np.ones((40, 8), np.uint16) << 14
    pyamx.matmul(a, pyamx.pack(b) if packed else b, backend="emulator", threads=2)
    assert seen.count(2) == 1, seen


def test_per_instruction_calls_from_threads_keep_their_own_descriptors():
    """tile_call's run() keeps one descriptor per thread and shape and sets its pointers per call:
    threads calling one run() at once (the GIL released in C) must each get their own product."""
    import threading

    ok, _ = eng._compiled_status("portable")
    if not ok:
        pytest.skip("no compiled engine here")
    compiled = eng.resolve("portable")
    run = compiled.tile_call("tdpbf16ps")
    numpy_engine = eng.resolve("numpy")
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        m, n, kd = 16, 16, 16  # one shape: each thread's calls find the same kept descriptor key
        for _ in range(300):
            a = rng.integers(0, 1 << 14, (m, 2 * kd), dtype=np.uint16)
            b = rng.integers(0, 1 << 14, (kd, 2 * n), dtype=np.uint16)
            c = rng.integers(0, 1 << 30, (m, n), dtype=np.uint32)
            out = np.empty((m, n), np.uint32)
            run(a, 4 * kd, b, 4 * n, c, n, out, n, m, n, kd)
            if not np.array_equal(out, numpy_engine.dot("tdpbf16ps", c, a, b, kd)):
                failures.append(seed)
                return

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
