"""The projection's intervals cover on stored sweeps (issue 57): every sweep kept as test data
(benchmarks.keep_sweep: its timing runs, as analysis.projection.predict reads them) replayed through the
out-of-sample check, as `python -m benchmarks.measure --only projection` prints it. The sweeps
differ in launch noise (quiet and noisy hours), so an interval that holds only on one of them fails."""

from pathlib import Path

import pytest

from benchmarks.measure import PROJECTION_SWEEPS, projection_coverage

SWEEPS = sorted(d for d in Path(PROJECTION_SWEEPS).glob("*") if (d / "runs.csv").is_file())


@pytest.fixture(scope="module")
def coverage():
    return {d.name: projection_coverage(d) for d in SWEEPS}


def test_three_sweeps_of_different_launch_noise_are_kept(coverage):
    noise = sorted(f["noise_sd"] for f in coverage.values())
    assert len(noise) >= 3 and noise[-1] > 1.2 * noise[0], noise


@pytest.mark.parametrize("name", [d.name for d in SWEEPS])
def test_at_least_90_percent_of_held_out_points_fall_inside_their_calibrated_intervals(coverage, name):
    f = coverage[name]
    assert f["calibrated"] and f["points"] >= 12, f
    assert f["inside"] >= 0.9 * f["points"], f
