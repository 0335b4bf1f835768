"""No committed file names a path of the machine it was written on (a home or work directory):
such a path means nothing on a user's machine, and says who wrote it where. Project files beside
the checkout are named relative to it (``../shared/amx-family.md``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Built from parts, so that this file does not match itself.
MACHINE_PATH = re.compile("(?<![\\w.~-])/(?:" + "|".join(("wo" + "rk", "ro" + "ot", "ho" + "me")) + ")/[\\w.-]")

pytestmark = pytest.mark.static


def _tracked() -> list:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an sdist): the committed files are not known here")
    return [name for name in out.decode().split("\0") if name]


def test_no_committed_file_names_a_path_of_a_development_machine():
    found = []
    for name in _tracked():
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary data
        found += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
                  if MACHINE_PATH.search(line)]
    assert not found, "paths of a development machine:\n" + "\n".join(found[:20])


def test_the_pattern_finds_what_it_is_for():
    assert MACHINE_PATH.search("see " + "/wo" + "rk/shared/amx-family.md")
    assert MACHINE_PATH.search("/ro" + "ot/.pyenv/versions")
    assert not MACHINE_PATH.search("../shared/amx-family.md and /tmp/x and /usr/bin/cc")
