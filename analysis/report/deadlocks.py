"""The deadlock and failure report: what every non-ok run was doing when it stopped.

For each run that did not end "ok": its configuration, status, the runner's diagnosis (summary,
cause, remedy, evidence, where each rank was blocked), a condensed view of the captured stacks
(top frames per rank and loader worker) and the command that reproduces it. hang_parts says
the same in one sentence for the first screen ("What hangs, and why?").
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from analysis import FRAMEWORK_ORDER, STATUS_SEVERITY, framework_label, model_label
from analysis.grouping import truthy
from runners.records.rundir import RunDir
from runners.watch.diagnosis.causes import label_of
from runners.watch.stacks import OWN_CODE, main_first, parse_stack_text

TOP_FRAMES = 6
# py-spy files are <role>-pid<N>.txt; the faulthandler fallback adds a "faulthandler-" prefix.
STACK_FILE_RE = re.compile(r"^(?P<fh>faulthandler-)?(?P<role>rank\d+(?:-worker\d+)?)-pid(?P<pid>\d+)\.txt$")


def read_stacks(run_dir: Path, top: int = TOP_FRAMES) -> list:
    """Condensed stacks of every captured process: [{role, pid, source, threads, note}].

    py-spy dumps are preferred; a faulthandler dump is used for a role whose py-spy dump is
    missing or failed (e.g. py-spy not installed or not permitted)."""
    stacks_dir = RunDir(run_dir).stacks
    found = {}
    for path in sorted(stacks_dir.glob("*.txt")) if stacks_dir.is_dir() else []:
        m = STACK_FILE_RE.match(path.name)
        if not m:
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        threads = parse_stack_text(text)
        source = "faulthandler" if m.group("fh") else "py-spy"
        if not threads and source == "faulthandler":
            continue  # every rank registers a dump file; most stay empty
        entry = {"role": m.group("role"), "pid": int(m.group("pid")), "source": source,
                 "file": str(path.relative_to(run_dir)),
                 "threads": [{"name": t["name"], "state": t["state"], "frames": t["frames"][:top],
                              "own_frame": _own_frame(t["frames"])}
                             for t in main_first(threads)],
                 "note": None if threads else (text.strip().splitlines() or ["(empty dump)"])[0][:300]}
        key = entry["role"]
        # py-spy (names threads, shows their state) wins over faulthandler unless it produced nothing.
        if key not in found or _preference(entry) > _preference(found[key]):
            found[key] = entry
    return sorted(found.values(), key=lambda e: _role_order(e["role"]))


def _preference(entry: dict) -> tuple:
    return (bool(entry["threads"]), entry["source"] == "py-spy")


def _own_frame(frames: list):
    """The innermost frame in our own code: what the rank was doing in the training loop."""
    return next((f for f in frames if any(f"({own}" in f for own in OWN_CODE)), None)


def _role_order(role: str):
    nums = [int(x) for x in re.findall(r"\d+", role)]
    return (nums[0] if nums else 0, len(nums), nums[1:] or [0])


CONFIG_SHOWN = ("framework", "model", "devices", "nodes", "batch_size", "workers", "dataset",
                "epochs", "repeat", "device_type", "inject", "uneven_batches", "fanouts")


def failure_record(data: dict, run_dir: Path) -> dict:
    """Everything the report shows about one non-ok run (kept in failures.json)."""
    cfg = data["config"]
    diag = data.get("diagnosis") or {}
    return {
        "run_id": data["run_id"], "status": data["status"],
        "config": {k: cfg.get(k) for k in CONFIG_SHOWN},
        "command": data["command"]["shell"], "run_dir": str(run_dir),
        "wall_time_s": data.get("wall_time_s"),
        "diagnosis": {
            "summary": diag.get("summary") or f"{data['status']} (the runner left no diagnosis)",
            "cause": diag.get("cause"), "cause_text": diag.get("cause_text"),
            "remedy": diag.get("remedy"), "evidence": diag.get("evidence") or [],
            "ranks": diag.get("ranks") or [], "workers": diag.get("workers") or [],
            "culprit_rank": diag.get("culprit_rank"),
            "detected_after_s": diag.get("detected_after_s"),
            "error_excerpt": diag.get("error_excerpt"),
        },
        "stacks": read_stacks(run_dir),
    }


def sort_failures(failures: list) -> list:
    """Real failures before injected ones, most severe status first, look-alikes together."""
    def key(f):
        c = f["config"]
        return (bool(c.get("inject")), STATUS_SEVERITY.index(f["status"]) if f["status"] in STATUS_SEVERITY else 9,
                str(f["diagnosis"].get("cause")), str(c.get("dataset")), str(c.get("framework")), str(c.get("model")),
                c.get("devices") or 0, c.get("batch_size") or 0, c.get("workers") or 0, c.get("repeat") or 0)
    return sorted(failures, key=key)


# -- outputs --------------------------------------------------------------------------------

def failures_frame(failures: list) -> pd.DataFrame:
    """One row per failed run (deadlocks.csv)."""
    rows = []
    for f in failures:
        d, c = f["diagnosis"], f["config"]
        rows.append({"run_id": f["run_id"], "status": f["status"], **c, "cause": d["cause"],
                     "culprit_rank": d["culprit_rank"], "detected_after_s": d["detected_after_s"],
                     "summary": d["summary"], "remedy": d["remedy"], "command": f["command"]})
    return pd.DataFrame(rows, columns=["run_id", "status", *CONFIG_SHOWN, "cause", "culprit_rank",
                                       "detected_after_s", "summary", "remedy", "command"])


def config_line(c: dict) -> str:
    parts = [framework_label(c.get("framework")), model_label(c.get("model")),
             f"{c.get('devices')} device(s)" + (f" x {c['nodes']} nodes" if (c.get("nodes") or 1) > 1 else ""),
             f"batch {c.get('batch_size')}", f"{c.get('workers')} worker(s)", f"dataset {c.get('dataset')}",
             f"repeat {c.get('repeat')}"]
    if c.get("inject"):
        parts.append(f"injected fault: {c['inject']}")
    elif c.get("uneven_batches"):
        parts.append("uneven batches")
    return " · ".join(str(p) for p in parts)


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _rank_table(ranks: list, culprit) -> str:
    if not ranks:
        return "<p class='muted'>No per-rank progress was recorded.</p>"
    cols = [("rank", "rank"), ("epoch", "epoch"), ("step", "step"), ("phase", "phase"),
            ("blocked_in", "blocked in"), ("idle_s", "idle (s)"), ("exit_code", "exit code"),
            ("error", "error")]
    cols = [c for c in cols if any(r.get(c[0]) is not None for r in ranks)]
    head = "".join(f"<th>{_e(label)}</th>" for _, label in cols)
    body = []
    for r in ranks:
        cls = " class='culprit'" if culprit is not None and r.get("rank") == culprit else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_e(r.get(k))}</td>" for k, _ in cols) + "</tr>")
    return f"<table class='grid compact'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _stack_lines(s: dict) -> list:
    """Main thread's top frames in full, other threads by their innermost frame."""
    lines = []
    for i, t in enumerate(s["threads"]):
        if i == 0:
            lines.append(f"thread {t['name']}" + (f" ({t['state']})" if t["state"] else ""))
            lines += [f"  {'→' if j == 0 else ' '} {fr}" for j, fr in enumerate(t["frames"])]
            if t["own_frame"] and t["own_frame"] not in t["frames"]:
                lines.append(f"    … {t['own_frame']}")
        else:
            lines.append(f"thread {t['name']}: {t['frames'][0] if t['frames'] else '(no frames)'}")
    if s["note"]:
        lines.append(s["note"])
    return lines


def _stacks_html(stacks: list) -> str:
    """One box per distinct stack; processes blocked in the same place share a box."""
    if not stacks:
        return ("<p class='muted'>No stacks were captured (the watchdog takes them only when it stops a "
                "hung or timed-out run).</p>")
    groups = {}
    for s in stacks:
        groups.setdefault("\n".join(_stack_lines(s)), []).append(s)
    out = []
    for text, members in groups.items():
        roles = ", ".join(m["role"] for m in members)
        if len(members) == 1:
            m = members[0]
            meta = f"pid {m['pid']}, {m['source']}, {m['file']}"
        else:
            meta = f"{len(members)} processes with identical stacks ({members[0]['source']})"
        out.append(f"<div class='stack'><div class='stack-head'>{_e(roles)} <span class='muted'>{_e(meta)}</span></div>"
                   f"<pre>{_e(text)}</pre></div>")
    return "<div class='stacks'>" + "".join(out) + "</div>"


def render_html(failures: list) -> str:
    """The deadlock report as an HTML fragment (one card per non-ok run)."""
    if not failures:
        return "<p>Every run ended <span class='status status-ok'>ok</span>: nothing to diagnose.</p>"
    cards = []
    for f in failures:
        d = f["diagnosis"]
        # Every card starts folded: its summary line names status and configuration; the page's
        # answer says what hung and why.
        evidence = "".join(f"<li>{_e(x)}</li>" for x in d["evidence"])
        excerpt = f"<details><summary>error excerpt</summary><pre>{_e(d['error_excerpt'])}</pre></details>" \
            if d.get("error_excerpt") else ""
        detected = f", detected after {d['detected_after_s']:.0f} s" if d.get("detected_after_s") is not None else ""
        cards.append(f"""
<details class="card" id="fail-{_e(f['run_id'])}">
  <summary><h3><span class="status status-{_e(f['status'])}">{_e(f['status'])}</span> {_e(config_line(f['config']))}</h3></summary>
  <p class="diag-summary">{_e(d['summary'])}</p>
  <dl class="kv">
    <dt>known cause</dt><dd>{_e(d.get('cause_text') or d.get('cause') or 'unknown')}{f" <code>{_e(d['cause'])}</code>" if d.get('cause') else ''}</dd>
    <dt>remedy</dt><dd>{_e(d.get('remedy') or '—')}</dd>
    <dt>run</dt><dd><code>{_e(f['run_id'])}</code>{_e(detected)}</dd>
    <dt>reproduce</dt><dd><code class="cmd">{_e(f['command'])}</code></dd>
  </dl>
  <h4>Where each rank was</h4>
  {_rank_table(d['ranks'], d.get('culprit_rank'))}
  {f"<h4>Evidence</h4><ul class='evidence'>{evidence}</ul>" if evidence else ''}
  {excerpt}
  <h4>Stacks (innermost frame first)</h4>
  {_stacks_html(f['stacks'])}
</details>""")
    return "\n".join(cards)


# -- the first screen's answer: what hangs, and why ---------------------------------------------

def demonstration(config: dict) -> bool:
    """A run made to show the seed study's kind of hang: a naive (uneven) seed split, or one an
    experiment marks as a demonstration."""
    return bool(truthy(config.get("uneven_batches")) or truthy(config.get("demonstration")))


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _cause(f: dict) -> str:
    """The diagnosed cause in a few words: its Cause record's label (causes.label_of). A result
    whose cause text no record holds (written before its cause's wording changed) is read as it
    was written then: its text up to the first colon."""
    d = f["diagnosis"]
    return label_of(d) or (d.get("cause_text") or d.get("cause") or "unknown cause").split(":")[0]


def _who(fs: list) -> list:
    """'PyG and DGL GraphSAGE on 2 devices', each framework linked to its run's card."""
    parts = []
    for i, f in enumerate(fs):
        sep = "" if i == 0 else (" and " if i == len(fs) - 1 else ", ")
        parts += [(sep, None), (framework_label(f["config"].get("framework")), f"#fail-{f['run_id']}")]
    models = ", ".join(dict.fromkeys(model_label(f["config"].get("model")) for f in fs))
    devices = "/".join(str(d) for d in sorted({f["config"].get("devices") for f in fs}))
    return parts + [(f" {models} on {devices} devices", None)]


STATUS_VERBS = {"hang": "hung", "timeout": "timed out", "crashed": "crashed", "killed": "were killed",
                "diverged": "diverged", "error": "failed", "interrupted": "were interrupted"}


def _verb(fs: list) -> str:
    """'hung', 'crashed or hung': what the runs' statuses say, as a verb."""
    return " or ".join(dict.fromkeys(STATUS_VERBS.get(f["status"], f["status"]) for f in fs))


def _demo_parts(demos: list) -> list:
    what, not_what = (("deliberate demonstrations", "benchmark failures") if len(demos) > 1
                      else ("a deliberate demonstration", "a benchmark failure"))
    return _who(demos) + [(f" with uneven batches per rank {_verb(demos)} ({_cause(demos[0])}): {what} "
                           f"of the seed study's kind of hang, not {not_what}. ", None)]


def hang_parts(failures: list, n_runs: int) -> list:
    """What hung or failed and why (failures.json records), as the first screen's (text, href)
    parts: demonstrations, injected faults and real failures said apart."""
    if not failures:
        who = "The one run" if n_runs == 1 else f"All {n_runs} runs"
        return [(f"{who} ended ok or skipped: nothing to diagnose.", "#deadlocks")]
    parts = []
    injected = [f for f in failures if f["config"].get("inject")]
    demos = [f for f in failures if f not in injected and demonstration(f["config"])]
    real = [f for f in failures if f not in injected and f not in demos]
    if demos:
        order = {f: i for i, f in enumerate(FRAMEWORK_ORDER)}
        parts += _demo_parts(sorted(demos, key=lambda f: order.get(f["config"].get("framework"), 99)))
    if injected:
        kinds = ", ".join(dict.fromkeys(str(f["config"]["inject"]) for f in injected))
        parts += [(f"{_n(len(injected), 'injected fault')} ({kinds}) ", None),
                  (_verb(injected), f"#fail-{injected[0]['run_id']}"), (" as intended", None)]
    if not real:
        parts.append(("; no other run failed." if injected else "No other run failed.", None))
    for cause, fs in _by_cause(real).items():
        parts += [(f"{_n(len(fs), 'run')} ", None), (_verb(fs), f"#fail-{fs[0]['run_id']}"),
                  (f" for real: {cause}; e.g. ", None), *_who(fs[:1]),
                  (f", {fs[0]['config'].get('workers')} workers. ", None)]
    return parts


def _by_cause(fs: list) -> dict:
    out = {}
    for f in fs:
        out.setdefault(_cause(f), []).append(f)
    return out
