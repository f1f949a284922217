"""The run record (runners/records/rank_rows.py): named rows round-trip through the per-rank files."""

import json

import jsonschema

from runners.adapters import Batch, LayerWork
from runners.records import rank_rows, result
from runners.records.rank_rows import EpochRow, RowAppender, StepRow
from runners.records.rundir import RunDir, is_run_entry, relative_files


def _step(epoch, step, seeds, phases, loss):
    # two layers, as a DGL block pair would give them: 10*seeds rows read, 3*seeds then seeds written
    layers = (LayerWork(10 * seeds, 3 * seeds, 15 * seeds), LayerWork(3 * seeds, seeds, 5 * seeds))
    batch = Batch(inputs=None, labels=None, seed_nodes=seeds, sampled_nodes=10 * seeds, sampled_edges=20 * seeds,
                  layers=layers, feature_bytes=400 * seeds)
    return StepRow(epoch=epoch, step=step, **batch.work(), **dict(zip(rank_rows.PHASE_COLUMNS, phases)),
                   step_s=sum(p or 0 for p in phases), loss=loss, seed_id_sum=7)


def test_rows_are_written_in_the_contract_order_and_read_back_by_name(tmp_path):
    # docs/CONTRACTS.md's steps.csv columns, in order
    assert rank_rows.STEP_COLUMNS == ("epoch", "step", "seed_nodes", "sampled_nodes", "sampled_edges", "feature_bytes",
                                   "layer_src_nodes", "layer_dst_nodes", "layer_edges", "load_wait_s",
                                   "prepare_s", "copy_s", "forward_s", "backward_s", "optimizer_s", "step_s",
                                   "loss", "seed_id_sum", "src_nodes_by_layer", "dst_nodes_by_layer", "edges_by_layer")
    steps = [_step(0, 0, 4, [0.5, 0.1, 0.0, 0.2, 0.3, 0.1], 2.0), _step(0, 1, 2, [0.25] * 6, 1.0)]
    RowAppender(RunDir(tmp_path).rank_file(1, "steps"), StepRow).write(steps)
    RowAppender(RunDir(tmp_path).rank_file(1, "epochs"), EpochRow).write(
        [EpochRow.of_steps(0, 1, steps, 1.2345678, phases_valid=True)])
    back = rank_rows.read_rank_rows(tmp_path, 1, "steps")
    assert [r["seed_nodes"] for r in back] == ["4", "2"] and back[1]["forward_s"] == "0.25"
    assert rank_rows.count_rows(tmp_path, 1, "steps") == 2 and rank_rows.count_rows(tmp_path, 2, "steps") == 0
    epoch = rank_rows.read_rank_rows(tmp_path, 1, "epochs")[0]
    assert (epoch["steps"], epoch["seed_nodes"], epoch["loss"], epoch["load_wait_s"], epoch["time_s"]) == (
        "2", "6", "1.5", "0.75", "1.234568")
    assert rank_rows.read_rank_rows(tmp_path, 3, "steps") is None and rank_rows.read_rank_info(tmp_path, 1) is None


def test_the_work_of_a_step_is_summed_per_epoch_and_averaged_per_layer(tmp_path):
    steps = [_step(0, 0, 4, [0.1] * 6, 2.0), _step(0, 1, 2, [0.1] * 6, 1.0)]
    assert (steps[0].layer_src_nodes, steps[0].layer_dst_nodes, steps[0].layer_edges) == (52, 16, 80)
    assert (steps[0].edges_by_layer, steps[1].dst_nodes_by_layer) == ("60;20", "6;2")
    RowAppender(RunDir(tmp_path).rank_file(0, "steps"), StepRow).write(steps)
    RowAppender(RunDir(tmp_path).rank_file(0, "epochs"), EpochRow).write(
        [EpochRow.of_steps(0, 0, steps, 1.0, phases_valid=True)])
    m = rank_rows.collect_measurements(tmp_path, [0])
    assert (m["epochs"][0]["layer_edges"], m["epochs"][0]["feature_bytes"]) == (120, 2400)
    assert m["layer_work"] == [{"layer": 0, "src_nodes": 30.0, "dst_nodes": 9.0, "edges": 45.0},
                               {"layer": 1, "src_nodes": 9.0, "dst_nodes": 3.0, "edges": 15.0}]
    per_step = rank_rows.work_per_step(m["epochs"])
    assert (per_step["seed_nodes"], per_step["layer_edges"], per_step["feature_bytes"]) == (3.0, 60.0, 1200.0)
    schema = json.loads(result.SCHEMA_PATH.read_text())["properties"]
    assert list(jsonschema.Draft202012Validator(schema["epochs"]).iter_errors(m["epochs"])) == []
    summary = {"work_per_step": per_step, "work_per_layer": m["layer_work"]}
    for key in summary:
        assert list(jsonschema.Draft202012Validator(schema["summary"]["properties"][key]).iter_errors(summary[key])) == []


def test_unsynchronised_phases_stay_empty_and_pass_the_schema(tmp_path):
    # A CUDA run without --breakdown on records no phase times. On the first GPU sweep (H200)
    # every such run broke the schema and the aggregate set it aside as unusable.
    steps = [_step(0, 0, 4, [None] * 6, 2.0)]
    row = EpochRow.of_steps(0, 0, steps, 1.0, phases_valid=False)
    assert all(getattr(row, p) is None for p in rank_rows.PHASE_COLUMNS) and row.seed_nodes == 4
    RowAppender(RunDir(tmp_path).rank_file(0, "epochs"), EpochRow).write([row])
    epochs = rank_rows.collect_measurements(tmp_path, [0])["epochs"]
    assert epochs[0]["forward_s"] is None and epochs[0]["time_s"] == 1.0
    schema = json.loads(result.SCHEMA_PATH.read_text())["properties"]["epochs"]
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(epochs)) == []


def test_steps_per_epoch_is_the_most_any_rank_takes():
    # --uneven-batches: the last rank is a batch short; the epoch lasts until the others are done
    ranks = [{"rank": 0, "steps_per_epoch": 5}, {"rank": 1, "steps_per_epoch": 4}, {"rank": 2, "steps_per_epoch": None}]
    assert rank_rows.steps_per_epoch(ranks) == 5
    assert rank_rows.steps_per_epoch([{"rank": 0, "steps_per_epoch": None}]) is None


def test_a_run_directory_hands_out_the_contract_layout(tmp_path):
    # docs/CONTRACTS.md, "Run directory files": every module finds them through RunDir
    run = RunDir(tmp_path)
    assert run.result == tmp_path / "result.json" and run.config == tmp_path / "config.json"
    assert run.heartbeat(3) == tmp_path / "heartbeats" / "rank3.hb"
    assert run.timeline == tmp_path / "heartbeats" / "timeline.jsonl"
    assert run.rank_file(1, "steps") == tmp_path / "rank1" / "steps.csv"
    assert run.rank_error(1) == tmp_path / "rank1" / "error.json"
    assert run.node(2).result == tmp_path / "node2" / "result.json"
    assert relative_files([0])["ranks"][0]["cpu"] == "rank0/cpu.csv"
    assert not run.is_run()
    run.make()
    assert run.is_run() and run.launcher_log.parent.is_dir() and run.stacks.is_dir()
    assert is_run_entry("rank12") and is_run_entry("processes.json") and not is_run_entry("previous")
