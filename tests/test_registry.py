"""One registry of frameworks and models (runners/adapters/registry.py), and one source of
every default: these tests fail when a schema, a config, the analysis, an adapter or the
workflow drifts from them, or when an unknown model name would fall through to another model.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runners.adapters import registry
from runners.config import MODEL_DEFAULTS, ConfigError, RunConfig, build_parser, config_from_args
from runners.settings import default

ROOT = Path(__file__).resolve().parents[1]
CONFIG_SCHEMA = yaml.safe_load((ROOT / "workflows" / "schemas" / "config.schema.yaml").read_text())
RESULT_SCHEMA = json.loads((ROOT / "runners" / "records" / "result.schema.json").read_text())
FRAMEWORKS = set(registry.FRAMEWORK_NAMES)
MODELS = set(registry.MODEL_NAMES)

# A framework's or model's name as a literal in these files is a list that can drift; the
# few that remain name something only one framework has (a PyG-only setting, a package).
SCANNED = sorted(ROOT.glob("analysis/**/*.py")) + [ROOT / "runners" / "config.py"] + [
    ROOT / "benchmarks" / f"{name}.py" for name in ("memory_probe", "measure", "measure_runs", "coverage",
                                                    "partitioned_memory")]
ALLOWED_LITERALS = {
    ("analysis/report/sweep_record.py", "pyg"): "fairness rows of PyG-only settings (sampler backend, layer trimming)",
    ("analysis/report/findings.py", "pyg"): "the seed study's findings, which are about its two frameworks",
    ("analysis/report/findings.py", "dgl"): "the seed study's findings: its DGL loader was the unsharded one",
    ("analysis/aggregate.py", "dgl"): "the env column of the DGL package version",
    ("benchmarks/memory_probe.py", "sage"): "the model the memory probe builds (any registered model would do)",
    ("benchmarks/measure_runs.py", "dgl"): "a second reference loop of DGL's example only (its graph formats)",
    ("benchmarks/measure_runs.py", "sage"): "the model of the recorder-cost run (any registered model would do)",
    ("benchmarks/partitioned_memory.py", "sage"): "the model of the partitioned runs (any registered model would do)",
    ("benchmarks/coverage.py", "sage"): "the configurations the coverage check launches (any model would do)",
}


def argv(framework="pyg", model="sage", *extra):
    return ["--framework", framework, "--model", model, "--devices", "1", "--batch-size", "8", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--out", "/tmp/x", *extra]


def test_registry_imports_without_frameworks():
    """The launcher, Snakemake at parse time and the analysis import it: no torch/PyG/DGL."""
    code = ("import sys, runners.adapters.registry, runners.config, analysis.report; "
            "print(sorted(m for m in ('torch', 'dgl', 'torch_geometric') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_schemas_list_exactly_the_registry():
    """Models are listed in both schemas (and must match); frameworks in neither file: the result
    schema as read (result.schema()) takes the registry's, and runners.sweep.check the config's."""
    from runners.records.result import schema

    grid = CONFIG_SCHEMA["properties"]["grid"]["properties"]
    assert "enum" not in grid["frameworks"]["items"]
    assert set(grid["models"]["items"]["enum"]) == MODELS
    assert set(CONFIG_SCHEMA["properties"]["models"]["propertyNames"]["enum"]) == MODELS
    config = RESULT_SCHEMA["properties"]["config"]["properties"]
    assert "enum" not in config["framework"]
    assert set(config["model"]["enum"]) == MODELS
    assert set(schema()["properties"]["config"]["properties"]["framework"]["enum"]) == FRAMEWORKS


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_configs_name_only_registered_frameworks_and_models(path):
    cfg = yaml.safe_load(path.read_text())
    assert set(cfg["grid"]["frameworks"]) <= FRAMEWORKS
    assert set(cfg["grid"]["models"]) <= MODELS
    for name, settings in (cfg.get("models") or {}).items():
        assert name in MODELS
        assert set(settings) <= set(registry.model(name).settings) | {"epochs"}, (name, settings)


def test_analysis_orders_labels_and_colours_come_from_the_registry():
    import analysis
    from analysis import grouping
    from analysis.report import plots
    from analysis.tables import grids

    assert grids.FRAMEWORK_ORDER == plots.FRAMEWORK_ORDER == registry.FRAMEWORK_NAMES
    assert grouping.MODEL_ORDER == plots.MODEL_ORDER == registry.MODEL_NAMES
    assert set(analysis.FRAMEWORK_LABELS) == set(analysis.FRAMEWORK_COLOURS) == FRAMEWORKS
    assert set(analysis.MODEL_LABELS) == MODELS
    assert len(set(analysis.FRAMEWORK_COLOURS.values())) == len(FRAMEWORKS)


def test_no_framework_or_model_lists_outside_the_registry():
    found = set()
    for path in SCANNED:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in FRAMEWORKS | MODELS:
                found.add((str(path.relative_to(ROOT)), node.value))
    for smk in sorted((ROOT / "workflows" / "rules").glob("*.smk")):
        text = smk.read_text()
        found |= {(str(smk.relative_to(ROOT)), n) for n in FRAMEWORKS | MODELS
                  if f'"{n}"' in text or f"'{n}'" in text or f"{n}|" in text or f"|{n}" in text}
    assert found <= set(ALLOWED_LITERALS), sorted(found - set(ALLOWED_LITERALS))


def test_fanout_order_and_argparse_follow_the_registry():
    for fw in registry.FRAMEWORKS.values():
        cfg = config_from_args(build_parser().parse_args(argv(fw.name, "sage", "--fanouts", "15,10,5")), 0, 2)
        assert cfg.fanouts_framework == ([15, 10, 5] if fw.seeds_hop_first else [5, 10, 15])
    for name in MODELS:
        cfg = config_from_args(build_parser().parse_args(argv("pyg", name)), 0, 2)
        assert {k: getattr(cfg, k) for k in MODEL_DEFAULTS[name]} == registry.model(name).defaults


@pytest.mark.parametrize("option,value", [("--framework", "tensorflow"), ("--model", "gin")])
def test_unknown_names_are_refused_naming_the_allowed_ones(option, value):
    args = argv("pyg", "sage")
    args[args.index(option) + 1] = value
    with pytest.raises(ConfigError) as err:
        config_from_args(build_parser().parse_args(args), 0, 2)
    allowed = registry.FRAMEWORK_NAMES if option == "--framework" else registry.MODEL_NAMES
    assert value in str(err.value) and all(n in str(err.value) for n in allowed)
    with pytest.raises(ValueError, match="gin"):
        RunConfig(framework="pyg", model="gin", devices=1, batch_size=1, workers=0, dataset="tiny", epochs=1, out="x")


# -- adapters: one builder per registered model, nothing falls through ----------------------

def adapter_module(name):
    import importlib

    pytest.importorskip("dgl")
    pytest.importorskip("torch_sparse")
    return importlib.import_module(registry.framework(name).adapter)


@pytest.mark.parametrize("framework", registry.FRAMEWORK_NAMES)
def test_adapter_declares_what_the_registry_says(framework):
    mod = adapter_module(framework)
    assert set(mod.MODEL_BUILDERS) == MODELS
    assert mod.ADAPTER.name == framework and callable(mod.self_check)
    assert not hasattr(mod.ADAPTER, "splits_seeds_itself"), "the harness splits seeds for every framework"


@pytest.mark.parametrize("framework", registry.FRAMEWORK_NAMES)
def test_unknown_model_raises_in_every_adapter(framework):
    from runners.adapters import model_builder

    mod = adapter_module(framework)
    with pytest.raises(ValueError, match="'gin' is unknown; allowed: " + ", ".join(registry.MODEL_NAMES)):
        model_builder(mod.MODEL_BUILDERS, framework, "gin")
    # A registered model an adapter lacks: named, with what the adapter does build.
    with pytest.raises(ValueError, match=f"the {framework} adapter has no builder for model 'sage'; it builds: gat"):
        model_builder({"gat": mod.MODEL_BUILDERS["gat"]}, framework, "sage")


def test_between_layers_refuses_an_unknown_model():
    torch = pytest.importorskip("torch")
    from runners.adapters import between_layers, layer_shapes

    with pytest.raises(ValueError, match="gin"):
        between_layers(torch.zeros(2, 2), "gin", 0.5, False)
    with pytest.raises(ValueError, match="gin"):
        layer_shapes("gin", 4, 8, 2, 2, 1)


# -- defaults, defined once -----------------------------------------------------------------

# Config key (path in the workflow schema) -> the runner option it is passed as.
SCHEMA_TO_OPTION = {
    "seed": "seed", "optimizer.lr": "lr", "optimizer.weight_decay": "weight_decay",
    "optimizer.lr_scaling": "lr_scaling", "optimizer.warmup_epochs": "warmup_epochs", "device": "device",
    "sampling.replace": "replace", "sampling.pyg_trim": "pyg_trim", "eval_every": "eval_every",
    "max_steps_per_epoch": "max_steps_per_epoch", "time_limit_s": "time_limit",
    "stall_floor_s": "stall_floor", "stall_factor": "stall_factor", "threads_per_rank": "threads_per_rank",
    "timing.precision": "precision", "timing.min_steady_epochs": "min_steady_epochs",
}
# Workflow-only settings (the runner has no such option, or a different meaning).
WORKFLOW_ONLY = {"raw_dir", "download", "grid.repeats", "node_gpus", "max_cpu_devices", "nodes",
                 "request_gpus", "master_port", "models", "optimizer", "sampling", "run_order_seed", "grid.harnesses", "lanes", "loaders", "trim",
                 "strategy",
                 "deadlocks",
                 # The sweep's timing runs stop by the rule with caps; the runner's own default is
                 # the fixed schedule of --epochs (a command line says what it wants).
                 "timing", "timing.until", "timing.max_epochs", "timing.max_train_s", "timing.eval_every",
                 "convergence", "study",
                 # the sweep's design: the second round and where loader workers run
                 "adaptive", "grid.worker_batch_sizes"}


def schema_defaults(node, prefix=""):
    out = {}
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        if "default" in sub:
            out[path] = sub["default"]
        out.update(schema_defaults(sub, f"{path}."))
    return out


def test_workflow_defaults_are_the_runners():
    parsed = vars(build_parser().parse_args(argv()))
    defaults = schema_defaults(CONFIG_SCHEMA)
    assert set(defaults) <= set(SCHEMA_TO_OPTION) | WORKFLOW_ONLY | {"sampling.self_loops"}, \
        sorted(set(defaults) - set(SCHEMA_TO_OPTION) - WORKFLOW_ONLY)
    for key, option in SCHEMA_TO_OPTION.items():
        assert defaults[key] == parsed[option], (key, defaults[key], parsed[option])
    assert defaults["sampling.self_loops"] is (not parsed["no_self_loops"])
    # Model settings have no default outside the registry.
    assert "default" not in str(CONFIG_SCHEMA["properties"]["models"]["additionalProperties"])


def test_runner_options_default_to_the_runconfig_fields():
    cfg = config_from_args(build_parser().parse_args(argv()), 0, 2)
    for field in ("lr", "weight_decay", "seed", "eval_every", "time_limit_s", "stall_floor_s", "stall_factor",
                  "startup_timeout_s", "fanouts", "max_steps_per_epoch", "eval_batch_size"):
        assert getattr(cfg, field) == default(field), field
    assert MODEL_DEFAULTS == {m.name: m.defaults for m in registry.MODELS.values()}
