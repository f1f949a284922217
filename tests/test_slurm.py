"""The workflow and the runner under a real SLURM scheduler: a private single-node cluster
(the `slurm` fixture, tests/slurm_cluster.py; skipped with the reason where it cannot start).

- the sweep submitted through profiles/slurm with the SLURM executor;
- a multi-node run as SLURM runs it (one job, 2 tasks, one torchrun agent per task);
- SLURM's limits (time limit, scancel) leave results.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.test_workflow import SNAKEMAKE, copy_project, minimal_with, tools_ready

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def proj(tmp_path):
    reason = tools_ready()
    if reason:
        pytest.skip(reason)
    proj = tmp_path / "proj"
    proj.mkdir()
    copy_project(proj)
    return proj


def test_slurm_sweep_through_profile(slurm, proj):
    """A 2 x 2 grid (both frameworks, 1 and 2 processes) submitted job by job through
    profiles/slurm: every run ok, each result names its own SLURM job, and the report is made."""
    cfg = minimal_with(**{"grid.devices": [1, 2], "max_steps_per_epoch": 3, "time_limit_s": 120})
    (proj / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    # The profile as a user runs it, sized down to this one-node CPU cluster: no GPUs, 2 CPUs
    # and little memory per job, no whole-node allocation, and a quick first status check.
    t0 = time.time()
    res = subprocess.run(
        [SNAKEMAKE, "-s", str(proj / "Snakefile"), "--directory", str(proj),
         "--workflow-profile", str(proj / "profiles" / "slurm"),
         "--slurm-init-seconds-before-status-checks", "1",
         "--set-threads", f"run={min(2, slurm.cpus)}", "dataset=1",
         "--set-resources", "run:mem_mb=2000", "run:slurm_extra=''", "dataset:mem_mb=2000",
         "--configfile", str(proj / "sweep.yaml"), "--config", "request_gpus=False"],
        cwd=proj, env=slurm.env, capture_output=True, text=True, timeout=900)
    sweep_s = time.time() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    results = {p.parent.name: json.loads(p.read_text()) for p in (proj / "results/runs/tiny").glob("*/result.json")}
    assert sorted(results) == sorted(f"{fw}-sage-d{d}-b64-w0-r0" for fw in ("pyg", "dgl") for d in (1, 2))
    job_ids = set()
    for name, r in results.items():
        assert r["status"] == "ok", (name, r.get("diagnosis"))
        sched = r["env"]["scheduler"]
        assert sched["name"] == "slurm" and sched["nodelist"] == slurm.host, sched
        assert sched["partition"] == "test" and sched["cluster"] == "gnnscale-test", sched
        job_ids.add(sched["job_id"])
    assert len(job_ids) == 4, job_ids  # one allocation per run
    html = proj / "results/report/index.html"
    assert html.exists() and html.stat().st_size > 0
    runs_ran = sum(r["wall_time_s"] for r in results.values())
    print(f"\n[slurm] sweep of {len(results)} runs + dataset/aggregate/report: {sweep_s:.1f} s; "
          f"runs' own wall time {runs_ran:.1f} s")
