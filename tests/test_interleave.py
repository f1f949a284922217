"""The fidelity measurement's kept runs (benchmarks.interleave): `--resume` continues only the
measurement it can continue (the same settings, cells and measured code), from its complete
repeats, and refuses anything else before a run starts, naming what differs."""

import json

import pytest

from benchmarks import interleave, measure
from benchmarks.measure_runs import MeasureError


def kept(tmp_path, s, repeats_per_cell, commit):
    """A work directory holding a measurement's runs so far, as timing_runs writes it."""
    work = tmp_path / "work"
    work.mkdir()
    runs = {"/".join(k): [{"epoch_s": 1.0 + i / 10} for i in range(n)]
            for k, n in zip(interleave.cells(s, ("probes-on", "reference")), repeats_per_cell)}
    (work / interleave.SO_FAR).write_text(json.dumps({
        "settings": {k: getattr(s, k) for k in interleave.RUN_SETTINGS}, "git_commit": commit, "runs": runs}))
    return work


@pytest.fixture
def code_unchanged(monkeypatch):
    """The measured code as it was (this working tree may edit runners/ while the tests run)."""
    monkeypatch.setattr(interleave, "code_changed_since", lambda commit: [])


def test_resume_keeps_the_complete_repeats_and_runs_nothing_once_they_suffice(tmp_path, code_unchanged):
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl", "--repeats", "3", "--resume"])
    variants = measure.timing_variants(s)
    assert variants == ("probes-on", "reference")
    work = kept(tmp_path, s, [4, 3, 3, 3, 3], "a" * 40)  # pyg's runner ran a 4th
    runs, done, _ = interleave.so_far(s, work, variants)
    assert done == 3 and {len(v) for v in runs.values()} == {3}
    raw = {}
    assert interleave.timing_runs(s, work, variants, raw) == runs  # nothing left to run: no launch
    assert raw["resumed"]["repeats"] == 3


def test_resume_continues_runs_kept_elsewhere_from_an_earlier_sitting(tmp_path, code_unchanged):
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl", "--repeats", "2"])
    copy = tmp_path / "kept-from-last-sitting.json"
    (kept(tmp_path, s, [2] * 5, "b" * 40) / interleave.SO_FAR).rename(copy)
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl", "--repeats", "2", "--resume", str(copy),
                            "--out-dir", str(tmp_path / "fresh")])
    assert s.resume == str(copy)
    runs, done, commit = interleave.so_far(s, tmp_path / "fresh" / "work", measure.timing_variants(s))
    assert done == 2 and commit == "b" * 40 and len(runs) == 5
    s = measure.parse_args(["--only", "fidelity", "--resume", str(tmp_path / "none.json")])
    with pytest.raises(MeasureError, match="none.json"):
        interleave.so_far(s, tmp_path / "work", measure.timing_variants(s))


@pytest.mark.parametrize("change, named", [
    (["--epochs", "9"], "epochs 9 here, 5 there"),
    (["--timed", "pyg"], "timed ['pyg'] here, ['pyg', 'dgl'] there"),
])
def test_resume_refuses_other_settings_naming_them(tmp_path, change, named, code_unchanged):
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl"])
    work = kept(tmp_path, s, [2] * 5, "a" * 40)
    other = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl", *change])
    with pytest.raises(MeasureError, match=named.replace("[", r"\[").replace("]", r"\]")):
        interleave.so_far(other, work, measure.timing_variants(other))


def test_resume_refuses_where_the_measured_code_cannot_be_shown_unchanged(tmp_path, capsys):
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg,dgl"])
    assert interleave.code_changed_since(None)[0].startswith("?")
    assert interleave.code_changed_since("0" * 40)[0].startswith("? (git diff 0000000")
    work = kept(tmp_path, s, [2] * 5, None)
    argv = ["--only", "fidelity", "--timed", "pyg,dgl", "--resume", "--out-dir", str(tmp_path)]
    assert measure.main(argv) == 2  # refused before any run
    assert "the measured code changed since" in capsys.readouterr().err
    assert not (tmp_path / "measure.json").exists() and (work / interleave.SO_FAR).exists()
