"""Shared helpers of the tests: run the real runner on the tiny dataset."""

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA_ROOT = REPO / "results" / "test-datasets"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runner_argv(out, framework="pyg", model="sage", devices=2, workers=0, epochs=2, batch_size=128,
                dataset="tiny", extra=()) -> list:
    """The command line of `python -m runners.run` for one configuration on the test datasets."""
    return [sys.executable, "-m", "runners.run", "--framework", framework, "--model", model,
            "--devices", str(devices), "--batch-size", str(batch_size), "--workers", str(workers),
            "--dataset", dataset, "--epochs", str(epochs), "--fanouts", "6,5,4",
            "--data-root", str(DATA_ROOT), "--out", str(out), *extra]


def live_dir(out) -> Path:
    """Where a run of `out` writes while it runs: its newest staging directory (runners.records.history),
    or `out` itself when there is none (the run has finished, or not begun)."""
    from runners.records import history

    found = history.stagings(Path(out))
    return found[-1] if found else Path(out)


def run_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def run_config(out, framework="pyg", model="sage", devices=2, workers=0, epochs=2, batch_size=128,
               dataset="tiny", extra=(), timeout=600):
    """Run `python -m runners.run` for real and return the CompletedProcess (stdout+stderr merged)."""
    cmd = runner_argv(out, framework, model, devices, workers, epochs, batch_size, dataset, extra)
    return subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=run_env())


def steps_losses(path) -> list:
    with open(path, newline="") as fh:
        return [float(r["loss"]) for r in csv.DictReader(fh)]
