"""The scaling model (analysis/projection/predict.py) on constructed worlds whose answer is known: an exact
alpha-beta world with contention, an Amdahl world, the Universal Scalability Law, the fallback
without a micro-benchmark, where it stops, and the CLI's refusals. (The real all-reduce
micro-benchmark run is tests/test_collectives.py's.)"""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from analysis import PHASE_COLUMNS
from analysis.projection import __main__ as projection_cli
from analysis.projection import formulas, inputs, predict, text
from runners.rank.seeds import split_seeds

SEEDS, BATCH = 4096, 512        # 8 steps at 1 device, 4 at 2, 2 at 4, 1 at 8
PARAMS = 100_000                # 400 kB of float32 gradients: one DDP bucket
ALPHA, BETA = 50e-6, 1 / 1e9    # 50 us a step, 1 GB/s
R = 1.25                        # every phase 25% slower at 2 devices
PHASES = {"pyg": {"load_wait_s": 0.004, "prepare_s": 0.001, "copy_s": 0.0005, "forward_s": 0.010,
                  "backward_s": 0.020, "optimizer_s": 0.002},
          "dgl": {"load_wait_s": 0.002, "prepare_s": 0.002, "copy_s": 0.0005, "forward_s": 0.006,
                  "backward_s": 0.012, "optimizer_s": 0.001}}
OUTSIDE = {"pyg": 0.05, "dgl": 0.02}
COLL = {"alpha_s": ALPHA, "beta_s_per_byte": BETA, "errors": [0.0], "source": "constructed"}


def ar(n, nbytes=4 * PARAMS, alpha=ALPHA, beta=BETA):
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta


def world(phases=PHASES, outside=OUTSIDE, r=R, allreduce=ar, devices=(1, 2), repeats=2, cores=64, seeds=SEEDS,
          extra=None):
    """runs, epochs, steps of a noiseless world: per framework, `repeats` runs at each device count
    whose every step takes exactly the model's time (contention r^(N>1), all-reduce `allreduce(N)`
    in the backward), and outside[fw] r^(N>1) seconds of each epoch outside the steps."""
    runs, epochs, steps = [], [], []
    for fw, ph in phases.items():
        for n in devices:
            factor = r if n > 1 else 1.0
            step = {p: v * factor for p, v in ph.items()}
            step["backward_s"] += allreduce(n) if n > 1 else 0.0
            s = -(-seeds // (BATCH * n))
            out = outside[fw] * factor
            for rep in range(repeats):
                rid = f"{fw}-d{n}-r{rep}"
                runs.append({"run_id": rid, "status": "ok", "framework": fw, "model": "sage", "devices": n,
                             "batch_size": BATCH, "workers": 0, "repeat": rep, "dataset": "synthetic",
                             "device_type": "cpu", "epochs": 4, "until": "epochs", "harness": "fair", "inject": None,
                             "strategy": "replicated", "train_split_seed_nodes": seeds, "max_steps_per_epoch": 0,
                             "parameters": PARAMS, "env_cpu_cores": cores, "env_memory_bytes": 64 * 2**30,
                             "mem_limit_bytes": None, "mem_peak_bytes": 2**30 + n * 2**29,
                             "mem_model_bytes": 2**30 + n * 2**29, "steady_epoch_mean_s": None,
                             "command": f"run {rid}", **(extra or {})})
                t = s * sum(step.values()) + out
                runs[-1]["steady_epoch_mean_s"] = t
                for epoch in range(4):
                    for rank in range(n):
                        epochs.append({"run_id": rid, "epoch": epoch, "rank": rank, "time_s": t})
                        steps += [{"run_id": rid, "rank": rank, "epoch": epoch, "step": i, "seed_nodes": BATCH,
                                   **step} for i in range(s)]
    return pd.DataFrame(runs), pd.DataFrame(epochs), pd.DataFrame(steps)


def expected(fw, n, allreduce=ar, r=R):
    """The world's epoch time at n devices, as the model's equations give it."""
    g = 1 + (r - 1) * (n - 1)
    s = -(-SEEDS // (BATCH * n))
    return s * (g * sum(PHASES[fw].values()) + (allreduce(n) if n > 1 else 0)) + OUTSIDE[fw] * g


def by(df, **keys):
    sel = np.ones(len(df), bool)
    for k, v in keys.items():
        sel &= df[k].to_numpy() == v
    return df[sel].iloc[0]


def test_an_exact_alpha_beta_world_is_predicted_exactly_in_and_out_of_sample():
    res = predict.project(*world(), devices=[4, 8], collectives=COLL, draws=20)
    for fw in PHASES:
        v = by(res["validation"], framework=fw, devices=2)
        # out of sample: the other framework's 1->2 contention, the 1-device runs, the micro-benchmark
        assert v["predicted_s"] == pytest.approx(v["measured_s"], rel=1e-9)
        assert v["error"] == pytest.approx(0, abs=1e-9) and v["inside"] and v["contention_pool"] == 1
        assert v["measured_s"] == pytest.approx(expected(fw, 2), rel=1e-9)
        assert v["ideal_s"] == pytest.approx(expected(fw, 1) / 2)  # the naive prediction beside it
        for n in (4, 8):
            p = by(res["projection"], framework=fw, devices=n)
            assert p["predicted_s"] == pytest.approx(expected(fw, n), rel=1e-9)
            assert p["low_s"] == pytest.approx(p["predicted_s"], rel=1e-9)  # no noise, no interval
            assert p["allreduce_s"] == pytest.approx(p["steps"] * ar(n), rel=1e-9)
            assert p["wait_s"] == pytest.approx(0, abs=1e-12)
    assert "FAILS" not in text.verdict(res["validation"])
    # in sample, the backward beyond its compute is exactly the all-reduce: no waiting in this world
    t = res["terms"].set_index("framework")
    assert t["residual_step_s"].to_numpy() == pytest.approx([ar(2)] * 2, rel=1e-9)
    assert t["allreduce_step_s"].to_numpy() == pytest.approx([ar(2)] * 2, rel=1e-9)
    assert t["r_forward_s"].to_numpy() == pytest.approx([R] * 2)


def test_an_amdahl_world_gives_amdahls_speedups():
    # No contention, no all-reduce, no waiting: the steps divide by N, the time outside them does not.
    res = predict.project(*world(r=1.0, allreduce=lambda n: 0.0), devices=[4, 8],
                          collectives={**COLL, "alpha_s": 0.0, "beta_s_per_byte": 0.0}, draws=10)
    for fw in PHASES:
        t1 = 8 * sum(PHASES[fw].values()) + OUTSIDE[fw]
        serial = OUTSIDE[fw] / t1
        for n in (2, 4, 8):
            p = by(res["projection"], framework=fw, devices=n)
            assert p["speedup"] == pytest.approx(1 / (serial + (1 - serial) / n), rel=1e-9)


def test_the_fallback_without_a_micro_benchmark_takes_alpha_from_the_other_configurations():
    # Both frameworks have the same gradient, so at 2 devices 2 alpha' = 2 alpha + n beta exactly.
    res = predict.project(*world(), devices=[4], collectives=None, draws=10)
    for fw in PHASES:
        v = by(res["validation"], framework=fw, devices=2)
        assert v["predicted_s"] == pytest.approx(v["measured_s"], rel=1e-9)
        assert v["allreduce_source"].startswith("fallback")
    p = by(res["projection"], framework="pyg", devices=4)
    assert p["allreduce_s"] == pytest.approx(2 * 6 * ar(2) / 2, rel=1e-9)  # 2 steps x 2(N-1) alpha', beta' = 0


def test_the_usl_fit_recovers_known_sigma_and_kappa():
    sigma, kappa = 0.05, 0.002
    ns = [1, 2, 4, 8, 16]
    times = [10.0 / formulas.usl_speedup(n, sigma, kappa) for n in ns]
    fit = formulas.fit_usl(ns, times)
    assert fit["sigma"] == pytest.approx(sigma, rel=1e-6) and fit["kappa"] == pytest.approx(kappa, rel=1e-6)
    assert fit["retrograde"] and fit["peak_devices"] == pytest.approx(math.sqrt((1 - sigma) / kappa))
    amdahl = formulas.fit_usl(ns, [10.0 / formulas.usl_speedup(n, 0.1, 0.0) for n in ns])
    assert amdahl["kappa"] == pytest.approx(0, abs=1e-9) and not amdahl["retrograde"]
    with pytest.raises(ValueError, match="3 or more device counts"):
        formulas.fit_usl([1, 2], [1.0, 0.6])


def test_three_measured_device_counts_get_a_usl_row():
    res = predict.project(*world(devices=(1, 2, 4)), devices=[8], collectives=COLL, draws=10)
    u = res["usl"].set_index("framework")
    assert set(u.index) == set(PHASES) and u.loc["pyg", "device_counts"] == "1,2,4"
    assert u.loc["pyg", "sigma"] > 0  # contention and all-reduce: sub-linear


def test_measured_points_past_two_devices_are_checked_against_the_projection_from_one_and_two():
    runs, epochs, steps = world(devices=(1, 2, 4))
    res = predict.project(runs, epochs, steps, devices=[8], collectives=COLL, draws=10)
    past = predict.beyond_fit(res)
    assert sorted(past["framework"]) == sorted(PHASES) and set(past["devices"]) == {4}
    # the world slows every rank past the first by r once, the model by r per added rank: it overshoots
    for r in past.to_dict("records"):
        fw = r["framework"]
        world_4 = -(-SEEDS // (BATCH * 4)) * (R * sum(PHASES[fw].values()) + ar(4)) + OUTSIDE[fw] * R
        assert r["measured_s"] == pytest.approx(world_4) and r["predicted_s"] == pytest.approx(expected(fw, 4))
        assert r["error"] == pytest.approx(expected(fw, 4) / world_4 - 1) and not r["inside"]
    # projected from the 1- and 2-device runs alone: the 4-device runs change no prediction
    fitted = world(devices=(1, 2))
    alone = predict.project(*fitted, devices=[4, 8], collectives=COLL, draws=10)["projection"]
    for r in past.to_dict("records"):
        same = alone[(alone["framework"] == r["framework"]) & (alone["devices"] == 4)].iloc[0]
        assert same["predicted_s"] == pytest.approx(r["predicted_s"], rel=1e-12)
    printed = text.format_tables(res)
    assert "Past the fitted 1 and 2 devices: each measured point" in printed
    assert re.search(r"0 of 2 measured points past 2 devices inside their intervals; median absolute error \d+%\.", printed)
    assert "Past the fitted 1 and 2 devices: no measured point" in text.format_tables(
        predict.project(*fitted, devices=[4], collectives=COLL, draws=10))


def test_steps_follow_the_harness_split():
    for seeds in (1, 999, 3900, 4096):
        for batch in (128, 1024):
            for n in (1, 2, 3, 4, 8):
                share = len(split_seeds(np.arange(seeds), 0, n, 0, batch, False))
                assert formulas.steps_at(seeds, batch, n) == -(-share // batch)
    assert formulas.steps_at(3900, 256, 1, max_steps=5) == 5


def test_waiting_for_the_slowest_rank_is_the_expected_maximum():
    assert formulas.expected_max([1.0, 2.0], 2) == pytest.approx(1.75)  # max of two draws
    assert formulas.wait_factor([1.0, 2.0], 2) == pytest.approx(1.75 / 1.5 - 1)
    assert formulas.wait_factor([1.0, 2.0], 1) == 0
    assert formulas.wait_factor([3.0] * 5, 16) == pytest.approx(0)
    rng = np.random.default_rng(0)
    x = rng.normal(1, 0.1, 20000)
    assert formulas.wait_factor(x, 2) == pytest.approx(0.1 / math.sqrt(math.pi), rel=0.05)  # E[max of 2 N(0,1)]


def test_contention_grows_linearly_and_speedups_do_not_extrapolate():
    assert formulas.contention(1.25, 1) == 1 and formulas.contention(1.25, 4) == pytest.approx(1.75)
    assert formulas.contention(0.9, 8) == pytest.approx(0.9) and formulas.contention(math.nan, 8) == 1
    assert formulas.buckets(4 * PARAMS) == 1 and formulas.buckets(2**20 + 25 * 2**20 + 1) == 3


def test_where_it_stops():
    res = predict.project(*world(cores=8, extra=None), devices=[4, 8, 16], collectives=COLL, draws=10)
    p = by(res["projection"], framework="pyg", devices=16)
    assert p["oversubscribed_from"] == 9 and p["beyond_cpu"]  # 1 process per rank, 8 cores
    assert not by(res["projection"], framework="pyg", devices=8)["beyond_cpu"]
    # peaks 1 GiB + N x 0.5 GiB on 64 GiB: the 127th rank no longer fits
    assert p["memory_measured_from"] == 127 and p["memory_modelled_from"] == 127
    assert p["memory_measured_per_rank_bytes"] == pytest.approx(2**29)


def test_a_model_that_fails_says_so():
    v = pd.DataFrame([{"experiment": "e", "framework": "pyg", "model": "sage", "batch_size": 1, "workers": 0,
                       "devices": 2, "error": e, "inside": ok, "reason": None}
                      for e, ok in ((0.5, False), (0.4, False), (0.01, True))])
    said = text.verdict(v)
    assert "FAILS" in said and "1 of 3" in said and "+50%" in said


def test_a_configuration_without_a_1_device_run_is_projected_from_its_schedule_twin():
    runs, epochs, steps = world()
    twin = runs[runs["devices"] == 2].assign(run_id=lambda d: "conv-" + d["run_id"], epochs=12)
    ids = dict(zip(runs.loc[runs["devices"] == 2, "run_id"], twin["run_id"]))
    more = [df[df["run_id"].isin(ids)].assign(run_id=lambda d: d["run_id"].map(ids)) for df in (epochs, steps)]
    res = predict.project(pd.concat([runs, twin]), pd.concat([epochs, more[0]]), pd.concat([steps, more[1]]),
                          devices=[4], collectives=COLL, draws=10)
    v = res["validation"]
    conv = v[v["experiment"].str.contains("12 epochs")]
    assert len(conv) == 2 and conv["base"].str.startswith("1-device runs of").all()
    # out of sample: its twin (the same steps, measured apart) is not in its contention pool
    assert (conv["contention_pool"] == 1).all()
    assert conv["predicted_s"].to_numpy() == pytest.approx(conv["measured_s"].to_numpy(), rel=1e-9)


@pytest.mark.parametrize("bad", ["4,x", "0", "-2", "4,,8", "2.5"])
def test_a_bad_devices_value_is_refused_by_name(bad, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        projection_cli.main(["--aggregate", str(tmp_path), "--devices", bad])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--devices {bad!r}" in err and "not a positive whole number" in err


def test_the_cli_prints_both_tables(tmp_path, capsys):
    runs, epochs, steps = world()
    for name, df in (("runs", runs), ("epochs", epochs), ("steps", steps)):
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    coll = tmp_path / "collectives.json"
    coll.write_text(json.dumps({"backend": "gloo", "procs": [2], "fit": {
        "alpha_s": ALPHA, "beta_s_per_byte": BETA, "points": [{"relative_error": 0.0}]}}))
    assert projection_cli.main(["--aggregate", str(tmp_path), "--devices", "4,8", "--collectives", str(coll),
                                "--draws", "10"]) == 0
    out = capsys.readouterr().out
    assert "Projection" in out and "Validation" in out and "2 of 2 measured points inside" in out
    assert "micro-benchmark" in out and "USL: not fitted" in out
    with pytest.raises(SystemExit):
        projection_cli.main(["--aggregate", str(tmp_path), "--collectives", str(tmp_path / "none.json")])
    assert "no such file" in capsys.readouterr().err


def test_a_micro_benchmark_from_elsewhere_is_named():
    runs = pd.DataFrame({"backend": ["nccl"], "env_hostname": ["gpu-node"], "env_cpu_cores": [2]})
    notes = inputs.collectives_notes({**COLL, "backend": "gloo", "host": "laptop", "cores": 2}, runs)
    assert notes == ["the micro-benchmark's backend is gloo, the runs' nccl",
                     "the micro-benchmark's host is laptop, the runs' gpu-node"]
    assert "no all-reduce micro-benchmark" in inputs.collectives_notes(None, runs)[0]


def test_a_share_smaller_than_a_batch_makes_a_smaller_step():
    # 16 ranks share 4096 seeds: 256 each, one half batch per rank
    assert formulas.step_seeds(SEEDS, BATCH, 16) == 256 and formulas.step_seeds(3900, 1024, 2) == 975
    res = predict.project(*world(), devices=[16], collectives=COLL, draws=10)
    g = 1 + (R - 1) * 15
    ph = PHASES["pyg"]
    local = g * (0.5 * sum(v for p, v in ph.items() if p != "optimizer_s") + ph["optimizer_s"])
    p = by(res["projection"], framework="pyg", devices=16)
    assert p["steps"] == 1 and p["predicted_s"] == pytest.approx(local + ar(16) + OUTSIDE["pyg"] * g, rel=1e-9)


def test_the_report_finds_the_micro_benchmark_beside_the_aggregate(tmp_path):
    agg = tmp_path / "results" / "aggregate"
    agg.mkdir(parents=True)
    for name, df in zip(("runs", "epochs", "steps"), world()):
        df.to_csv(agg / f"{name}.csv", index=False)
    assert predict.project_aggregate(agg, [4], draws=5)["collectives"] is None
    (tmp_path / "results" / "benchmarks").mkdir()
    (tmp_path / "results" / "benchmarks" / "collectives.json").write_text(json.dumps({"backend": "gloo", "fit": {
        "alpha_s": ALPHA, "beta_s_per_byte": BETA, "points": [{"relative_error": 0.0}]}}))
    res = predict.project_aggregate(agg, [4], draws=5)
    assert res["collectives"]["alpha_s"] == ALPHA and res["projection"]["allreduce_source"].iloc[0] == "micro-benchmark"
    assert set(res) >= {"projection", "validation", "usl", "terms", "assumptions"}


def test_missing_data_gives_empty_tables_not_errors():
    runs, epochs, steps = world(devices=(1,))
    res = predict.project(runs, epochs, steps, devices=[4], collectives=COLL, draws=5)
    assert res["projection"].empty and res["validation"].empty  # no 1 -> 2 contention measured anywhere
    assert "No multi-device point" in text.format_tables(res)
    none = predict.project(runs.iloc[:0], epochs.iloc[:0], steps.iloc[:0], devices=[4], collectives=None, draws=5)
    assert none["projection"].empty and "No multi-device point" in text.format_tables(none)
