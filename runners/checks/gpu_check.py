"""One-command check of the GPU path: `make gpu-check` (python -m runners.checks.gpu_check).

On a machine with one or more NVIDIA GPUs it runs, in order: the doctor; one short real run
per registered framework x model at 1 and 2 GPUs (NCCL, step breakdown on, so every phase edge
is synchronised); the aggregation and report of those runs; two faults injected into a 1-GPU run
(a rank frozen by SIGSTOP, a rank that crashes), each of which the watchdog must diagnose, with
no process left holding the GPU afterwards (nvidia-smi); and the tests marked `gpu`. It runs
in the lane it is started from (`make gpu-check LANE=own PYTHON=python3` reuses the machine's
CUDA torch). A point the machine or the lane cannot run is recorded as skipped with its reason,
as the sweep records it: 2 GPUs on a one-GPU machine, DGL in a lane whose torch it does not
import. It prints the GPUs and driver, one table of runs (status, median epoch time, NVML samples
that reached the report's aggregate, phases recorded) and one of faults, and exits non-zero if a point that could run did not run cleanly. On a machine
without a GPU it fails at once and says so: a GPU check that passes without a GPU would be
a lie.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from runners.adapters.registry import FRAMEWORK_NAMES as FRAMEWORKS, MODEL_NAMES as MODELS
from runners.records import envinfo
# Points a machine or a lane cannot run are recorded with their reason, not failures of the check.
from runners.records.rundir import RunDir
from runners.watch.diagnosis import SKIP_CAUSES


def _run(cmd: list, log: Path) -> int:
    print("[gpu-check] $ " + " ".join(cmd), flush=True)
    with open(log, "w") as fh:
        return subprocess.run(cmd, cwd=envinfo.REPO_ROOT, stdout=fh, stderr=subprocess.STDOUT).returncode


# An epoch of `small` takes about 0.1 s on an H200: NVML (a driver query, nothing read from the
# rank's process) samples often enough to draw a run of a few seconds. The CPU sampler keeps its
# once a second: it reads the rank's /proc smaps, and on the second H200 check, sampling 4 times a
# second, steady steps were 2.4 times slower (on a machine also slower to set up: unresolved).
SAMPLING = ("--nvml-sample-interval", "0.1")


def run_points(py: str, out: Path, dataset: str, epochs: int) -> list:
    """One short NCCL run per framework x model at 1 and 2 GPUs; their run directories."""
    runs = []
    for framework in FRAMEWORKS:
        for model in MODELS:
            for devices in (1, 2):
                run_dir = out / "runs" / f"{framework}-{model}-d{devices}"
                _run([py, "-m", "runners.run", "--framework", framework, "--model", model,
                      "--devices", str(devices), "--batch-size", "1024", "--workers", "0",
                      "--dataset", dataset, "--epochs", str(epochs), "--device", "cuda",
                      "--breakdown", "on", "--skip-unavailable", *SAMPLING, "--out", str(run_dir)],
                     out / f"{run_dir.name}.log")
                runs.append(run_dir)
    return runs


# The faults the check injects on the GPU and what the watchdog must call each (status, cause):
# a rank frozen by SIGSTOP inside backward, and a rank that raises mid-epoch.
FAULTS = {"freeze-rank": ("hang", "stalled_rank"), "crash-rank": ("crashed", "crash")}


def gpu_processes() -> list:
    """'pid (MiB)' of every process holding a GPU, as nvidia-smi lists them; None where it cannot."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    res = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        return None
    return [f"{pid.strip()} ({mib.strip()} MiB)" for pid, mib in
            (line.split(",", 1) for line in res.stdout.splitlines() if "," in line)]


def run_faults(py: str, out: Path, dataset: str, stall_floor: float) -> list:
    """Each fault of FAULTS injected into a 1-GPU PyG run; (fault, run dir, GPU processes after)."""
    done = []
    for fault in FAULTS:
        run_dir = out / "faults" / fault
        _run([py, "-m", "runners.run", "--framework", "pyg", "--model", "sage", "--devices", "1",
              "--batch-size", "1024", "--workers", "0", "--dataset", dataset, "--epochs", "3",
              "--device", "cuda", "--inject", fault, "--allow-fault-injection",
              "--stall-floor", str(stall_floor), "--out", str(run_dir)], out / f"fault-{fault}.log")
        done.append((fault, run_dir, gpu_processes()))
    return done


def print_faults(faults: list) -> list:
    """The table of injected faults; the names of those not diagnosed or that left a GPU process."""
    failures = []
    print(f"\n{'fault':<14} {'status':<8} {'cause':<14} {'expected':<22} GPU processes after")
    for fault, run_dir, held in faults:
        try:
            res = json.loads(RunDir(run_dir).result.read_text())
        except (OSError, ValueError):
            res = {"status": "missing"}
        cause = (res.get("diagnosis") or {}).get("cause")
        want = FAULTS[fault]
        print(f"{fault:<14} {res['status']:<8} {str(cause):<14} {'/'.join(want):<22} "
              f"{'unknown (nvidia-smi failed)' if held is None else ', '.join(held) or 'none'}")
        if (res["status"], cause) != want or held:
            failures.append(fault)
    return failures


def analyse(apy: str, out: Path, runs: list) -> tuple:
    """Aggregate and report the runs; (report path, NVML samples per run id in the aggregate)."""
    agg_dir, report = out / "aggregate", out / "report" / "index.html"
    _run([apy, "-m", "analysis.aggregate", "--out-dir", str(agg_dir), *map(str, runs)], out / "aggregate.log")
    _run([apy, "-m", "analysis.report", "--aggregate", str(agg_dir), "--out", str(report)], out / "report.log")
    try:
        import pandas as pd

        return report, pd.read_csv(agg_dir / "nvml.csv").groupby("run_id").size().to_dict()
    except (ImportError, OSError, ValueError, KeyError):
        return report, {}


def print_runs(runs: list, nvml_rows: dict) -> list:
    """The table of runs; the names of those that could run and did not run cleanly."""
    failures = []
    print(f"\n{'run':<18} {'status':<8} {'epoch s':>8} {'NVML samples':>13} {'phases':>7}")
    for run_dir in runs:
        try:
            res = json.loads(RunDir(run_dir).result.read_text())
        except (OSError, ValueError):
            res = {"status": "missing", "summary": None, "probes": {}}
        summary = res.get("summary") or {}
        epoch = summary.get("median_epoch_time_s")
        samples = nvml_rows.get(res.get("run_id", run_dir.name), 0)
        phases = bool(summary.get("step_breakdown_s"))
        print(f"{run_dir.name:<18} {res['status']:<8} {epoch if epoch is not None else float('nan'):>8.3f} "
              f"{samples:>13} {'yes' if phases else 'no':>7}")
        if res["status"] == "skipped" and (res.get("diagnosis") or {}).get("cause") in SKIP_CAUSES:
            print(f"{'':<18} {res['diagnosis']['summary']}")
        elif res["status"] != "ok" or samples == 0 or not phases:
            failures.append(run_dir.name)
    return failures


def main(argv=None) -> int:
    """Doctor, runs, report and gpu tests in this Python's lane; exit 1 on any failure."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="results/gpu-check", help="where the runs, aggregate and report go")
    p.add_argument("--dataset", default="small")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--stall-floor", type=float, default=15.0,
                   help="the watchdog's stall floor (s) for the injected faults: the frozen rank's hang "
                        "is declared after it")
    p.add_argument("--no-faults", action="store_true", help="skip the injected faults")
    p.add_argument("--analysis-python", default=sys.executable,
                   help="the Python with the analysis packages (the pair lane's); the lane's own if it lacks one")
    args = p.parse_args(argv)
    out = (envinfo.REPO_ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    env = envinfo.collect()
    if envinfo.visible_gpu_count(env) == 0:
        print(f"gpu-check: FAILED: no GPU on this machine (NVML: {env['nvml']['reason'] or 'no GPUs'}; "
              "torch sees none). Run it on a machine with an NVIDIA GPU and the CUDA builds "
              "(docs/setup.md, 'GPU machines').", file=sys.stderr)
        return 1
    print(f"GPUs: {', '.join(g['name'] for g in env['gpus'])}; driver {env['nvml']['driver']}; "
          f"torch {env['torch']}", flush=True)
    if _run([py, "-m", "runners.checks.doctor"], out / "doctor.log") != 0:
        print(f"gpu-check: FAILED: the doctor found an unusable framework; see {out / 'doctor.log'}",
              file=sys.stderr)
        return 1
    runs = run_points(py, out, args.dataset, args.epochs)
    apy = args.analysis_python if Path(args.analysis_python).exists() else py
    report, nvml_rows = analyse(apy, out, runs)
    faults = [] if args.no_faults else run_faults(py, out, args.dataset, args.stall_floor)
    # Only the files that hold `gpu` tests: the others may import what a GPU image lacks (Snakemake).
    gpu_files = [str(f) for f in sorted((envinfo.REPO_ROOT / "tests").glob("test_*.py")) if "mark.gpu" in f.read_text()]
    tests_rc = _run([py, "-m", "pytest", "-q", "-m", "gpu", *gpu_files], out / "pytest-gpu.log")
    failures = print_runs(runs, nvml_rows) + print_faults(faults)
    print(f"\ngpu tests (pytest -m gpu): {'passed' if tests_rc == 0 else f'FAILED (exit {tests_rc})'}; "
          f"log {out / 'pytest-gpu.log'}")
    print(f"report: {report}  (lane {env['lane']['lane']}, torch {env['torch']})")
    if failures or tests_rc != 0:
        print(f"gpu-check: FAILED: {', '.join(failures) or 'gpu tests'}; logs in {out}", file=sys.stderr)
        return 1
    print("gpu-check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
