"""The native AMX matmul kernel (csrc/matmul_amx.c) against the emulator's one-instruction functions.

The expected bits come from an independent composition of the schedule: a
Python loop over 16 x 16 output tiles and 16-dword K blocks, each block one
call of ``pyamx.emulator.tdp*`` whose C is the previous block's result. The
kernel runs as native code (on silicon, or through the trap mode's SIGILL
emulator, where every tile instruction costs ~15 us: shapes stay small).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import pyamx
from pyamx.cpu import _native_matmul
from pyamx import emulator
from pyamx.table import isa
from pyamx.cpu import native
from pyamx.tools import testing
from pyamx.cpu._native_matmul import matmul_native
from pyamx.errors import BackendError

from childproc import PYAMX_HOME, child_env

OPS = tuple(native.OPS)  # mnemonic -> (C op name, group, lanes)
INT8 = ("tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud")
DIMS = (1, 15, 17, 33)
KDS = (1, 16, 17, 33)


@pytest.fixture
def group_lib(native_group):
    """``(op_name) -> (ffi, lib)`` of a kernel group that can run here (else skip/fail)."""

    def get(op_name):
        group = native.OPS[op_name][1]
        native_group(group)
        return native._lib(group)

    return get


@pytest.fixture
def trap_lib(group_lib):
    """The C functions of the trap mode (counters, per-thread state), where native runs trapped."""
    group_lib("tdpbf16ps")
    from pyamx.cpu import detect, trap

    if detect.report().mode != "trap":
        pytest.skip("this checks the trap mode's per-thread state and counters; native runs on silicon here")
    return trap._lib()


# -- operands -------------------------------------------------------------------


def _fp16(rng, shape, adversarial):
    sign = rng.integers(0, 2, shape, dtype=np.uint16) << 15
    exponent = rng.integers(12, 18, shape).astype(np.uint16) << 10
    bits = (sign | exponent | rng.integers(0, 1024, shape, dtype=np.uint16)).astype(np.uint16)
    if adversarial:
        specials = np.array(
            [0x0000, 0x8000, 0x0001, 0x83FF, 0x03FF, 0x7C00, 0xFC00, 0x7BFF, 0xFBFF, 0x7E01, 0xFD23, 0x7C01],
            dtype=np.uint16,
        )
        mask = rng.random(shape) < 0.15
        bits = np.where(mask, rng.choice(specials, size=shape), bits).astype(np.uint16)
    return bits


def operands(op_name, m, kd, n, cls, rng):
    """(c, a, b) for one op: a (M, Kd*L) and b (Kd, N*L) already in instruction layout."""
    if op_name == "tdpbf16ps":
        return testing.operands(rng, m, kd, n, cls)
    adversarial = cls != "normal"
    insn = isa.get(op_name)
    if insn.a_format.name in ("fp16", "cfp16"):  # a complex number is a pair of fp16 values
        c = testing.operands(rng, m, 1, n, cls)[0]
        return c, _fp16(rng, (m, 2 * kd), adversarial), _fp16(rng, (kd, 2 * n), adversarial)
    a = rng.integers(0, 256, (m, 4 * kd), dtype=np.uint8)
    b = rng.integers(0, 256, (kd, 4 * n), dtype=np.uint8)
    if insn.is_float:  # fp8: every code, NaN and infinity encodings included
        return testing.operands(rng, m, 1, n, cls)[0], a, b
    c = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
    if adversarial:  # extremes of every signedness, and sums that wrap around int32
        edge8 = np.array([0x00, 0x7F, 0x80, 0xFF, 0x01], dtype=np.uint8)
        a = np.where(rng.random(a.shape) < 0.5, rng.choice(edge8, size=a.shape), a).astype(np.uint8)
        b = np.where(rng.random(b.shape) < 0.5, rng.choice(edge8, size=b.shape), b).astype(np.uint8)
        edge32 = np.array([2**31 - 1, -(2**31), -1, 0, 2**31 - 100], dtype=np.int32)
        c = np.where(rng.random(c.shape) < 0.5, rng.choice(edge32, size=c.shape), c).astype(np.int32)
    return c, a, b


# -- the independent composition --------------------------------------------------


def schedule_reference(op_name, c, a, b, kd):
    """The schedule through the emulator's one-instruction functions: per 16x16 tile, K blocks chained."""
    lanes = native.OPS[op_name][2]
    fn = getattr(emulator, op_name)
    m, n = c.shape
    out = np.array(c, copy=True)
    for i0 in range(0, m, 16):
        for j0 in range(0, n, 16):
            i1, j1 = min(i0 + 16, m), min(j0 + 16, n)
            acc = np.ascontiguousarray(out[i0:i1, j0:j1])
            for k0 in range(0, kd, 16):
                k1 = min(k0 + 16, kd)
                ta = np.ascontiguousarray(a[i0:i1, lanes * k0 : lanes * k1])
                tb = np.ascontiguousarray(b[k0:k1, lanes * j0 : lanes * j1])
                acc = np.asarray(fn(acc, ta, tb)).view(out.dtype)
            out[i0:i1, j0:j1] = acc
    return out


def _ptr(array):
    ffi, _ = native._lib()
    return ffi.cast("uint8_t *", array.ctypes.data)


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32) if x.dtype.itemsize == 4 else x


def assert_same_bits(got, want, what):
    got, want = _bits(got), _bits(want)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {got.size} elements differ; first at {tuple(bad[0])}: "
        f"got {int(got[tuple(bad[0])]):#010x}, want {int(want[tuple(bad[0])]):#010x}"
    )


# -- bit-exact against the schedule -------------------------------------------------


def _shapes():
    """Every M with every N (1, 15, 17, 33), K in dwords cycling so each K meets each M and each N."""
    for i, (m, n) in enumerate(itertools.product(DIMS, DIMS)):
        yield m, KDS[(i + i // 4) % 4], n


@pytest.mark.parametrize("op_name", OPS)
def test_kernel_matches_the_emulated_schedule_bit_for_bit_on_edge_shapes(op_name, group_lib):
    group_lib(op_name)
    rng = np.random.default_rng(1000 + OPS.index(op_name))
    classes = testing.CLASSES if op_name == "tdpbf16ps" else ("normal", "mixed")
    for number, (m, kd, n) in enumerate(_shapes()):
        cls = classes[number % len(classes)]
        c, a, b = operands(op_name, m, kd, n, cls, rng)
        got = matmul_native(op_name, a, b, c, kd, 1)
        assert got.dtype == c.dtype and got.shape == (m, n)
        assert_same_bits(got, schedule_reference(op_name, c, a, b, kd), f"{op_name} M={m} Kd={kd} N={n} {cls}")


@pytest.mark.parametrize("op_name", OPS)
def test_adversarial_values_survive_the_kernel_bit_for_bit(op_name, group_lib):
    """NaN payloads, denormals, +-0, inf in every operand, K spanning three blocks (one partial)."""
    group_lib(op_name)
    rng = np.random.default_rng(2000 + OPS.index(op_name))
    m, kd, n = 17, 33, 33
    for cls in ("nans", "denormal", "zeros", "specials", "mixed"):
        c, a, b = operands(op_name, m, kd, n, cls, rng)
        got = matmul_native(op_name, a, b, c, kd, 1)
        assert_same_bits(got, schedule_reference(op_name, c, a, b, kd), f"{op_name} {cls}")
    if op_name in ("tdpbf16ps", "tdpfp16ps"):
        # whole operands of one special each: every output a NaN with a chosen payload, or a signed zero
        for a_val, b_val, c_val in ((0x7FC1, 0x3F80, 0x7F800123), (0x8000, 0x3F80, 0x80000000),
                                    (0x0001, 0x0001, 0x00000001), (0xFF80, 0x0000, 0x3F800000)):
            c = np.full((m, n), c_val, dtype=np.uint32)
            a = np.full((m, 2 * kd), a_val, dtype=np.uint16)
            b = np.full((kd, 2 * n), b_val, dtype=np.uint16)
            got = matmul_native(op_name, a, b, c, kd, 1)
            assert_same_bits(got, schedule_reference(op_name, c, a, b, kd), f"{op_name} {a_val:#x} {b_val:#x}")


@pytest.mark.parametrize("op_name", ("tdpbf16ps", "tdpfp16ps", "tdpbsud"))
def test_kernel_matches_the_exact_rational_reference(op_name, group_lib):
    """The schedule built from tests/reference.py (Fractions, written from the spec), not from pyamx."""
    import reference

    group_lib(op_name)
    rng = np.random.default_rng(3000 + OPS.index(op_name))
    m, kd, n = 3, 33, 17  # two tile columns, three K blocks (the last one partial)
    c, a, b = operands(op_name, m, kd, n, "mixed", rng)
    lanes = native.OPS[op_name][2]
    want = c.tolist()
    for k0 in range(0, kd, 16):
        k1 = min(k0 + 16, kd)
        ta, tb = a[:, lanes * k0 : lanes * k1], b[k0:k1]
        if op_name == "tdpbf16ps":
            want = reference.tdpbf16ps(want, ta, tb)
        elif op_name == "tdpfp16ps":
            want = reference.tdpfp16ps(want, ta, tb)
        else:
            want = reference.tdpb_int8(True, False, want, ta, tb)
    want = np.array(want, dtype=np.int64).astype(c.dtype)
    assert_same_bits(matmul_native(op_name, a, b, c, kd, 1), want, f"{op_name} vs the rational reference")


def test_inputs_are_not_modified_and_c_dtype_is_kept(group_lib):
    group_lib("tdpbf16ps")
    rng = np.random.default_rng(5)
    c, a, b = operands("tdpbf16ps", 15, 17, 17, "normal", rng)
    copies = [x.copy() for x in (c, a, b)]
    c_float = c.view(np.float32)
    got = matmul_native("tdpbf16ps", a, b, c_float, 17, 1)
    assert got.dtype == np.float32 and got.flags.c_contiguous and got is not c_float
    for before, after in zip(copies, (c, a, b)):
        assert np.array_equal(before, after)
    assert_same_bits(got, schedule_reference("tdpbf16ps", c, a, b, 17), "float32 accumulator")


@pytest.mark.parametrize("m", (17, 33))  # B read in place (one block row) and through the kernel's packed copy
def test_row_strided_operands_give_the_same_bits(m, group_lib):
    """Views into wider arrays (row stride larger than a row) are read through the strides, not copied."""
    group_lib("tdpbssd")
    rng = np.random.default_rng(6)
    c, a, b = operands("tdpbssd", m, 17, 15, "mixed", rng)
    wide_a = np.zeros((m, 4 * 17 + 12), dtype=np.uint8)
    wide_a[:, 4:4 + 4 * 17] = a
    wide_b = np.full((17, 4 * 15 + 20), 0xAB, dtype=np.uint8)
    wide_b[:, : 4 * 15] = b
    got = matmul_native("tdpbssd", wide_a[:, 4:4 + 4 * 17], wide_b[:, : 4 * 15], c, 17, 1)
    assert_same_bits(got, schedule_reference("tdpbssd", c, a, b, 17), "strided")


def _placed(x, offset):
    """``x``'s bytes in a new array whose first byte sits ``offset`` bytes past a 64-byte boundary."""
    raw = np.zeros(x.nbytes + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    view = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    view[...] = x
    return view


@pytest.mark.parametrize("op_name", ("tdpbf16ps", "tdpbuud"))
def test_a_anywhere_mod_64_gives_the_same_bits(op_name, group_lib):
    """A with 64-byte aligned rows is loaded in place, any other A through the kernel's aligned strip copy."""
    group_lib(op_name)
    rng = np.random.default_rng(19)
    m, kd, n = 40, 33, 40  # row pitch 132 bytes: 64-byte aligned rows need a padded stride
    c, a, b = operands(op_name, m, kd, n, "mixed", rng)
    want = schedule_reference(op_name, c, a, b, kd)
    pitch = 192  # bytes: a multiple of 64, so an aligned start gives aligned rows
    wide = np.zeros((m, pitch // a.itemsize), dtype=a.dtype)
    wide[:, : a.shape[1]] = a
    for offset in (0, 2, 16, 48):
        placed = _placed(wide, offset)[:, : a.shape[1]]
        for threads in (1, 2):
            assert_same_bits(matmul_native(op_name, placed, b, c, kd, threads), want, f"A at {offset} mod 64")
        assert_same_bits(matmul_native(op_name, _placed(a, offset), b, c, kd, 1), want, f"dense A at {offset}")


# -- threads -----------------------------------------------------------------------


@pytest.mark.parametrize("op_name", ("tdpbf16ps", "tdpbusd"))
def test_three_threads_give_the_bits_of_one(op_name, group_lib):
    ffi, lib = group_lib(op_name)
    rng = np.random.default_rng(7)
    m, kd, n = 70, 17, 65  # 3 x 3 blocks of 32 x 32 with edge blocks in both directions
    c, a, b = operands(op_name, m, kd, n, "mixed", rng)
    one = matmul_native(op_name, a, b, c, kd, 1)
    three = matmul_native(op_name, a, b, c, kd, 3)
    assert_same_bits(three, one, "threads=3 vs threads=1")
    assert_same_bits(one, schedule_reference(op_name, c, a, b, kd), "threads=1 vs schedule")
    # more threads than 32 x 32 blocks (one here): the surplus is never started
    lanes = native.OPS[op_name][2]
    sub_c, sub_a, sub_b = np.ascontiguousarray(c[:20, :30]), a[:20], np.ascontiguousarray(b[:, : lanes * 30])
    assert_same_bits(matmul_native(op_name, sub_a, sub_b, sub_c, kd, 5),
                     schedule_reference(op_name, sub_c, sub_a, sub_b, kd), "threads=5, one block")


@pytest.mark.parametrize("op_name", ("tdpbf16ps", "tdpfp16ps", "tdpbsud"))
def test_cache_panels_do_not_change_a_bit(op_name, group_lib):
    """K panels store C and reload it between K ranges; N panels reorder blocks: the bits stay."""
    group_lib(op_name)
    rng = np.random.default_rng(17)
    m, kd, n = 70, 50, 100  # 3 block rows, 4 block columns, 3 full K blocks and a remainder
    c, a, b = operands(op_name, m, kd, n, "mixed", rng)
    want = schedule_reference(op_name, c, a, b, kd)
    assert_same_bits(matmul_native(op_name, a, b, c, kd, 1), want, "default panels")
    for panels, threads in (((1, 1), 1), ((2, 1), 3), ((1, 3), 2), ((2, 2), 5)):
        got = matmul_native(op_name, a, b, c, kd, threads, panels=panels)
        assert_same_bits(got, want, f"panels={panels} threads={threads}")


def test_concurrent_calls_from_several_python_threads_keep_their_own_tiles(group_lib):
    """Tile registers are per thread: four callers at once, each with workers, each get their own bits."""
    group_lib("tdpbf16ps")
    rng = np.random.default_rng(18)
    cases = [operands("tdpbf16ps", 40 + 7 * i, 17 + i, 33 + 5 * i, "mixed", rng) for i in range(4)]
    wants = [schedule_reference("tdpbf16ps", c, a, b, a.shape[1] // 2) for c, a, b in cases]
    results = [None] * 4
    barrier = threading.Barrier(4)

    def run(i):
        c, a, b = cases[i]
        barrier.wait()
        results[i] = [matmul_native("tdpbf16ps", a, b, c, a.shape[1] // 2, 2) for _ in range(3)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, want in enumerate(wants):
        for got in results[i]:
            assert_same_bits(got, want, f"caller {i}")


def _settled_slots(lib):
    """The trap's slots in use once threads of earlier tests have ended (a slot is freed as its OS
    thread ends, which can be after join() returned): the count held still for 0.2 s."""
    before, still_since = lib.pyamx_trap_slots_in_use(), time.monotonic()
    deadline = still_since + 5
    while time.monotonic() - still_since < 0.2 and time.monotonic() < deadline:
        time.sleep(0.01)
        now = lib.pyamx_trap_slots_in_use()
        if now != before:
            before, still_since = now, time.monotonic()
    return before


def test_pool_workers_persist_and_release_their_trap_state_when_the_pool_stops(trap_lib):
    """Workers are created once and reused (no thread per call); in trap mode each holds an emulated
    tile state slot while it lives, and stopping the pool (atexit) joins them and frees every slot."""
    lib = trap_lib
    _, kernels = native._lib()
    rng = np.random.default_rng(8)
    c, a, b = operands("tdpbf16ps", 64, 2, 64, "normal", rng)  # 4 blocks: 3 workers + the caller
    matmul_native("tdpbf16ps", a, b, c, 2, 1)  # the calling thread's own slot is claimed
    assert kernels.pyamx_pool_shutdown() >= 0
    assert kernels.pyamx_pool_workers() == 0
    before = _settled_slots(lib)
    for _ in range(5):
        got = matmul_native("tdpbf16ps", a, b, c, 2, 4)
        assert kernels.pyamx_pool_workers() == 3
        assert before <= lib.pyamx_trap_slots_in_use() <= before + 3
    assert_same_bits(got, schedule_reference("tdpbf16ps", c, a, b, 2), "threads=4")
    assert kernels.pyamx_pool_shutdown() == 3
    assert kernels.pyamx_pool_workers() == 0
    assert lib.pyamx_trap_slots_in_use() == before
    assert_same_bits(matmul_native("tdpbf16ps", a, b, c, 2, 4), got, "a pool created again")


def test_a_forked_child_gets_its_own_pool(group_lib):
    """fork() copies only the forking thread: the child must not wait for the parent's workers."""
    group_lib("tdpbf16ps")
    rng = np.random.default_rng(18)
    c, a, b = operands("tdpbf16ps", 70, 17, 40, "mixed", rng)
    want = matmul_native("tdpbf16ps", a, b, c, 17, 3)  # the parent's workers exist now
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's atexit or finalizers
        try:
            _, kernels = native._lib()
            inherited = kernels.pyamx_pool_workers()  # the parent's workers did not come along
            got = matmul_native("tdpbf16ps", a, b, c, 17, 3)
            same = np.array_equal(got.view(np.uint32), want.view(np.uint32))
            os.write(write_end, f"{inherited} {kernels.pyamx_pool_workers()} {same}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            answer = pipe.read()
    finally:
        _, status = os.waitpid(pid, 0)
    assert answer == b"0 2 True" and os.waitstatus_to_exitcode(status) == 0


def test_threads_none_uses_the_default_and_gives_the_same_bits(group_lib):
    group_lib("tdpbuud")
    rng = np.random.default_rng(15)
    c, a, b = operands("tdpbuud", 40, 3, 70, "mixed", rng)
    assert _native_matmul.default_threads() >= 1
    assert_same_bits(matmul_native("tdpbuud", a, b, c, 3, None), matmul_native("tdpbuud", a, b, c, 3, 1), "None")


def test_workers_without_trap_state_leave_their_blocks_to_the_caller(trap_lib):
    """With the trap's per-thread table full, workers cannot run tile code: the caller does their blocks."""
    lib = trap_lib
    rng = np.random.default_rng(16)
    c, a, b = operands("tdpbf16ps", 64, 17, 64, "mixed", rng)  # 4 blocks
    want = schedule_reference("tdpbf16ps", c, a, b, 17)
    native._before_entry()  # this thread's own slot first
    release = threading.Event()
    codes = []
    ready = threading.Semaphore(0)

    def hold():
        codes.append(lib.pyamx_trap_thread_prepare())
        ready.release()
        release.wait()

    holders = []
    try:
        while not codes or codes[-1] == 0:
            assert len(holders) < 400, "the trap's table never filled"
            holders.append(threading.Thread(target=hold))
            holders[-1].start()
            ready.acquire()
        assert codes[-1] == lib.PYAMX_TRAP_E_TABLE_FULL
        full = lib.pyamx_trap_slots_in_use()
        got = matmul_native("tdpbf16ps", a, b, c, 17, 4)
        assert lib.pyamx_trap_slots_in_use() == full
    finally:
        release.set()
        for holder in holders:
            holder.join()
    assert_same_bits(got, want, "threads=4 with no free trap slot")


def test_the_gil_is_released_while_the_kernel_runs(group_lib):
    """Python bytecode of another thread runs between the start and the end of one kernel call.

    With the GIL held across the call no other thread could execute a single
    bytecode in that window, so a tick stamped inside it proves the release.
    """
    ffi, lib = group_lib("tdpbf16ps")
    from pyamx.cpu import detect

    # Long enough for the other thread to be scheduled: ~4600 trapped instructions, or ~17 GFLOP on silicon.
    m, kd, n = (256, 128, 256) if detect.report().mode == "trap" else (2048, 1024, 2048)
    a = np.full((m, 2 * kd), 0x3F80, dtype=np.uint16)
    b = np.full((kd, 2 * n), 0x3F80, dtype=np.uint16)
    c = np.zeros((m, n), dtype=np.uint32)
    windows = []
    stop = threading.Event()

    def call():
        native._before_entry()
        for _ in range(5):
            t0 = time.perf_counter()
            rc = lib.pyamx_matmul_amx(lib.PYAMX_OP_TDPBF16PS, m, n, kd, ffi.cast("void *", a.ctypes.data), 4 * kd,
                                      ffi.cast("void *", b.ctypes.data), 4 * n,
                                      ffi.cast("uint32_t *", c.ctypes.data), 4 * n, 1)
            windows.append((t0, time.perf_counter(), rc))
        stop.set()

    ticks = []
    worker = threading.Thread(target=call)
    worker.start()
    while not stop.is_set():
        ticks.append(time.perf_counter())
    worker.join()
    assert all(rc == lib.PYAMX_OK for _, _, rc in windows)
    ticks = np.array(ticks)
    inside = sum(int(((ticks > t0) & (ticks < t1)).sum()) for t0, t1, _ in windows)
    assert inside > 0, f"no bytecode of another thread ran during {len(windows)} kernel calls"
    # c accumulated in place: 1.0 . 1.0 over K = 2 * kd per call, exact in fp32
    assert (c.view(np.float32) == np.float32(len(windows) * 2 * kd)).all()


# -- the caller's tile state ----------------------------------------------------------


def test_callers_native_machine_keeps_its_tiles_and_config(group_lib):
    group_lib("tdpbf16ps")
    machine = native.NativeMachine()
    cfg = bytearray(64)
    cfg[0] = 1
    for t, (rows, colsb) in enumerate(((16, 64), (3, 12), (16, 64), (0, 0), (7, 40), (1, 4), (16, 64), (2, 8))):
        cfg[16 + 2 * t] = colsb
        cfg[48 + t] = rows
    machine.ldtilecfg(bytes(cfg))
    rng = np.random.default_rng(10)
    for t in (0, 1, 2, 4, 5, 6, 7):
        machine.tileloadd(t, rng.integers(0, 256, (16, 64), dtype=np.uint8), 64)
    before = machine.snapshot()
    c, a, b = operands("tdpbf16ps", 33, 17, 17, "normal", rng)
    got = matmul_native("tdpbf16ps", a, b, c, 17, 3)
    after = machine.snapshot()
    assert after[0] == before[0]
    assert np.array_equal(after[1], before[1])
    assert_same_bits(got, schedule_reference("tdpbf16ps", c, a, b, 17), "with a live NativeMachine")
    machine.tilerelease()


def test_a_fresh_thread_is_left_in_the_init_state(trap_lib):
    lib = trap_lib
    rng = np.random.default_rng(11)
    c, a, b = operands("tdpbf16ps", 17, 17, 17, "normal", rng)
    seen = {}

    def call():
        matmul_native("tdpbf16ps", a, b, c, 17, 1)
        cfg = np.full(64, 0xEE, dtype=np.uint8)
        tiles = np.full(8192, 0xEE, dtype=np.uint8)
        seen["has_state"] = lib.pyamx_trap_thread_state(_ptr(cfg), _ptr(tiles))
        seen["cfg"], seen["tiles"] = cfg, tiles

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert seen["has_state"] == 1  # the thread did run tile instructions
    assert not seen["cfg"].any() and not seen["tiles"].any()


def test_pending_start_row_is_refused_before_anything_runs(group_lib):
    group_lib("tdpbf16ps")
    machine = native.NativeMachine()
    cfg = bytearray(64)
    cfg[0], cfg[1] = 1, 5
    cfg[16], cfg[48] = 64, 16
    machine.ldtilecfg(bytes(cfg))
    rng = np.random.default_rng(12)
    c, a, b = operands("tdpbf16ps", 3, 2, 3, "normal", rng)
    with pytest.raises(BackendError, match="start_row"):
        matmul_native("tdpbf16ps", a, b, c, 2, 1)
    assert machine.sttilecfg()[1] == 5
    machine.tilerelease()


# -- instruction counts: the schedule's shape, one LDTILECFG per configuration --------


def _expected_counts(m, kd, n, k_panel):
    """Tile instructions of one threads=1 call from a thread in the init state, from the schedule.

    C is loaded and stored once per K panel of full 16-dword blocks and once
    for the partial last block; each K-block size needs its own configuration.
    """
    tm, tn = -(-m // 16), -(-n // 16)
    bm, bn = -(-m // 32), -(-n // 32)
    kblocks = -(-kd // 16)
    visits = -(-(kd // 16) // k_panel) + (kd % 16 != 0)
    configs = (kd >= 16) + (kd % 16 != 0)
    row_kinds = len({(min(16, m - 32 * i), max(0, min(16, m - 32 * i - 16))) for i in range(bm)})
    col_kinds = len({(min(16, n - 32 * j), max(0, min(16, n - 32 * j - 16))) for j in range(bn)})
    return {
        "STTILECFG": 1,  # saving the caller's state
        "LDTILECFG": configs * row_kinds * col_kinds,
        "TILELOADD": visits * tm * tn + kblocks * (tm * bn + tn * bm),  # C per visit; A and B per K block
        "TILESTORED": visits * tm * tn,
        "DOT": tm * tn * kblocks,
        "TILERELEASE": 1,  # back to the init state
    }


@pytest.mark.parametrize("m,kd,n,k_panel", [(1, 1, 1, None), (33, 33, 33, None), (64, 16, 64, None),
                                             (70, 20, 17, None), (33, 81, 40, 2), (17, 64, 17, 1)])
def test_instruction_counts_follow_the_schedule(m, kd, n, k_panel, trap_lib, group_lib):
    ffi, ids = group_lib("tdpbf16ps")  # the op ids: the one numbering, in pyamx._native
    lib = trap_lib
    rng = np.random.default_rng(13)
    c, a, b = operands("tdpbf16ps", m, kd, n, "normal", rng)
    names = ("STTILECFG", "LDTILECFG", "TILELOADD", "TILESTORED", "TILERELEASE", "TDPBF16PS")
    counts = {}

    def call():
        before = {x: lib.pyamx_trap_op_count(getattr(ids, f"PYAMX_OP_{x}")) for x in names}
        matmul_native("tdpbf16ps", a, b, c, kd, 1, panels=None if k_panel is None else (k_panel, 1))
        counts.update({x: lib.pyamx_trap_op_count(getattr(ids, f"PYAMX_OP_{x}")) - before[x] for x in names})

    thread = threading.Thread(target=call)  # a fresh thread: no tile state to save and restore
    thread.start()
    thread.join()
    counts["DOT"] = counts.pop("TDPBF16PS")
    assert counts == _expected_counts(m, kd, n, k_panel or ids.PYAMX_MATMUL_K_PANEL)


# -- bad arguments ----------------------------------------------------------------------


def test_python_side_rejects_bad_arguments_before_any_c_call(group_lib):
    group_lib("tdpbf16ps")
    rng = np.random.default_rng(14)
    c, a, b = operands("tdpbf16ps", 4, 3, 5, "normal", rng)
    with pytest.raises(ValueError, match="unknown instruction"):
        matmul_native("tdpbf17ps", a, b, c, 3, 1)
    with pytest.raises(TypeError, match="numpy array"):
        matmul_native("tdpbf16ps", a.tolist(), b, c, 3, 1)
    with pytest.raises(TypeError, match="2-byte"):
        matmul_native("tdpbf16ps", a.astype(np.uint32), b, c, 3, 1)
    with pytest.raises(TypeError, match="4-byte"):
        matmul_native("tdpbf16ps", a, b, c.astype(np.uint16), 3, 1)
    with pytest.raises(TypeError, match="1-byte"):
        matmul_native("tdpbssd", a, b, c, 3, 1)  # int8 ops take bytes
    with pytest.raises(TypeError, match="byte order"):
        matmul_native("tdpbf16ps", a.astype(">u2"), b, c, 3, 1)
    with pytest.raises(ValueError, match="shapes do not fit"):
        matmul_native("tdpbf16ps", a, b, c, 2, 1)
    with pytest.raises(ValueError, match="shapes do not fit"):
        matmul_native("tdpbf16ps", a, b[:, :8], c, 3, 1)
    with pytest.raises(ValueError, match="2-D"):
        matmul_native("tdpbf16ps", a[None], b, c, 3, 1)
    with pytest.raises(ValueError, match="contiguous"):
        matmul_native("tdpbf16ps", np.repeat(a, 2, axis=1)[:, ::2], b, c, 3, 1)
    with pytest.raises(ValueError, match="overlap"):
        matmul_native("tdpbf16ps", np.lib.stride_tricks.as_strided(a, strides=(2, 2)), b, c, 3, 1)
    with pytest.raises(ValueError, match="overlap"):
        matmul_native("tdpbf16ps", a[::-1], b, c, 3, 1)
    with pytest.raises(ValueError, match="at least 1 x 1"):
        matmul_native("tdpbf16ps", a[:0], b, c[:0], 3, 1)
    # threads is checked once, by the public entry (pyamx._threads.check), before anything runs;
    # the C entry refuses a count outside 1..PYAMX_MATMUL_MAX_THREADS by itself (test below)
    a16, b16 = a.view(np.uint16)[:, :5], np.zeros((5, 2), np.uint16)
    for threads in (0, -1, 257, True, 1.0, "2"):
        with pytest.raises(ValueError, match="threads"):
            pyamx.matmul(a16, b16, backend="native", threads=threads)
    with pytest.raises(ValueError, match="k_dwords"):
        matmul_native("tdpbf16ps", a[:, :0], b[:0], c, 0, 1)
    with pytest.raises(ValueError, match="k_panel"):
        matmul_native("tdpbf16ps", a, b, c, 3, 1, panels=(0, 1))
    with pytest.raises(TypeError, match="panels"):
        matmul_native("tdpbf16ps", a, b, c, 3, 1, panels=[1, 1])


def test_c_side_rejects_bad_arguments_without_touching_memory(group_lib):
    ffi, lib = group_lib("tdpbf16ps")
    E_ARG = lib.PYAMX_E_ARG
    a = np.zeros((4, 8), dtype=np.uint16)  # M=4, Kd=4
    b = np.zeros((4, 10), dtype=np.uint16)  # N=5
    c = np.full((4, 5), 0xDEADBEEF, dtype=np.uint32)
    pa, pb, pc = (ffi.cast("void *", x.ctypes.data) for x in (a, b, c))
    ok = dict(op=lib.PYAMX_OP_TDPBF16PS, m=4, n=5, kd=4, a=pa, lda=16, b=pb, ldb=20, c=pc, ldc=20, threads=1,
              kp=1, np_=1)

    def call(**change):
        args = {**ok, **change}
        return lib.pyamx_matmul_amx_panels(args["op"], args["m"], args["n"], args["kd"], args["a"], args["lda"],
                                           args["b"], args["ldb"], ffi.cast("uint32_t *", args["c"]), args["ldc"],
                                           args["threads"], args["kp"], args["np_"])

    big = 2**62
    bad = [
        dict(op=lib.PYAMX_OP_TILEZERO), dict(op=max(i.op_id for i in isa.TABLE) + 1), dict(op=-1), dict(op=0),
        dict(op=2**31 - 1), dict(op=-(2**31)),
        dict(m=0), dict(n=0), dict(kd=0), dict(m=-3), dict(n=big), dict(kd=big),
        dict(lda=15), dict(ldb=19), dict(ldc=19), dict(lda=-16),
        dict(m=2**40, lda=2**30), dict(kd=4, lda=2**62),
        dict(a=ffi.NULL), dict(b=ffi.NULL), dict(c=ffi.NULL),
        dict(threads=0), dict(threads=lib.PYAMX_MATMUL_MAX_THREADS + 1), dict(kp=0), dict(np_=0), dict(np_=-1),
    ]
    native._before_entry()
    for change in bad:
        assert call(**change) == E_ARG, change
        assert (c == 0xDEADBEEF).all(), change
    assert lib.pyamx_matmul_amx(lib.PYAMX_OP_TDPBF16PS, 0, 5, 4, pa, 16, pb, 20, ffi.cast("uint32_t *", pc), 20,
                                1) == E_ARG
    assert (c == 0xDEADBEEF).all()
    assert call() == lib.PYAMX_OK  # the same arguments, unchanged, are fine: 0 + 0 . 0 keeps c
    assert (c == 0xDEADBEEF).all()


def test_kernel_refuses_before_detection_and_permission_said_yes():
    """In a process that never asked for permission the C entry answers E_NOT_READY and runs nothing."""
    code = (
        "import numpy as np\n"
        "from pyamx.cpu import _nativelib\n"
        "ffi, lib = _nativelib.load()\n"
        "c = np.zeros((1, 1), np.uint32); a = np.zeros((1, 2), np.uint16); b = np.zeros((1, 2), np.uint16)\n"
        "p = lambda x: ffi.cast('void *', x.ctypes.data)\n"
        "rc = lib.pyamx_matmul_amx(lib.PYAMX_OP_TDPBF16PS, 1, 1, 1, p(a), 4, p(b), 4,"
        " ffi.cast('uint32_t *', p(c)), 4, 1)\n"
        "print(rc == lib.PYAMX_E_NOT_READY or (rc == lib.PYAMX_E_NO_KERNEL and lib.pyamx_build_kernels() == 0))\n"
    )
    try:
        from pyamx.cpu import _nativelib

        _nativelib.load()
    except ImportError as exc:
        pytest.skip(f"no compiled extension: {exc}")
    env = child_env(drop=("PYAMX_TRAP_EMULATION", "PYAMX_BACKEND"))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=PYAMX_HOME, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("op_name", ("tdpbf16ps", "tdpbssd"))
def test_the_peak_probe_runs_a_chain_of_exactly_count_dot_products(op_name, trap_lib, group_lib):
    """benchmarks/bench_native.py's peak probe: `count` chained dot products and one configuration."""
    ffi, ids = group_lib(op_name)
    lib = trap_lib
    op = getattr(ids, f"PYAMX_OP_{op_name.upper()}")
    elapsed = ffi.new("int64_t *")
    native._before_entry()
    assert ids.pyamx_matmul_peak_probe(op, 0, elapsed) == ids.PYAMX_E_ARG
    assert ids.pyamx_matmul_peak_probe(ids.PYAMX_OP_LDTILECFG, 1, elapsed) == ids.PYAMX_E_ARG
    before = {x: lib.pyamx_trap_op_count(x) for x in (op, ids.PYAMX_OP_LDTILECFG)}
    assert ids.pyamx_matmul_peak_probe(op, 37, elapsed) == ids.PYAMX_OK
    assert lib.pyamx_trap_op_count(op) - before[op] == 37
    assert lib.pyamx_trap_op_count(ids.PYAMX_OP_LDTILECFG) - before[ids.PYAMX_OP_LDTILECFG] >= 1
    assert elapsed[0] > 0


def test_the_pool_is_joined_at_interpreter_exit(group_lib):
    """An atexit hook registered before pyamx's runs after it: by then the workers are joined."""
    group_lib("tdpbf16ps")
    code = (
        "import atexit, numpy as np\n"
        "from pyamx.cpu import native\n"
        "from pyamx.cpu._native_matmul import matmul_native\n"
        "atexit.register(lambda: print('workers at exit', native._lib()[1].pyamx_pool_workers()))\n"
        "c = np.zeros((64, 64), np.float32); a = np.zeros((64, 2), np.uint16); b = np.zeros((1, 128), np.uint16)\n"
        "matmul_native('tdpbf16ps', a, b, c, 1, 4)\n"
        "print('workers after the call', native._lib()[1].pyamx_pool_workers())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=PYAMX_HOME, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["workers after the call 3", "workers at exit 0"]
