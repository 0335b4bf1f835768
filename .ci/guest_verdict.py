"""The guest leg's verdict: fail on any test outcome but the known failures of QEMU's float rule.

Reads the junit XML reports of .ci/guest-suite's pytest sessions. QEMU's TCG (7.2 in Debian 12,
10.0 in bookworm-backports alike) detects float tininess *before* rounding under FTZ, where x86
detects it after: `pyamx_trap_fma32(0x21118e00, 0x1ee12000, 0)` gives 0 in the guest and
0x00800000 on silicon. The trap's float paths run the hardware FMA under DAZ/FTZ, so in the guest
that case fails, and so do the checks of a C program's TDPFP16PS against the emulator (whose
random data reach that rule); the same tests pass on every x86 CPU (docs/testing.md).

A known failure must fail in the test named here and with a message of its own rule's shape, so a
listed test that fails for another reason (a TDPBF16PS mismatch, a crash) is unexpected. A listed
test that passes fails the leg as well: the guest then computes this rule as x86 does, and the list
must shrink, or it would hide that rule's breakage later.
"""

from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET

QEMU_RULE = "QEMU's TCG detects tininess before rounding under FTZ (x86: after)"

# The one fma32 case of the spec's table that sits on the rule.
FMA32_CASE = "tests/trap/test_trap.py::test_fma32_gives_the_specs_bits_on_each_rule[554798592-518070272-0-8388608]"
# check_blocks() names every operation whose tile differs: only TDPFP16PS may differ.
TDPFP16PS_ONLY = re.compile(r"tile mismatch: ([^ ;]+ tdpfp16ps: dword \d+ \(row \d+, col \d+\) is 0x[0-9a-f]{8}, "
                            r"the emulator says 0x[0-9a-f]{8}(; )?)+$")

RUN = "tests/trap/test_run.py::"
PROCESS = "tests/trap/test_emulate_process.py::"
KNOWN = {FMA32_CASE: re.compile(r"assert 0 == 8388608")}
KNOWN.update((test_id, TDPFP16PS_ONLY) for test_id in (
    *(f"{RUN}test_permission_path_and_all_dot_products_match_the_emulator[{path}]"
      for path in ("syscall", "symbol", "raw")),
    f"{RUN}test_int3_futex_sleep_yield_and_sigusr1_between_tile_instructions",
    f"{RUN}test_threads_under_timer_and_sigusr1",
    f"{RUN}test_fork_keeps_tile_registers_and_the_child_computes",
    f"{RUN}test_exec_passes_the_preload_on",
    f"{RUN}test_programs_own_sigill_handler_sees_its_ud2",
    *(f"{PROCESS}test_emulate_process_serves_another_modules_permission_request_and_tiles[{path}]"
      for path in ("syscall", "symbol", "raw")),
    f"{PROCESS}test_emulate_process_with_threads_and_signals",
    *(f"{PROCESS}test_python_program_under_pyamx_run_keeps_emulating_through_faulthandler_and_signal[{how}]"
      for how in ("direct", "forked-by-sh")),
    f"{PROCESS}test_plugin_amx_emulate_runs_a_downstream_suite",
    f"{PROCESS}test_plugin_amx_require_accepts_pyamx_run",
))


TRUNCATED = "[truncated; full report in element text]"


def module_file(classname: str) -> str:
    """tests/trap/test_x.py from junit's classname: tests.trap.test_x, or tests.trap.test_x.TestClass."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if os.path.exists(path):
            return "::".join([path, *parts[end:]])
    return classname


def outcomes(report: str):
    """(test id, outcome, message) for each test case of one junit report."""
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{module_file(case.get('classname', ''))}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            message = bad.get("message") or ""
            if message.endswith(TRUNCATED):  # pytest shortens long messages; the text holds them whole
                message = bad.text or ""
            yield test_id, bad.tag, " ".join(message.split())
        elif case.find("skipped") is not None:
            yield test_id, "skipped", ""
        else:
            yield test_id, "passed", ""


def main(reports) -> int:
    unexpected, known, counts = [], [], {}
    seen = {}
    for report in reports:
        if not os.path.exists(report):
            unexpected.append(f"no report {os.path.basename(report)}: its pytest session did not finish in the guest")
            continue
        for test_id, outcome, message in outcomes(report):
            counts[outcome] = counts.get(outcome, 0) + 1
            seen[test_id] = outcome
            if outcome in ("failure", "error"):
                rule = KNOWN.get(test_id)
                if outcome == "failure" and rule is not None and rule.search(message):
                    known.append(test_id)
                else:
                    unexpected.append(f"{outcome}: {test_id}: {message[:400]}")
    passed_known = sorted(t for t in KNOWN if seen.get(t) == "passed")
    print("guest verdict: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())))
    print(f"  {len(known)} known failure(s) of {QEMU_RULE}")
    for line in unexpected:
        print(f"  UNEXPECTED {line}")
    for test_id in passed_known:
        print(f"  UNEXPECTED pass of a known failure (the guest follows x86's rule now? shrink KNOWN): {test_id}")
    if not seen:
        print("  no test ran")
    return 1 if unexpected or passed_known or not seen else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
