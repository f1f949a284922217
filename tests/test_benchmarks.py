"""Smoke test of the instrument benchmark (benchmarks/measure.py): a --quick run on the tiny
dataset completes and prints its table with every row. No timing assertions: the figures are
measurements, not pass/fail criteria of the test suite."""

import json
import os
import subprocess
import sys

from tests.helpers import DATA_ROOT, REPO

ROWS = ["probe overhead (pyg-sage)", "probe overhead (dgl-sage)", "probe overhead (dgl-graphbolt-sage)",
        "fidelity: runner / reference epoch (pyg-sage)", "fidelity: runner / reference epoch (dgl-sage)",
        "fidelity: runner / reference epoch (dgl-graphbolt-sage)", "fidelity: runner / reference epoch (dgl-sage-csc)",
        "fidelity: the runner's framework gap / the references' (pyg/dgl-sage)",
        "memory: PSS 2 ranks / 1 rank (pyg)", "memory: PSS 2 ranks / 1 rank (dgl)",
        "start-up: command to first step (pyg)", "start-up: command to first step (dgl)",
        "start-up: command to first step (dgl-graphbolt)",
        "sweep wall time (default, cold)", "sweep wall time (no-op rerun)",
        "variation: CV of epoch time (pyg-sage)", "variation: CV of epoch time (dgl-sage)",
        "variation: CV of epoch time (dgl-graphbolt-sage)",
        "launch: run minus training, over the import floor (pyg)",
        "launch: run minus training, over the import floor (dgl)"]
# The projection row replays stored sweeps; one of them here (each takes about 12 s).
SWEEP = sorted(p for p in (REPO / "tests" / "data" / "sweeps").glob("*") if (p / "runs.csv").is_file())[0]
ROWS.append(f"projection: held-out points outside their intervals ({SWEEP.name})")


def test_quick_measure_prints_every_row(tmp_path):
    # One repeat: every row's code runs over 1 repeat as over 2 (medians, paired ratios with no
    # interval), but variation, which needs two, is skipped and says so.
    cmd = [sys.executable, "-m", "benchmarks.measure", "--quick", "--data-root", str(DATA_ROOT),
           "--memory-graph", "20000,400000,32", "--memory-root", str(tmp_path / "datasets"),
           "--repeats", "1", "--launch-repeats", "1", "--projection-sweeps", str(SWEEP), "--out-dir", str(tmp_path / "out")]
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=1800, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| measurement | figure | target | verdict | detail |")
    for name in ROWS:
        rows = [line for line in table if line.startswith(f"| {name} |")]
        assert len(rows) == 1, f"row {name!r} missing from:\n" + "\n".join(table)
        verdict = rows[0].split(" | ")[3]
        # Sweep rows are skipped without --with-sweep, variation with one repeat; fidelity's
        # verdict is its figure's with one repeat (no interval); every other row was measured.
        allowed = (("SKIP",) if name.startswith(("sweep", "variation")) else
                   ("PASS", "MISS", "UNSETTLED") if name.startswith("fidelity") else ("PASS", "MISS"))
        assert verdict in allowed, rows[0]
        if name.startswith("variation"):
            assert "variation needs two" in rows[0], rows[0]
    written = (tmp_path / "out" / "measure.md").read_text()
    assert all(f"| {name} |" in written for name in ROWS)
    raw = json.loads((tmp_path / "out" / "measure.json").read_text())
    assert len(raw["rows"]) == len(ROWS) and not raw.get("errors")
    # The launch, part by part, for both rank starters: no part is negative (the marks are in
    # order), the floors were measured, and the parts add up to the whole command.
    for fw in ("pyg", "dgl"):
        for starter in ("spawn", "torchrun"):
            parts = raw["launch"][fw][starter]
            assert all(v > -0.05 for v in parts.values()), (fw, starter, parts)
            assert parts["rank: import torch"] > 0.1 and parts["training epochs"] > 0
        # Both floors were measured; their order is a timing, which a busy machine can swap.
        floors = raw["launch"][fw]["floor"]
        assert floors["import torch + framework"] > 0 and floors["... + torch._dynamo"] > 0
    assert "Launch, part by part" in written and "| rank starter, until the ranks exist |" in written
    # The fidelity rows are kept with where and how they were measured, for the report's fairness table.
    record = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    assert record["settings"]["repeats"] == 1 and record["cpu_cores"] >= 1 and record["git_commit"]
    kept = {(r["framework"], r.get("loader"), r["model"], r.get("against"), r.get("over")) for r in record["rows"]}
    assert {("pyg", None, "sage", None, None), ("dgl", None, "sage", None, None),
            ("dgl", "graphbolt", "sage", None, None), ("pyg", None, "sage", None, "dgl")} <= kept
