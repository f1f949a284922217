"""The report in a real browser: headless Chromium loads it offline, every image decodes,
no console or script error, and a screenshot is written; the first 1,400 x 900 screen holds the
answers, and with every <details> folded the page is short."""

import json
import re
import subprocess
import sys

import pytest

from analysis.report import first_screen
from analysis.aggregate import Aggregate
from scripts import check_report_browser as browser
from tests import _runs

SCREEN = "1400,900"
MAX_FOLDED_HEIGHT = 7200  # px at 1,400 px wide: 8 screens, down from 13,158 before issue 25

pytestmark = pytest.mark.skipif(
    browser.find_chromium() is None,
    reason="chromium is not installed (apt-get install -y chromium); the browser check needs it")


def test_report_opens_cleanly_in_chromium(tmp_path_factory, tmp_path):
    page = _runs.report_page(tmp_path_factory)
    shot = tmp_path / "screenshot.png"
    res = subprocess.run([sys.executable, str(_runs.REPO / "scripts" / "check_report_browser.py"), str(page),
                          "--screenshot", str(shot), "--window-size", "1280,1800"],
                         capture_output=True, text=True, timeout=300, cwd=_runs.REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert '"problems": []' in res.stdout
    summary = browser.check(page)
    figures = page.read_text().count("<figure>")
    assert summary["ok"] and figures >= 4 and summary["images"] == summary["images_loaded"] == figures
    # every question of the study has its section, laid out by the browser
    for section in ("answers", "speed", "scaling", "speedup-gap", "workers", "batch", "breakdown", "deadlocks",
                    "accuracy", "study", "plan"):
        assert section in summary["sections"], (section, summary["sections"])
    assert shot.exists() and shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_catches_a_broken_image_and_an_external_reference(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><title>x</title></head><body>"
                   "<img alt='broken' src='data:image/png;base64,AAAA'>"
                   "<img alt='remote' src='http://127.0.0.1:9/x.png'></body></html>")
    summary = browser.check(bad)
    assert not summary["ok"]
    problems = "\n".join(summary["problems"])
    assert "image did not load: broken" in problems
    assert "external reference: http://127.0.0.1:9/x.png" in problems


def squeeze(text: str) -> str:
    """Text without whitespace: the browser's text nodes and the sentence split spaces differently."""
    return re.sub(r"\s+", "", text)


def test_first_screen_answers_the_questions_and_the_folded_page_is_short(tmp_path_factory):
    page = _runs.report_page(tmp_path_factory)
    layout = browser.layout(page, SCREEN)
    assert not layout["problems"], layout["problems"]
    said = {a.key: a for a in first_screen.from_aggregate(Aggregate.load(_runs.aggregate_dir(tmp_path_factory)))["answers"]}
    first = squeeze(layout["first_screen_text"])
    for key in ("speed", "scaling"):  # at least the framework and the scaling answers, whole
        assert squeeze(said[key].text()) in first, (key, said[key].text(), layout["first_screen_text"])
    for a in said.values():  # and every question
        assert squeeze(a.label) in first, a.label
    # every number on the first screen links somewhere on the page
    for link in layout["first_screen_links"]:
        assert link["href"].startswith("#") and link["href"][1:] in layout["ids"], link
    assert layout["details"] >= 10
    print(f"page height with every <details> folded at {SCREEN}: {layout['page_height']} px; "
          f"sections: {json.dumps(layout['section_heights'])}")
    assert layout["page_height"] <= MAX_FOLDED_HEIGHT, layout["section_heights"]


def test_layout_from_the_command_line(tmp_path_factory):
    page = _runs.report_page(tmp_path_factory)
    res = subprocess.run([sys.executable, str(_runs.REPO / "scripts" / "check_report_browser.py"), str(page),
                          "--layout", SCREEN], capture_output=True, text=True, timeout=300, cwd=_runs.REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    layout = json.loads(res.stdout)["layout"]
    assert 0 < layout["page_height"] <= MAX_FOLDED_HEIGHT and "Which framework is faster?" in layout["first_screen_text"]


def test_layout_folds_details_and_cuts_at_the_screen(tmp_path):
    page = tmp_path / "tall.html"
    page.write_text("<!DOCTYPE html><html><head><title>x</title></head><body style='margin:0'>"
                    "<p id='top'>first screen</p><details open><summary>folded</summary>"
                    "<div style='height:5000px'>inside</div></details>"
                    "<div style='height:1000px'></div><p>below the screen</p></body></html>")
    layout = browser.layout(page, "800,600")
    assert layout["page_height"] < 1300  # the open <details> was folded before measuring
    assert "first screen" in layout["first_screen_text"] and "folded" in layout["first_screen_text"]
    assert "inside" not in layout["first_screen_text"] and "below the screen" not in layout["first_screen_text"]
    assert "top" in layout["ids"]
