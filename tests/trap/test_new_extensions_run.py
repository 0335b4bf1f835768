"""A program using AMX-FP8, AMX-COMPLEX, AMX-AVX512 and AMX-MOVRS, run under ``pyamx run``, equals the emulator.

tests/programs/new_extensions.c runs each case with the real instruction
bytes. Where the CPU has an extension, that is silicon; on AMX silicon
without it (a Sapphire Rapids), ``pyamx run``'s complement mode emulates it
on the tile registers the kernel saved in the signal frame; without AMX the
trap mode emulates everything. Either way every result must equal
``pyamx.<mnemonic>(..., backend="emulator")`` bit for bit, on random data and
on data built from each format's special codes. A mismatch prints the
operands.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyamx
from childproc import pyamx_run
from pyamx.table import isa

DOTS = ("tdpbf8ps", "tdpbhf8ps", "tdphbf8ps", "tdphf8ps", "tcmmimfp16ps", "tcmmrlfp16ps", "tdpfp16ps")
LOADS = ("tileloaddrs", "tileloaddrst1")
ROWS = tuple(insn.name for insn in isa.TABLE if insn.is_row)


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("new_extensions", "-O1", optional=True, needs_run=True)


def run_cases(program, lines, *args):
    proc = pyamx_run("--", program, *args, input="".join(line + "\n" for line in lines), timeout=300)
    assert proc.returncode == 0, proc.stderr
    answers = proc.stdout.split()
    assert len(answers) == len(lines), proc.stderr
    return answers, proc.stderr


def _special_bytes(fmt) -> np.ndarray:
    return np.array(fmt.special_values, dtype=np.uint8)


def operand_bytes(rng, fmt, shape, mode: str) -> np.ndarray:
    """Bytes of an operand: every code at random, finite codes only, or mostly the format's specials."""
    count = int(np.prod(shape))
    if fmt.name in ("cfp16", "fp16"):
        halves = rng.integers(0, 1 << 16, size=2 * count, dtype=np.uint32).astype(np.uint16)
        if mode == "finite":
            halves &= np.uint16(0xBBFF)  # exponent field below 31: no Inf or NaN
        elif mode == "special":
            pool = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF,
                             0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE05, 0x6400, 0xE400], dtype=np.uint16)
            halves = np.where(rng.random(2 * count) < 0.7, rng.choice(pool, 2 * count), halves)
        return halves.view(np.uint8)
    codes = rng.integers(0, 256, size=count * 4, dtype=np.uint16).astype(np.uint8)
    if mode == "finite":
        nan_or_inf = (codes & 0x7F) >= (0x7C if fmt.name == "bf8" else 0x7F)
        codes = np.where(nan_or_inf, codes & 0x3F, codes)
    elif mode == "special":
        codes = np.where(rng.random(codes.size) < 0.5, rng.choice(_special_bytes(fmt), codes.size), codes)
    return codes


def c_bytes(rng, shape, mode: str) -> np.ndarray:
    if mode == "special":
        pool = np.array([0, 0x80000000, 0x00000001, 0x80000001, 0x7F800000, 0xFF800000, 0x7FC00000,
                         0x7F7FFFFF, 0x3F800000, 0xBF800000], dtype=np.uint32)
        values = rng.choice(pool, shape)
    else:
        values = (rng.standard_normal(shape) * 4).astype(np.float32).view(np.uint32)
    return values.astype("<u4").view(np.uint8)


def make_case(rng, name: str, mode: str):
    insn = isa.get(name)
    m, k, n = (int(x) for x in rng.integers(1, 17, size=3))
    c = c_bytes(rng, (m, n), mode)
    a = operand_bytes(rng, insn.a_format, (m, k), mode)
    b = operand_bytes(rng, insn.b_format, (k, n), mode)
    return name, m, k, n, c, a, b


def line_of(case) -> str:
    name, m, k, n, c, a, b = case
    return f"{name} {m} {k} {n} {c.tobytes().hex()} {a.tobytes().hex()} {b.tobytes().hex()}"


def emulated(case) -> str:
    name, m, k, n, c, a, b = case
    insn = isa.get(name)
    cbits = c.view("<u4").reshape(m, n)
    if insn.a_format.name in ("cfp16", "fp16"):
        a_op = a.view("<u2").reshape(m, 2 * k)
        b_op = b.view("<u2").reshape(k, 2 * n)
    else:
        a_op = a.reshape(m, 4 * k)
        b_op = b.reshape(k, 4 * n)
    out = getattr(pyamx, name)(cbits, a_op, b_op, backend="emulator")
    return np.ascontiguousarray(np.asarray(out)).view("<u4").tobytes().hex()


@pytest.mark.parametrize("mode", ["random", "finite", "special"])
def test_dot_products_under_pyamx_run_equal_the_emulator(program, mode):
    rng = np.random.default_rng(["random", "finite", "special"].index(mode) + 17)
    cases = [make_case(rng, name, mode) for name in DOTS for _ in range(12)]
    answers, _ = run_cases(program, [line_of(case) for case in cases])
    for case, got in zip(cases, answers):
        want = emulated(case)
        assert got == want, f"{line_of(case)}\n  program: {got}\n  emulator: {want}"


def test_fp8_exact_sum_vector_and_every_code_pair(program):
    # amx-family.md 10.1: (2^15, 1, -2^15, 0) . (2^15, 1, 2^15, 0) is exactly 1, which any
    # rounded model loses. Then every pair of codes of each instruction's two formats: a case
    # is a 16 x 16 block of products x_i * y_n (lane 0 of A's row i and of B's dword n).
    cases = [("tdpbf8ps", 1, 1, 1, np.zeros(4, np.uint8), np.array([0x78, 0x3C, 0xF8, 0], np.uint8),
              np.array([0x78, 0x3C, 0x78, 0], np.uint8))]
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for name in ("tdpbf8ps", "tdpbhf8ps", "tdphbf8ps", "tdphf8ps"):
        for x in codes:
            for y in codes:
                a = np.zeros((16, 4), np.uint8)
                a[:, 0] = x
                b = np.zeros((1, 64), np.uint8)
                b[0, ::4] = y
                cases.append((name, 16, 1, 16, np.zeros(16 * 16 * 4, np.uint8), a.reshape(-1), b.reshape(-1)))
    answers, _ = run_cases(program, [line_of(case) for case in cases])
    assert answers[0] == "0000803f"
    for case, got in zip(cases, answers):
        assert got == emulated(case), line_of(case)


def test_movrs_loads_read_memory_as_tileloadd(program):
    rng = np.random.default_rng(5)
    cases = []
    for name in LOADS:
        for _ in range(6):
            m, k = (int(x) for x in rng.integers(1, 17, size=2))
            a = rng.integers(0, 256, size=m * k * 4, dtype=np.uint16).astype(np.uint8)
            cases.append((name, m, k, 1, np.zeros(m * 4, np.uint8), a, np.zeros(k * 4, np.uint8)))
    answers, _ = run_cases(program, [line_of(case) for case in cases])
    for case, got in zip(cases, answers):
        assert got == case[5].tobytes().hex()


@pytest.mark.parametrize("name", LOADS + ("tdpbf8ps",))
def test_first_tile_data_instruction_of_a_process_is_emulated_too(program, name):
    # Linux enlarges a task's FPU state at its first tile-data instruction; before that the
    # signal frame has no room for tile data (the complement mode then makes the kernel enlarge it).
    rng = np.random.default_rng(9)
    case = (name, 2, 2, 2, np.zeros(16, np.uint8), rng.integers(0, 120, size=16, dtype=np.uint16).astype(np.uint8),
            rng.integers(0, 120, size=16, dtype=np.uint16).astype(np.uint8))
    answers, _ = run_cases(program, [line_of(case)])
    want = case[5].tobytes().hex() if name in LOADS else emulated(case)
    assert answers == [want]


def test_without_the_permission_request_the_new_instructions_fault_as_on_silicon(program):
    rng = np.random.default_rng(3)
    cases = [make_case(rng, name, "finite") for name in DOTS]
    answers, stderr = run_cases(program, [line_of(case) for case in cases], "--no-permission")
    assert answers == ["UD"] * len(cases)


def _cpu_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512f" in f.read().split()
    except OSError:
        return True


def test_row_instructions_write_the_zmm_register_the_emulator_computes(program):
    # AMX-AVX512 writes a zmm register of the interrupted program: the handler puts it in the
    # signal frame's XSAVE image. Rows of int32/fp32 data with ties, denormals, NaNs and infinities.
    rng = np.random.default_rng(11)
    pool = np.array([0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFF812345, 0x00FFFFFF,
                     0x01000001, 0x7FFFFFFF, 0x33800001, 0x387FE000, 0x477FF000, 0x3F808000], dtype=np.uint32)
    cases = []
    for name in ROWS:
        for _ in range(8):
            m, k = (int(x) for x in rng.integers(1, 17, size=2))
            words = rng.integers(0, 2**32, size=m * k, dtype=np.uint64).astype(np.uint32)
            words = np.where(rng.random(words.size) < 0.5, rng.choice(pool, words.size), words)
            row = int(rng.integers(0, m))
            cases.append((name, m, k, row + 1, np.zeros(4 * m * (row + 1), np.uint8),
                          words.astype("<u4").view(np.uint8), np.zeros(4 * k * (row + 1), np.uint8)))
    answers, _ = run_cases(program, [line_of(case) for case in cases])
    if not _cpu_has_avx512():
        # No zmm registers to write: AMX-AVX512 exists only on CPUs with AVX-512, and the
        # emulation leaves a row instruction to SIGILL where the frame has no zmm state.
        assert set(answers) == {"UD"}, answers
        return
    for case, got in zip(cases, answers):
        name, m, k, n, _, a, _ = case
        machine = pyamx.TileMachine()
        machine.ldtilecfg(pyamx.TileConfig.make({1: (m, 4 * k)}))
        machine.tileloadd(1, a, stride=4 * k)
        want = np.asarray(getattr(machine, name)(1, n - 1)).astype("<u4").tobytes().hex()
        assert got == want, f"{line_of(case)}\n  program: {got}\n  emulator: {want}"
