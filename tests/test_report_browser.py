"""The report in a real browser: headless Chromium loads it offline, every image decodes,
no console or script error, and a screenshot is written."""

import subprocess
import sys

import pytest

from analysis import report
from scripts import check_report_browser as browser
from tests import _runs

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
    assert summary["ok"] and summary["images"] == summary["images_loaded"] == len(report.PLOT_NAMES)
    # every axis of the study has its section, laid out by the browser
    for section in ("scaling", "workers", "batch", "throughput", "study", "plan", "accuracy"):
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
