"""The report's figures at a readable size (issue 57, item 6): the scaling section shows the
speed-up panels of the experiment its answer speaks for, and folds every experiment's under them,
as the timing and breakdown sections do; on an Aggregate of two experiments built in memory."""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

import pandas as pd
import pytest

from analysis import REPORT_PLOTS, caption_name
from analysis.report import figures, render
from analysis.report.context import Context
from tests.test_project import PHASES, world
from tests.test_projection_report import in_memory, section


def two_experiments():
    """runs, epochs, steps: the main experiment (PyG and DGL at 1 and 2 devices) and another of
    PyG alone at another learning rate (no framework comparison, so never the main one)."""
    main = world()
    other = world(phases={"pyg": PHASES["pyg"]}, extra={"lr": 0.5})
    other = [f.assign(run_id="other-" + f["run_id"]) for f in other]
    return tuple(pd.concat([a, b], ignore_index=True) for a, b in zip(main, other))


def png_size(src: str) -> tuple:
    """(width, height) of a PNG data URI, from its IHDR chunk."""
    data = base64.b64decode(src.split(",", 1)[1])
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figures")
    agg = in_memory(tmp, two_experiments())
    page = render.render(agg, tmp / "report" / "index.html", tmp / "report").read_text()
    return agg, tmp / "report", page


def test_the_speedup_figure_draws_the_main_experiment_and_the_folded_one_every_experiment(rendered):
    agg, _, _ = rendered
    ctx = Context(agg)
    assert ctx.runs["experiment"].nunique() == 2
    assert set(ctx.drawn["speedup"]["experiment"]) == {ctx.experiment}
    assert set(ctx.drawn["speedup_all"]["experiment"]) == set(ctx.runs["experiment"])


def test_the_scaling_section_shows_the_main_panels_and_folds_the_rest(rendered):
    _, assets, page = rendered
    sec = section(page, "scaling")
    shown, folded = sec.split("<details><summary>Figure: every experiment's panels</summary>")
    main = re.findall(r'<img src="([^"]+)"', shown)
    rest = re.findall(r'<img src="([^"]+)"', folded)
    assert len(main) == 1 and len(rest) == 1 and main != rest
    assert "(file: speedup.png)" in shown and "(file: speedup_all.png)" in folded
    # one row of panels on the page, the two experiments' rows in the fold
    (_, h), (_, h_all) = png_size(main[0]), png_size(rest[0])
    assert h_all > 1.5 * h
    assert main[0].endswith(base64.b64encode((assets / "speedup.png").read_bytes()).decode())


def test_the_folded_figure_is_written_declared_and_captioned(rendered):
    _, assets, _ = rendered
    assert "speedup_all" in REPORT_PLOTS and "speedup_all.png" in render.ASSETS
    assert (assets / "speedup_all.png").is_file()
    captions = Path(__file__).resolve().parents[1] / "workflows" / "report"
    assert all((captions / f"{caption_name(n, a)}.rst").is_file() for n, a in REPORT_PLOTS.items())


def test_the_fold_is_left_out_only_where_it_would_repeat_the_panels_above(rendered):
    agg, _, _ = rendered
    ctx = Context(agg)
    drawn, main = dict(ctx.drawn), ctx.drawn["speedup"]
    # one experiment: the fold would draw the panels above again
    one = figures.not_drawn(ctx.runs, {**drawn, "speedup_all": main}, ctx.gap)
    assert one["speedup_all"] == "Not drawn again: the sweep has one experiment, shown above."
    # the main experiment has no speed-up to draw, another one has: the fold is its only figure
    other = drawn["speedup_all"][drawn["speedup_all"]["experiment"] != ctx.experiment]
    why = figures.not_drawn(ctx.runs, {**drawn, "speedup": main.iloc[0:0], "speedup_all": other}, ctx.gap)
    assert "speedup_all" not in why and why["speedup"].startswith("Not drawn: ")
