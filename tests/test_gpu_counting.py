"""Counting GPUs, and grid points that ask for more GPUs than the node has (CPU-testable)."""

import dataclasses
import html
import json
import re
import shutil

import jsonschema
import pytest

from analysis import aggregate
from analysis.report import render
from runners.config import ConfigError, build_parser, config_from_args
from runners.records import envinfo
from runners.records.result import SCHEMA_PATH
from runners.records.settle import record_skipped
from runners.run import check_lane
from tests import _runs


@pytest.mark.parametrize("mask,expected", [(None, 3), ("0,1", 2), ("", 0), ("2", 1), ("1,-1,0", 1)])
def test_gpu_count_honours_cuda_visible_devices(monkeypatch, mask, expected):
    if mask is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    three = {"gpus": [{"index": i} for i in range(3)]}
    assert envinfo.visible_gpu_count(three) == expected


def test_this_machine_counts_what_it_has():
    """No NVIDIA driver here: NVML sees nothing and torch is not asked (nor needed)."""
    import os

    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver")
    assert envinfo.visible_gpu_count() == 0


def _cfg(tmp_path, *extra):
    argv = ["--framework", "pyg", "--model", "sage", "--devices", "4", "--batch-size", "64", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--device", "cuda", "--out", str(tmp_path / "d4"), *extra]
    return argv, config_from_args(build_parser().parse_args(argv), visible_gpus=2, cpu_cores=2)


def test_too_many_devices_is_an_error_on_the_command_line(tmp_path):
    with pytest.raises(ConfigError, match=r"--devices 4: only 2 GPU\(s\) visible.*allowed: 1\.\.2"):
        _cfg(tmp_path)


@pytest.mark.e2e  # a real run
def test_a_sweep_records_too_many_devices_as_skipped(tmp_path, tmp_path_factory):
    argv, cfg = _cfg(tmp_path, "--skip-unavailable")
    assert "--devices 4" in cfg.skip_reason
    env = envinfo.collect()
    # as the launcher does before it records anything (runners.run.parse_and_check)
    cfg = dataclasses.replace(cfg, lane=check_lane(cfg.lane, env["lane"]))
    assert record_skipped(cfg, env, argv) == 0
    result = json.loads((tmp_path / "d4" / "result.json").read_text())
    jsonschema.validate(result, json.loads(SCHEMA_PATH.read_text()))
    assert result["status"] == "skipped" and "only 2 GPU(s)" in result["diagnosis"]["summary"]

    # The report still renders, shows the point as skipped, and does not call it a failure.
    runs = _runs.real_runs(tmp_path_factory)
    shutil.copytree(runs / "dgl-sage-d1", tmp_path / "dgl-sage-d1")
    agg = aggregate.aggregate([tmp_path / "d4", tmp_path / "dgl-sage-d1"])
    assert set(agg.runs["status"]) == {"ok", "skipped"}
    assert agg.failures == []
    page = render.render(agg, tmp_path / "report" / "index.html", tmp_path / "report").read_text()
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    assert "1 ok, 1 skipped" in text and "not_enough_devices" in text


def test_too_many_gpus_is_skipped_before_the_frameworks_gpu_checks(tmp_path, monkeypatch):
    """On a 1-GPU node a 2-GPU DGL point is skipped for its GPU count, whatever DGL is installed:
    it never launches, so DGL's refusal of a CPU-only build on GPUs does not apply (the first GPU
    check refused it instead, naming "the installed DGL None" where DGL was absent)."""
    from runners.run import parse_and_check

    monkeypatch.setattr(envinfo, "visible_gpu_count", lambda *a: 1)  # a node with one GPU
    argv = ["--framework", "dgl", "--model", "sage", "--devices", "2", "--batch-size", "64", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--device", "cuda", "--skip-unavailable",
            "--out", str(tmp_path / "d2")]
    cfg, _, cause = parse_and_check(argv)
    assert cause == "not_enough_devices", cause
    assert "--devices 2: only 1 GPU(s)" in cfg.skip_reason


def test_gpu_check_fails_loudly_without_a_gpu():
    import subprocess
    import sys

    if envinfo.visible_gpu_count() > 0:
        pytest.skip("this machine has a GPU: `make gpu-check` runs the real check")
    proc = subprocess.run([sys.executable, "-m", "runners.checks.gpu_check", "--out", "results/gpu-check-test"],
                          cwd=envinfo.REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "FAILED: no GPU" in proc.stderr
