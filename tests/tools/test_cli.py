"""The command line as a user meets it: one line and exit status 2 for every explained failure, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env
from pyamx import _backend
from pyamx._version import __version__


def _pyamx(*args, cwd=None, stdout=subprocess.PIPE, drop=("PYAMX_BACKEND",), **env):
    return subprocess.run([sys.executable, "-m", "pyamx", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, cwd=cwd or PYAMX_HOME, env=child_env(drop=drop, **env))


def _one_line_failure(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 or "usage:" in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_version():
    proc = _pyamx("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"pyamx {__version__}"


@pytest.mark.parametrize("command", [["demo"], ["record", "out.json"]])
def test_negative_seed_is_a_usage_error(command, tmp_path):
    proc = _pyamx(*command, "--seed", "-1", cwd=tmp_path)
    _one_line_failure(proc, "a seed is an integer >= 0")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("args, words", [
    (["bench", "--sizes", "99999999"], ["--sizes", "a size is an integer >= 1 and <= 8192"]),
    (["bench", "--sizes", "8", "--threads", "100000"], ["--threads", "<= 256"]),
    (["bench", "--sizes", "8", "--budget", "-1"], ["--budget", "> 0"]),
    (["bench", "--sizes", "8", "--budget", "nan"], ["--budget", "> 0"]),
    (["record", "out.json", "--per-class", str(10**20)], ["--per-class", "<= 1000"]),
    (["record", "out.json", "--seed", str(2**64)], ["--seed", "a seed is an integer >= 0 and <="]),
    (["replay", "out.json", "--show", "-1"], ["--show", ">= 0"]),
])
def test_every_number_has_a_bound_and_a_usage_error(args, words, tmp_path):
    proc = _pyamx(*args, cwd=tmp_path)
    _one_line_failure(proc, "error: argument", *words)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.skipif(_backend.native_mode() == "silicon", reason="AMX silicon here; the refusal needs a machine without")
def test_native_demo_without_amx_says_what_to_type():
    proc = _pyamx("demo", PYAMX_BACKEND="native", drop=("PYAMX_BACKEND", "PYAMX_TRAP_EMULATION"))
    _one_line_failure(proc, "pyamx demo", "--backend emulator", "pyamx info")
    assert "backend='emulator'" not in proc.stderr


def test_demo_takes_backend_on_the_command_line():
    proc = _pyamx("demo", "--backend", "emulator")
    assert proc.returncode == 0, proc.stderr
    assert "on backend: emulator" in proc.stdout


@pytest.mark.parametrize("variable, value", [("PYAMX_BACKEND", "bogus"), ("PYAMX_TRAP_EMULATION", "maybe")])
def test_a_bad_environment_variable_is_one_line_and_info_and_help_still_work(variable, value):
    bad = {variable: value}
    _one_line_failure(_pyamx("demo", **bad), variable, repr(value))
    assert _pyamx("--help", **bad).returncode == 0
    info = _pyamx("info", **bad)
    assert info.returncode == 0 and "Traceback" not in info.stderr
    assert variable in info.stdout  # the report says what is wrong


@pytest.mark.parametrize("variable, value", [("PYAMX_ENGINE_THREADS", "abc"), ("PYAMX_ENGINE_THREADS", "0"),
                                             ("PYAMX_ENGINE", "fast")])
@pytest.mark.parametrize("command", [["demo", "--backend", "emulator"], ["probe", "--backend", "emulator"],
                                     ["record", "out.json", "--per-class", "1", "--backend", "emulator"],
                                     ["replay", "in.json", "--backend", "emulator"],
                                     ["bench", "--sizes", "4", "--engines", "numpy"]], ids=lambda c: c[0])
def test_every_computing_command_refuses_a_bad_engine_setting_as_matmul_does(command, variable, value, tmp_path):
    (tmp_path / "in.json").write_text(_pyamx("record", "-", "--per-class", "1", "--backend", "emulator").stdout)
    proc = _pyamx(*command, cwd=tmp_path, **{variable: value})
    _one_line_failure(proc, f"pyamx {command[0]}", variable, repr(value))
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("value", ["", "emulator"])
def test_empty_backend_variable_means_unset(value):
    proc = _pyamx("info", "--json", PYAMX_BACKEND=value)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["backend"] in ("native", "emulator")
    if value == "":
        assert "PYAMX_BACKEND=emulator" not in data["backend_reason"]


@pytest.mark.parametrize("args", [["info", "--json"], ["info"], ["record", "-", "--per-class", "1"]])
def test_a_closed_pipe_ends_quietly(args):
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -1` having exited: the first write gets EPIPE
    try:
        proc = _pyamx(*args, stdout=write_end)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 1


def test_record_dash_writes_the_vectors_to_stdout(tmp_path):
    proc = _pyamx("record", "-", "--per-class", "1", "--backend", "emulator", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["format"] == "pyamx-vectors" and document["cases"]
    assert not (tmp_path / "-").exists()
    assert "wrote stdout" in proc.stderr


def test_replaying_a_file_without_cases_fails(tmp_path):
    recorded = _pyamx("record", "-", "--per-class", "1", "--backend", "emulator", cwd=tmp_path)
    document = json.loads(recorded.stdout)
    document["cases"] = []
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(document))
    _one_line_failure(_pyamx("replay", str(empty), "--backend", "emulator"), "no cases")


def test_an_unwritable_record_path_is_one_line(tmp_path):
    _one_line_failure(_pyamx("record", str(tmp_path / "missing-dir" / "x.json"), "--per-class", "1"), "missing-dir")


def test_replay_names_the_backend_in_the_shared_vocabulary(native, tmp_path):
    from pyamx._result import backend_label

    recorded = _pyamx("record", "-", "--per-class", "1", "--backend", "emulator", cwd=tmp_path)
    path = tmp_path / "v.json"
    path.write_text(recorded.stdout)
    proc = _pyamx("replay", str(path), "--backend", "native")
    assert proc.returncode == 0, proc.stderr
    assert f"replayed on {backend_label('native', _backend.native_mode())}:" in proc.stdout


def test_info_reports_the_engine_that_runs_and_every_engines_availability():
    from pyamx.emulator import engine

    text = _pyamx("info").stdout
    chosen = engine.resolve(None)
    assert f"emulator engine: {chosen.name} ({chosen.simd})" in text
    for name, ok, reason in engine.available_engines():
        assert f"{'[ok  ]' if ok else '[    ]'} {name:<9} {reason}" in text
    out = json.loads(_pyamx("info", "--json").stdout)["engine"]
    assert out["default"] == chosen.name and out["simd"] == chosen.simd
    assert [e["name"] for e in out["engines"]] == [n for n, _, _ in engine.available_engines()]


def test_info_names_a_bad_engine_variable_instead_of_failing():
    result = _pyamx("info", PYAMX_ENGINE="bogus")
    assert result.returncode == 0
    assert "emulator engine: none (" in result.stdout and "PYAMX_ENGINE" in result.stdout


def test_pyamx_run_and_version_never_import_numpy():
    # `pyamx run` wraps other programs: its start-up (target < 50 ms) must not pay for numpy.
    code = (
        "import sys\n"
        "from pyamx.tools import cli\n"
        "status = cli.main(['run', '--env'])\n"
        "loaded = sorted(m for m in sys.modules if m == 'numpy' or m.startswith('numpy.'))\n"
        "assert not loaded, loaded[:5]\n"
        "sys.exit(status)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PYAMX_HOME, env=child_env(drop=("PYAMX_BACKEND",)))
    # 2: a build without the preload library says so in one line; numpy must stay out either way.
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-c", "import sys, pyamx; pyamx.__version__, pyamx.isa.DOTS; "
                           "assert 'numpy' not in sys.modules"], capture_output=True, text=True, timeout=120,
                          cwd=PYAMX_HOME, env=child_env(drop=("PYAMX_BACKEND",)))
    assert proc.returncode == 0, proc.stderr


def test_help_names_no_path_of_this_machine():
    import re

    import pyamx

    proc = _pyamx("--help")
    assert proc.returncode == 0, proc.stderr
    assert os.path.dirname(pyamx.__file__) not in proc.stdout and PYAMX_HOME not in proc.stdout, proc.stdout
    assert not re.search(r"(^|[\s(])/\w", proc.stdout), proc.stdout
    own = _pyamx("run", "--help")  # a command's own help may say where its docs are on this machine
    assert own.returncode == 0 and "run.md" in own.stdout, own.stdout


def test_record_says_what_it_skipped_in_one_line(tmp_path, monkeypatch, capsys):
    from pyamx.tools import cli
    from pyamx.table import isa
    from pyamx.tools import vectors

    left_out = [name for name in vectors.KINDS if isa.get(name).feature.name != "AMX-BF16"]
    assert len(left_out) > 2
    monkeypatch.setattr(vectors, "unsupported", lambda backend: {
        name: f"{isa.get(name).feature.name} (CPUID bit): a long reason of several clauses. " * 3
        for name in left_out})
    path = tmp_path / "rec.json"
    assert cli.main(["record", str(path), "--backend", "emulator", "--per-class", "1"]) == 0
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if "skipped" in line]
    assert len(skipped) == 1, out
    assert f"skipped {len(left_out)} instruction(s)" in skipped[0] and "AMX-FP16" in skipped[0]
    assert "a long reason" not in out
    recorded = json.loads(path.read_text())["provenance"]["skipped"]
    assert set(recorded) == {isa.get(name).mnemonic for name in left_out}  # each reason is in the file
