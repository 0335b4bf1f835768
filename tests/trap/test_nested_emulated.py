"""A handler that runs an emulated instruction while its thread is inside one keeps that thread's tiles.

tests/programs/nested_emulated.c: workers keep a TDPBF8PS accumulator (AMX-FP8, which no shipping
Xeon executes: emulated everywhere, in the complement mode on AMX silicon) and a TDPBF16PS one live
over 2,000 iterations of all-ones operands while another thread sends them SIGUSR1 back to back; the
handler loads its own configuration and operands and runs both instructions. Every accumulator must
end as the arithmetic says (64 and 32 per iteration), and some handlers must have interrupted
pyamx's SIGILL handler, or the window was not exercised. In the complement mode a nested emulation
used to write its own tiles into the interrupted one (issue 27, item 2).
"""

from __future__ import annotations

import os
import re

import pytest

from childproc import pyamx_run
from test_run import _cpu_has_amx, pytestmark  # noqa: F401  (same platform skip)


@pytest.fixture(scope="module")
def program(c_program):
    return c_program("nested_emulated", "-O1", "-pthread", needs_run=True)


@pytest.mark.parametrize("workers", [1, 8])
@pytest.mark.parametrize("trial", [1, 2])
def test_nested_emulation_keeps_the_interrupted_tiles(program, workers, trial):
    env = {k: v for k, v in os.environ.items() if k != "PYAMX_TRAP_EMULATION"}
    proc = pyamx_run("--", program, workers, 2000, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("workers ok\n"), proc.stdout + proc.stderr
    handlers = re.search(r"^handlers ok (\d+), (\d+) inside", proc.stdout, re.M)
    assert handlers and int(handlers.group(1)) > 0, proc.stdout + proc.stderr
    if int(handlers.group(2)) == 0:
        if _cpu_has_amx():
            pytest.skip("no handler interrupted an emulation: this CPU may execute TDPBF8PS itself")
        pytest.fail("no handler interrupted an emulated instruction: the window was not exercised\n" + proc.stdout)
