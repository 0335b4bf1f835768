"""The main job of the README runs, says which backend ran, and passes its float64 check."""

from __future__ import annotations

from pyamx import demo


def test_demo_reports_backend_and_passes(capsys):
    assert demo.main(["--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "on backend:" in out and "why this backend:" in out
    assert "-> OK" in out
