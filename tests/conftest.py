"""Test-session settings: the markers, and the `slurm` fixture (a private SLURM cluster).

Every test carries one kind: `unit` (no real run, sweep or host: milliseconds to a second;
`make test-fast` runs these), `e2e` (real DDP runs, Snakemake sweeps, subprocess tools),
`hosts` (network-namespace hosts), `slurm` (a private SLURM cluster) or `gpu` (NVIDIA GPUs;
skipped without CUDA). A test is `unit` when its module is in UNIT_MODULES, it uses none of
the fixtures that launch runs (E2E_FIXTURES) and it is not marked otherwise itself; any other
test is `e2e`, so a new module is a slow one until it is listed here.
"""

import pytest

from runners.records.envinfo import visible_gpu_count


UNIT_MODULES = {
    "test_adaptive", "test_analysis", "test_architecture_doc", "test_collectives", "test_answers", "test_axes_report", "test_bad_requests", "test_datasets",
    "test_diagnosis", "test_fidelity_record", "test_interleave", "test_framework_drill", "test_gpu_counting", "test_rulebook_drill", "test_imports", "test_user_graphs", "test_memory", "test_noise",
    "test_partitioned_report", "test_partitions", "test_preflight", "test_process_walk", "test_project", "test_projection_report", "test_record", "test_registry", "test_result", "test_sections",
    "test_settings", "test_wakeups", "test_report_figures", "test_report_graphs", "test_speedup_gap", "test_stopping", "test_strategy", "test_sweep", "test_trim_variant", "test_twin", "test_work_gap",
}
# Fixtures that launch real runs or sweeps (tests/_runs.py) or make hosts or a cluster.
E2E_FIXTURES = {
    "runs_dir", "agg_dir", "page", "results", "agg", "all_tables", "top", "said", "page_ids", "ok_runs",
    "grid_top", "grid_runs", "real", "runs", "real_gap", "hosts", "slurm", "slurm_hosts",
}
KINDS = {
    "unit": "no real run, sweep or host; `make test-fast` runs these",
    "e2e": "real DDP runs, Snakemake sweeps or subprocess tools",
    "hosts": "network-namespace hosts (root)",
    "slurm": "a private SLURM cluster (root)",
    "gpu": "needs NVIDIA GPUs (NCCL, NVML); skipped without CUDA",
}


def pytest_configure(config):
    for name, what in KINDS.items():
        config.addinivalue_line("markers", f"{name}: {what}")


def kind_of(item) -> str:
    """The test's kind (KINDS): its own marker, else its module's and fixtures'."""
    own = [k for k in ("gpu", "slurm", "hosts", "e2e") if item.get_closest_marker(k)]
    if own:
        return own[0]
    module = item.module.__name__.rsplit(".", 1)[-1]
    if module == "test_hosts":
        return "hosts"
    if module == "test_slurm":
        return "slurm"
    if module in UNIT_MODULES and not E2E_FIXTURES & set(item.fixturenames):
        return "unit"
    return "e2e"


def pytest_collection_modifyitems(config, items):
    for item in items:
        kind = kind_of(item)
        if not item.get_closest_marker(kind):
            item.add_marker(getattr(pytest.mark, kind))
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or visible_gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible on this machine (run `make gpu-check` on one)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A private single-node SLURM cluster (tests/slurm_cluster.py) for the whole session,
    stopped by PID at its end; skips with the reason where this machine cannot run one."""
    from tests import slurm_cluster

    reason = slurm_cluster.why_not()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except slurm_cluster.Unavailable as exc:
        pytest.skip(f"could not start a private SLURM cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
