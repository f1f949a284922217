"""`python -m runners.doctor` and the launcher's pre-flight checks."""

import dataclasses
import json
import subprocess
import sys

from runners.config import RunConfig
from runners.run import expected_output, preflight
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
    env = {"shm_bytes": 64 * 2**20, "open_files_limit": 128}
    pre = preflight(cfg, env, {"num_nodes": 232_965, "num_features": 602})
    assert len(pre["warnings"]) == 2
    assert "/dev/shm is 64 MiB" in pre["warnings"][0]
    assert pre["warnings"][1].startswith("open-files limit (`ulimit -n`) 128 is below the about ")
    assert "`ulimit -n 1024`" in pre["warnings"][1]
    check = pre["open_files"]
    assert check["soft_limit"] == 128 and 128 < check["needed_per_process_estimate"] < 256
    assert check["needed_per_process_estimate"] == sum(check["terms"].values())
    # The limit holds per process: 4 ranks x 8 workers need 256 descriptors in no single process.
    assert not preflight(cfg, dict(env, open_files_limit=256), {"num_nodes": 232_965, "num_features": 602}
                         )["open_files"]["warning"]
    ok = preflight(RunConfig(framework="pyg", model="sage", devices=1, batch_size=64, workers=1, dataset="tiny",
                             epochs=1, out="/tmp/x"), {"shm_bytes": 24 * 2**30, "open_files_limit": 20000},
                   {"num_nodes": 2000, "num_features": 32})
    assert ok["warnings"] == []


# The least `ulimit -n` measured to fail and to run (tiny, fan-outs 6,5,4, batch 128, 2 epochs):
# (framework, ranks, workers, failed at, ran at).
MEASURED_FD_LIMITS = [("pyg", 1, 1, 56, 64), ("pyg", 2, 2, 56, 80), ("pyg", 2, 4, 80, 96),
                      ("dgl", 1, 1, 80, 96), ("dgl", 2, 2, 96, 112)]


def test_descriptor_estimate_lies_between_the_limits_that_failed_and_ran():
    from runners.descriptors import fd_need

    for framework, devices, workers, failed, ran in MEASURED_FD_LIMITS:
        cfg = RunConfig(framework=framework, model="sage", devices=devices, batch_size=128, workers=workers,
                        dataset="tiny", epochs=2, out="/tmp/x")
        assert failed < fd_need(cfg)["per_process"] <= ran, (framework, devices, workers)
    no_workers = RunConfig(framework="pyg", model="sage", devices=2, batch_size=128, workers=0, dataset="tiny",
                           epochs=2, out="/tmp/x")
    assert fd_need(no_workers)["per_process"] is None


def test_preflight_warns_when_the_shared_memory_need_exceeds_what_is_free():
    # The small graph: PyG, 2 ranks x 2 workers, batches of 512 seeds (about 36 MiB modelled).
    meta = {"num_nodes": 6000, "num_edges": 60000, "num_features": 64, "num_classes": 10,
            "dataset_bytes": 2 * 2**20, "adjacency_bytes": 2**19}
    cfg = RunConfig(framework="pyg", model="sage", devices=2, batch_size=512, workers=2, dataset="small",
                    epochs=1, out="/tmp/x", fanouts=[6, 5, 4])
    env = {"shm_bytes": 2**30, "shm_free_bytes": 4 * 2**20, "open_files_limit": 20000}
    pre = preflight(cfg, env, meta)
    assert pre["shm_needed_estimate_bytes"] > 4 * 2**20 and pre["shm_free_bytes"] == 4 * 2**20
    assert len(pre["warnings"]) == 1
    assert pre["warnings"][0].startswith("/dev/shm has 4.00 MiB free (of 1.00 GiB)")
    assert "--shm-size" in pre["warnings"][0] and "fewer workers" in pre["warnings"][0]
    # Half of /dev/shm is free and that is enough: no warning. Without workers nothing is needed.
    assert preflight(cfg, dict(env, shm_free_bytes=2**29), meta)["warnings"] == []
    no_workers = RunConfig(framework="pyg", model="sage", devices=2, batch_size=512, workers=0, dataset="small",
                           epochs=1, out="/tmp/x", fanouts=[6, 5, 4])
    assert preflight(no_workers, env, meta)["warnings"] == []


def test_expected_output_grows_with_steps_epochs_and_the_time_limit():
    cfg = RunConfig(framework="pyg", model="sage", devices=2, batch_size=128, workers=1, dataset="tiny", epochs=4,
                    out="/tmp/x", fanouts=[6, 5, 4], time_limit_s=100)
    base = expected_output(cfg, {"num_train": 1300})
    assert base["steps_per_epoch"] == 6  # 1300 seeds / 2 ranks / 128 per batch, rounded up
    assert base["least_bytes"] < base["expected_bytes"] == sum(base["terms_bytes"].values())
    more = expected_output(dataclasses.replace(cfg, epochs=8, time_limit_s=200), {"num_train": 1300})
    assert more["terms_bytes"]["steps"] == 2 * base["terms_bytes"]["steps"]
    assert more["terms_bytes"]["samples"] == 2 * base["terms_bytes"]["samples"]
    assert more["least_bytes"] == base["least_bytes"]
    assert expected_output(dataclasses.replace(cfg, max_steps_per_epoch=2), {"num_train": 1300})["steps_per_epoch"] == 2
