"""The projection's check past the device counts it is fitted on (issue 57, item 5), for real: a
1-, 2- and 3-process grid of `tiny`, aggregated, and `python -m analysis.projection` comparing the
3-process runs with their projection from the 1- and 2-process runs alone. A machine with the
cores runs the same command on 4 and 8 processes (#53)."""

import subprocess
import sys

import pandas as pd

from analysis.projection import predict
from tests._runs import DATA_ROOT, REPO, _env

DEVICES, REPEATS = (1, 2, 3), 2


def test_three_processes_are_checked_against_the_projection_from_one_and_two(tmp_path):
    prep = subprocess.run([sys.executable, "-m", "runners.datasets", "prepare", "tiny", "--root", str(DATA_ROOT)],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert prep.returncode == 0, prep.stdout + prep.stderr
    for d in DEVICES:
        for rep in range(REPEATS):
            out = tmp_path / "runs" / f"pyg-sage-d{d}-r{rep}"
            run = subprocess.run(
                [sys.executable, "-m", "runners.run", "--framework", "pyg", "--model", "sage", "--devices", str(d),
                 "--workers", "0", "--batch-size", "128", "--dataset", "tiny", "--data-root", str(DATA_ROOT),
                 "--epochs", "3", "--fanouts", "6,5,4", "--threads-per-rank", "1", "--repeat", str(rep),
                 "--out", str(out)], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
            assert run.returncode == 0 and (out / "result.json").exists(), run.stdout[-3000:] + run.stderr[-3000:]
    agg = tmp_path / "aggregate"
    res = subprocess.run([sys.executable, "-m", "analysis.aggregate", "--out-dir", str(agg), str(tmp_path / "runs")],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    cli = subprocess.run([sys.executable, "-m", "analysis.projection", "--aggregate", str(agg), "--devices", "4,8",
                          "--draws", "50"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "Past the fitted 1 and 2 devices: each measured point as projected from the 1 and 2-device runs" \
        in cli.stdout, cli.stdout
    assert "measured points past 2 devices inside their intervals" in cli.stdout
    # the 3-process point is predicted from the 1- and 2-process runs alone: without the 3-process
    # runs in the aggregate the prediction is the same
    runs = pd.read_csv(agg / "runs.csv")
    epochs, steps = pd.read_csv(agg / "epochs.csv"), pd.read_csv(agg / "steps.csv")
    full = predict.beyond_fit(predict.project(runs, epochs, steps, [4, 8], draws=20))
    assert list(full["devices"]) == [3] and full["measured_s"].notna().all()
    fitted = runs[runs["devices"] < 3]
    alone = predict.project(fitted, epochs[epochs["run_id"].isin(fitted["run_id"])],
                            steps[steps["run_id"].isin(fitted["run_id"])], [3], draws=20)["projection"]
    assert alone.loc[alone["devices"] == 3, "predicted_s"].iloc[0] == full["predicted_s"].iloc[0]
