"""The pytest plugin's header line says what ``--amx=emulate`` found, in words a user can read."""

from __future__ import annotations

import pytest

from pyamx.cpu import trap
from pyamx.tools import pytest_plugin


class _Config:
    """What pytest_configure reads of pytest's config: the option and the marker registry."""

    def __init__(self, amx):
        self.amx = amx

    def getoption(self, name):
        assert name == "pyamx_amx"
        return self.amx

    def addinivalue_line(self, name, line):
        pass


def _header(monkeypatch, how, features=()):
    monkeypatch.setattr(trap, "emulate_process", lambda: how)
    monkeypatch.setattr(trap, "_complemented_features", lambda lib: tuple(features))
    monkeypatch.setattr(trap, "_load_or_backend_error", lambda: (None, None))
    config = _Config("emulate")
    pytest_plugin.pytest_configure(config)
    return pytest_plugin.pytest_report_header(config)


def test_the_complement_mode_header_names_silicon_and_what_is_emulated(monkeypatch):
    header = _header(monkeypatch, "complement", ("AMX-FP16", "AMX-COMPLEX", "AMX-FP8"))
    assert header == "AMX: silicon, with AMX-FP16, AMX-COMPLEX, AMX-FP8 emulated by pyamx (complement mode)"


@pytest.mark.parametrize("how, words", [("silicon", "nothing is emulated"),
                                        ("emulated", "the CPU has no usable AMX"),
                                        ("preload", "pyamx run's preload library")])
def test_every_other_answer_is_a_sentence(monkeypatch, how, words):
    header = _header(monkeypatch, how)
    assert header.startswith("AMX: ") and words in header and header != f"AMX: {how}"
