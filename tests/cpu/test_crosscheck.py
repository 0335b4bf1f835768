"""Native against emulator, byte for byte (in the spirit of corsix/amx's test suite).

Seeded random tile configurations, memory and instruction sequences run on
``pyamx.emulator.TileMachine`` and ``pyamx.cpu.native.NativeMachine`` side by
side; after every step the whole tile state (STTILECFG image and all eight
tiles) and the memory the stores wrote must be identical, and a faulting
step must fault the same way on both. A failure prints the step, its
operands in hex and the differing bytes.

Skipped where native cannot run (the reason is the detection report's),
failed instead under PYAMX_REQUIRE_NATIVE=1 (see tests/conftest.py).

Knobs: PYAMX_CROSSCHECK_SEQUENCES (default 200), PYAMX_CROSSCHECK_SEED.
The steps include the #UD edges that silicon decides (docs/semantics.md
section 7): loads, stores and TILEZERO of unconfigured tiles, loads and
stores of tiles whose colsb is not a multiple of 4, start_row >= rows.
"""

from __future__ import annotations

import os
import resource
import warnings

import numpy as np
import pytest

from pyamx import _env, emulator
from pyamx.table import isa
from pyamx.emulator import PRESETS, instructions
from pyamx.errors import BackendError, GeneralProtectionFault, InvalidOpcodeFault
from pyamx.table.tilecfg import TileConfig

SEQUENCES = _env.integer("PYAMX_CROSSCHECK_SEQUENCES", 200)
SEED = _env.integer("PYAMX_CROSSCHECK_SEED", 20240611)
STEPS = 24
MEM_BYTES = 4096
STATS = {}  # (method, ran without fault) -> count, over the random sequences

# bf16 classes the numerics must agree on: zeros of both signs, denormals,
# the smallest normals, infinities, quiet and signalling NaNs with payloads,
# the largest finite values (overflow), 2^-12 and 2^-63 (products at 2^-24
# and 2^-126: ties and the FTZ boundary), and ordinary values.
BF16_SPECIAL = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x0081, 0x8081,
    0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7FC1, 0xFFE5, 0x7F81, 0xFF81, 0x7FA5, 0x7F7F,
    0xFF7F, 0x3F80, 0xBF80, 0x3F81, 0x4000, 0x3980, 0xB980, 0x2000, 0xA000, 0x1F80,
    0x2080, 0x3400,
]
FP32_SPECIAL = [
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
    0x80800000, 0x00800001, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0x7FA00123, 0xFFC00456, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F800001,
    0x34000000, 0x33800000, 0x00FFFFFF,
]
FP16_SPECIAL = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7C00, 0xFC00, 0x7E00,
    0xFE01, 0x7C01, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x3C01, 0x1400, 0x0C00,
]


def adversarial_memory(rng: np.random.Generator, nbytes: int) -> np.ndarray:
    """Bytes whose 16- and 32-bit lanes hit the fp classes above, plus exact negations."""
    words = rng.integers(0, 2**32, nbytes // 4, dtype=np.uint64).astype(np.uint32)
    kind = rng.integers(0, 6, words.size)
    pick16 = lambda table: np.array(table, dtype=np.uint32)[rng.integers(0, len(table), words.size)]  # noqa: E731
    bf_pair = pick16(BF16_SPECIAL) | (pick16(BF16_SPECIAL) << 16)
    # A narrow exponent band makes sums cancel and round to ties often.
    band = ((rng.integers(0, 2, words.size) << 15) | (rng.integers(124, 131, words.size) << 7)
            | rng.integers(0, 128, words.size)).astype(np.uint32)
    band2 = ((rng.integers(0, 2, words.size) << 15) | (rng.integers(124, 131, words.size) << 7)
             | rng.integers(0, 4, words.size)).astype(np.uint32)
    fp16_pair = pick16(FP16_SPECIAL) | (pick16(FP16_SPECIAL) << 16)
    fp32 = pick16(FP32_SPECIAL)
    words = np.select(
        [kind == 1, kind == 2, kind == 3, kind == 4],
        [bf_pair, band | (band2 << 16), fp16_pair, fp32],
        words,
    ).astype(np.uint32)
    # Exact cancellation: some words are sign-flipped copies of others.
    flip = rng.integers(0, words.size, words.size // 8)
    src = rng.integers(0, words.size, flip.size)
    words[flip] = words[src] ^ np.uint32(0x80008000)
    return words.view(np.uint8).copy()


# -- random configurations and steps --------------------------------------------------


def random_config(rng: np.random.Generator):
    """A palette-1 config with a dot-product triple, its roles, and sometimes a start_row."""
    m, k, n = (int(x) for x in rng.integers(1, 17, 3))
    roles = [int(t) for t in rng.permutation(8)[:3]]
    shapes = {}
    for t in range(8):
        if rng.random() < 0.6:
            shapes[t] = (int(rng.integers(1, 17)), int(rng.integers(1, 65)))
    dst, src1, src2 = roles
    shapes[dst], shapes[src1], shapes[src2] = (m, 4 * n), (m, 4 * k), (k, 4 * n)
    min_rows = min(r for r, _ in shapes.values())
    start_row = 0
    if rng.random() < 0.2:
        start_row = int(rng.integers(0, 17)) if rng.random() < 0.5 else int(rng.integers(0, min_rows))
    return TileConfig.make(shapes, start_row=start_row), tuple(roles)


def illegal_config(rng: np.random.Generator) -> bytes:
    image = bytearray(TileConfig.make({0: (1, 4)}).to_bytes())
    choice = rng.integers(0, 4)
    if choice == 0:
        image[0] = int(rng.integers(2, 256))  # palette
    elif choice == 1:
        image[int(rng.choice([2, 33, 60]))] = 1  # reserved byte
    elif choice == 2:
        image[16] = 65  # colsb > 64
    else:
        image[49] = 3  # rows without colsb
    return bytes(image)


def memory_operand(rng, cfg: TileConfig, tmm: int):
    """(stride, offset) for a load/store of ``tmm``; about 5% fall outside the buffer."""
    rows, colsb = (cfg.rows[tmm], cfg.colsb[tmm]) if 0 <= tmm < 8 else (1, 4)
    colsb = max(colsb, 1)
    stride = int(rng.choice([0, colsb, 64, colsb + int(rng.integers(0, 17)), -(colsb + int(rng.integers(0, 17))),
                             int(rng.integers(1, colsb + 1))]))
    first = min(cfg.start_row, rows)
    starts = [r * stride for r in range(first, rows)] or [0]
    lo, hi = -min(starts), MEM_BYTES - colsb - max(starts)
    if rng.random() < 0.05 or lo > hi:
        return stride, int(rng.choice([lo - 1, hi + 1, -1, MEM_BYTES]))
    return stride, int(rng.integers(lo, hi + 1))


def random_step(rng, state, groups, extensions=frozenset()):
    """One (method name, args) step; ``state`` holds the current config and roles. ``extensions``: the
    CPUID features beyond the kernel groups that native runs here (AMX-AVX512, AMX-MOVRS); without
    them the random stream is the same as before they existed."""
    cfg, roles = state["cfg"], state["roles"]
    configured = [t for t in range(8) if cfg.rows[t]] or [0]
    r = rng.random()
    if r < 0.05:
        new_cfg, new_roles = random_config(rng)
        state.update(cfg=new_cfg, roles=new_roles)
        return "ldtilecfg", (new_cfg.to_bytes(),)
    if r < 0.07:
        return "ldtilecfg", (illegal_config(rng),)
    if r < 0.09:
        state.update(cfg=TileConfig(), roles=roles)
        return "tilerelease", ()
    if r < 0.12:
        return "sttilecfg", ()
    if r < 0.45:
        tmm = int(rng.integers(0, 8)) if rng.random() < 0.2 else int(rng.choice(configured))
        if rng.random() < 0.02:
            tmm = 8
        stride, offset = memory_operand(rng, cfg, tmm)
        loads = ["tileloadd", "tileloaddt1"] + (["tileloaddrs", "tileloaddrst1"] if "AMX-MOVRS" in extensions else [])
        return str(rng.choice(loads)), (tmm, "mem", stride, offset)
    if r < 0.60:
        tmm = int(rng.integers(0, 8)) if rng.random() < 0.2 else int(rng.choice(configured))
        stride, offset = memory_operand(rng, cfg, tmm)
        return "tilestored", (tmm, "out", stride, offset)
    if r < 0.66:
        return "tilezero", (int(rng.integers(0, 8)) if rng.random() < 0.2 else int(rng.choice(configured)),)
    if r < 0.70:
        return "oneshot", ()
    if r < 0.76 and "AMX-AVX512" in extensions:
        tmm = int(rng.integers(0, 8)) if rng.random() < 0.2 else int(rng.choice(configured))
        imm = bool(rng.random() < 0.5)
        index = int(rng.integers(0, 17))  # 16: the #UD the native guard refuses before running
        chunk = int(rng.choice([0, 0, 0, 1, 3]))
        selector = (chunk << 6 | index) if imm else (chunk << 16 | index)
        return str(rng.choice(isa.ROW_NAMES)), (tmm, selector, imm)
    names = [name for group in sorted(groups) for name in _GROUP_NAMES[group] * (4 // len(_GROUP_NAMES[group]))]
    triple = roles if rng.random() < 0.9 else tuple(int(x) for x in rng.integers(0, 8, 3))
    return str(rng.choice(names)), triple


_GROUP_NAMES = {group: [i.name for i in isa.DOTS if i.group == group] for group in isa.GROUPS}


# -- running one step on both machines ----------------------------------------------


def _apply(machine, method, args, buffers):
    args = tuple(buffers[a] if isinstance(a, str) else a for a in args)
    try:
        if method in isa.ROW_NAMES:  # (tmm, selector, imm): the result's dwords, compared as bits
            tmm, selector, imm = args
            return None, tuple(int(x) for x in getattr(machine, method)(tmm, selector, imm=imm))
        return None, getattr(machine, method)(*args)
    except Exception as exc:  # faults are compared, not propagated
        return exc, None


def _hexrows(tile: np.ndarray, rows: int, colsb: int) -> str:
    return "\n".join(f"      row {r:2d}: {tile[r, :colsb].tobytes().hex()}" for r in range(rows))


def _describe(step_no, method, args, emu_before):
    cfg_bytes, tiles = emu_before
    cfg = TileConfig() if cfg_bytes[0] == 0 else _parse(cfg_bytes)
    lines = [f"step {step_no}: {method}{args!r}", f"  config before: {cfg_bytes.hex()}"]
    for a in args if method.startswith("tdp") else args[:1]:
        if isinstance(a, int) and 0 <= a < 8 and cfg.rows[a]:
            lines.append(f"  tmm{a} before ({cfg.rows[a]} x {cfg.colsb[a]} B):")
            lines.append(_hexrows(tiles[a], cfg.rows[a], cfg.colsb[a]))
    return "\n".join(lines)


def _parse(cfg_bytes):
    from pyamx.table.tilecfg import parse_tilecfg

    return parse_tilecfg(cfg_bytes)


def _diff(label, expected: np.ndarray, got: np.ndarray, limit=16) -> str:
    where = np.argwhere(expected != got)
    lines = [f"  {label}: {len(where)} bytes differ (emulator vs native)"]
    for idx in where[:limit]:
        idx = tuple(int(i) for i in idx)
        lines.append(f"    at {idx}: emulator 0x{int(expected[idx]):02x}  native 0x{int(got[idx]):02x}")
    return "\n".join(lines)


def _compare_state(emu, nat, bufs_e, bufs_n, context):
    emu_cfg, nat_cfg = emu.sttilecfg(), nat.sttilecfg()
    assert emu_cfg == nat_cfg, f"{context}\n  STTILECFG differs:\n    emulator {emu_cfg.hex()}\n    native   {nat_cfg.hex()}"
    if emu.config.start_row == 0:  # a snapshot would consume a pending start_row on native
        _, emu_tiles = emu.snapshot()
        _, nat_tiles = nat.snapshot()
        assert np.array_equal(emu_tiles, nat_tiles), f"{context}\n{_diff('tiles (tmm, row, byte)', emu_tiles, nat_tiles)}"
    assert np.array_equal(bufs_e["out"], bufs_n["out"]), f"{context}\n{_diff('stored memory', bufs_e['out'], bufs_n['out'])}"


def _oneshot_step(rng, native, emu, nat, context):
    m, k, n = (int(x) for x in rng.integers(1, 17, 3))
    data = adversarial_memory(rng, 4 * (m * n + m * k + k * n) + 4)
    c = data[: 4 * m * n].view(np.uint32).reshape(m, n).copy()
    a = data[4 * m * n : 4 * m * n + 4 * m * k].view(np.uint16).reshape(m, 2 * k).copy()
    b = data[4 * m * n + 4 * m * k : 4 * (m * n + m * k + k * n)].view(np.uint16).reshape(k, 2 * n).copy()
    if emu.config.start_row:
        with pytest.raises(BackendError):
            native.tdpbf16ps(c, a, b)
        return
    expected = instructions.tdpbf16ps(c, a, b, PRESETS["sdm"])
    got = native.tdpbf16ps(c, a, b)
    assert np.array_equal(expected, got), (
        f"{context}\n  one-shot TDPBF16PS {m}x{k}x{n} differs\n  c={c.tobytes().hex()}\n  a={a.tobytes().hex()}\n"
        f"  b={b.tobytes().hex()}\n{_diff('result bits (as bytes)', expected.view(np.uint8), got.view(np.uint8))}"
    )


# -- a fault must fault in C too ------------------------------------------------------
#
# Both machines raise their exceptions from the same Python rules (pyamx.table.tilecfg)
# before any C runs, so agreeing on them says nothing about the C side. A
# faulting step is therefore also replayed as a raw lib call, every Python
# check skipped, in a forked child (a fault there kills the child, not the
# tests): the kernels' own guards, which check each instruction against the
# configuration loaded in the registers (csrc/kernels.c), must refuse it with
# the status of the same fault (PYAMX_E_GP_CONFIG, PYAMX_E_UD_*) before it
# executes. (The trap handler's own fault mapping, the #UD as SIGILL and the
# #GP as SIGSEGV of docs/semantics.md section 6, is tested with the trap's
# self-test kernels in tests/trap/test_trap*.py.)

FAULT_CHECKS = {}  # (method, expected outcome) -> count, over the random sequences
_FAULT_BUDGET = 3  # children per (method, outcome): enough to prove the path, cheap enough to run always


#: pyamx_load_tile's hint argument per load
_LOAD_HINTS = {"tileloadd": 0, "tileloaddt1": 1, "tileloaddrs": 2, "tileloaddrst1": 3}


def _raw_step(ffi, lib, method, args, buf) -> int:
    ptr = ffi.cast("uint8_t *", buf.ctypes.data)
    if method == "ldtilecfg":
        return lib.pyamx_load_config(ffi.from_buffer("uint8_t[]", args[0]))
    if method in _LOAD_HINTS:
        return lib.pyamx_load_tile(args[0], ptr, buf.size, 0, 64, _LOAD_HINTS[method])
    if method in isa.ROW_NAMES:
        tmm, selector, imm = args
        kernel = lib.pyamx_tilerow_imm if imm else lib.pyamx_tilerow
        return kernel(isa.BY_NAME[method].op_id, tmm, selector, ffi.cast("uint32_t *", buf.ctypes.data))
    if method == "tilestored":
        return lib.pyamx_store_tile(args[0], ptr, buf.size, 0, 64)
    if method == "tilezero":
        return lib.pyamx_zero_tile(args[0])
    return lib.pyamx_tdp(isa.BY_NAME[method].op_id, *args)


def _raw_in_child(cfg: TileConfig, method, args):
    """``(outcome, stderr)`` of the raw step in a forked child.

    outcome: ``("status", rc)``, ``("signal", signo)`` or ``("exit", code)``.
    """
    import faulthandler

    from pyamx.cpu import _nativelib
    from pyamx.cpu import detect

    ffi, lib = _nativelib.load()
    trapped = detect.report().mode == "trap"
    buf = np.zeros(16 * 64 + 64, np.uint8)  # 16 rows of 64 bytes at stride 64: every load/store stays inside
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python >= 3.12 warns on fork() in a threaded process (an xdist worker has execnet's
        # threads); the child runs C and _exit()s, touching no lock those threads could hold.
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 97
        try:
            os.close(read_end)
            os.dup2(write_end, 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            # pytest's faulthandler would report the fault on its own fd; without it the
            # trap handler (reinstalled below) chains to the default action: death by the signal.
            faulthandler.disable()
            if trapped:
                from pyamx.cpu import trap

                trap.ensure_installed()  # pyamx._trap's, not _native's
            image = cfg.to_bytes()
            rc = lib.pyamx_release_tiles() if image[0] == 0 else lib.pyamx_load_config(ffi.from_buffer("uint8_t[]", image))
            code = 98 if rc != 0 else 0
            if rc == 0:
                rc = _raw_step(ffi, lib, method, args, buf)
                code = 100 - rc if rc < 0 else (99 if rc else 0)
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        stderr = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return ("signal", os.WTERMSIG(status)), stderr
    code = os.WEXITSTATUS(status)
    return (("status", 100 - code) if code > 100 else ("exit", code)), stderr


def _expected_in_c(lib, method, args, err):
    """What the raw call must return for a step the Python rules refused with ``err``; None: not comparable.

    The kernels check every instruction against the configuration loaded in
    the registers before executing it, so each fault is a distinct status
    and nothing reaches a #UD or #GP.
    """
    if isinstance(err, GeneralProtectionFault):
        return ("status", lib.PYAMX_E_GP_CONFIG)  # only LDTILECFG raises #GP: cfg_legal refuses every illegal image
    if not isinstance(err, InvalidOpcodeFault):
        return None  # MemoryAccessFault: the raw step uses its own buffer, in which every row fits
    if "not configured (palette 0" in err.rule:
        return ("status", lib.PYAMX_E_UD_UNCONFIGURED)
    if "palette 1 has tmm0..tmm7" in err.rule:
        return ("status", lib.PYAMX_E_UD_REGISTER)
    return ("status", lib.PYAMX_E_UD_SHAPE)


def _check_fault_in_c(cfg, method, args, err):
    from pyamx.cpu import _nativelib

    _, lib = _nativelib.load()
    expected = _expected_in_c(lib, method, args, err)
    if expected is None:
        return
    key = (method, expected)
    if FAULT_CHECKS.get(key, 0) >= _FAULT_BUDGET:
        return
    from pyamx.cpu import detect

    got, stderr = _raw_in_child(cfg, method, args)
    assert got == expected, (
        f"{method}{args!r} on config {cfg.to_bytes().hex()}: Python raised {err!r}; the raw C call gave {got}, "
        f"expected {expected}; child stderr: {stderr[-500:]}"
    )
    if expected[0] == "signal" and detect.report().mode == "trap":  # the trap handler decided it, not the CPU
        assert "#UD" in stderr, f"{method}{args!r}: the trap handler did not report a #UD: {stderr[-500:]}"
    FAULT_CHECKS[key] = FAULT_CHECKS.get(key, 0) + 1


def native_extensions() -> frozenset:
    """The features beyond the kernel groups (AMX-AVX512, AMX-MOVRS) whose instructions native runs here."""
    from pyamx.cpu import detect, native as native_module

    rep = detect.report()
    return frozenset(i.feature.name for i in isa.TABLE if i.feature.name in ("AMX-AVX512", "AMX-MOVRS")
                     and native_module.feature_missing(rep, i) is None)


def run_sequence(native, seed: int, groups, check_faults_in_c: bool = False) -> None:
    """One random sequence on both machines, compared after every step.

    ``check_faults_in_c``: replay faulting steps as raw C calls in a forked
    child (single-threaded callers only; see above).
    """
    rng = np.random.default_rng(seed)
    emu, nat = emulator.TileMachine(), native.NativeMachine()
    extensions = native_extensions()
    mem = adversarial_memory(rng, MEM_BYTES)
    bufs_e = {"mem": mem, "out": np.zeros(MEM_BYTES, np.uint8)}
    bufs_n = {"mem": mem.copy(), "out": np.zeros(MEM_BYTES, np.uint8)}
    cfg, roles = random_config(rng)
    state = {"cfg": cfg, "roles": roles}
    steps = [("ldtilecfg", (cfg.to_bytes(),))] + [None] * STEPS
    try:
        for i in range(len(steps)):
            method, args = steps[i] or random_step(rng, state, groups, extensions)
            context = f"seed {seed}, " + _describe(i, method, args, emu.snapshot())
            if method == "oneshot":
                _oneshot_step(rng, native, emu, nat, context)
            else:
                cfg_before = emu.config
                err_e, out_e = _apply(emu, method, args, bufs_e)
                err_n, out_n = _apply(nat, method, args, bufs_n)
                assert type(err_e) is type(err_n), (
                    f"{context}\n  emulator raised {err_e!r}\n  native raised   {err_n!r}"
                )
                if check_faults_in_c and err_e is not None:
                    _check_fault_in_c(cfg_before, method, args, err_e)
                state["cfg"] = emu.config  # what the next random step is generated against
                STATS[method, err_e is None] = STATS.get((method, err_e is None), 0) + 1
                assert out_e == out_n, f"{context}\n  results differ: emulator {out_e!r}, native {out_n!r}"
            _compare_state(emu, nat, bufs_e, bufs_n, context)
    finally:
        # A faulting step's exception keeps this frame, and so `nat`, alive in a reference
        # cycle; a pending start_row (an edge step may leave one no load can consume) would
        # then stop the next sequence's machine from taking the thread's registers.
        nat.tilerelease()


# -- the tests --------------------------------------------------------------------------


def test_random_sequences_match_emulator_and_faults_reach_the_c_guards_and_the_trap(native):
    from pyamx.cpu import _nativelib
    from pyamx.cpu import detect

    _, lib = _nativelib.load()
    STATS.clear()
    FAULT_CHECKS.clear()
    for s in range(SEQUENCES):
        run_sequence(native, SEED + s, detect.report().kernels, check_faults_in_c=True)
    # Every kind of fault the sequences make went through C: cfg_legal and the shape rules of the loaded config.
    outcomes = {(m == "ldtilecfg", m.startswith("tdp"), e) for m, e in FAULT_CHECKS}
    gp, shape = ("status", lib.PYAMX_E_GP_CONFIG), ("status", lib.PYAMX_E_UD_SHAPE)
    assert {(True, False, gp), (False, True, shape)} <= outcomes, FAULT_CHECKS
    # The sequences must mostly run instructions, not just agree on faults.
    ran = sum(v for (m, ok), v in STATS.items() if ok)
    assert ran > 0.6 * sum(STATS.values()), STATS
    for method in ("tileloadd", "tilestored", "tilezero", "tdpbf16ps", "ldtilecfg"):
        assert STATS.get((method, True), 0) > 0, f"no successful {method} in the random sequences: {STATS}"
    # What the run covered, for CI's lock-step leg (`-rP` shows it): the seeds reproduce any finding.
    print(f"lock-step ({detect.report().mode}): seeds {SEED}..{SEED + SEQUENCES - 1}, {SEQUENCES} sequences of "
          f"{STEPS + 1} steps; {ran} steps ran on both machines, {sum(STATS.values()) - ran} faulted alike")
    print("  ran/faulted per instruction: " + ", ".join(
        f"{m} {STATS.get((m, True), 0)}/{STATS.get((m, False), 0)}" for m in sorted({m for m, _ in STATS})))


def test_random_sequences_in_four_threads_at_once_match_emulator(native):
    """Four threads at once, each with its own pair of machines: native calls release the GIL, so
    their tile instructions interleave, and per-thread tile state must keep them apart."""
    import threading

    from pyamx.cpu import detect

    failures = []

    def worker(first_seed):
        try:
            for s in range(max(4, SEQUENCES // 20)):
                run_sequence(native, first_seed + s, detect.report().kernels)
        except BaseException as exc:  # every thread's failure is reported, not just the first
            failures.append(f"thread starting at seed {first_seed}: {exc}")

    threads = [threading.Thread(target=worker, args=(SEED + 100_000 * (i + 1),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, "\n\n".join(failures)


def test_two_machines_in_one_thread_keep_their_state(native):
    """Machines take turns in the one set of tile registers; each sees only its own state."""
    rng = np.random.default_rng(SEED)
    pairs = [(emulator.TileMachine(), native.NativeMachine()) for _ in range(2)]
    mem = adversarial_memory(rng, MEM_BYTES)
    for emu, nat in pairs:
        cfg, _ = random_config(rng)
        cfg = cfg.with_start_row(0)
        for m in (emu, nat):
            m.ldtilecfg(cfg)
    for step in range(40):
        emu, nat = pairs[step % 2]
        cfg = emu.config
        tmm = int(rng.choice([t for t in range(8) if cfg.rows[t]]))
        stride, offset = memory_operand(rng, cfg, tmm)
        if not 0 <= offset <= MEM_BYTES:
            continue
        errs = [_apply(m, "tileloadd", (tmm, "mem", stride, offset), {"mem": mem})[0] for m in (emu, nat)]
        assert type(errs[0]) is type(errs[1])
        for e, n in pairs:
            assert e.sttilecfg() == n.sttilecfg()
            assert np.array_equal(e.snapshot()[1], n.snapshot()[1]), f"step {step}"


def _bf16_oneshot_inputs(rng):
    m, k, n = (int(x) for x in rng.integers(1, 17, 3))
    data = adversarial_memory(rng, 4 * (m * n + m * k + k * n) + 4)
    c = data[: 4 * m * n].view(np.uint32).reshape(m, n).copy()
    a = data[4 * m * n : 4 * (m * n + m * k)].view(np.uint16).reshape(m, 2 * k).copy()
    b = data[4 * (m * n + m * k) : 4 * (m * n + m * k + k * n)].view(np.uint16).reshape(k, 2 * n).copy()
    return c, a, b


def test_oneshot_tdpbf16ps_matches_emulator(native):
    rng = np.random.default_rng(SEED + 1)
    for trial in range(300):
        c, a, b = _bf16_oneshot_inputs(rng)
        expected = instructions.tdpbf16ps(c, a, b, PRESETS["sdm"])
        got = native.tdpbf16ps(c, a, b)
        assert got.dtype == c.dtype and got.shape == c.shape
        assert np.array_equal(expected, got), (
            f"trial {trial}: c={c.tobytes().hex()} a={a.tobytes().hex()} b={b.tobytes().hex()}\n"
            + _diff("result (bytes)", expected.view(np.uint8), got.view(np.uint8))
        )


def test_oneshot_int8_matches_emulator(native_group):
    native = native_group("int8")
    rng = np.random.default_rng(SEED + 2)
    for trial in range(100):
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        c = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
        a = rng.integers(0, 256, (m, 4 * k), dtype=np.uint8)
        b = rng.integers(0, 256, (k, 4 * n), dtype=np.uint8)
        for name in _GROUP_NAMES["int8"]:
            expected = instructions.tdpb_int8(name, c, a, b)
            got = getattr(native, name)(c, a, b)
            assert np.array_equal(expected, got), f"{name} trial {trial}"


def test_oneshot_fp16_matches_emulator(native_group):
    native = native_group("fp16")
    rng = np.random.default_rng(SEED + 3)
    for trial in range(100):
        m, k, n = (int(x) for x in rng.integers(1, 17, 3))
        c = np.array(FP32_SPECIAL, np.uint32)[rng.integers(0, len(FP32_SPECIAL), (m, n))]
        a = np.array(FP16_SPECIAL, np.uint16)[rng.integers(0, len(FP16_SPECIAL), (m, 2 * k))]
        b = rng.standard_normal((k, 2 * n)).astype(np.float16).view(np.uint16)
        expected = instructions.tdpfp16ps(c, a, b, PRESETS["sdm"])
        got = native.tdpfp16ps(c, a, b)
        assert np.array_equal(expected, got), f"trial {trial}: " + _diff("bytes", expected.view(np.uint8), got.view(np.uint8))


def test_oneshot_keeps_a_machine_state_intact(native):
    rng = np.random.default_rng(SEED + 4)
    nat = native.NativeMachine()
    cfg, roles = random_config(rng)
    nat.ldtilecfg(cfg.with_start_row(0))
    mem = adversarial_memory(rng, MEM_BYTES)
    for t in range(8):
        if cfg.rows[t] and cfg.colsb[t] % 4 == 0:  # others cannot be loaded (#UD) and stay zero
            nat.tileloadd(t, mem, 64, 0)
    before = nat.snapshot()
    native.tdpbf16ps(*_bf16_oneshot_inputs(rng))
    after = nat.snapshot()
    assert before[0] == after[0] and np.array_equal(before[1], after[1])


# docs/semantics.md section 3: the operands come from pyamx.tools.probe.POINTS (defined once); the values
# each model gives are the spec's, restated here so the probe's bytes are checked against them.
PROBES = [("P1", 0x3F800001, 0x3F800000), ("P2", 0x3F800001, 0x3F800000), ("P7", 0x00000000, 0x80000000)]


@pytest.mark.parametrize("probe", PROBES, ids=[p[0] for p in PROBES])
def test_semantics_probes_on_native_give_the_emulators_default_bits(native, probe, capsys):
    """Silicon's answer to each probe is surfaced, then held to the emulator's default model."""
    from pyamx.tools.probe import point

    name, sdm, straight = probe
    e = point(name)
    c, a, b = e.c, e.a, e.b
    got = int(native.tdpbf16ps(c, a, b)[0, 0])
    emu = int(instructions.tdpbf16ps(c, a, b, PRESETS["sdm"])[0, 0])
    model = {sdm: "SDM even/odd", straight: "straight (intrinsics guide)"}.get(got, "neither documented model")
    from pyamx.cpu import detect

    line = (f"docs/semantics.md probe {name} on native ({detect.report().mode}): 0x{got:08X} = {model} "
            f"(SDM 0x{sdm:08X}, straight 0x{straight:08X}, emulator default 0x{emu:08X})")
    with capsys.disabled():
        print("\n" + line)
    assert got == emu, line
