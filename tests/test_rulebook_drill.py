"""The rulebook closed on both halves (issue 54): a new fault is a Cause record, one override
function and its place in the one ordered sequence (diagnosis.OVERRIDES), applied by the one loop
(diagnosis.apply_overrides) to the evidence the run's Outcome carries. The drill registers both
only here: placed before an existing override it wins, placed after that one it does not."""

import pytest

from runners.watch.diagnosis import causes, overrides
from runners.watch.diagnosis.causes import Cause, Diagnosis, Outcome, label_of
from runners.watch.evidence import MemoryWatch

# A fault the suite does not know: a GPU that fell off the bus, found from a kernel log line.
FELL_OFF = Cause("gpu_fell_off", "a GPU fell off the bus", ": the driver lost it mid-run, and its rank with it",
                 "check the GPU's seating, power and the kernel log (`dmesg | grep -i xid`); then rerun", "crashed")


def _fell_off(status, diag, findings):
    """The drill's override: pure, evidence in (Findings.extra), a verdict or None out."""
    line = findings.extra.get("gpu_fell_off")
    if line is None or status == "ok":
        return None
    summary = f"crashed: {line}; cause: {FELL_OFF.label}"
    return overrides.Verdict("crashed", Diagnosis.superseding(diag, FELL_OFF.key, summary, [line], status=status))


DRILL = overrides.Override("gpu_fell_off", (FELL_OFF.key,), _fell_off, "the drill (Findings.extra)",
                           "a GPU lost from the bus explains whatever its rank's peers showed after")


@pytest.fixture
def drill(monkeypatch):
    """The drill's Cause in CAUSES and a fresh OVERRIDES to register its override into, both
    undone after the test."""
    monkeypatch.setitem(causes.CAUSES, FELL_OFF.key, FELL_OFF)
    monkeypatch.setattr(overrides, "OVERRIDES", list(overrides.OVERRIDES))
    return overrides


def _hang_at_the_cap() -> Outcome:
    """A hang whose memory cgroup sat at its cap (out_of_memory names it memory_pressure), and
    whose kernel log says a GPU fell off the bus."""
    ranks = [{"rank": 0, "phase": "loading"}, {"rank": 1, "phase": "backward"}]
    hang = Diagnosis.of("stalled_rank", "hang: rank 0 made no progress in phase 'loading' while rank 1 waited in "
                        "'backward'; cause: " + causes.CAUSES["stalled_rank"].label, ["rank 0 idle"], ranks, 0)
    stats = {"cgroup": "/sys/fs/cgroup/x", "limit_bytes": 1000, "usage_bytes": 990, "anon_bytes": 600,
             "file_bytes": 100, "shmem_bytes": 300, "major_faults": 500, "t": 5.0}
    outcome = Outcome("hang", hang)
    outcome.findings.oom = (None, MemoryWatch(last=stats, full=dict(stats, major_faults=20)))
    outcome.findings.extra["gpu_fell_off"] = "NVRM: Xid 79, GPU has fallen off the bus (rank 0's GPU)"
    return outcome


def test_without_the_drill_the_hang_at_the_cap_is_memory_pressure():
    d = overrides.apply_overrides(_hang_at_the_cap()).diagnosis
    assert d["cause"] == "memory_pressure" and d["previous_cause"] == "stalled_rank", d
    # the summary is the stop rules' line with the new cause: no string was split to make it
    assert d["summary"].startswith("hang: rank 0 made no progress in phase 'loading' while rank 1 waited in "
                                   "'backward'; cause: memory exhaustion (the run sat at its"), d["summary"]


def test_registered_before_an_override_it_wins(drill):
    drill.register(DRILL, before="out_of_memory")
    assert [o.name for o in drill.OVERRIDES].index("gpu_fell_off") == 1
    outcome = drill.apply_overrides(_hang_at_the_cap())
    d = outcome.diagnosis
    # gpu_fell_off made it a crash; out_of_memory, after it, names a hang at the cap only
    assert outcome.status == "crashed" and d["cause"] == "gpu_fell_off", d
    assert d["previous_cause"] == "stalled_rank" and d["previous_status"] == "hang"
    assert d["cause_text"] == FELL_OFF.text and d["remedy"] == FELL_OFF.remedy
    assert label_of(d) == FELL_OFF.label


def test_registered_after_an_override_it_supersedes_what_that_one_said(drill):
    drill.register(DRILL, after="out_of_memory")
    outcome = drill.apply_overrides(_hang_at_the_cap())
    d = outcome.diagnosis
    assert d["cause"] == "gpu_fell_off" and d["previous_cause"] == "memory_pressure", d


def test_registered_after_a_final_override_that_found_something_it_is_not_applied(drill):
    drill.register(DRILL, after="run_dir_vanished")
    outcome = _hang_at_the_cap()
    outcome.findings.vanished = {"run_dir": "/tmp/gone", "missing": "/tmp/gone", "after_s": 3.0,
                                 "whereabouts": None, "ranks": [], "ended": True}
    outcome = drill.apply_overrides(outcome)
    assert outcome.status == "failed" and outcome.diagnosis["cause"] == "run_dir_vanished", outcome.diagnosis
    assert outcome.diagnosis["previous_status"] == "hang"
    # before it, the drill wins over memory pressure and is then what the vanished directory supersedes
    drill.OVERRIDES.remove(DRILL)
    drill.register(DRILL, before="out_of_memory")
    outcome = _hang_at_the_cap()
    outcome.findings.vanished = {"run_dir": "/tmp/gone", "missing": "/tmp/gone", "after_s": 3.0,
                                 "whereabouts": None, "ranks": [], "ended": True}
    assert drill.apply_overrides(outcome).diagnosis["previous_status"] == "crashed"


def test_the_sequence_is_declared_once_and_names_known_causes(drill):
    names = [o.name for o in drill.OVERRIDES]
    assert names == ["crash_before_hang", "out_of_memory", "run_dir_vanished", "lost_node", "server",
                     "lost_culprit", "remote_server"]
    assert all(k in causes.CAUSES for o in drill.OVERRIDES for k in o.causes)
    with pytest.raises(ValueError, match="already declared"):
        drill.register(overrides.Override("out_of_memory", (), _fell_off, "", ""))
