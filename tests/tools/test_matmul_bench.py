"""``pyamx bench`` on tiny sizes: it runs, reports what it promises, and rejects bad arguments (no timing asserted)."""

from __future__ import annotations

import builtins
import json
import signal
import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env
from pyamx.tools import bench, cli


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing rounds
def test_bench_json_on_tiny_sizes(capsys):
    assert cli.main(["bench", "--sizes", "8", "3", "--json", "--threads", "1"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    groups = {r["group"] for r in report["results"]}
    assert groups == {"bf16", "fp16", "int8", "fp8"}
    for r in report["results"]:
        assert r["size"] in (8, 3) and r["seconds"] > 0 and r["numpy_seconds"] > 0
        assert r["ratio"] == pytest.approx(r["seconds"] / r["numpy_seconds"])
        assert r["backend"] in ("emulator", "native")
        if r["backend"] == "emulator":
            assert r["engine"] is not None
    assert any(r["engine"] == "numpy" for r in report["results"])
    assert report["environment"]["blas"]["thread_control"]
    assert report["environment"]["threads"] == 1
    assert "[1/" in captured.err  # progress goes to stderr
    for s in report["skipped"]:
        assert s["reason"]


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing rounds
def test_bench_table(capsys):
    assert cli.main(["bench", "--sizes", "4", "--groups", "int8,bf16", "--engines", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "ratio" in out and "BLAS" in out
    assert "int8" in out and "bf16" in out and "fp16   " not in out


def test_bench_says_when_threadpoolctl_is_missing(monkeypatch):
    real_import = builtins.__import__

    def no_threadpoolctl(name, *args, **kwargs):
        if name == "threadpoolctl":
            raise ImportError("not installed (simulated)")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_threadpoolctl)
    info = bench.blas_info()
    assert "threadpoolctl is not installed" in info["thread_control"]


def test_a_spent_budget_starts_nothing_not_even_the_first_size():
    report = bench.run([4, 64], groups=["bf16"], engines=["numpy"], budget=1e-9)
    assert report["results"] == []
    for size in (4, 64):
        assert any(s.get("size") == size and "budget of 1e-09 s was spent" in s["reason"] for s in report["skipped"])
    table = bench.format_report(report)
    assert "skipped: everything at size 4: the budget of 1e-09 s was spent" in table


def test_the_first_size_above_the_calibration_size_is_estimated_against_the_budget():
    # The numpy engine takes seconds for one bf16 1024^3 product: its 256^3 calibration says so
    # before it starts, and it is left out, with the estimate, instead of overrunning the budget.
    report = bench.run([1024], groups=["bf16"], engines=["numpy"], budget=0.5)
    assert not [r for r in report["results"] if r["engine"] == "numpy"], report["results"]
    reasons = [s["reason"] for s in report["skipped"] if s.get("engine") == "numpy" and s.get("size") == 1024]
    assert len(reasons) == 1 and ("exceeds" in reasons[0] or "was spent" in reasons[0]), reasons


def test_a_backend_nobody_named_that_cannot_run_is_one_short_line():
    report = {"environment": {"pyamx": "0", "numpy": "0", "threads": None, "cpus": 1, "native_usable": False,
                              "native": "AMX-TILE: " + "a long reason. " * 30, "blas": {
                                  "name": "b", "version": None, "kernel": None, "thread_control": "none"}},
              "results": [], "skipped": [{"backend": "native", "engine": None, "reason": "a long reason. " * 30,
                                          "asked": False},
                                         {"backend": "emulator", "engine": "avx2", "reason": "needs AVX2",
                                          "asked": True}]}
    table = bench.format_report(report)
    assert "a long reason" not in table
    assert "skipped: native: does not run here (`pyamx info` says why)" in table.splitlines()
    assert "skipped: emulator/avx2: needs AVX2" in table.splitlines()  # named with --engines: the reason
    assert max(len(line) for line in table.splitlines()) < 120


def test_bench_marks_a_backend_it_was_not_asked_for():
    report = bench.run([4], groups=["bf16"], engines=["numpy"], budget=1e-9)
    native = [s for s in report["skipped"] if s["backend"] == "native"]
    assert all(s["asked"] is False for s in native)


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing rounds
def test_bench_reports_an_engine_asked_for_that_cannot_run():
    report = bench.run([4], groups=["int8"], engines=["numpy", "avx2"])
    ran = {r["engine"] for r in report["results"]}
    if "avx2" not in ran:
        assert any(s["engine"] == "avx2" and s["reason"] for s in report["skipped"])


@pytest.mark.parametrize("argv", [["--groups", "bf8"], ["--engines", "gpu"]])
def test_bench_rejects_bad_arguments(argv, capsys):
    assert cli.main(["bench", "--sizes", "4", *argv]) == 2
    assert "pyamx bench" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--sizes", "0"], ["--threads", "0"], ["--budget", "0"]])
def test_bench_rejects_numbers_out_of_range_as_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--sizes", "4", *argv])
    assert exit_.value.code == 2
    assert f"pyamx bench: error: argument {argv[0]}" in capsys.readouterr().err


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing rounds
def test_bench_console_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "pyamx", "bench", "--sizes", "8", "--groups", "fp16"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "fp16" in proc.stdout and "numpy" in proc.stdout


def test_ctrl_c_prints_the_partial_table_and_exits_130():
    # Size 4 is timed at once; the numpy engine's 1024^3 bf16 product then takes seconds, long enough
    # for SIGINT to arrive inside it.
    proc = subprocess.Popen([sys.executable, "-m", "pyamx", "bench", "--sizes", "4", "1024", "--groups", "bf16",
                             "--engines", "numpy", "--budget", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PYAMX_HOME,
                            env=child_env(drop=("PYAMX_BACKEND",)))
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "emulator/numpy 1024^3" in line:
                break
        else:
            pytest.fail(f"bench ended before the 1024^3 run: {''.join(seen)}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + err
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    # Native rows come too where native runs (silicon, the trap mode): only the engine's are counted.
    rows = [line for line in out.splitlines() if line.startswith("bf16 ") and "emulator/numpy" in line]
    assert len(rows) == 1 and rows[0].split()[1:3] == ["emulator/numpy", "4"], out
    assert "interrupted (Ctrl-C)" in out
