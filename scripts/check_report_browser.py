"""Open the HTML report in headless Chromium: screenshot it, check that every image loads,
that nothing is fetched from outside the file and that no script or console error occurs; and
measure its layout: the page's height with every <details> folded and the text and links a
reader sees on the first screen.

    python scripts/check_report_browser.py results/report/index.html \
        [--screenshot results/report/screenshot.png] [--window-size 1400,2400] \
        [--layout 1400,900]

Prints a JSON summary; exit 0 when the page is clean, 1 when it has problems, 2 when no
Chromium is installed (install it with `apt-get install -y chromium`).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Quiet, isolated and offline-friendly: no first-run UI, no background traffic, fresh profile.
BASE_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--hide-scrollbars", "--mute-audio")
MARKER_ID = "__report_check__"

# Injected first in <head> of a temporary copy: records errors from the very start, and after
# `load` (which waits for every image) writes what it saw into the DOM for --dump-dom.
PROBE = """<script>
(function () {
  var errors = [];
  window.addEventListener('error', function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) errors.push('resource failed: ' + String(t.src || t.href).slice(0, 120));
    else errors.push('script error: ' + e.message);
  }, true);
  window.addEventListener('unhandledrejection', function (e) { errors.push('unhandled rejection: ' + e.reason); });
  var orig = console.error;
  console.error = function () { errors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); orig.apply(console, arguments); };
  window.addEventListener('load', function () {
    var imgs = Array.prototype.map.call(document.images, function (i) {
      return {alt: (i.alt || '').slice(0, 80), loaded: i.complete && i.naturalWidth > 0,
              width: i.naturalWidth, height: i.naturalHeight, data_uri: i.src.slice(0, 5) === 'data:'};
    });
    var res = performance.getEntriesByType('resource').map(function (r) { return r.name; })
      .filter(function (n) { return n.slice(0, 5) !== 'data:'; });
    var sections = Array.prototype.map.call(document.querySelectorAll('section[id]'), function (s) {
      var h = s.querySelector('h2');
      return {id: s.id, heading: h ? h.textContent : '', rendered: s.offsetHeight > 0};
    });
    var pre = document.createElement('pre');
    pre.id = '%s';
    pre.textContent = JSON.stringify({images: imgs, errors: errors, resources: res, title: document.title,
                                      sections: sections});
    document.body.appendChild(pre);
  });
})();
</script>""" % MARKER_ID

LAYOUT_ID = "__report_layout__"
# Injected like PROBE: after `load`, folds every <details> and measures at the window's width.
# A text node counts as on the first screen when the browser shows it and one of its boxes starts
# above H (given, not the window's inner height: headless Chromium takes its own toolbar off that).
LAYOUT_PROBE = """<script>
(function () {
  window.addEventListener('load', function () {
    Array.prototype.forEach.call(document.querySelectorAll('details[open]'), function (d) { d.open = false; });
    var h = __SCREEN_H__, texts = [], links = [];
    // A folded <details> keeps its content laid out but hidden (content-visibility), so boxes alone
    // do not tell: ask the browser whether the element is shown.
    var shown = function (e) { return !e.checkVisibility || e.checkVisibility({visibilityProperty: true}); };
    var walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (var n = walk.nextNode(); n; n = walk.nextNode()) {
      var t = n.textContent.replace(/\\s+/g, ' ');
      if (!t.trim() || /^(STYLE|SCRIPT)$/.test(n.parentNode.nodeName) || !shown(n.parentElement)) continue;
      var r = document.createRange(); r.selectNodeContents(n);
      var boxes = Array.prototype.filter.call(r.getClientRects(), function (b) { return b.width > 0 && b.top < h; });
      if (boxes.length) texts.push(t);
    }
    Array.prototype.forEach.call(document.querySelectorAll('a[href]'), function (a) {
      var b = a.getBoundingClientRect();
      if (b.width > 0 && b.top < h && !a.closest('nav') && shown(a)) links.push({text: a.textContent.trim(), href: a.getAttribute('href')});
    });
    var ids = Array.prototype.map.call(document.querySelectorAll('[id]'), function (e) { return e.id; });
    var heights = {};
    Array.prototype.forEach.call(document.querySelectorAll('section[id]'), function (e) { heights[e.id] = e.offsetHeight; });
    var pre = document.createElement('pre');
    pre.id = '__LAYOUT_ID__';
    pre.textContent = JSON.stringify({width: window.innerWidth, height: h,
      page_height: Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),
      first_screen_text: texts.join(' ').replace(/\\s+/g, ' ').trim(), first_screen_links: links, ids: ids, section_heights: heights,
      details: document.querySelectorAll('details').length});
    pre.style.display = 'none';
    document.body.appendChild(pre);
  });
})();
</script>"""

EXTERNAL_RE = re.compile(r"""(?:\bsrc|\bhref)\s*=\s*["']?(?!data:|#)([^"'\s>]+)|url\(\s*["']?(?!data:)([^"')]+)""", re.I)


def find_chromium(explicit: str | None = None):
    if explicit:
        return explicit if Path(explicit).exists() or shutil.which(explicit) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def external_references(text: str) -> list:
    """Anything the page would load from outside itself (links to #anchors and data: are fine)."""
    return sorted({m.group(1) or m.group(2) for m in EXTERNAL_RE.finditer(text)})


def run_chromium(chromium: str, args: list, timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="report-check-profile-") as profile:
        cmd = [chromium, *BASE_FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOME": profile})


def console_errors(stderr: str) -> list:
    """Console messages Chromium logged at error level, or uncaught exceptions."""
    out = []
    for line in stderr.splitlines():
        if "CONSOLE" in line and ("Uncaught" in line or ":ERROR:CONSOLE" in line or '"error"' in line.lower()):
            out.append(line.strip()[:300])
    return out


def layout(report: Path, window_size: str = "1400,900", chromium: str | None = None,
           timeout: float = 120.0) -> dict:
    """The page laid out at `window_size` (W,H) with every <details> folded: page_height (px),
    first_screen_text (what lies above H), first_screen_links [{text, href}] (outside the side
    navigation), ids (every element id, for checking where links go), section_heights (id -> px),
    details (how many)."""
    exe = find_chromium(chromium)
    if exe is None:
        return {"chromium": None, "problems": ["chromium is not installed"]}
    text = Path(report).resolve().read_text()
    with tempfile.TemporaryDirectory(prefix="report-layout-") as tmp:
        copy = Path(tmp) / "layout.html"
        probe = LAYOUT_PROBE.replace("__SCREEN_H__", str(int(window_size.split(",")[1]))).replace(
            "__LAYOUT_ID__", LAYOUT_ID)
        copy.write_text(re.sub(r"<head>", lambda m: m.group(0) + probe, text, count=1, flags=re.I))
        res = run_chromium(exe, [f"--window-size={window_size}", "--virtual-time-budget=15000",
                                 "--dump-dom", copy.as_uri()], timeout)
    m = re.search(rf'<pre id="{LAYOUT_ID}"[^>]*>(.*?)</pre>', res.stdout, re.S)
    if not m:
        return {"chromium": exe, "problems": [f"no layout (chromium exit {res.returncode}): {res.stderr[-500:]}"]}
    return {"chromium": exe, "problems": [], **json.loads(html.unescape(m.group(1)))}


def check(report: Path, screenshot: Path | None = None, window_size: str = "1400,2400",
          chromium: str | None = None, timeout: float = 120.0) -> dict:
    """Check one report; return a summary with `ok` and `problems`."""
    exe = find_chromium(chromium)
    if exe is None:
        return {"ok": False, "chromium": None, "problems": ["chromium is not installed"]}
    report = Path(report).resolve()
    text = report.read_text()
    problems = [f"external reference: {ref}" for ref in external_references(text)]
    with tempfile.TemporaryDirectory(prefix="report-check-") as tmp:
        probe_copy = Path(tmp) / "probe.html"
        probe_copy.write_text(re.sub(r"<head>", lambda m: m.group(0) + PROBE, text, count=1, flags=re.I))
        res = run_chromium(exe, ["--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000",
                                 "--dump-dom", probe_copy.as_uri()], timeout)
    m = re.search(rf'<pre id="{MARKER_ID}">(.*?)</pre>', res.stdout, re.S)
    if not m:
        problems.append(f"the page did not finish loading (chromium exit {res.returncode}): {res.stderr[-500:]}")
        seen = {"images": [], "errors": [], "resources": [], "sections": []}
    else:
        seen = json.loads(html.unescape(m.group(1)))
    broken = [i for i in seen["images"] if not i["loaded"]]
    problems += [f"image did not load: {i['alt'] or '(no alt text)'}" for i in broken]
    problems += [f"image is not embedded: {i['alt']}" for i in seen["images"] if not i["data_uri"]]
    problems += seen["errors"]
    problems += [f"fetched from outside the page: {r}" for r in seen["resources"]]
    problems += [f"console: {line}" for line in console_errors(res.stderr)]
    summary = {"ok": not problems, "chromium": exe, "report": str(report), "images": len(seen["images"]),
               "images_loaded": len(seen["images"]) - len(broken), "problems": problems,
               # the sections the browser laid out (id -> heading), so a check can ask for them
               "sections": {s["id"]: s["heading"] for s in seen.get("sections", []) if s.get("rendered")}}
    if screenshot is not None:
        screenshot = Path(screenshot).resolve()
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = run_chromium(exe, [f"--window-size={window_size}", f"--screenshot={screenshot}",
                                  report.as_uri()], timeout)
        if not screenshot.exists() or screenshot.stat().st_size == 0:
            summary["problems"].append(f"no screenshot written (chromium exit {shot.returncode})")
            summary["ok"] = False
        summary["screenshot"] = str(screenshot)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("report", type=Path, help="the report's index.html")
    p.add_argument("--screenshot", type=Path, default=None, help="write a PNG screenshot here")
    p.add_argument("--window-size", default="1400,2400", help="W,H in pixels of the screenshot")
    p.add_argument("--chromium", default=None, help="browser executable (default: search PATH)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per browser run")
    p.add_argument("--layout", metavar="W,H", default=None,
                   help="also report the page height at width W with every <details> folded and the "
                        "text within the first H pixels (key 'layout')")
    args = p.parse_args(argv)
    if not args.report.exists():
        p.error(f"{args.report}: no such file")
    summary = check(args.report, args.screenshot, args.window_size, args.chromium, args.timeout)
    if args.layout and summary["chromium"]:
        summary["layout"] = layout(args.report, args.layout, args.chromium, args.timeout)
        summary["problems"] += summary["layout"]["problems"]
        summary["ok"] = summary["ok"] and not summary["layout"]["problems"]
    print(json.dumps(summary, indent=1))
    if summary["chromium"] is None:
        print("chromium not found: install it with `apt-get install -y chromium`", file=sys.stderr)
        return 2
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
