"""result.json has one builder and one reader (runners/records/result.py): a result of schema 1 as the
suite wrote it is upgraded and aggregated, a result claiming a newer schema is refused naming
its version, and what the builder writes passes the schema."""

import dataclasses
import json
from pathlib import Path

import pytest

from analysis import aggregate
from runners import settings
from runners.config import build_parser, config_from_args
from runners.records import result
from runners.watch.diagnosis import skipped

SCHEMA_1 = Path(__file__).resolve().parent / "data" / "schema1" / "result.json"


def _point(tmp_path: Path, edit=None) -> Path:
    """A point directory holding the saved schema-1 result, edited by `edit(data)`."""
    d = tmp_path / "pyg-sage-d2-b1024-w0-r0"
    d.mkdir()
    data = json.loads(SCHEMA_1.read_text())
    if edit:
        edit(data)
    (d / "result.json").write_text(json.dumps(data))
    return d


def test_a_schema_1_result_of_todays_suite_is_upgraded_and_aggregated(tmp_path):
    old = json.loads(SCHEMA_1.read_text())
    assert old["schema_version"] == 1 and "rel_halfwidth" in old["summary"]["precision"]
    d = _point(tmp_path)
    agg = aggregate.aggregate([d])
    assert agg.invalid.empty and len(agg.runs) == 1
    row = agg.runs.iloc[0]
    assert row["run_id"] == old["run_id"] and row["status"] == "ok"
    assert row["precision_reached"] == old["summary"]["precision"]["rel_halfwidth"]
    assert row["steady_epoch_mean_s"] == old["summary"]["precision"]["mean_s"]
    assert row["parameters"] == old["ranks"][0]["parameters"]  # the gradient size analysis/projection/predict.py scales
    assert len(agg.epochs) == len(old["epochs"])
    # Upgraded when read, never rewritten: the file stays what the run wrote.
    assert json.loads((d / "result.json").read_text()) == old
    upgraded = result.read(d / "result.json")
    assert upgraded["schema_version"] == result.SCHEMA_VERSION == 2
    assert result.schema_problems(upgraded) == []


def test_a_schema_1_result_from_before_lanes_gets_what_its_run_did(tmp_path):
    def older(data):
        for key in ("harness", "lane", "loader"):
            del data["config"][key]
        del data["env"]["lane"]
        del data["memory"]
        data["command"]["argv"][0] = "python"

    row = aggregate.aggregate([_point(tmp_path, older)]).runs.iloc[0]
    assert (row["harness"], row["lane"], row["loader"], row["loader_variant"]) == ("fair", "pair", "neighbor", "default")
    assert row["command"].startswith(".venv/bin/python -m runners.run ")
    assert row["mem_model_bytes"] == json.loads(SCHEMA_1.read_text())["preflight"]["memory_model_bytes"]


@pytest.mark.parametrize("version", [3, 99])
def test_a_result_of_a_newer_schema_is_refused_naming_its_version(tmp_path, version):
    d = _point(tmp_path, lambda data: data.update(schema_version=version))
    with pytest.raises(result.ResultVersionError, match=f"schema_version {version} is newer than this code's 2"):
        result.read(d / "result.json")
    agg = aggregate.aggregate([d])
    assert agg.runs.empty
    assert f"schema_version {version} is newer" in agg.invalid["reason"].iloc[0]


def test_a_result_without_a_version_is_refused(tmp_path):
    d = _point(tmp_path, lambda data: data.pop("schema_version"))
    with pytest.raises(result.ResultVersionError, match="schema_version None: not a result version; this code reads 1..2"):
        result.read(d / "result.json")


def test_what_the_builder_writes_passes_the_schema(tmp_path):
    argv = ["--framework", "dgl", "--model", "gat", "--devices", "4", "--batch-size", "64", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--device", "cuda", "--skip-unavailable", "--out", str(tmp_path)]
    env = json.loads(SCHEMA_1.read_text())["env"]
    # the launcher names the lane it runs in (runners.run.check_lane) before anything is recorded
    cfg = dataclasses.replace(config_from_args(build_parser().parse_args(argv), visible_gpus=1, cpu_cores=2),
                              lane=env["lane"]["lane"])
    identity = cfg.identity(None)
    head = result.Head(identity["run_id"], tmp_path.name, identity, "skipped", "t0", "t0", 0.0, ["python", "-m", "x"])
    doc = result.build(head, result.skipped(cfg, env, skipped(cfg.skip_reason, "not_enough_devices")))
    assert list(doc)[:2] == ["schema_version", "run_id"] and doc["summary"] is None
    assert result.write(tmp_path, doc) == []
    assert result.read(tmp_path / "result.json")["diagnosis"]["cause"] == "not_enough_devices"
    with pytest.raises(TypeError, match="summary"):
        result.Ok(**{k: None for k in ("config", "env", "seeds", "ranks", "epochs", "validation", "accuracy_reference",
                                         "diagnosis", "probes", "preflight", "memory", "machine_load", "watchdog",
                                         "files", "timeline")})


def test_the_result_schema_knows_every_lane():
    schema = json.loads(result.SCHEMA_PATH.read_text())
    assert tuple(schema["properties"]["config"]["properties"]["lane"]["enum"]) == settings.LANES


def test_the_result_schema_names_only_settings_that_are_fields():
    """result.json's `config` is RunConfig's fields plus what the launcher adds beside them."""
    from runners.config import RunConfig

    config = json.loads(result.SCHEMA_PATH.read_text())["properties"]["config"]
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(config["required"]) <= fields, set(config["required"]) - fields
    assert set(config["properties"]) <= fields | {"adapter_choices", "harness_settings", "lr_effective"}
