"""Rewriting a user's file keeps what they set up: its mode, and a symbolic link as a link.

``atomic_writer`` is what ``pyamx record`` and ``pyamx run --stats-file`` write with; the last
tests go through the commands themselves.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from childproc import PYAMX_HOME, child_env
from pyamx.tools._files import atomic_writer


def _write(path, text):
    with atomic_writer(path) as out:
        out.write(text)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444, 0o755], ids=oct)
def test_rewriting_a_file_keeps_its_mode(tmp_path, mode):
    path = tmp_path / "recording.json"
    path.write_text("old\n")
    os.chmod(path, mode)
    _write(path, "new\n")
    assert path.read_text() == "new\n"
    assert _mode(path) == mode, oct(_mode(path))


def test_a_new_file_gets_the_umask_default(tmp_path):
    old = os.umask(0o027)
    try:
        _write(tmp_path / "fresh.json", "new\n")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "fresh.json") == 0o640


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "recording.json"
    target.write_text("old\n")
    os.chmod(target, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(os.path.join("real", "recording.json"))
    _write(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", "recording.json")
    assert target.read_text() == "new\n" and _mode(target) == 0o600
    # the temporary file lived beside the target, and nothing is left of it in either folder
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real"]
    assert os.listdir(tmp_path / "real") == ["recording.json"]


def test_a_chain_of_links_is_followed_to_the_file(tmp_path):
    target = tmp_path / "file.json"
    target.write_text("old\n")
    (tmp_path / "one").symlink_to("file.json")
    (tmp_path / "two").symlink_to("one")
    _write(tmp_path / "two", "new\n")
    assert (tmp_path / "two").is_symlink() and (tmp_path / "one").is_symlink()
    assert target.read_text() == "new\n"


def test_a_dangling_symlink_creates_its_target(tmp_path):
    (tmp_path / "out").mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(os.path.join("out", "new.json"))
    _write(link, "new\n")
    assert link.is_symlink()
    assert (tmp_path / "out" / "new.json").read_text() == "new\n"


def test_a_link_into_a_missing_folder_is_an_error_naming_the_link(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(os.path.join("no-such-folder", "new.json"))
    with pytest.raises(OSError) as caught:
        _write(link, "new\n")
    assert caught.value.filename == str(link)
    assert link.is_symlink() and os.listdir(tmp_path) == ["link.json"]


def _pyamx(*args):
    return subprocess.run([sys.executable, "-m", "pyamx", *args], capture_output=True, text=True, timeout=300,
                          cwd=PYAMX_HOME, env=child_env(drop=("PYAMX_BACKEND",)))


def test_record_keeps_a_private_recording_private_and_a_link_a_link(tmp_path):
    target = tmp_path / "private.json"
    target.write_text("{}\n")
    os.chmod(target, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to("private.json")
    proc = _pyamx("record", str(link), "--backend", "emulator", "--per-class", "1")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and _mode(target) == 0o600
    assert '"provenance"' in target.read_text()


def test_stats_file_keeps_its_mode(tmp_path):
    from childproc import pyamx_run, require_pyamx_run

    require_pyamx_run()
    stats = tmp_path / "stats.txt"
    stats.write_text("old\n")
    os.chmod(stats, 0o600)
    proc = pyamx_run("--stats-file", stats, "--", "sh", "-c", "exit 0")
    assert proc.returncode == 0, proc.stderr
    assert stats.read_text().startswith("pyamx run:") and _mode(stats) == 0o600
