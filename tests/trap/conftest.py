"""Fixtures the trap's test modules share."""

from __future__ import annotations

import pytest


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
