# The second round (config `adaptive`): after every first-round timing run of the grid, plan
# more repeats where a comparison's interval is still too wide
# (analysis/repeats/second_round.py); the aggregate then waits for those runs too. Without
# `adaptive` the plan is not made at all.
#
# A plan made by an earlier sweep is read directly, not through the checkpoint: Snakemake does
# not look again at a job downstream of a checkpoint whose output exists, so a deleted run or an
# edit to the analysis would not make the aggregate run again. A stale plan is set aside first
# (analysis.repeats.second_round.set_aside_stale_plan), and the checkpoint makes a new one.

PLAN = "results/plan/repeats.json"

if config.get("adaptive"):
    _stale = second_round.set_aside_stale_plan(PLAN, TIMING_RESULTS)
    if _stale:
        print(f"[gnnscale] {_stale}", file=sys.stderr)
EARLIER_PLAN = PLAN if config.get("adaptive") and os.path.exists(PLAN) else None


checkpoint plan_repeats:
    """Repeats for the comparisons still open after the first round, within the time budget."""
    input:
        TIMING_RESULTS,
    output:
        PLAN,
    log:
        "results/logs/plan_repeats.log",
    conda:
        "../../environment.yml"
    params:
        precision=lambda wildcards: config["adaptive"]["precision"],
        budget=lambda wildcards: config["adaptive"]["budget_min"],
        max_repeats=lambda wildcards: config["adaptive"]["max_repeats"],
    shell:
        "python -m analysis.repeats.second_round --precision {params.precision} --budget-min {params.budget}"
        " --max-repeats {params.max_repeats} --out {output} {input} > {log} 2>&1"


def added_run_results(wildcards):
    """The runs the plan added to the first round (none without `adaptive`)."""
    if not config.get("adaptive"):
        return []
    path = EARLIER_PLAN or checkpoints.plan_repeats.get().output[0]
    plan = json.loads(Path(path).read_text())
    added = [
        sweep.parse(r["name"], r["dataset"], repeat=r["repeat"]).result
        for r in plan["runs"]
    ]
    return [path for path in added if path not in RUN_RESULTS]


def adaptive_plan(wildcards):
    """The plan this sweep makes, for the aggregate to pass on to the report (none without
    `adaptive`, or when an earlier sweep made it: EARLIER_PLAN)."""
    if not config.get("adaptive"):
        return []
    return EARLIER_PLAN or checkpoints.plan_repeats.get().output[0]
