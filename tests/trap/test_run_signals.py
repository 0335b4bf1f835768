"""``pyamx run`` hands the program each signal once, and its exit status whatever the report does.

A terminal's Ctrl-C reaches every process of the foreground group, the program included: pyamx
run must not forward it a second time (issue 18). A SIGTERM sent to pyamx run itself must reach
the program, once. A --stats-file that cannot be written is reported, never in place of the
program's exit status.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

import pytest

from childproc import PYAMX_HOME, pyamx_run, require_pyamx_run


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("signal_count", "-O1", needs_run=True)


def _read_until(fd, buf: bytearray, token: bytes, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while token not in buf and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return token in buf


def test_a_terminal_ctrl_c_arrives_once_and_a_sent_sigterm_is_forwarded_once(program):
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: session leader of the pty, so pyamx run and the program are its foreground group
        try:
            os.chdir(PYAMX_HOME)
            os.execv(sys.executable, [sys.executable, "-m", "pyamx", "run", "--", str(program)])
        finally:
            os._exit(127)
    buf = bytearray()
    try:
        assert _read_until(fd, buf, b"ready", 60), bytes(buf)
        for _ in range(2):  # apart, so that two deliveries of one (the bug) cannot merge into one pending signal
            os.write(fd, b"\x03")  # the terminal's interrupt character: SIGINT to the foreground group
            time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)  # to pyamx run alone
        assert _read_until(fd, buf, b"SIGTERM ", 30), bytes(buf)
        _read_until(fd, buf, b"\n", 5)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert b"SIGINT 2 SIGTERM 1" in buf, bytes(buf)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("path", ["/nonexistent-dir/report.txt", "/proc/version"])
def test_an_unwritable_stats_file_keeps_the_programs_exit_status(path):
    require_pyamx_run()
    proc = pyamx_run("--stats-file", path, "--", "sh", "-c", "exit 7", timeout=120)
    assert proc.returncode == 7, proc.stderr
    assert "could not be written" in proc.stderr and "emulated in" in proc.stderr


def test_the_counters_file_has_no_name_and_a_reused_descriptor_keeps_its_own_file(tmp_path):
    # issue 18: descendants used to reopen the counters by name, which another user could swap
    # for a symlink; now the file is unlinked at once and travels as a descriptor (docs/run.md).
    require_pyamx_run()
    other = tmp_path / "other"
    script = (f'fd=${{PYAMX_RUN_STATS%%:*}}; eval "exec $fd>{other}"; echo "names: $(ls -A "$TMPDIR")"; '
              'sh -c "exit 0"; echo "variable: $PYAMX_RUN_STATS"')
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = pyamx_run("--stats", "--", "sh", "-c", script, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert lines["names"] == "other", proc.stdout  # while the program runs, no counters file under any name
    fd, dev, ino = lines["variable"].split(":")
    assert int(fd) > 2 and int(ino) > 0
    assert other.stat().st_size == 0  # the descendant with the reused number left that file alone
    # the outer shell counted itself; ls and the inner shell found another file behind the number
    assert "in 1 process(es)" in proc.stderr, proc.stderr
    assert not [p for p in tmp_path.iterdir() if p.name != "other"]
