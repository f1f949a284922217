"""The pre-flight models (runners.launch.preflight): pure functions of the configuration, the machine's
description and the dataset's sizes; nothing is launched."""

import dataclasses
import json

import pytest

from runners.config import RunConfig
from runners.launch import preflight
from runners.launch.preflight import expected_output
from runners.memory.model import model_peak

META = {"num_nodes": 2000, "num_edges": 20000, "num_features": 32, "num_classes": 5, "num_train": 1300,
        "dataset_bytes": 2**20, "adjacency_bytes": 2**18}
ROOMY = {"cpu_cores": 64, "memory_bytes": 2**40, "shm_bytes": 2**34, "shm_free_bytes": 2**34,
         "open_files_limit": 20000}


def _cfg(**kw) -> RunConfig:
    base = dict(framework="pyg", model="sage", devices=2, batch_size=128, workers=1, dataset="tiny", epochs=2,
                out="/tmp/unused", fanouts=[6, 5, 4])
    base.update(kw)
    return RunConfig(**base)


def test_preflight_warns_about_small_shm_and_fd_limit():
    cfg = RunConfig(framework="pyg", model="sage", devices=4, batch_size=2048, workers=8, dataset="small",
                    epochs=1, out="/tmp/x", fanouts=[10, 10, 10])
    env = {"shm_bytes": 64 * 2**20, "open_files_limit": 128}
    reddit = {"num_nodes": 232_965, "num_features": 602}
    pre = preflight.preflight(cfg, env, reddit)
    assert len(pre["warnings"]) == 2
    assert "/dev/shm is 64 MiB" in pre["warnings"][0]
    assert pre["warnings"][1].startswith("open-files limit (`ulimit -n`) 128 is below the about ")
    assert "`ulimit -n 1024`" in pre["warnings"][1]
    check = pre["open_files"]
    assert check["soft_limit"] == 128 and 128 < check["needed_per_process_estimate"] < 256
    assert check["needed_per_process_estimate"] == sum(check["terms"].values())
    # The limit holds per process: 4 ranks x 8 workers need 256 descriptors in no single process.
    assert not preflight.preflight(cfg, dict(env, open_files_limit=256), reddit)["open_files"]["warning"]
    tiny = RunConfig(framework="pyg", model="sage", devices=1, batch_size=64, workers=1, dataset="tiny", epochs=1,
                     out="/tmp/x")
    ok = preflight.preflight(tiny, {"shm_bytes": 24 * 2**30, "open_files_limit": 20000},
                             {"num_nodes": 2000, "num_features": 32})
    assert ok["warnings"] == []


def test_preflight_warns_when_the_shared_memory_need_exceeds_what_is_free():
    # The small graph: PyG, 2 ranks x 2 workers, batches of 512 seeds (about 36 MiB modelled).
    meta = {"num_nodes": 6000, "num_edges": 60000, "num_features": 64, "num_classes": 10,
            "dataset_bytes": 2 * 2**20, "adjacency_bytes": 2**19}
    cfg = RunConfig(framework="pyg", model="sage", devices=2, batch_size=512, workers=2, dataset="small",
                    epochs=1, out="/tmp/x", fanouts=[6, 5, 4])
    env = {"shm_bytes": 2**30, "shm_free_bytes": 4 * 2**20, "open_files_limit": 20000}
    pre = preflight.preflight(cfg, env, meta)
    assert pre["shm_needed_estimate_bytes"] > 4 * 2**20 and pre["shm_free_bytes"] == 4 * 2**20
    assert len(pre["warnings"]) == 1
    assert pre["warnings"][0].startswith("/dev/shm has 4.00 MiB free (of 1.00 GiB)")
    assert "--shm-size" in pre["warnings"][0] and "fewer workers" in pre["warnings"][0]
    # Half of /dev/shm is free and that is enough: no warning. Without workers nothing is needed.
    assert preflight.preflight(cfg, dict(env, shm_free_bytes=2**29), meta)["warnings"] == []
    no_workers = dataclasses.replace(cfg, workers=0)
    assert preflight.preflight(no_workers, env, meta)["warnings"] == []


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


def test_shm_need_counts_waiting_batches_and_shared_copies_per_rank():
    model = model_peak(_cfg(workers=2), META)
    inp = model["inputs"]
    per_batch = inp["batch_bytes"] if inp["workers_gather_features"] else inp["batch_structure_bytes"]
    assert preflight.shm_need(model) == inp["ranks"] * (inp["dataset_copy_per_rank_bytes"]
                                                         + inp["batches_waiting_per_rank"] * per_batch) > 0
    assert preflight.shm_need(model_peak(_cfg(workers=0), META)) == 0


def test_the_replicated_memory_model_is_runners_memory_model():
    cfg = _cfg()
    assert preflight.memory_model(cfg, META) == model_peak(cfg, META)


def test_impossible_names_too_many_processes_or_too_little_memory():
    assert preflight.impossible(_cfg(), ROOMY, META) is None
    crowded = preflight.impossible(_cfg(devices=3, workers=8), dict(ROOMY, cpu_cores=2), META)
    assert crowded.startswith("3 ranks x (1 + 8 loader workers) = 27 processes on 2 cores")
    peak = preflight.memory_model(_cfg(), META)["total_bytes"]
    small = preflight.impossible(_cfg(), dict(ROOMY, memory_bytes=peak // 2), META)
    assert "exceeds this machine's memory" in small and "OOM killer" in small
    capped = preflight.impossible(_cfg(memory_limit_bytes=peak // 2), ROOMY, META)
    assert "exceeds the --memory-limit cap" in capped
    # a cap above the model wins over a machine below it
    assert preflight.impossible(_cfg(memory_limit_bytes=2 * peak), dict(ROOMY, memory_bytes=peak // 2), META) is None


def test_check_capacity_refuses_forces_or_skips(tmp_path, capsys):
    env = dict(ROOMY, memory_bytes=1)
    assert preflight.check_capacity(_cfg(), ROOMY, [], META) is None
    assert preflight.check_capacity(_cfg(), env, [], META) == 2
    said = capsys.readouterr()
    assert said.err.startswith("error: the modelled peak host memory") and "--force-launch" in said.err
    assert preflight.check_capacity(_cfg(force_launch=True), env, [], META) is None
    assert capsys.readouterr().out.startswith("[gnnscale] warning: launching anyway (--force-launch): ")
    point = tmp_path / "point"
    assert preflight.check_capacity(_cfg(skip_unavailable=True, out=str(point)), env, [], META) == 0
    result = json.loads((point / "result.json").read_text())
    assert result["status"] == "skipped" and result["diagnosis"]["cause"] == "over_capacity"


@pytest.mark.parametrize("free,warned", [(2**40, False), (2**21, True)])
def test_preflight_with_output_warns_when_the_output_may_not_fit(capsys, free, warned):
    space = {**expected_output(_cfg(), META), "free_bytes": free}
    pre = preflight.preflight_with_output(_cfg(), ROOMY, META, space)
    assert pre["output"] is space
    assert any("if it fills up, the run is stopped without a result (exit 3)" in w for w in pre["warnings"]) == warned
    assert ("[gnnscale] pre-flight warning: --out's filesystem has" in capsys.readouterr().out) == warned
