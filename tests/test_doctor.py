"""`python -m runners.checks.doctor`, and the open-files estimate against measured limits (the other pre-flight
models: test_preflight)."""

import json
import subprocess
import sys

from runners.checks import doctor
from runners.config import RunConfig
from tests.helpers import REPO


def test_doctor_finds_both_frameworks_usable():
    # One doctor run (each imports and self-checks both frameworks): its JSON, and the text made
    # from the same findings.
    res = subprocess.run([sys.executable, "-m", "runners.checks.doctor", "--json"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["frameworks"]["pyg"]["usable"] and report["frameworks"]["dgl"]["usable"]
    assert report["frameworks"]["pyg"]["detail"] in ("pyg-lib", "torch-sparse")
    env = report["env"]
    assert env["torch"].startswith("2.2.1") and env["dgl"].startswith("2.1.0")
    assert env["cpu_cores"] >= 1 and env["open_files_limit"] > 0
    if not env["gpus"]:
        assert env["nvml"]["available"] is False and env["nvml"]["reason"]
    lines = doctor.text_lines(report)
    backend = [line for line in lines if line.startswith("pyg_sampler_backend ")]
    assert len(backend) == 1 and env["pyg_sampler_backend"] in backend[0], lines
    assert {line.split()[0] for line in lines if " usable " in line} == {"pyg", "dgl"}, lines


# The least `ulimit -n` measured to fail and to run (tiny, fan-outs 6,5,4, batch 128, 2 epochs):
# (framework, ranks, workers, failed at, ran at).
MEASURED_FD_LIMITS = [("pyg", 1, 1, 56, 64), ("pyg", 2, 2, 56, 80), ("pyg", 2, 4, 80, 96),
                      ("dgl", 1, 1, 80, 96), ("dgl", 2, 2, 96, 112)]


def test_descriptor_estimate_lies_between_the_limits_that_failed_and_ran():
    from runners.launch.descriptors import fd_need

    for framework, devices, workers, failed, ran in MEASURED_FD_LIMITS:
        cfg = RunConfig(framework=framework, model="sage", devices=devices, batch_size=128, workers=workers,
                        dataset="tiny", epochs=2, out="/tmp/x")
        assert failed < fd_need(cfg)["per_process"] <= ran, (framework, devices, workers)
    no_workers = RunConfig(framework="pyg", model="sage", devices=2, batch_size=128, workers=0, dataset="tiny",
                           epochs=2, out="/tmp/x")
    assert fd_need(no_workers)["per_process"] is None
