"""`python -m runners.doctor` and the launcher's pre-flight checks."""

import json
import subprocess
import sys

from runners.config import RunConfig
from runners.run import preflight
from tests.helpers import REPO


def test_doctor_finds_both_frameworks_usable():
    res = subprocess.run([sys.executable, "-m", "runners.doctor", "--json"], cwd=REPO, capture_output=True,
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


def test_doctor_text_names_the_sampler_backend():
    res = subprocess.run([sys.executable, "-m", "runners.doctor"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert "PyG sampler backend" in res.stdout and "dgl usable" in res.stdout


def test_preflight_warns_about_small_shm_and_fd_limit():
    cfg = RunConfig(framework="pyg", model="sage", devices=4, batch_size=2048, workers=8, dataset="small",
                    epochs=1, out="/tmp/x", fanouts=[10, 10, 10])
    env = {"shm_bytes": 64 * 2**20, "open_files_limit": 256}
    pre = preflight(cfg, env, {"num_nodes": 232_965, "num_features": 602})
    assert len(pre["warnings"]) == 2
    assert "/dev/shm is 64 MiB" in pre["warnings"][0] and "open-files limit 256" in pre["warnings"][1]
    ok = preflight(RunConfig(framework="pyg", model="sage", devices=1, batch_size=64, workers=1, dataset="tiny",
                             epochs=1, out="/tmp/x"), {"shm_bytes": 24 * 2**30, "open_files_limit": 20000},
                   {"num_nodes": 2000, "num_features": 32})
    assert ok["warnings"] == []
