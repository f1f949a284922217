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


def windows(*busy):
    """A machine whose CPUs are `busy` % busy with other work in successive windows (then idle)."""
    seen = iter(busy)
    return lambda: next(seen, 0.0)


def test_a_run_starts_after_enough_quiet_windows_in_a_row():
    busy = [80.0, 5.0, 5.0, 60.0] + [5.0] * interleave.QUIET_WINDOWS + [90.0]
    got = interleave.settle(windows(*busy))
    assert got == {"waited_s": (4 + interleave.QUIET_WINDOWS) * interleave.WINDOW_S, "quiet": True,
                   "busy_percent": 5.0}


def test_a_machine_that_never_quiets_is_measured_after_the_bound_and_says_so():
    got = interleave.settle(lambda: interleave.QUIET_PERCENT)  # at the threshold: not quiet
    assert got == {"waited_s": interleave.SETTLE_WINDOWS * interleave.WINDOW_S, "quiet": False,
                   "busy_percent": interleave.QUIET_PERCENT}


def test_every_timed_run_settles_first_and_keeps_how(tmp_path, monkeypatch):
    """The order of events in timing_runs: a settle before each run, its record kept with the run."""
    s = measure.parse_args(["--only", "fidelity", "--timed", "pyg", "--repeats", "2"])
    events = []
    monkeypatch.setattr(interleave, "settle", lambda: events.append("settle") or {"waited_s": 2.0, "quiet": False,
                                                                                 "busy_percent": 30.0})
    ran = lambda *a, **k: events.append("run") or {"epoch_s": 1.0, "command_s": 2.0}  # noqa: E731
    monkeypatch.setattr(interleave, "run_runner", ran)
    monkeypatch.setattr(interleave, "run_reference", ran)
    raw = {}
    runs = interleave.timing_runs(s, tmp_path, ("probes-on", "reference"), raw)
    assert events == ["settle", "run"] * 4
    assert all(r["settle"]["waited_s"] == 2.0 for recs in runs.values() for r in recs)
    assert raw["settle"] == {"runs": 4, "not_quiet": 4, "median_wait_s": 2.0}
    kept_runs = json.loads((tmp_path / interleave.SO_FAR).read_text())["runs"]
    assert all("settle" in r for recs in kept_runs.values() for r in recs)
