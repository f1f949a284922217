"""Real result directories for the analysis tests, made once per test session.

A small real grid on the tiny dataset (CPU, gloo): PyG and DGL GraphSAGE on 1 and 2
processes, plus real failures: an uneven split for each framework (`--uneven-batches`, a
genuine DDP hang, what the default sweep's deadlock demonstrations run) and an injected
stalled rank (a hang, with stacks). Runs go two at a time (the machine has 2 cores); the directories, the aggregate
and the report are cached for every test module of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA_ROOT = REPO / "results" / "test-datasets"  # shared with the runner's tests
COMMON = ["--dataset", "tiny", "--epochs", "2", "--batch-size", "128", "--fanouts", "6,5,4",
          "--data-root", str(DATA_ROOT)]

# With gloo, what a rank with one batch fewer runs into depends on what its partner does next. At
# batch 128 (6 steps against 5) the partner's gradient bucket meets the short rank's 8-byte
# epoch-end all-reduce, and gloo aborts on the size mismatch (crashed). At batch 384 (3 against 2),
# as at the default sweep's batch 1024 on `small`, the partner waits in DDP's forward while the
# short rank waits at the epoch's end: a genuine deadlock, as NCCL gives on GPUs.
UNEVEN_BATCH = ["--batch-size", "384"]

# run_id -> extra runner arguments (after COMMON, so that they override it)
GRID = {
    "pyg-sage-d1": ["--framework", "pyg", "--model", "sage", "--devices", "1", "--workers", "0"],
    "pyg-sage-d2": ["--framework", "pyg", "--model", "sage", "--devices", "2", "--workers", "0"],
    "dgl-sage-d1": ["--framework", "dgl", "--model", "sage", "--devices", "1", "--workers", "0"],
    "dgl-sage-d2": ["--framework", "dgl", "--model", "sage", "--devices", "2", "--workers", "0"],
    "pyg-sage-d2-uneven": ["--framework", "pyg", "--model", "sage", "--devices", "2", "--workers", "0",
                           "--uneven-batches", "--stall-floor", "3", *UNEVEN_BATCH],
    "dgl-sage-d2-uneven": ["--framework", "dgl", "--model", "sage", "--devices", "2", "--workers", "0",
                           "--uneven-batches", "--stall-floor", "3", *UNEVEN_BATCH],
    "pyg-sage-d2-stall": ["--framework", "pyg", "--model", "sage", "--devices", "2", "--workers", "0",
                          "--inject", "stall-rank", "--allow-fault-injection", "--stall-floor", "3"],
}
OK_RUNS = ("pyg-sage-d1", "pyg-sage-d2", "dgl-sage-d1", "dgl-sage-d2")
PARALLEL = 2
TIMEOUT_S = 300

_cache: dict = {}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _python(*args, cwd=REPO, timeout=TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def real_runs(tmp_path_factory) -> Path:
    """The directory holding one run directory per GRID entry (each with its result.json)."""
    if "runs" in _cache:
        return _cache["runs"]
    root = tmp_path_factory.mktemp("analysis-runs")
    # Prepare the dataset once, before runs that would otherwise race to create it.
    prep = _python("-m", "runners.datasets", "prepare", "tiny", "--root", str(DATA_ROOT))
    assert prep.returncode == 0, prep.stdout + prep.stderr
    pending = list(GRID.items())
    running = []
    while pending or running:
        while pending and len(running) < PARALLEL:
            run_id, extra = pending.pop(0)
            log = open(root / f"{run_id}.log", "w")
            cmd = [sys.executable, "-m", "runners.run", *COMMON, *extra, "--out", str(root / run_id)]
            running.append((run_id, subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=log,
                                                     stderr=subprocess.STDOUT), log))
        run_id, proc, log = running.pop(0)
        rc = proc.wait(timeout=TIMEOUT_S)
        log.close()
        assert rc == 0, f"{run_id}: runner exit {rc}\n" + (root / f"{run_id}.log").read_text()[-3000:]
        assert (root / run_id / "result.json").exists(), run_id
    _cache["runs"] = root
    return root


def aggregate_dir(tmp_path_factory) -> Path:
    """`python -m analysis.aggregate` over the real runs (through its command line)."""
    if "aggregate" not in _cache:
        runs = real_runs(tmp_path_factory)
        out = tmp_path_factory.mktemp("analysis-aggregate")
        res = _python("-m", "analysis.aggregate", "--out-dir", str(out), str(runs))
        assert res.returncode == 0, res.stdout + res.stderr
        _cache["aggregate"] = out
    return _cache["aggregate"]


def report_page(tmp_path_factory) -> Path:
    """`python -m analysis.report` on that aggregate; returns index.html (assets beside it)."""
    if "report" not in _cache:
        agg = aggregate_dir(tmp_path_factory)
        out = tmp_path_factory.mktemp("analysis-report") / "index.html"
        res = _python("-m", "analysis.report", "--aggregate", str(agg), "--out", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
        _cache["report"] = out
    return _cache["report"]
