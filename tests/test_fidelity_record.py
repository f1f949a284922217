"""The fairness table's fidelity rows (analysis.report.fidelity): read from a fidelity record as
benchmarks.measure writes it, this checkout's own measurement before the project's record, with
where it was measured; a missing record says which command measures it."""

import json

import pytest

from analysis.report import fidelity
from benchmarks import measure


def record(value: float, commit: str) -> dict:
    rows = [{"key": "fidelity:pyg-sage", "figure": f"{value:.3f} (0.990-1.010)", "value": value,
             "interval": [0.99, 1.01], "verdict": "PASS", "framework": "pyg", "loader": None, "model": "sage"},
            {"key": "fidelity:dgl-graphbolt-sage", "figure": "1.040 (1.020-1.060)", "value": 1.04,
             "interval": [1.02, 1.06], "verdict": "MISS", "framework": "dgl", "loader": "graphbolt", "model": "sage"},
            {"key": "fidelity:dgl-sage-csc", "figure": "0.980 (0.950-1.010)", "value": 0.98, "interval": [0.95, 1.01],
             "verdict": "PASS", "framework": "dgl", "loader": None, "model": "sage", "against": "the CSC-only loop"},
            {"key": "fidelity_gap:pyg/dgl-sage", "figure": "0.970 (0.950-0.990)", "value": 1 / 0.97, "estimate": 0.97,
             "interval": [0.95, 0.99], "verdict": "UNSETTLED", "framework": "pyg", "loader": None, "model": "sage",
             "over": "dgl"}]
    return {"measured_at": "2026-11-29T01:40:00Z", "git_commit": commit, "host": "box", "cpu_cores": 2,
            "settings": {"dataset": "small", "devices": 2, "batch_size": 256, "repeats": 10}, "rows": rows}


def test_fidelity_rows_state_each_framework_and_the_gap_with_where_they_were_measured(tmp_path):
    own, stored = tmp_path / "results" / "benchmarks" / "fidelity.json", tmp_path / "benchmarks" / "fidelity.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps(record(1.0, "a" * 40)))
    sources = ((own, "this checkout's last measurement"), (stored, "the project's record"))
    rows = {r["setting"]: r for r in fidelity.fidelity_rows(["pyg", "dgl"], sources)}
    assert rows[fidelity.SETTING]["PyG"] == "GraphSAGE: 1.000 (0.990–1.010) PASS"
    assert rows[fidelity.SETTING]["DGL"] == ("GraphSAGE with its graphbolt loader: 1.040 (1.020–1.060) MISS; "
                                             "GraphSAGE, against the CSC-only loop: 0.980 (0.950–1.010) PASS")
    # the gap as measured (below 1: the runner narrows it), not the verdict's folded figure
    gap = rows[fidelity.GAP_SETTING.format(reference="DGL")]
    assert gap["PyG"] == "GraphSAGE: 0.970 (0.950–0.990) UNSETTLED" and gap["DGL"] == "—"
    assert "commit aaaaaaa" in rows[fidelity.MEASURED]["PyG"] and "the project's record" in rows[fidelity.MEASURED]["PyG"]
    # this checkout's own measurement comes first
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps(record(1.02, "b" * 40)
                              | {"command": "python -m benchmarks.measure --only fidelity --repeats 9 --resume"}))
    rows = {r["setting"]: r for r in fidelity.fidelity_rows(["pyg", "dgl"], sources)}
    assert rows[fidelity.SETTING]["PyG"].startswith("GraphSAGE: 1.020")
    assert "commit bbbbbbb" in rows[fidelity.MEASURED]["DGL"] and "last measurement" in rows[fidelity.MEASURED]["DGL"]
    # measuring afresh is its own command without --resume, which only continues runs kept where it ran
    assert rows[fidelity.MEASURED]["DGL"].endswith("rerun: python -m benchmarks.measure --only fidelity --repeats 9")


def test_without_a_record_the_row_names_the_command(tmp_path):
    [row] = fidelity.fidelity_rows(["pyg"], ((tmp_path / "none.json", "nothing"),))
    assert row["PyG"] == f"not measured: {fidelity.COMMAND}"



def test_timed_limits_the_rows_to_the_named_frameworks_and_refuses_unknown_names(capsys):
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl"])
    keys = measure.expected_keys(s)
    assert "fidelity_gap:pyg/dgl-sage" in keys and "fidelity:dgl-sage-csc" in keys
    assert not [k for k in keys if "graphbolt" in k]
    assert measure.gap_pairs(measure.parse_args(["--timed", "pyg"])) == ()
    with pytest.raises(SystemExit):
        measure.parse_args(["--timed", "pyg,mxnet"])
    assert "--timed: unknown ['mxnet']; known: pyg, dgl" in capsys.readouterr().err
