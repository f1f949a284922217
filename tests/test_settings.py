"""Every run setting is declared once (runners/settings.py): these tests fail when the sweep
config's schema drifts from the declarations, or when the flags a sweep passes do not parse
back into the values it meant."""

from pathlib import Path

import pytest
import yaml

from runners import settings
from runners.adapters import registry
from runners.config import ConfigError, build_parser, config_from_args

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflows" / "schemas" / "config.schema.yaml").read_text())
JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array"}
# Top-level keys that shape the sweep rather than set a run: the grid and its kinds of runs,
# the dataset job, the device count of "all", SLURM requests, and the fixed schedule
# (`epochs`, `eval_every`, `timing`: per kind of run, settings.sweep_stop_values).
SWEEP_KEYS = {"dataset", "raw_dir", "download", "grid", "convergence", "study", "deadlocks", "lanes", "loaders", "trim",
              "strategy", "adaptive", "models",
              "run_order_seed", "node_gpus", "max_cpu_devices", "request_gpus", "epochs", "eval_every", "timing"}
CONFIGURED = {s.config_key: s for s in settings.SETTINGS if s.config_key}


def schema_leaves(node, prefix=""):
    """Dotted key -> schema of every leaf under `node` (an object's properties are not leaves)."""
    out = {}
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        out.update(schema_leaves(sub, f"{path}.") if "properties" in sub else {path: sub})
    return out


def assert_same_type(key, entry, setting):
    types = entry.get("type")
    types = types if isinstance(types, list) else [types]
    assert JSON_TYPES[setting.type] in types, (key, types, setting.type)


def test_every_configured_setting_has_its_schema_entry():
    leaves = schema_leaves(SCHEMA)
    for key, setting in CONFIGURED.items():
        assert key in leaves, f"{setting.name}: config key {key} is not in the schema"
        entry = leaves[key]
        assert_same_type(key, entry, setting)
        if "enum" in entry:
            assert set(entry["enum"]) == set(setting.allowed()), key
        wanted = setting.cli_default if setting.config_default is settings.REQUIRED else setting.config_default
        assert entry.get("default", wanted) == wanted, (key, entry.get("default"), wanted)


def test_every_run_setting_of_the_schema_is_declared():
    run_keys = {k for k in schema_leaves(SCHEMA) if k.split(".")[0] not in SWEEP_KEYS}
    assert run_keys == set(CONFIGURED), sorted(run_keys ^ set(CONFIGURED))


def test_timing_and_model_sections_map_to_settings():
    timing = SCHEMA["properties"]["timing"]["properties"]
    assert set(timing) == set(settings.TIMING_KEYS)
    for key, name in settings.TIMING_KEYS.items():
        if "type" in timing[key]:
            assert_same_type(f"timing.{key}", timing[key], settings.BY_NAME[name])
    model = SCHEMA["properties"]["models"]["additionalProperties"]["properties"]
    declared = {n for m in registry.MODELS.values() for n in m.settings}
    assert set(model) == declared | {"epochs"}
    for name in declared:
        assert_same_type(f"models.*.{name}", model[name], settings.BY_NAME[name])
    harnesses = SCHEMA["properties"]["grid"]["properties"]["harnesses"]
    assert set(harnesses["items"]["enum"]) == set(settings.HARNESSES)
    assert harnesses["default"] == [settings.default("harness")]


def runner_argv(**options):
    """A valid runner command line; `options` (flag -> value) replace or add options."""
    given = {"--framework": "pyg", "--model": "sage", "--devices": "1", "--batch-size": "8", "--workers": "0",
             "--dataset": "tiny", "--epochs": "1", "--out": "/tmp/x", **options}
    return [word for flag, value in given.items() for word in (flag, value)]


@pytest.mark.parametrize("kind", ["timing", "convergence", "study"])
@pytest.mark.parametrize("model", registry.MODEL_NAMES)
def test_sweep_flags_parse_back_to_the_sweep_values(kind, model):
    from snakemake.utils import validate

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["models"] = {model: {"hidden": 8}}
    validate(config, str(ROOT / "workflows" / "schemas" / "config.schema.yaml"))  # fills the defaults
    harness = "study" if kind == "study" else "fair"
    argv = runner_argv(**{"--model": model}) + settings.sweep_flags(config, model, kind, 2, harness).split()
    cfg = config_from_args(build_parser().parse_args(argv), 0, 2).to_json()
    values = settings.sweep_values(config, model, kind, 2, harness)
    fields = {k: v for k, v in values.items() if settings.BY_NAME[k].field}
    assert {k: cfg[k] for k in fields} == fields
    assert cfg["seed"] == config["seed"] + 2 and cfg["hidden"] == 8


@pytest.mark.parametrize("setting", [s for s in settings.SETTINGS if s.choices and s.option],
                         ids=lambda s: s.name)
def test_a_bad_choice_names_the_value_and_what_is_allowed(setting):
    with pytest.raises(ConfigError) as err:
        config_from_args(build_parser().parse_args(runner_argv(**{setting.option: "bogus"})), 0, 2)
    assert "'bogus'" in str(err.value) and all(str(a) in str(err.value) for a in setting.allowed())


def test_every_framework_declares_what_the_launcher_reads():
    """The launcher knows a framework from its registry entry alone (no import of it)."""
    for f in registry.FRAMEWORKS.values():
        assert set(f.memory) == set(registry.MEMORY_TRAIT_KEYS), f.name
        assert f.packages and callable(f.check_environment), f.name


def test_every_runconfig_field_is_written_in_the_source():
    """A search of the source for a field finds its declaration (no field is injected)."""
    import ast
    import dataclasses

    from runners.config import RunConfig

    written = set()
    for path in ("runners/settings.py", "runners/config.py"):
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.ClassDef) and node.name in ("RunSettings", "RunConfig"):
                written |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)}
    assert {f.name for f in dataclasses.fields(RunConfig)} == written


def test_a_runconfig_is_frozen_and_replaced_whole():
    import dataclasses

    cfg = config_from_args(build_parser().parse_args(runner_argv()), 0, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.out = "/elsewhere"
    moved = dataclasses.replace(cfg, out="/elsewhere")
    assert moved.out == "/elsewhere" and cfg.out == "/tmp/x" and moved.hidden == cfg.hidden


def test_runs_csv_and_experiments_take_their_settings_from_the_fields():
    from analysis import EXPERIMENT_KEYS
    from analysis.aggregate import CONFIG_COLUMNS, RUN_COLUMNS
    from runners.config import field_names

    assert set(field_names("column")) <= set(CONFIG_COLUMNS) <= set(RUN_COLUMNS)
    assert "out" not in CONFIG_COLUMNS and "lr" in CONFIG_COLUMNS  # declared column=False / by default
    assert set(field_names("experiment")) <= set(EXPERIMENT_KEYS) and "seed" not in EXPERIMENT_KEYS


@pytest.mark.parametrize("value, hops", [("-1,-1", [-1, -1]), ("-1,5", [-1, 5]), ("5,-1", [5, -1]), ("-1", [-1])])
def test_fanouts_may_start_with_all_neighbours(value, hops):
    """The help offers -1 (all neighbours); argparse alone takes '-1,-1' for an option."""
    argv = runner_argv(**{"--layers": str(len(hops)), "--fanouts": value})
    cfg = config_from_args(build_parser().parse_args(argv), 0, 2)
    assert cfg.fanouts == hops
