"""The sweep's grammar (runners/sweep.py), without Snakemake: names parse back for every kind
and prefix, the configs' runs are what the workflow plans, the order is reproducible, and a
config the schema accepts but the sweep cannot run is refused by name.

The counts and the order below are what `snakemake -n` planned for these configs before the
grammar moved out of workflows/rules/common.smk (tests/test_workflow.py checks the counts
through Snakemake itself).
"""

import copy
import functools
import itertools
import os
import sys
from pathlib import Path

import pytest
import yaml

from analysis.repeats import plan_points
from runners import settings, sweep
from runners.adapters import registry

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache
def _validated(name: str) -> dict:
    from snakemake.utils import validate  # the workflow's own check, which fills the defaults

    config = yaml.safe_load((ROOT / "config" / name).read_text())
    validate(config, str(ROOT / "workflows" / "schemas" / "config.schema.yaml"))
    return config


def config(name: str = "config.yaml", **blocks) -> dict:
    """A config of config/ as the workflow sees it, with top-level keys replaced."""
    return copy.deepcopy(_validated(name)) | blocks


def runs_of(cfg: dict) -> list:
    return sweep.first_round(cfg, sweep.resolve_devices(cfg))


# --- names ----------------------------------------------------------------------------------


EVERY_PREFIX = list(itertools.product(sweep.KIND_PREFIXES, sweep.LANE_PREFIXES, sweep.LOADER_PREFIXES,
                                      sweep.TRIM_PREFIXES, sweep.PART_PREFIXES))


@pytest.mark.parametrize("kind,lane,loader,trim,part_method", EVERY_PREFIX)
def test_every_name_parses_back_to_its_run(kind, lane, loader, trim, part_method):
    for framework, model in itertools.product(registry.FRAMEWORK_NAMES, registry.MODEL_NAMES):
        run = sweep.Run(framework, model, devices=2, batch=1024, workers=1, repeat=12, kind=kind, lane=lane,
                        loader=loader, trim=trim, part_method=part_method, dataset="reddit-shape")
        assert sweep.parse(run.name, run.dataset) == run
        assert sweep.parse_dir(run.dir) == run
        assert sweep.parse(run.stem, run.dataset, repeat=12) == run
        # Snakemake hands the wildcards over as strings
        assert sweep.from_wildcards({k: str(v) for k, v in run.wildcards.items()}) == run


def test_names_are_spelled_as_before():
    run = sweep.Run("pyg", "sage", 2, 256, 0, 1, kind="convergence", dataset="small")
    assert run.dir == "results/runs/small/conv-pyg-sage-d2-b256-w0-r1"
    assert run.result == "results/runs/small/conv-pyg-sage-d2-b256-w0-r1/result.json"
    assert run.stem == "conv-pyg-sage-d2-b256-w0"
    other = sweep.Run("dgl", "gat", 1, 1024, 0, 0, lane="current", loader="graphbolt", part_method="metis")
    assert other.name == "current-graphbolt-part-metis-dgl-gat-d1-b1024-w0-r0"
    assert sweep.Run("pyg", "sage", 1, 1024, 0, 2, trim=True).name == "trim-pyg-sage-d1-b1024-w0-r2"
    assert sweep.Run("pyg", "sage", 1, 64, 0, 0, kind="study").harness == "study"
    assert sweep.Run("pyg", "sage", 1, 64, 0, 0, kind="deadlock").harness == settings.default("harness")


@pytest.mark.parametrize("name", ["pyg-sage-d2-b256-w0", "tf-sage-d2-b256-w0-r0", "conv-hang-pyg-sage-d2-b256-w0-r0",
                                  "pyg-sage-d2-b256-w0-r0-extra", "nightly-pyg-sage-d2-b256-w0-r0"])
def test_a_name_outside_the_grammar_is_refused(name):
    with pytest.raises(ValueError, match="is no run name"):
        sweep.parse(name)


def test_the_adaptive_plan_reads_names_with_the_same_parser():
    point = Path("results/runs/small/graphbolt-dgl-gat-d1-b1024-w0-r10")
    assert plan_points.run_wildcards(point) == {"dataset": "small", "name": "graphbolt-dgl-gat-d1-b1024-w0"}
    with pytest.raises(ValueError, match="is no run name"):
        plan_points.run_wildcards(Path("results/runs/small/somebody-else-r1"))


# --- the runs of each block -----------------------------------------------------------------


def test_the_default_config_plans_what_the_workflow_planned():
    cfg = config()
    by_block = {name: len(runs) for name, runs in sweep.blocks(cfg, sweep.resolve_devices(cfg)).items()}
    # workers only at batch 1024: 3 batch x workers points of 4; lanes are opt-in (compare: [])
    assert by_block == {"grid": 72, "convergence": 8, "study": 8, "deadlocks": 2, "lanes": 0, "loaders": 12,
                        "trim": 8}
    runs = runs_of(cfg)
    assert len({run.name for run in runs}) == len(runs) == 110
    assert all(run.framework == "dgl" and run.loader == "graphbolt" for run in runs if run.loader != "default")
    # trimmed runs: the frameworks that declare a layer trimming (PyG), at the loaders' points
    assert {(run.framework, run.kind, run.devices, run.batch, run.workers) for run in runs if run.trim} == {
        ("pyg", "timing", d, 1024, 0) for d in (1, 2)}
    assert sum(sweep.planned_by_adaptive(run) for run in runs) == 72 + 12 + 8
    # `make report LANES=current`: 12 more runs of the current lane, the others unchanged
    lanes = config(lanes=dict(cfg["lanes"], compare=["current"]))
    with_lane = runs_of(lanes)
    # the lanes block comes after the grid, convergence, study and deadlocks (90 runs)
    assert len(with_lane) == 122 and with_lane == runs[:90] + with_lane[90:102] + runs[90:]
    assert {run.lane for run in with_lane[90:102]} == {"current"}


@pytest.mark.parametrize("name,count", [("minimal.yaml", 2), ("study.yaml", 32), ("paper.yaml", 72)])
def test_the_other_configs_plan_what_the_workflow_planned(name, count):
    assert len(runs_of(config(name))) == count


def test_partitioned_points_are_dgls_only():
    strategy = {"method": "metis", "devices": [1], "batch_size": 128, "repeats": 2}
    runs = runs_of(config("minimal.yaml", nodes=2, strategy=strategy))
    part = [run for run in runs if run.part_method != "replicated"]
    assert [run.name for run in part] == ["part-metis-dgl-sage-d1-b128-w0-r0", "part-metis-dgl-sage-d1-b128-w0-r1"]
    assert not any(sweep.planned_by_adaptive(run) for run in part)
    flags = sweep.run_flags(config("minimal.yaml", nodes=2, strategy=strategy), part[0])
    assert flags.endswith(" --strategy partitioned --part-method metis --ip-config slurm")


def test_only_runs_off_the_pair_and_first_loader_name_them_in_their_flags():
    cfg = config()
    plain = sweep.Run("dgl", "sage", 2, 1024, 0, 0, dataset="small")
    assert "--lane" not in sweep.run_flags(cfg, plain) and "--loader" not in sweep.run_flags(cfg, plain)
    lane = sweep.Run("dgl", "sage", 2, 1024, 0, 0, lane="current", loader="graphbolt", dataset="small")
    assert sweep.run_flags(cfg, lane) == sweep.run_flags(cfg, plain) + " --lane current --loader graphbolt"
    pyg = sweep.Run("pyg", "sage", 2, 1024, 0, 0, dataset="small")
    assert "--pyg-trim" not in sweep.run_flags(cfg, pyg)
    assert sweep.run_flags(cfg, sweep.Run("pyg", "sage", 2, 1024, 0, 0, trim=True, dataset="small")) == \
        sweep.run_flags(cfg, pyg) + " --pyg-trim"


def test_devices_all_is_this_nodes_count():
    cfg = config("scaling.yaml")
    assert cfg["grid"]["devices"] == "all"
    assert sweep.resolve_devices(dict(cfg, node_gpus=3), visible_gpus=lambda: 8) == [1, 2, 3]
    assert sweep.resolve_devices(dict(cfg, node_gpus=None), visible_gpus=lambda: 4) == [1, 2, 3, 4]
    assert sweep.resolve_devices(dict(cfg, node_gpus=None, max_cpu_devices=2), visible_gpus=lambda: 0) == [1, 2]


# --- the order ------------------------------------------------------------------------------


def test_the_order_is_reproducible_interleaved_and_pairs_the_frameworks():
    runs = runs_of(config())
    first = sweep.Schedule(runs, 0)
    assert first.order == sweep.Schedule(runs, 0).order != sweep.Schedule(runs, 1).order
    assert sorted(first.order) == sorted(run.result for run in runs)
    # a pin of what seed 0 gives: a change to the order's rule shows here
    assert first.order[:6] == [f"results/runs/small/{name}/result.json" for name in (
        "dgl-sage-d1-b1024-w0-r0", "pyg-sage-d1-b1024-w0-r0", "graphbolt-dgl-sage-d2-b1024-w0-r0",
        "graphbolt-dgl-sage-d1-b1024-w0-r0", "pyg-sage-d2-b1024-w1-r0", "dgl-sage-d2-b1024-w1-r0")]
    by_result = {run.result: run for run in runs}
    ordered = [by_result[path] for path in first.order]
    repeats = [run.repeat for run in ordered]
    assert repeats == sorted(repeats)  # every repeat r before any r + 1
    # a configuration's frameworks run back to back
    configuration = [(run.kind, run.loader, run.trim, run.model, run.devices, run.batch, run.workers, run.repeat)
                     for run in ordered]
    blocks = [key for key, _ in itertools.groupby(configuration)]
    assert len(blocks) == len(set(configuration))
    # and one model's runs of a repeat run together (the block analysis.repeats.noise fits a shift for)
    model_blocks = [key for key, _ in itertools.groupby((run.repeat, run.model) for run in ordered)]
    assert len(model_blocks) == len(set(model_blocks)) == 3 * 2


def test_run_numbers_and_priorities_follow_the_order():
    runs = runs_of(config("minimal.yaml"))
    schedule = sweep.Schedule(runs, 0)
    first, second = (next(run for run in runs if run.result == path) for path in schedule.order)
    assert format(schedule, first.result) == "1/2" and format(schedule, second.result) == "2/2"
    assert format(schedule, "results/runs/tiny/elsewhere/result.json") == "?/2"
    assert schedule.priority(first) == 2 > schedule.priority(second) == 1
    assert schedule.priority(sweep.Run("pyg", "gat", 9, 9, 9, 9, dataset="tiny")) == 0


# --- the rerun command ----------------------------------------------------------------------


def test_the_rerun_command_names_this_invocations_configs(tmp_path):
    inside, outside = str(ROOT / "config" / "minimal.yaml"), str(tmp_path / "mine.yaml")
    assert sweep.rerun_command([inside, outside], {}, str(ROOT), on_slurm=False) == (
        f".venv/bin/snakemake --cores all --profile profiles/default --configfile config/minimal.yaml --configfile {outside}")
    assert sweep.rerun_command(None, {"lanes": {"compare": ["current"]}}, str(ROOT), on_slurm=True) == (
        ".venv/bin/snakemake --workflow-profile profiles/slurm --config 'lanes={compare: [current]}'")


def test_the_rerun_command_names_the_snakemake_beside_this_interpreter(tmp_path, monkeypatch):
    """Relative to the project when it lives there (above), else by its absolute path; the pair
    lane's .venv/bin/snakemake where none is beside the interpreter. Never a bare `snakemake`."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "snakemake")
    assert sweep.snakemake_command(str(tmp_path)) == beside
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    assert sweep.snakemake_command(str(ROOT)) == ".venv/bin/snakemake"


# --- configs the schema accepts but the sweep cannot run ------------------------------------


def _grid(**changes):
    """An edit of the minimal config's grid."""
    return lambda cfg: cfg["grid"].update(changes)


TRIM = {"devices": [1], "batch_size": 64, "workers": 0, "repeats": 1}
BAD = {
    "fanouts": (lambda cfg: cfg.update(fanouts=[5, 5, 5]),
                ["Invalid config: fanouts: [5, 5, 5] has 3 entries", "models.sage.layers is 2"]),
    "model setting": (lambda cfg: cfg.update(models={"sage": {"heads": 2}}),
                      ["Invalid config: models.sage: heads not used by sage", "it takes layers, hidden, dropout"]),
    "worker batch": (_grid(worker_batch_sizes=[128]),
                     ["Invalid config: grid.worker_batch_sizes: [128] not in grid.batch_sizes [64]"]),
    "dataset": (lambda cfg: cfg.update(dataset="nosuchgraph"),
                ["Invalid config: dataset:", "'nosuchgraph'", "allowed: tiny, small"]),
    "one node": (lambda cfg: cfg.update(strategy={"method": "metis", "devices": [1], "batch_size": 64, "repeats": 1}),
                 ["Invalid config: strategy: partitioned runs need nodes >= 2", "nodes is 1"]),
    "loader": (lambda cfg: (cfg.update(loaders={"compare": ["graphbolt"], "devices": [1], "batch_size": 64,
                                                "workers": 0, "repeats": 1}), _grid(frameworks=["pyg"])(cfg)),
               ["Invalid config: loaders.compare: 'graphbolt' is no other loader of a framework in "
                "grid.frameworks (pyg); allowed: none"]),
    "unknown framework": (_grid(frameworks=["pyg", "mxnet"]),
                          ["Invalid config: grid.frameworks: 'mxnet' is no registered framework; registered: pyg, "
                           "dgl (runners/adapters/registry.py)"]),
    "trim without a framework that trims": (
        lambda cfg: (cfg.update(trim=TRIM), _grid(frameworks=["dgl"])(cfg)),
        ["Invalid config: trim: none of grid.frameworks (dgl) can trim its layers; those that can: pyg; add one, "
         "or set trim: null"]),
    "trim with every run trimmed": (
        lambda cfg: (cfg.update(trim=TRIM), cfg["sampling"].update(pyg_trim=True)),
        ["Invalid config: trim: sampling.pyg_trim is true, so every pyg run trims already"]),
    "lane": (lambda cfg: cfg.update(lanes={"compare": ["own"], "devices": [1], "batch_size": 64, "workers": 0,
                                           "repeats": 1}),
             ["Invalid config: lanes.compare: 'own': its environment", ".venv-own/bin/python is missing",
              "make setup LANE=own"]),
}


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_config_is_refused_naming_the_value_and_what_is_allowed(tmp_path, bad):
    edit, says = BAD[bad]
    cfg = config("minimal.yaml")
    edit(cfg)
    with pytest.raises(sweep.ConfigError) as err:
        sweep.check(cfg, basedir=str(tmp_path), data_root=str(tmp_path / "datasets"))
    for text in says:
        assert text in str(err.value)


def test_the_configs_of_the_project_pass(tmp_path):
    for name in ("config.yaml", "minimal.yaml", "study.yaml", "paper.yaml", "scaling.yaml"):
        sweep.check(config(name), basedir=str(ROOT), data_root=str(tmp_path))


def test_the_lane_interpreter_is_envinfos():
    from runners.records.envinfo import lane_interpreter

    assert sweep.interpreter("current", "/project") == f"/project/{lane_interpreter('current')}"
