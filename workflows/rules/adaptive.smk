# The second round (config `adaptive`): after every first-round timing run of the grid, plan
# more repeats where a comparison's interval is still too wide (analysis/adaptive.py); the
# aggregate then waits for those runs too. Without `adaptive` the plan is not made at all.


checkpoint plan_repeats:
    """Repeats for the comparisons still open after the first round, within the time budget."""
    input:
        TIMING_RESULTS,
    output:
        "results/plan/repeats.json",
    log:
        "results/logs/plan_repeats.log",
    conda:
        "../../environment.yml"
    params:
        precision=lambda wildcards: config["adaptive"]["precision"],
        budget=lambda wildcards: config["adaptive"]["budget_min"],
        max_repeats=lambda wildcards: config["adaptive"]["max_repeats"],
    shell:
        "python -m analysis.adaptive --precision {params.precision} --budget-min {params.budget}"
        " --max-repeats {params.max_repeats} --out {output} {input} > {log} 2>&1"


def added_run_results(wildcards):
    """The runs the plan added to the first round (none without `adaptive`)."""
    if not config.get("adaptive"):
        return []
    plan = json.loads(Path(checkpoints.plan_repeats.get().output[0]).read_text())
    added = [
        f"results/runs/{r['dataset']}/{r['name']}-r{r['repeat']}/result.json"
        for r in plan["runs"]
    ]
    return [path for path in added if path not in RUN_RESULTS]


def adaptive_plan(wildcards):
    """The plan, for the aggregate to pass on to the report (none without `adaptive`)."""
    return checkpoints.plan_repeats.get().output[0] if config.get("adaptive") else []
