"""Children of a process that ran ``pyamx.cpu.trap.emulate_process()`` live as they would on silicon.

They inherit the seccomp filters of the emulation but not its handlers (exec
replaces those): a child Python that asked arch_prctl about AMX (importing
pyamx does) died of SIGSYS, and a multiprocessing spawn pool replaced its
dying workers forever, so ``map()`` never returned -- the README's
``pytest --amx=emulate`` recipe with a spawn pool hung. The preload of ``pyamx
run`` now travels with them in LD_PRELOAD, so they are emulated too. On AMX
silicon (the complement mode, no filters) the same scripts must simply work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


from childproc import PYAMX_HOME, require_pyamx_run
from test_run import pytestmark  # noqa: F401  (same platform skip)

POOL = textwrap.dedent("""
    import multiprocessing, os, subprocess, sys
    import pyamx.tools.run, pyamx.cpu.trap

    def child_report(_):
        import pyamx.cpu.native
        r = pyamx.cpu.native.report()  # detection, and the start: the permission request in this child
        return f"{os.getpid()}:{r.mode}"

    if __name__ == "__main__":
        mode = pyamx.cpu.trap.emulate_process()
        print("mode", mode, flush=True)
        print("preload", pyamx.tools.run.preload_file() in os.environ.get("LD_PRELOAD", ""), flush=True)
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            answers = pool.map(child_report, range(4), chunksize=1)
        print("pool", len(answers), flush=True)
        child = subprocess.run([sys.executable, "-X", "faulthandler", "-c",
                                "import pyamx.cpu.native; print(pyamx.cpu.native.report().mode)"],
                               capture_output=True, text=True)
        print("child", child.returncode, child.stderr.strip()[-300:], flush=True)
""")


def test_spawn_pool_and_child_pythons_of_an_emulating_process_work(tmp_path):
    require_pyamx_run()
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    env = dict(os.environ)
    env.pop("PYAMX_TRAP_EMULATION", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=PYAMX_HOME, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["pool"] == "4", proc.stdout + proc.stderr
    assert lines["child"].startswith("0"), proc.stdout + proc.stderr
    if lines["mode"] in ("emulated", "complement"):
        assert lines["preload"] == "True", proc.stdout
