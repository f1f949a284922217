"""The strategy as the launcher sees it (runners.launch.strategy) and the environment the ranks get
(runners.launch.ranks.child_environment); nothing is launched."""

import os
from pathlib import Path
from types import SimpleNamespace

from runners.config import ConfigError, RunConfig
from runners.launch import ranks as launch, strategy


def _cfg(**kw) -> RunConfig:
    base = dict(framework="dgl", model="sage", devices=1, batch_size=128, workers=0, dataset="tiny", epochs=1,
                out="/tmp/unused")
    base.update(kw)
    return RunConfig(**base)


def test_the_strategy_object_follows_the_option():
    assert type(strategy.of(_cfg())) is strategy.Replicated
    assert type(strategy.of(_cfg(strategy="partitioned", nodes=2))) is strategy.Partitioned


def test_replicated_starts_nothing_and_leaves_the_run_alone(tmp_path):
    rep, env, pre = strategy.Replicated(), {}, {"memory_model": "kept"}
    run = SimpleNamespace(proc=None, outcome=None)
    assert rep.prepare(_cfg(), env, tmp_path, pre, {}) is True
    rep.watch(run)
    rep.stop(_cfg(), env, pre, run)
    rep.explain(tmp_path, run)
    assert rep.trainer_env == {} and env == {} and pre == {"memory_model": "kept"} and not list(tmp_path.iterdir())


def test_partitioned_refusal_says_why_and_starts_nothing(tmp_path, monkeypatch, capsys):
    from runners.partitioned import server as partitioned

    def refuse(cfg, env, out):
        raise ConfigError("no hosts")

    monkeypatch.setattr(partitioned, "plan", refuse)
    monkeypatch.setattr(partitioned, "start_server", None)  # calling it would fail the test
    part, env = strategy.Partitioned(), {}
    assert part.prepare(_cfg(), env, tmp_path, {}, {}) is False
    assert capsys.readouterr().err == "error: --strategy partitioned: no hosts\n"
    assert part.server is None and part.trainer_env == {} and env == {}


def test_partitioned_hands_the_trainers_variables_to_the_launch_not_to_os_environ(tmp_path, monkeypatch):
    from runners.partitioned import server as partitioned

    trainer_env = {"DGL_ROLE": "client", "DGL_DIST_MODE": "distributed", "OMP_NUM_THREADS": "1"}
    plan = SimpleNamespace(describe=lambda cfg: {"strategy": "partitioned"}, trainer_env=lambda cfg: trainer_env)
    server = SimpleNamespace(watched=[], watch=lambda pid: server.watched.append(pid))
    monkeypatch.setattr(partitioned, "plan", lambda cfg, env, out: plan)
    monkeypatch.setattr(partitioned, "start_server", lambda cfg, the_plan, out: server)
    monkeypatch.setattr(strategy.Partitioned, "memory_model", lambda self, cfg, meta: {"total_bytes": 7})
    before = dict(os.environ)
    part, env, pre = strategy.Partitioned(), {}, {"memory_model": {"total_bytes": 1}, "memory_model_bytes": 1}
    assert part.prepare(_cfg(), env, tmp_path, pre, {}) is True
    assert dict(os.environ) == before
    assert part.trainer_env == trainer_env and env["partitioned"] == {"strategy": "partitioned"}
    assert pre["memory_model_bytes"] == 7
    part.watch(SimpleNamespace(proc=None))
    part.watch(SimpleNamespace(proc=SimpleNamespace(pid=42)))
    assert server.watched == [42]


def test_child_environment_adds_the_strategy_variables_then_the_launchers_own(monkeypatch):
    monkeypatch.setenv("DGL_ROLE", "launcher's")
    cfg = _cfg(device_type="cpu")
    env = launch.child_environment(cfg, None, {"DGL_ROLE": "client", "OMP_NUM_THREADS": "99"})
    assert env["DGL_ROLE"] == "client" and os.environ["DGL_ROLE"] == "launcher's"
    assert env["OMP_NUM_THREADS"] == str(cfg.threads_per_rank)  # the run's threads per rank win
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(launch.envinfo.REPO_ROOT))
    assert launch.child_environment(cfg)["DGL_ROLE"] == "launcher's"
