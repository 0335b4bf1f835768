""".ci/guest_verdict.py: only QEMU's float rule, in the tests it names, may fail in the guest leg."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pytest

pytestmark = pytest.mark.static  # reads .ci/ only: once per Python, as the layout tests

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("guest_verdict", ROOT / ".ci" / "guest_verdict.py")
verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdict)

FORK = "test_fork_keeps_tile_registers_and_the_child_computes"
FP16_ONLY = ("Failed: tile mismatch: child tdpfp16ps: dword 0 (row 0, col 0) is 0xc2980a22, the emulator says "
             "0xc2980a1f; parent tdpfp16ps: dword 2 (row 0, col 2) is 0x43abc145, the emulator says 0x43abc15f")


def case(classname, name, failure=None):
    """A junit test case as pytest writes it; a long failure message is shortened in the attribute."""
    if failure is None:
        body = ""
    elif len(failure) > 500:
        short = failure[:500] + "...\n" + verdict.TRUNCATED
        body = f"<failure message={quoteattr(short)}>{escape(failure)}</failure>"
    else:
        body = f"<failure message={quoteattr(failure)}>trace</failure>"
    return f'<testcase classname="{classname}" name={quoteattr(name)} time="1">{body}</testcase>'


def report(tmp_path, *cases):
    path = tmp_path / "r.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
    return str(path)


@pytest.fixture
def all_known_fail(monkeypatch):
    """Every known failure failing with its rule's message, as in the guest: the verdict's input."""
    monkeypatch.chdir(ROOT)  # module_file() finds tests/trap/test_x.py from the repository root
    cases = []
    for test_id, rule in verdict.KNOWN.items():
        path, name = test_id.split("::")
        message = "assert 0 == 8388608" if rule is not verdict.TDPFP16PS_ONLY else FP16_ONLY
        cases.append(case(path[:-3].replace(os.sep, "."), name, message))
    return cases


def test_the_known_failures_of_qemus_rule_pass_the_leg(tmp_path, all_known_fail):
    assert verdict.main([report(tmp_path, *all_known_fail, case("tests.trap.test_trap", "test_other"))]) == 0


def test_a_known_test_failing_on_another_operation_fails_the_leg(tmp_path, all_known_fail, capsys):
    bf16 = FP16_ONLY + "; child tdpbf16ps: dword 3 (row 0, col 3) is 0x3f800000, the emulator says 0x3f800001"
    cases = [c for c in all_known_fail if FORK not in c] + [case("tests.trap.test_run", FORK, bf16)]
    assert verdict.main([report(tmp_path, *cases)]) == 1
    assert f"UNEXPECTED failure: tests/trap/test_run.py::{FORK}" in capsys.readouterr().out


def test_any_other_failure_fails_the_leg(tmp_path, all_known_fail, capsys):
    other = case("tests.trap.test_run", "test_exit_status_and_fatal_signal_are_the_programs", "assert 1 == 0")
    assert verdict.main([report(tmp_path, *all_known_fail, other)]) == 1
    assert "test_exit_status_and_fatal_signal_are_the_programs" in capsys.readouterr().out


def test_a_known_failure_that_passes_fails_the_leg(tmp_path, all_known_fail, capsys):
    cases = [c for c in all_known_fail if FORK not in c] + [case("tests.trap.test_run", FORK)]
    assert verdict.main([report(tmp_path, *cases)]) == 1
    assert "UNEXPECTED pass of a known failure" in capsys.readouterr().out


def test_no_test_at_all_fails_the_leg(tmp_path):
    assert verdict.main([report(tmp_path)]) == 1


def test_a_session_without_a_report_fails_the_leg(tmp_path, all_known_fail, capsys):
    assert verdict.main([report(tmp_path, *all_known_fail), str(tmp_path / "own-guard.xml")]) == 1
    assert "no report own-guard.xml" in capsys.readouterr().out


def test_a_long_known_message_is_read_whole(tmp_path, all_known_fail):
    """Many threads' TDPFP16PS lines run past junit's message limit: the element's text holds them."""
    threads = "; ".join(f"t{i}.{j} tdpfp16ps: dword 1 (row 0, col 1) is 0xc525cfab, the emulator says 0xc525cfac"
                        for i in range(4) for j in range(3))
    cases = [c for c in all_known_fail if FORK not in c]
    cases.append(case("tests.trap.test_run", FORK, "Failed: tile mismatch: " + threads))
    assert verdict.main([report(tmp_path, *cases)]) == 0
    bf16 = threads + "; t0.1 tdpbf16ps: dword 1 (row 0, col 1) is 0x3f800000, the emulator says 0x3f800001"
    cases[-1] = case("tests.trap.test_run", FORK, "Failed: tile mismatch: " + bf16)
    assert verdict.main([report(tmp_path, *cases)]) == 1


def test_every_known_failure_names_a_test_that_exists():
    """The list follows the tests when they move or are renamed: each id's file and function exist."""
    for test_id in verdict.KNOWN:
        path, name = test_id.split("::")
        source = ROOT / path
        assert source.is_file(), f"{test_id}: no {path}"
        function = name.split("[", 1)[0]
        assert f"def {function}(" in source.read_text(encoding="utf-8"), f"{test_id}: no {function} in {path}"
