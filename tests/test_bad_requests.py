"""Bad requests and runs that measure nothing, as real runner processes: a loss that becomes
NaN ends as `diverged` (never `ok`), impossible runs are refused before launch (or recorded
as skipped in a sweep, or launched with --force-launch), an unwritable --out is one line."""

import json

import pytest

from analysis import aggregate
from tests.helpers import run_config


@pytest.mark.e2e  # a real run
def test_a_loss_that_becomes_nan_ends_the_run_as_diverged(tmp_path):
    # Adam with a learning rate of 1e30 sends the weights to ~1e30 at the first step: the
    # next forward pass overflows and the loss is NaN, on every rank through the all-reduce.
    out = tmp_path / "run"
    res = run_config(out, framework="pyg", devices=2, epochs=5, extra=["--lr", "1e30"])
    assert res.returncode == 0, res.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "diverged" and result["summary"] is None, result["diagnosis"]
    diag = result["diagnosis"]
    assert diag["cause"] == "diverged" and "learning rate" in diag["remedy"]
    first = diag["first_nonfinite"]
    assert first["epoch"] == 0 and first["loss"] in ("nan", "inf")
    assert diag["summary"].startswith(f"diverged: loss {first['loss']} at epoch 0 step {first['step']}")
    # Every rank stopped after the epoch it diverged in: no further epoch, no hang.
    assert sorted(e["rank"] for e in result["epochs"]) == [0, 1] and {e["epoch"] for e in result["epochs"]} == {0}
    assert "DIVERGED pyg/sage" in res.stdout
    # The analysis lists it as a failure and never times it.
    agg = aggregate.aggregate([out])
    assert list(agg.runs["status"]) == ["diverged"] and [f["diagnosis"]["cause"] for f in agg.failures] == ["diverged"]


@pytest.mark.parametrize("extra,why", [
    (["--devices", "3", "--workers", "8"], "= 27 processes on"),
    (["--devices", "1", "--hidden", "200000"], "exceeds this machine's memory"),
], ids=["processes", "memory"])
def test_an_impossible_run_is_refused_before_launch(tmp_path, extra, why):
    from runners.records import envinfo

    if "processes" in why and envinfo.cpu_cores() * 8 >= 27:
        pytest.skip("this machine has cores enough for 27 processes")
    out = tmp_path / "run"
    res = run_config(out, epochs=1, extra=extra, timeout=120)
    assert res.returncode == 2, res.stdout[-3000:]
    lines = [line for line in res.stdout.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and why in lines[0] and "--force-launch" in lines[0], res.stdout
    assert "Traceback" not in res.stdout and "launching" not in res.stdout
    assert not out.exists() and not list(tmp_path.glob(".run.run-*"))

    # A sweep records the point as skipped, with the reason; nothing is launched.
    res = run_config(out, epochs=1, extra=[*extra, "--skip-unavailable"], timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "skipped" and result["diagnosis"]["cause"] == "over_capacity"
    assert why in result["diagnosis"]["summary"]


def test_force_launch_goes_on_and_is_recorded(tmp_path, capsys):
    from runners.config import build_parser, config_from_args
    from runners.launch import preflight
    from runners.records import envinfo

    argv = ["--framework", "pyg", "--model", "sage", "--devices", "1", "--batch-size", "64", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--hidden", "200000", "--out", str(tmp_path / "run")]
    env = envinfo.collect()
    meta = {"num_nodes": 2000, "num_edges": 20000, "num_features": 32, "num_classes": 5, "num_train": 1300}
    cfg = config_from_args(build_parser().parse_args(argv), 0, env["cpu_cores"])
    assert preflight.check_capacity(cfg, env, argv, meta) == 2
    cfg = config_from_args(build_parser().parse_args([*argv, "--force-launch"]), 0, env["cpu_cores"])
    assert preflight.check_capacity(cfg, env, argv, meta) is None
    assert "launching anyway (--force-launch)" in capsys.readouterr().out
    assert cfg.to_json()["force_launch"] is True and "force_launch" not in cfg.identity("h")["settings"]


@pytest.mark.parametrize("out", ["/proc/gnnscale-test/run", "/sys/gnnscale-test"])
def test_an_unwritable_out_is_one_line_before_any_work(out):
    res = run_config(out, epochs=1, timeout=120)
    assert res.returncode == 2, res.stdout[-3000:]
    assert f"--out {out}: cannot write into" in res.stdout and "Traceback" not in res.stdout
