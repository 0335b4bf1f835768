"""Both arithmetic paths of the trap's float dot products equal the emulator bit for bit.

The handler computes TDPBF16PS/TDPFP16PS-style rows with AVX2 where the CPU
has it and with scalar FMA code otherwise (csrc/trap/isa/simd_dot.c, semantics.c);
the AMX-COMPLEX rows run through the same fp16 rows. On AMX silicon without
AMX-COMPLEX (the complement mode) and without AMX (the trap mode) the complex
instructions are emulated by that code, so this forces each path in turn
(``pyamx_trap_set_simd``) on random, special and denormal operands. A path
the CPU lacks is skipped.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env

SCRIPT = r"""
import numpy as np, pyamx, pyamx.cpu.detect, pyamx.cpu.native
from pyamx.cpu._nativelib import load_trap
from pyamx.table import isa
pyamx.cpu.native.report()  # the native start installs the trap first: installing sets the path to the CPU's best
ffi, lib = load_trap()
rng = np.random.default_rng(2026)
special = np.array([0, 0x8000, 1, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
                    0x3c00, 0xbc00, 0x3555, 0x0200], dtype=np.uint16)
names = [insn.name for insn in isa.TABLE if insn.kind == "dot-complex"]
for simd in (0, 1):
    got = lib.pyamx_trap_set_simd(simd)
    before = lib.pyamx_trap_simd_count()
    bad = cases = 0
    for it in range(40):
        c = rng.standard_normal((16, 16)).astype(np.float32)
        a = rng.standard_normal((16, 32)).astype(np.float16).view(np.uint16)
        b = rng.standard_normal((16, 32)).astype(np.float16).view(np.uint16)
        if it % 2:
            a = np.where(rng.random(a.shape) < 0.3, rng.choice(special, a.shape), a).astype(np.uint16)
            b = np.where(rng.random(b.shape) < 0.3, rng.choice(special, b.shape), b).astype(np.uint16)
        for name in names:
            fn = getattr(pyamx, name)
            args = (c, a.view(np.uint32), b.view(np.uint32))
            n = np.asarray(fn(*args, backend="native")).view(np.uint32)
            e = np.asarray(fn(*args, backend="emulator")).view(np.uint32)
            cases += 1
            if (n != e).any():
                bad += 1
                i = np.argwhere(n != e)[0]
                print("mismatch", name, "simd", got, tuple(i), hex(n[tuple(i)]), hex(e[tuple(i)]))
    print("path", got, "cases", cases, "bad", bad, "simd_rows", lib.pyamx_trap_simd_count() - before)
"""


def test_scalar_and_avx2_paths_of_the_trap_equal_the_emulator():
    from pyamx.cpu import native
    from pyamx.table import isa

    complex_row = next(insn for insn in isa.TABLE if insn.kind == "dot-complex")
    env = child_env(PYAMX_TRAP_EMULATION="1", PYAMX_BACKEND="native")
    probe = subprocess.run([sys.executable, "-c", "import pyamx.cpu.native as n, pyamx.table.isa as i; r = n.report(); "
                            f"print(r.mode_for(i.get({complex_row.name!r})))"],
                           capture_output=True, text=True, timeout=120, cwd=PYAMX_HOME, env=env)
    mode = probe.stdout.strip()
    if mode not in ("complement", "trap"):
        pytest.skip(f"the complex rows are not emulated by the trap here (mode {mode!r}; "
                    f"{native.report().mode!r} without the trap variable)")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                          cwd=PYAMX_HOME, env=env)
    assert proc.returncode == 0, proc.stderr
    paths = [line.split() for line in proc.stdout.splitlines() if line.startswith("path ")]
    assert paths, proc.stdout + proc.stderr
    rows = {}
    for _, path, _, cases, _, bad, _, simd_rows in paths:
        assert int(cases) > 0 and bad == "0", proc.stdout
        rows[path] = int(simd_rows)
    assert rows.get("1", 0) > rows["0"], f"the AVX2 path never ran: {proc.stdout}"
