"""The main job of the README runs, says which backend ran, and passes its float64 check."""

from __future__ import annotations

from pyamx.tools import demo


def test_demo_reports_backend_and_passes(capsys):
    assert demo.main(["--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "on backend:" in out and "why this backend:" in out
    assert "-> OK" in out


def test_demo_subcommand_runs_in_a_child():
    import subprocess
    import sys

    from childproc import PYAMX_HOME, child_env

    proc = subprocess.run([sys.executable, "-m", "pyamx", "demo"], capture_output=True, text=True,
                          env=child_env(), cwd=PYAMX_HOME, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "on backend:" in proc.stdout and "-> OK" in proc.stdout
