"""csrc/trap/frames/chain_marks.c: the trap's marks of its calls to a program's own SIGILL handler.

Where no guard answers sigaction(SIGILL), the trap cannot know that a handler it chained to (for
instance faulthandler) restored the trap's handler and re-raised; the mark says the re-raise comes
from inside that call, so it takes the default action instead of going round again. The marks used
to be one global for all threads (two threads in such calls at once masked each other's), and a
probe's siglongjmp left a mark that made a later ``raise(SIGILL)`` from deeper on the stack kill
the program (tests/programs/sigill_probes.c, "raised N KiB deeper"). tests/programs/chain_marks.c
drives the module directly: per-thread marks, their end by return or by a jump, a mark whose word
was overwritten, and the table's room after threads that left marks behind have ended.
"""

from __future__ import annotations

import subprocess

from conftest import PROGRAMS

ROOT = PROGRAMS.parent.parent
EXPECTED = ["own ok", "per_thread ok", "jump ok", "nested ok", "stale_word ok", "ended_threads ok"]


def test_chain_marks_are_per_thread_and_end_with_their_call(c_program):
    trap = ROOT / "csrc" / "trap"
    program = c_program("chain_marks", "-O1", "-pthread", f"-I{trap}", f"-I{ROOT / 'csrc'}",
                        sources=(trap / "frames" / "chain_marks.c", trap / "base" / "self_copy.c"))
    proc = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines() == EXPECTED, proc.stdout + proc.stderr
