# The second round (config `adaptive`): after every first-round timing run of the grid, plan
# more repeats where a comparison's interval is still too wide
# (analysis/repeats/second_round.py); the aggregate then waits for those runs too. Without
# `adaptive` the plan is not made at all.
#
# A plan made by an earlier sweep is read directly, not through the checkpoint: Snakemake does
# not look again at a job downstream of a checkpoint whose output exists, so a deleted run or an
# edit to the analysis would not make the aggregate run again. A stale plan (a first-round
# result it was made from is gone or newer: plan_file.stale_plan) is not read; parsing only
# says so and changes no file, even `snakemake -n`. Its inputs make Snakemake rerun the
# checkpoint, which sets the stale plan aside (previous/) before it writes the new one: the
# plan is an update() output, so Snakemake leaves it there for the job instead of deleting it.

PLAN = "results/plan/repeats.json"

_stale = config.get("adaptive") and plan_file.stale_plan(PLAN, TIMING_RESULTS)
if _stale:
    print(
        f"[gnnscale] the adaptive plan {PLAN} is stale ({_stale}): it is set aside"
        " and made again after the first round",
        file=sys.stderr,
    )
EARLIER_PLAN = (
    PLAN if config.get("adaptive") and os.path.exists(PLAN) and not _stale else None
)


checkpoint plan_repeats:
    """Repeats for the comparisons still open after the first round, within the time budget."""
    input:
        TIMING_RESULTS,
    output:
        # update(): the job sets a stale plan aside itself (plan_file.set_aside_stale_plan)
        update(PLAN),
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
