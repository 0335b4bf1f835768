"""pyamx/table/isa.py's rows: every mapping is a view of them, and no new row can take over an existing key."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyamx.table import isa

from childproc import PYAMX_HOME, child_env

ISA_PY = Path(isa.__file__)

# A second instruction on fp16 operands, in fp16's kernel group: what broke pyamx.matmul once
# (its row shared the group key "fp16" and took float16 matmuls over).
EXTRA = dataclasses.replace(isa.BY_NAME["tdpfp16ps"], mnemonic="TDPFP16PSX", matmul=False)


def test_a_row_sharing_formats_and_group_leaves_every_view_of_the_others_unchanged():
    before, after = isa.views(isa.TABLE), isa.views(isa.TABLE + (EXTRA,))
    assert dict(after.matmul_routes) == dict(before.matmul_routes)
    assert dict(after.inferred) == dict(before.inferred)
    assert dict(after.group_feature) == dict(before.group_feature) and after.groups == before.groups
    assert after.dots[:-1] == before.dots and after.by_name["tdpfp16psx"] is EXTRA


@pytest.mark.parametrize("clash, key", [
    (dataclasses.replace(EXTRA, matmul=True), "matmul route"),
    (dataclasses.replace(EXTRA, mnemonic="TDPFP16PS"), "the name"),
    (dataclasses.replace(EXTRA, feature=isa.FEATURES["AMX-BF16"]), "feature"),
    (dataclasses.replace(EXTRA, matmul=True, a_format=dataclasses.replace(isa.FORMATS["fp16"], name="fp16b"),
                         b_format=dataclasses.replace(isa.FORMATS["fp16"], name="fp16b")), "dtype"),
])
def test_a_row_claiming_an_existing_key_is_refused_naming_it(clash, key):
    with pytest.raises(isa.TableError, match=key):
        isa.views(isa.TABLE + (clash,))


def test_routing_follows_the_operand_formats():
    routes = {k: v.mnemonic for k, v in isa.MATMUL_ROUTES.items()}
    assert routes == {("bf16", "bf16"): "TDPBF16PS", ("fp16", "fp16"): "TDPFP16PS", ("int8", "int8"): "TDPBSSD",
                      ("int8", "uint8"): "TDPBSUD", ("uint8", "int8"): "TDPBUSD", ("uint8", "uint8"): "TDPBUUD",
                      ("bf8", "bf8"): "TDPBF8PS", ("bf8", "hf8"): "TDPBHF8PS", ("hf8", "bf8"): "TDPHBF8PS",
                      ("hf8", "hf8"): "TDPHF8PS"}


# What every consumer chose, printed by a child Python (the table is fixed at import).
_PROBE = r"""
import importlib.util, json, sys
import numpy as np
extra = sys.argv[1] == "extra"
if extra:  # load pyamx.table.isa first, add the row, then let the package import this very module
    spec = importlib.util.spec_from_file_location("pyamx.table.isa", sys.argv[2])
    isa = importlib.util.module_from_spec(spec)
    sys.modules["pyamx.table.isa"] = isa
    spec.loader.exec_module(isa)
    import dataclasses
    row = dataclasses.replace(isa.BY_NAME["tdpfp16ps"], mnemonic="TDPFP16PSX", matmul=False)
    isa.TABLE += (row,)
    v = isa.views(isa.TABLE)
    isa.VIEWS, isa.BY_NAME, isa.DOTS = v, v.by_name, v.dots
    isa.DOT_NAMES = tuple(i.name for i in v.dots)
import pyamx
from pyamx import _matmul
from pyamx.emulator import engine
from pyamx.table import isa
from pyamx.tools import vectors
assert ("tdpfp16psx" in vectors.INSTRUCTIONS) == extra, "the probe did not install its row"
rng = np.random.default_rng(1)
arrays = {"float16": rng.standard_normal((3, 40)).astype(np.float16),
          "bfloat16": rng.integers(0, 0x4000, (3, 40)).astype(np.uint16),
          "int8": rng.integers(-128, 128, (3, 40)).astype(np.int8),
          "uint8": rng.integers(0, 256, (3, 40)).astype(np.uint8)}
out = {"routes": {}, "bits": {}}
for x, a in arrays.items():
    for y, b in arrays.items():
        try:
            out["routes"][x + "," + y] = _matmul.check(a, b.T.copy()).mnemonic
        except TypeError:
            continue
        r = pyamx.matmul(a, b.T.copy(), backend="emulator", engine="portable")
        out["bits"][x + "," + y] = np.asarray(r).view(np.uint32).tolist()
eng = engine.resolve("portable")
out["ops"] = {n: eng._op_ids[n] for n in (i.name for i in isa.DOTS) if n != "tdpfp16psx"}
out["vectors"] = [n for n in vectors.INSTRUCTIONS if n != "tdpfp16psx"]
print(json.dumps(out))
"""


def _probe(which: str) -> dict:
    # cwd: `-c` puts the working directory first on sys.path, and a source checkout there would
    # shadow the pyamx this test imported (an installed one has its extension built).
    proc = subprocess.run([sys.executable, "-c", _PROBE, which, str(ISA_PY)], capture_output=True, text=True,
                          env=child_env(), cwd=PYAMX_HOME, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_extra_fp16_row_changes_no_matmul_route_engine_op_or_vector_list():
    pytest.importorskip("pyamx._native", reason="the engine's op ids come from the C extension")
    before, after = _probe("plain"), _probe("extra")
    assert after["routes"] == before["routes"] and before["routes"]["float16,float16"] == "tdpfp16ps"
    assert after["bits"] == before["bits"]
    assert after["ops"] == before["ops"] and after["vectors"] == before["vectors"] == list(isa.DOT_NAMES)
