"""Drill: a third framework. A framework registered by this test alone (a copy of PyG's registry
entry under the name "pygcopy") is compared with the reference (DGL) wherever the report compares
frameworks: speed rows, a first-screen answer line and the second round's repeats for its pair;
and the runner's argument checks accept its name.

The analysis keys on framework names only, so its input is a stored sweep's real runs with the PyG
runs (and their epochs and steps) copied under the new name; no time is made up.
"""

import dataclasses
import gzip
import shutil

import pandas as pd
import pytest

from analysis.aggregate import Aggregate
from analysis.repeats import plan_points, second_round
from analysis.report import first_screen, sections
from analysis.report.context import Context, main_experiment
from runners.adapters import registry
from runners.config import ConfigError, build_parser, config_from_args
from tests.helpers import REPO

SWEEP = REPO / "tests" / "data" / "sweeps" / "20261128-1544"
NEW = "pygcopy"


@pytest.fixture(scope="module")
def third():
    """The registry with "pygcopy" declared after PyG and DGL (restored after this module's tests)."""
    copy = dataclasses.replace(registry.FRAMEWORKS["pyg"], name=NEW, label="PyG copy", colour="#2ca02c")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry.FRAMEWORKS, NEW, copy)
        yield copy
    assert NEW not in registry.FRAMEWORK_NAMES


def copied_under_new_name(frame: pd.DataFrame, pyg_ids: set) -> pd.DataFrame:
    """`frame` with its PyG runs' rows again under the new name (run ids prefixed, so they stay apart)."""
    rows = frame[frame["run_id"].isin(pyg_ids)].copy()
    rows["run_id"] = NEW + "-" + rows["run_id"]
    if "framework" in rows:
        rows["framework"] = NEW
    return pd.concat([frame, rows], ignore_index=True)


@pytest.fixture(scope="module")
def stored(tmp_path_factory, third):
    """The stored sweep as an aggregate, its PyG runs copied under the new name."""
    d = tmp_path_factory.mktemp("aggregate")
    shutil.copy(SWEEP / "runs.csv", d / "runs.csv")
    for name in ("epochs", "steps"):
        with gzip.open(SWEEP / f"{name}.csv.gz") as src, open(d / f"{name}.csv", "wb") as dst:
            shutil.copyfileobj(src, dst)
    a = Aggregate.load(d)
    pyg_ids = set(a.runs.loc[a.runs["framework"] == "pyg", "run_id"])
    assert pyg_ids
    a.runs, a.epochs, a.steps = (copied_under_new_name(f, pyg_ids) for f in (a.runs, a.epochs, a.steps))
    return a


@pytest.fixture(scope="module")
def ctx(stored):
    return Context(stored)


def test_the_reference_pairs_follow_the_registry(third):
    assert registry.FRAMEWORK_NAMES[-1] == NEW and NEW in registry.FRAMEWORK_NAMES
    assert registry.reference_pairs(["dgl", NEW, "pyg"]) == [("pyg", "dgl"), (NEW, "dgl")]
    # without the reference's runs, the first framework present takes its place
    assert registry.reference_pairs([NEW, "pyg"]) == [(NEW, "pyg")]
    assert registry.reference_pairs(["pyg"]) == []


def test_a_third_framework_has_speed_rows_against_the_reference(ctx):
    speed = ctx.speed
    assert list(dict.fromkeys(zip(speed["a"], speed["b"]))) == [("pyg", "dgl"), (NEW, "dgl")]
    keys = ["experiment", "model", "devices", "batch_size", "workers"]
    pyg = speed[speed["a"] == "pyg"].set_index(keys)
    new = speed[speed["a"] == NEW].set_index(keys)
    assert len(new) == len(pyg) > 0
    # the same runs under another name: the same epoch-time ratios against the reference
    assert new["estimate"].to_dict() == pytest.approx(pyg["estimate"].to_dict())


def test_a_third_framework_has_a_first_screen_answer_line(stored, ctx):
    # the speed section's declared first-screen answer, from the frames the first screen gives it
    # (first_screen.from_aggregate makes every table of the page, too slow for a unit test)
    f = first_screen.Frames(ctx.runs, ctx.points, ctx.speed, *[pd.DataFrame()] * 4, failures=[])
    speed = sections.answer_function(sections.by_key()["speed"])(f, main_experiment(ctx.speed, ctx.points))
    text = speed.text()
    assert "PyG copy" in text and "DGL" in text
    answered = {i["answer"] for i in speed.intervals}
    models = set(stored.runs["model"])
    assert {(sections.framework_axis(NEW), m) for m in models} <= answered
    assert {(sections.framework_axis("pyg"), m) for m in models} <= answered
    whats = [i["what"] for i in speed.intervals]
    assert any(w.endswith("PyG copy / DGL") for w in whats) and any(w.endswith("PyG / DGL") for w in whats)


def test_the_second_round_plans_repeats_for_the_third_frameworks_pair(stored):
    ratio = sections.ratios()[sections.framework_axis(NEW)]
    assert (ratio.column, ratio.numerator, ratio.denominator, ratio.words) == ("framework", NEW, "dgl",
                                                                               "PyG copy over DGL")
    models = sorted(set(stored.runs["model"]))
    # a precision no first round reaches: the new pair's answers are open, first-screen ones, and get repeats
    plan = second_round.plan(plan_points.points_from_runs(stored.runs), precision=0.01, budget_s=1e6, max_repeats=5)
    answers = {r["answer"]: r for r in plan.answers}
    for model in models:
        row = answers[f"PyG copy over DGL, {model}"]
        assert row["first_screen"] and row["comparisons"] > 0 and row["added"] > 0
    # settling the new pair's answers alone (as the first screen asks) plans runs of its two frameworks only
    points = plan_points.points_from_runs(stored.runs)
    keys = [(sections.framework_axis(NEW), m) for m in models]
    cost = second_round.settling_cost(points, 0.05, keys, max_repeats=40)
    assert sorted(cost["answers"]) == keys and cost["runs"] > 0 and cost["settled"]
    plan, _, answers, measured = second_round._answers(points, 0.05, cost["seconds"], 40)
    plan.spend({name: cs for name, cs in answers.items() if cs[0].answer_key() in keys}, measured)
    assert {p.key[0] for p in plan.points if p.added} == {NEW, "dgl"}
    assert sum(p.added for p in plan.points) == cost["runs"]


def test_the_runner_accepts_the_new_name(third):
    argv = ["--framework", NEW, "--model", "sage", "--devices", "1", "--batch-size", "8", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--out", "/tmp/x"]
    cfg = config_from_args(build_parser().parse_args(argv), 0, 2)
    assert cfg.framework == NEW and cfg.identity("h")["run_id"].startswith(f"tiny-{NEW}-sage-d1")
    with pytest.raises((SystemExit, ConfigError)):
        config_from_args(build_parser().parse_args(["--framework", "nosuch", *argv[2:]]), 0, 2)


def test_a_loaders_gap_is_taken_against_the_reference(ctx):
    from analysis.variants.loaders import loader_rows

    rows = loader_rows(ctx.runs)
    others = rows.groupby("framework")["other_framework"].agg(set).to_dict()
    # DGL's GraphBolt runs ran beside every framework's first loader; the reference's gap is to the first other
    assert others == {"pyg": {"dgl"}, NEW: {"dgl"}, "dgl": {"pyg"}}
