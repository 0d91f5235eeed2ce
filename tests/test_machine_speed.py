"""benchmarks/machine_speed.py's arithmetic: a recorded day's make-figures times scaled by today's speed."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "machine_speed.py"
spec = importlib.util.spec_from_file_location("machine_speed", SCRIPT)
machine_speed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(machine_speed)


def test_the_factor_is_the_geometric_mean_of_the_ratios_and_scales_the_recorded_times():
    recorded = {"seconds": {"training": 10.0, "inference": 2.0}, "make_figures_s": {"cold": 2000.0, "warm": 600.0}}
    factor, then = machine_speed.scaled(recorded, {"training": 5.0, "inference": 1.6})  # ratios 0.5 and 0.8
    assert math.isclose(factor, math.sqrt(0.5 * 0.8))
    assert math.isclose(then["cold"], 2000.0 * factor) and math.isclose(then["warm"], 600.0 * factor)


def test_a_workload_the_record_lacks_is_left_out_of_the_factor():
    recorded = {"seconds": {"training": 10.0}, "make_figures_s": {}}
    factor, then = machine_speed.scaled(recorded, {"training": 15.0, "inference": 99.0})
    assert math.isclose(factor, 1.5) and then == {}
