"""Drill: a question declared in one place. A section added to analysis.report.sections by this
test alone, with its answer function and a table, appears in the navigation, as a heading and on
the first screen under one title, in its declared place; the page is rendered from a stored sweep."""

import gzip
import shutil

from analysis.report import sections
from analysis.report.__main__ import main as render_main
from analysis.report.answers import Answer
from tests.helpers import REPO

SWEEP = sorted(p for p in (REPO / "tests" / "data" / "sweeps").glob("*") if (p / "runs.csv").is_file())[0]
TITLE = "How many runs did the sweep make?"


def count_runs(frames, exp):
    n = int((frames.runs["experiment"] == exp).sum())
    return Answer("run-count", [(f"{n} runs in the main experiment", "#table-speed")])


def test_a_question_declared_once_is_on_the_nav_the_page_and_the_first_screen(tmp_path, monkeypatch):
    agg = tmp_path / "agg"
    agg.mkdir()
    shutil.copy(SWEEP / "runs.csv", agg / "runs.csv")
    for name in ("epochs", "steps"):
        with gzip.open(SWEEP / f"{name}.csv.gz") as src, open(agg / f"{name}.csv", "wb") as dst:
            shutil.copyfileobj(src, dst)
    keys = [s.key for s in sections.SECTIONS]
    at = keys.index("accuracy") + 1
    question = sections.Section("run-count", TITLE, answer=count_runs, tables=("speed",))
    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS[:at] + (question,) + sections.SECTIONS[at:])
    out = tmp_path / "report" / "index.html"
    assert render_main(["--aggregate", str(agg), "--out", str(out)]) == 0
    html = out.read_text()
    nav = html[html.index("<nav>"):html.index("</nav>")]
    assert f'<a href="#run-count">{TITLE}</a>' in nav
    first = html[html.index('<section id="answers">'):html.index("<nav>")]
    assert f'<dt><a href="#run-count">{TITLE}</a></dt>' in first and "runs in the main experiment" in first
    section = html[html.index('<section id="run-count">'):]
    section = section[:section.index("</section>")]
    assert f"<h2>{TITLE}</h2>" in section and 'id="table-speed"' in section
    # in its declared place: after accuracy's section, before the next one
    order = [html.index(f'<section id="{k}">') for k in ("accuracy", "run-count", keys[at])]
    assert order == sorted(order)
