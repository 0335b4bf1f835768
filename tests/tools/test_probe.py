"""The numerics probe names every emulator model back, point by point."""

from __future__ import annotations

import itertools

import pytest

from pyamx.tools import probe
from pyamx.emulator import PRESETS, Numerics


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_probe_names_each_preset_back(model):
    report = probe.probe("emulator", model)
    assert report["structure"] == PRESETS[model].structure
    assert report["complete_match"] == model
    assert report["candidates"]["structure"] == [PRESETS[model].structure]


VARIATIONS = [
    {}, dict(tininess="before"), dict(dest_daz=False), dict(input_daz=False), dict(nan="default"),
    dict(nan="canonical"), dict(tininess="before", dest_daz=False, input_daz=False, nan="canonical"),
]


@pytest.mark.parametrize(
    "options",
    [dict(structure=s, **v) for s, v in itertools.product(("sdm", "straight", "fused_pair", "wide"), VARIATIONS)],
    ids=lambda o: "-".join(str(v) for v in o.values()),
)
def test_probe_settles_every_point_for_every_option_set(options):
    model = Numerics(**options)
    # the dot products' points; the row instructions' row_ fields have their own probe (tests/emulator/test_rows.py)
    options = {**{f: v for f, v in Numerics().__dict__.items() if not f.startswith("row_")}, **options}
    report = probe.probe("emulator", model)
    for point, value in options.items():
        assert report[point] == value, f"{point}: probe says {report[point]!r}, model has {value!r}"
    assert report["products"] == "exact"
    assert report["fp16_structure"] == options["structure"] and report["fp16_denormals"] == "honoured"
    assert report["complete_match"] == model.name


def test_report_text_lists_every_point_and_the_observed_bits():
    text = probe.format_report(probe.probe("emulator", "straight"))
    for point in ("structure", "zero_signs", "tininess", "dest_daz", "input_daz", "products", "nan",
                  "fp16_structure", "fp16_denormals"):
        assert point in text
    assert "P1: C=1" in text and "observed 3f800000" in text
    assert "complete option set matching bit for bit on every experiment: straight" in text


def test_named_native_refuses_a_non_default_numerics_before_running_anything():
    # The rule of pyamx._backend: no native detection is needed to refuse it, so this holds everywhere.
    with pytest.raises(ValueError, match="emulator model"):
        probe.probe("native", "straight")


def test_auto_with_a_non_default_numerics_probes_the_emulator_wherever_it_runs():
    report = probe.probe("auto", "wide")
    assert report["backend"] == "emulator" and report["complete_match"] == "wide"


def test_fp16_denormal_point_tells_flushing_apart():
    """A backend that flushed fp16 denormal inputs would be named "flushed" (simulated by zeroing them)."""
    e = probe.EXPERIMENTS["fp16_denormals"][0]
    honoured = probe._predict(Numerics(), {}, e)
    flushed = probe._predict(Numerics(), {probe._FLUSH_FP16: True}, e)
    assert int(honoured[0, 0]) == 0x33800000 and int(flushed[0, 0]) == 0
