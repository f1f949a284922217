"""The all-reduce micro-benchmark (benchmarks/collectives.py): its alpha-beta fit on constructed
worlds, and one real run of gloo processes."""

import json
import subprocess
import sys

import pytest

from benchmarks import collectives
from tests.helpers import REPO, run_env


def test_the_fit_recovers_an_exact_alpha_beta_world():
    alpha, beta = 50e-6, 1 / 2e9  # 50 us a step, 2 GB/s
    points = [(p, n, 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta)
              for p in (2, 4, 8) for n in (4096, 2**20, 25 * 2**20)]
    fit = collectives.fit_alpha_beta(points)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert fit["beta_s_per_byte"] == pytest.approx(beta, rel=1e-6)
    assert fit["max_abs_relative_error"] < 1e-6
    assert collectives.predict(fit, 16, 2**20) == pytest.approx(30 * alpha + 2 * 15 / 16 * 2**20 * beta, rel=1e-6)


def test_a_latency_only_world_fits_no_bandwidth_term():
    points = [(p, n, 2 * (p - 1) * 1e-4) for p in (2, 3) for n in (4096, 2**20)]
    fit = collectives.fit_alpha_beta(points)
    assert fit["alpha_s"] == pytest.approx(1e-4) and fit["beta_s_per_byte"] == pytest.approx(0, abs=1e-15)
    assert fit["bandwidth_bytes_per_s"] is None


def test_sizes_and_too_few_points_are_refused_by_name():
    assert collectives.parse_size("64K") == 65536 and collectives.parse_size("25M") == 25 * 2**20
    with pytest.raises(ValueError, match="size '12X'"):
        collectives.parse_size("12X")
    with pytest.raises(ValueError, match="at least two timings"):
        collectives.fit_alpha_beta([(2, 4096, 1e-3)])


@pytest.mark.e2e  # real gloo processes
def test_a_real_run_times_every_size_and_records_the_fit(tmp_path):
    out = tmp_path / "collectives.json"
    # 32 MiB, not 4: on the 2-core VM a rank's wake-up after the barrier adds up to ~5 ms to any
    # all-reduce, more than 4 MiB's 2 ms, so 5 repeats of 4 KiB and 4 MiB could rank either way.
    res = subprocess.run([sys.executable, "-m", "benchmarks.collectives", "--procs", "2", "--sizes", "4K,256K,32M",
                          "--repeats", "5", "--out", str(out)], cwd=REPO, env=run_env(), capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [(r["procs"], r["bytes"]) for r in doc["timings"]] == [(2, 4096), (2, 262144), (2, 33554432)]
    assert all(r["repeats"] == 5 and 0 < r["min_s"] <= r["median_s"] <= r["max_s"] for r in doc["timings"])
    assert doc["timings"][-1]["median_s"] > doc["timings"][0]["median_s"]  # 32 MiB takes longer than 4 KiB
    assert doc["fit"]["alpha_s"] >= 0 and doc["fit"]["beta_s_per_byte"] > 0
    assert doc["env"]["cpu_cores"] >= 1 and "torch" in json.dumps(doc["env"])
    assert "largest error" in res.stdout
    bad = subprocess.run([sys.executable, "-m", "benchmarks.collectives", "--procs", "1"], cwd=REPO, env=run_env(),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--procs '1': give process counts of at least 2" in bad.stderr
