"""``pyamx bench`` on tiny sizes: it runs, reports what it promises, and rejects bad arguments (no timing asserted)."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys

import pytest

from pyamx import bench, cli


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing rounds
def test_bench_json_on_tiny_sizes(capsys):
    assert cli.main(["bench", "--sizes", "8", "3", "--json", "--threads", "1"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    families = {r["family"] for r in report["results"]}
    assert families == {"bf16", "fp16", "int8", "fp8"}
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
    assert cli.main(["bench", "--sizes", "4", "--families", "int8,bf16", "--engines", "numpy"]) == 0
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


def test_bench_skips_what_exceeds_the_budget():
    report = bench.run([4, 64], families=["bf16"], engines=["numpy"], budget=1e-9)
    emulated = [r["size"] for r in report["results"] if r["backend"] == "emulator"]
    assert emulated == [4]  # the first size calibrates, the next is estimated
    assert any(s.get("size") == 64 and s["engine"] == "numpy" and "budget" in s["reason"] for s in report["skipped"])
    assert all(r["size"] == 4 for r in report["results"])  # native too, where it runs


@pytest.mark.slow  # a benchmark's own run: seconds of warm-up and timing rounds
def test_bench_reports_an_engine_asked_for_that_cannot_run():
    report = bench.run([4], families=["int8"], engines=["numpy", "avx2"])
    ran = {r["engine"] for r in report["results"]}
    if "avx2" not in ran:
        assert any(s["engine"] == "avx2" and s["reason"] for s in report["skipped"])


@pytest.mark.parametrize("argv", [["--families", "bf8"], ["--engines", "gpu"]])
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
    proc = subprocess.run([sys.executable, "-m", "pyamx", "bench", "--sizes", "8", "--families", "fp16"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "fp16" in proc.stdout and "numpy" in proc.stdout
