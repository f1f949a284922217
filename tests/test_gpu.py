"""The GPU path: real NCCL runs on real GPUs (marker `gpu`; skipped without CUDA).

Run them with `make gpu-check` (or `pytest -m gpu tests`) on a machine with NVIDIA GPUs.
"""

import csv
import json

import pytest

from tests.helpers import run_config

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def _result(out):
    return json.loads((out / "result.json").read_text())


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_nccl_run_trains_evaluates_and_samples_its_own_gpu(tmp_path, framework):
    """Evaluation's all-reduce on the device (NCCL takes CUDA tensors only), epoch times synchronised,
    and one NVML series per rank from the GPU that rank really trains on (matched by PCI bus id)."""
    from runners.rank.probes import cuda_pci_bus_id, pci_key
    from runners.records import envinfo

    unavailable = envinfo.framework_unavailable(framework, envinfo.collect())
    if unavailable:  # a lane without it (DGL on a current torch) records its runs as skipped
        pytest.skip(unavailable)
    devices = min(2, _gpus())
    out = tmp_path / framework
    proc = run_config(out, framework=framework, devices=devices, epochs=2,
                      extra=["--device", "cuda", "--breakdown", "on", "--nvml-sample-interval", "0.1"])
    res = _result(out)
    assert res["status"] == "ok", proc.stdout[-3000:]
    assert res["config"]["backend"] == "nccl"
    assert [v["epoch"] for v in res["validation"]] == [0, 1]
    assert res["summary"]["step_breakdown_s"], "breakdown on: phases are synchronised and recorded"
    for rank in range(devices):
        info = json.loads((out / f"rank{rank}" / "rank.json").read_text())
        assert info["nvml"]["available"], info["nvml"]
        assert pci_key(info["nvml"]["pci_bus_id"]) == pci_key(cuda_pci_bus_id(rank))
        rows = list(csv.DictReader(open(out / f"rank{rank}" / "nvml.csv")))
        assert rows and {r["gpu"] for r in rows} == {str(info["nvml"]["gpu"])}


def test_unsynchronised_phases_are_not_recorded(tmp_path):
    out = tmp_path / "run"
    proc = run_config(out, framework="pyg", devices=1, epochs=1, extra=["--device", "cuda", "--breakdown", "off"])
    res = _result(out)
    assert res["status"] == "ok", proc.stdout[-3000:]
    assert res["probes"]["phases_recorded"] is False
    assert res["summary"]["step_breakdown_s"] is None
    rows = list(csv.DictReader(open(out / "rank0" / "steps.csv")))
    assert rows and all(r["forward_s"] == "" and r["step_s"] != "" for r in rows)


def test_pyg_on_gpu_runs_with_the_installed_sampler_backend(tmp_path):
    """torch-sparse serves a GPU run (sampling is on the CPU); the backend is recorded."""
    out = tmp_path / "run"
    proc = run_config(out, framework="pyg", model="gat", devices=1, epochs=1, extra=["--device", "cuda"])
    res = _result(out)
    assert res["status"] == "ok", proc.stdout[-3000:]
    assert res["env"]["pyg_sampler_backend"] in ("pyg-lib", "torch-sparse")
    assert res["env"]["pyg_sampler_backend"] in res["config"]["adapter_choices"]["sampler"]


def test_nvml_index_found_by_pci_bus_id_is_the_same_gpu_as_torchs():
    import pynvml
    import torch

    from runners.rank.probes import cuda_pci_bus_id, nvml_index_of

    pynvml.nvmlInit()
    try:
        for i in range(torch.cuda.device_count()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index_of(pynvml, cuda_pci_bus_id(i)))
            name = pynvml.nvmlDeviceGetName(handle)
            name = name if isinstance(name, str) else name.decode()
            assert name == torch.cuda.get_device_name(i)
    finally:
        pynvml.nvmlShutdown()
