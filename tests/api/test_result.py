"""Results keep their labels through pickles and copies; one vocabulary names the backend everywhere."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import pyamx
from pyamx._result import AMXResult, backend_label, label


def _result_of(backend="native", mode="trap", **extra):
    return label(np.arange(6, dtype=np.float32).reshape(2, 3), backend, mode, **extra)


@pytest.mark.parametrize("clone", [
    lambda r: pickle.loads(pickle.dumps(r)),
    lambda r: pickle.loads(pickle.dumps(r, protocol=2)),
    lambda r: pickle.loads(pickle.dumps(r, protocol=5)),  # the out-of-band buffer protocol
    copy.copy,
    copy.deepcopy,
    lambda r: r.copy(),
    lambda r: r[:1],
])
def test_labels_survive_pickles_copies_and_views(clone):
    original = _result_of(engine="avx512")
    twin = clone(original)
    assert isinstance(twin, AMXResult)
    assert (twin.backend, twin.native_mode, twin.engine) == ("native", "trap", "avx512")
    np.testing.assert_array_equal(np.asarray(twin), np.asarray(original)[: len(twin)])


def test_a_real_result_round_trips_through_pickle():
    r = pyamx.tdpbf16ps(np.ones((1, 1), np.float32), np.zeros((1, 2), np.uint16), np.zeros((1, 2), np.uint16),
                        backend="emulator")
    back = pickle.loads(pickle.dumps(r))
    assert back.backend == "emulator" and back.label == "emulator"
    assert back.view(np.uint32)[0, 0] == 0x3F800000


def test_a_plain_ndarray_pickle_still_loads_as_a_result_without_labels():
    plain = pickle.dumps(np.zeros(3, np.float32))
    assert pickle.loads(plain).dtype == np.float32


def test_labels_do_not_stick_to_arithmetic():
    r = _result_of()
    assert type(r + 1) is np.ndarray and not hasattr(r + 1, "native_mode")


@pytest.mark.parametrize("backend, mode, text", [
    ("emulator", None, "emulator"),
    ("native", "silicon", "native (silicon)"),
    ("native", "trap", "native (trap mode)"),
])
def test_one_vocabulary(backend, mode, text):
    assert backend_label(backend, mode) == text
    r = _result_of(backend, mode)
    assert r.label == text and f"(backend={text})" in repr(r)


def test_replay_and_info_use_the_same_words():
    from pyamx.cpu import detect
    from pyamx.tools import vectors

    prov = {"backend": "native", "native_mode": "trap", "silicon": False, "cpu": {}}
    assert "native (trap mode) (NOT silicon)" in vectors.describe_provenance(prov)
    rep = detect.evaluate(detect.RawFacts(system="Linux", machine="x86_64", python=(3, 11, 0)))
    assert "native backend: not usable" in detect.format_report(rep)


def test_probe_uses_the_same_words(native):
    from pyamx import _backend
    from pyamx.tools import probe

    report = probe.probe("native")
    assert report["backend"] == backend_label("native", _backend.native_mode())


def test_show_runtime_names_version_backend_and_environment(capsys, monkeypatch):
    monkeypatch.setenv("PYAMX_REQUIRE_NATIVE", "0")
    pyamx.show_runtime()
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"pyamx {pyamx.__version__} (python ") and "numpy" in first
    assert "\nbackend: " in out and "PYAMX_REQUIRE_NATIVE='0'" in out
